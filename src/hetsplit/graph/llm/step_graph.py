"""One prefill or decode step of a Llama-family model as a costing ``Graph`` (what the device models
cost per layer): ``tokens`` new positions against a KV cache of ``context`` positions (prefill:
tokens = context = S; decode: tokens = 1). Layers are named ``embed``, ``b{i}.<role>`` and ``head``;
weights count at ``weight_bytes`` (the file's stored bytes, or what an executor that dequantizes
holds: 4 bytes per element), the KV cache read by the attention layer as its input bytes."""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.graph.llm.config import LlmConfig, StoredTensor, block_tensor
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


def step_graph(cfg: LlmConfig, tensors: dict[str, StoredTensor], phase: Phase, weight_bytes: str = STORED) -> Graph:
    """The step as a chain of layers (block by block), weights at ``weight_bytes`` (``stored`` or ``float32``)."""
    s, d, ctx = phase.tokens, cfg.dim, phase.context
    layers: list[Layer] = []

    def gemm(name: str, tensor: str, out: int) -> None:
        t = tensors[tensor]
        layers.append(Layer(name, GEMM, s * t.elements, _weight(t, weight_bytes), s * out * F32, s * t.shape[1] * F32,
                            attrs=dict(m=s, k=t.shape[1], n=t.shape[0])))

    def elementwise(name: str, op: str, elements: int, inputs: int = 1, weight: str | None = None) -> None:
        params = 0 if weight is None else _weight(tensors[weight], weight_bytes)
        layers.append(Layer(name, op, 0, params, elements * F32, inputs * elements * F32))

    layers.append(Layer("embed", RESHAPE, 0, 0, s * d * F32, s * 8, attrs=dict(rows=s)))
    for i in range(cfg.blocks):
        p = f"b{i}."
        elementwise(p + "attn_norm", NORM, s * d, weight=block_tensor(i, "attn_norm"))
        for role, out in (("attn_q", d), ("attn_k", cfg.kv_dim), ("attn_v", cfg.kv_dim)):
            gemm(p + role, block_tensor(i, role), out)
        kv_read = 2 * cfg.kv_dim * ctx * F32
        macs = 2 * cfg.heads * s * ctx * cfg.head_dim
        layers.append(Layer(p + "attention", MATMUL, macs, 0, s * d * F32, s * d * F32 + kv_read,
                            attrs=dict(heads=cfg.heads, kv_heads=cfg.kv_heads, tokens=s, context=ctx)))
        gemm(p + "attn_output", block_tensor(i, "attn_output"), d)
        elementwise(p + "attn_add", ELTWISE, s * d, 2)
        elementwise(p + "ffn_norm", NORM, s * d, weight=block_tensor(i, "ffn_norm"))
        gemm(p + "ffn_gate", block_tensor(i, "ffn_gate"), cfg.ffn)
        gemm(p + "ffn_up", block_tensor(i, "ffn_up"), cfg.ffn)
        elementwise(p + "ffn_gate_mul", ELTWISE, s * cfg.ffn, 2)
        gemm(p + "ffn_down", block_tensor(i, "ffn_down"), d)
        elementwise(p + "ffn_add", ELTWISE, s * d, 2)
    elementwise("final_norm", NORM, d, weight="output_norm.weight")               # the head reads the last position only
    head = tensors["token_embd.weight" if cfg.tied else "output.weight"]
    layers.append(Layer("head", GEMM, head.elements, _weight(head, weight_bytes), cfg.vocab * F32, d * F32,
                        attrs=dict(m=1, k=d, n=cfg.vocab)))
    tensors_out = [Tensor("tokens", INPUT, s * 8, (0,))]
    for k, layer in enumerate(layers):
        last = k == len(layers) - 1
        tensors_out.append(Tensor(f"{layer.name}.out", k, layer.out_bytes, () if last else (k + 1,), is_output=last))
    return Graph(f"{cfg.name} step {phase.tokens}@{phase.context}", layers, tensors_out,
                 source=f"llm step of {cfg.name}")


def block_of(name: str) -> int | None:
    """The block a step layer belongs to (None: embedding, final norm, head)."""
    return int(name[1:].split(".")[0]) if name.startswith("b") and "." in name else None
