"""One prefill or decode step of a Llama-family model as a costing ``Graph`` (what the device models
cost per layer): ``tokens`` new positions against a KV cache of ``context`` positions (prefill:
tokens = context = S; decode: tokens = 1). Layers are named ``embed``, ``b{i}.<role>`` and ``head``;
weights count at ``weight_bytes`` (the file's stored bytes, or what an executor that dequantizes
holds: 4 bytes per element), the KV cache read by the attention layer as its input bytes. With a
``TensorShare`` (``graph.llm.shares``) the graph is one member's part of a tensor-parallel step: its
KV-head groups, FFN columns and head rows at their own shapes (a part it holds none of is left out), the
norms and residual adds whole."""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.graph.llm.config import LlmConfig, StoredTensor, block_tensor
from hetsplit.graph.llm.shares import TensorShare
from hetsplit.graph.types import ELTWISE, GEMM, INPUT, MATMUL, NORM, RESHAPE, Graph, Layer, Tensor

F32 = 4
STORED, FLOAT32 = "stored", "float32"


@dataclass(frozen=True)
class Phase:
    """``tokens`` fed against ``context`` cached positions (context includes them)."""

    tokens: int
    context: int


def _weight(t: StoredTensor, weight_bytes: str) -> int:
    return t.stored_bytes if weight_bytes == STORED else t.elements * F32


def step_graph(cfg: LlmConfig, tensors: dict[str, StoredTensor], phase: Phase, weight_bytes: str = STORED,
               share: TensorShare | None = None) -> Graph:
    """The step as a chain of layers (block by block), weights at ``weight_bytes`` (``stored`` or ``float32``);
    with ``share``, one tensor-parallel member's part of it."""
    s, d, ctx = phase.tokens, cfg.dim, phase.context
    kv = share.size("kv_heads") if share else cfg.kv_heads
    ffn = share.size("ffn") if share else cfg.ffn
    vocab = share.size("vocab") if share else cfg.vocab
    q_dim, kv_dim = kv * (cfg.heads // cfg.kv_heads) * cfg.head_dim, kv * cfg.head_dim
    layers: list[Layer] = []

    def gemm(name: str, tensor: str, out: int, inputs: int) -> None:
        """``out`` x ``inputs`` of the stored matrix ``tensor`` (a slice of it under a share)."""
        t = tensors[tensor]
        if out and inputs:
            part = out * inputs / t.elements
            layers.append(Layer(name, GEMM, s * out * inputs, int(round(_weight(t, weight_bytes) * part)), s * out * F32,
                                s * inputs * F32, attrs=dict(m=s, k=inputs, n=out)))

    def elementwise(name: str, op: str, elements: int, inputs: int = 1, weight: str | None = None) -> None:
        params = 0 if weight is None else _weight(tensors[weight], weight_bytes)
        if elements:
            layers.append(Layer(name, op, 0, params, elements * F32, inputs * elements * F32))

    layers.append(Layer("embed", RESHAPE, 0, 0, s * d * F32, s * 8, attrs=dict(rows=s)))
    for i in range(cfg.blocks):
        p = f"b{i}."
        elementwise(p + "attn_norm", NORM, s * d, weight=block_tensor(i, "attn_norm"))
        for role, out in (("attn_q", q_dim), ("attn_k", kv_dim), ("attn_v", kv_dim)):
            gemm(p + role, block_tensor(i, role), out, d)
        if kv:
            kv_read = 2 * kv_dim * ctx * F32
            heads = kv * (cfg.heads // cfg.kv_heads)
            macs = 2 * heads * s * ctx * cfg.head_dim
            layers.append(Layer(p + "attention", MATMUL, macs, 0, s * q_dim * F32, s * q_dim * F32 + kv_read,
                                attrs=dict(heads=heads, kv_heads=kv, tokens=s, context=ctx)))
        gemm(p + "attn_output", block_tensor(i, "attn_output"), d, q_dim)
        elementwise(p + "attn_add", ELTWISE, s * d, 2)
        elementwise(p + "ffn_norm", NORM, s * d, weight=block_tensor(i, "ffn_norm"))
        gemm(p + "ffn_gate", block_tensor(i, "ffn_gate"), ffn, d)
        gemm(p + "ffn_up", block_tensor(i, "ffn_up"), ffn, d)
        elementwise(p + "ffn_gate_mul", ELTWISE, s * ffn, 2)
        gemm(p + "ffn_down", block_tensor(i, "ffn_down"), d, ffn)
        elementwise(p + "ffn_add", ELTWISE, s * d, 2)
    elementwise("final_norm", NORM, d, weight="output_norm.weight")               # the head reads the last position only
    head = tensors["token_embd.weight" if cfg.tied else "output.weight"]
    if vocab:
        layers.append(Layer("head", GEMM, vocab * d, int(round(_weight(head, weight_bytes) * vocab / cfg.vocab)),
                            vocab * F32, d * F32, attrs=dict(m=1, k=d, n=vocab)))
    tensors_out = [Tensor("tokens", INPUT, s * 8, (0,))]
    for k, layer in enumerate(layers):
        last = k == len(layers) - 1
        tensors_out.append(Tensor(f"{layer.name}.out", k, layer.out_bytes, () if last else (k + 1,), is_output=last))
    return Graph(f"{cfg.name} step {phase.tokens}@{phase.context}", layers, tensors_out,
                 source=f"llm step of {cfg.name}")


def block_of(name: str) -> int | None:
    """The block a step layer belongs to (None: embedding, final norm, head)."""
    return int(name[1:].split(".")[0]) if name.startswith("b") and "." in name else None
