"""A Llama-family stage as ONNX graphs, for the onnxruntime executor (``runtime.llm_ort``).

The graphs compute what ``graph.llm.decoder`` computes in torch, op for op: RMSNorm, grouped-query
attention with RoPE (llama.cpp's adjacent-pair layout) over a KV cache, SwiGLU, the LM head. The KV cache
is not held in the graph: a block's graph takes its cache's first P positions as inputs (``past_k.I``,
``past_v.I``: (P, kv_heads, head_dim)) and returns the T positions it adds (``new_k.I``, ``new_v.I``), which
the caller writes into its cache; RoPE's cos and sin of the T positions (T, 1, head_dim / 2, 1) and the
additive causal mask (T, P + T) are inputs too, so one graph serves the prompt and every decode step.

Three kinds of graph:
- ``run_graph``: consecutive blocks with the residual adds between them, the embedding before the first
  (``ids``, int64 (T,)) where the stage embeds and the final norm and LM head after the last where it
  ends with it (``keep``: the rows to run through the head). A stage of one device runs as a few of these.
- ``attention_graph`` and ``ffn_graph``: one block's half (its norm, then the partial output of a
  tensor-parallel member's heads or FFN columns), the caller summing the members' partials and adding the
  residual in between, as ``decoder.Block`` does with its ``reduce``.
- ``head_graph``: the final norm and a member's rows of the LM head.

Weights are the decoder's (rows = outputs), stored transposed as MatMul's right operand."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hetsplit.graph.llm.config import LlmConfig

OPSET = 17
FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


class GraphBuilder:
    """Nodes, weights, inputs and outputs of one ONNX graph, each value named once (each small constant
    once, however many nodes read it)."""

    def __init__(self, name: str):
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.weights: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._count = 0
        self._constants: dict[tuple[str, tuple[int, ...], bytes], str] = {}

    def op(self, kind: str, *inputs: str, **attrs: Any) -> str:
        self._count += 1
        out = f"{kind.lower()}_{self._count}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def weight(self, name: str, array: np.ndarray) -> str:
        self.weights.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def ints(self, values: list[int]) -> str:
        return self._constant("ints", np.array(values, dtype=np.int64))

    def scalar(self, value: float) -> str:
        return self._constant("scalar", np.array(value, dtype=np.float32))

    def _constant(self, kind: str, array: np.ndarray) -> str:
        key = (kind, array.shape, array.tobytes())
        if key not in self._constants:
            self._constants[key] = self.weight(f"{kind}_{len(self.weights)}", array)
        return self._constants[key]

    def input(self, name: str, elem: int, shape: list[int | str]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem, shape))
        return name

    def output(self, name: str, value: str, shape: list[int | str]) -> None:
        self.nodes.append(helper.make_node("Identity", [value], [name]))
        self.outputs.append(helper.make_tensor_value_info(name, FLOAT, shape))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.weights)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


@dataclass(frozen=True)
class Heads:
    """The attention heads a graph computes: its KV-head groups and the query heads that read each."""

    kv_heads: int
    group: int
    head_dim: int

    @property
    def query(self) -> int:
        return self.kv_heads * self.group


def linear(g: GraphBuilder, x: str, w: np.ndarray, name: str) -> str:
    """``x @ w.T`` (``w``: rows = outputs, as the decoder's weights)."""
    return g.op("MatMul", x, g.weight(name, np.ascontiguousarray(w.T)))


def rms_norm(g: GraphBuilder, x: str, w: np.ndarray, eps: float, name: str) -> str:
    mean = g.op("ReduceMean", g.op("Mul", x, x), axes=[-1], keepdims=1)
    return g.op("Mul", g.op("Div", x, g.op("Sqrt", g.op("Add", mean, g.scalar(eps)))), g.weight(name, w))


def rope(g: GraphBuilder, x: str, heads: int, head_dim: int) -> str:
    """(T, heads * head_dim) -> (T, heads, head_dim), each adjacent pair rotated by its position's angle."""
    pairs = g.op("Reshape", x, g.ints([0, heads, head_dim // 2, 2]))
    half = g.ints([1, 1])
    x0, x1 = (f"{pairs}_{k}" for k in (0, 1))
    g.nodes.append(helper.make_node("Split", [pairs, half], [x0, x1], axis=-1))
    rotated = g.op("Concat", g.op("Sub", g.op("Mul", x0, "cos"), g.op("Mul", x1, "sin")),
                   g.op("Add", g.op("Mul", x0, "sin"), g.op("Mul", x1, "cos")), axis=-1)
    return g.op("Reshape", rotated, g.ints([0, heads, head_dim]))


def position_inputs(g: GraphBuilder, head_dim: int) -> None:
    """``cos``, ``sin`` (T, 1, head_dim / 2, 1) and ``mask`` (T, P + T) of the tokens fed."""
    for name in ("cos", "sin"):
        g.input(name, FLOAT, ["T", 1, head_dim // 2, 1])
    g.input("mask", FLOAT, ["T", "PT"])


def attention(g: GraphBuilder, x: str, w: dict[str, np.ndarray], block: int, heads: Heads, eps: float) -> str:
    """Block ``block``'s attention partial output (T, dim) of ``x`` (T, dim), its cache's inputs and its new
    positions' outputs declared (``past_k.I``/``new_k.I``, ``past_v.I``/``new_v.I``)."""
    hd, kv = heads.head_dim, heads.kv_heads
    h = rms_norm(g, x, w["attn_norm"], eps, f"{block}.attn_norm")
    q = rope(g, linear(g, h, w["attn_q"], f"{block}.attn_q"), heads.query, hd)
    k = rope(g, linear(g, h, w["attn_k"], f"{block}.attn_k"), kv, hd)
    v = g.op("Reshape", linear(g, h, w["attn_v"], f"{block}.attn_v"), g.ints([0, kv, hd]))
    g.output(f"new_k.{block}", k, ["T", kv, hd])
    g.output(f"new_v.{block}", v, ["T", kv, hd])
    keys = g.op("Concat", g.input(f"past_k.{block}", FLOAT, ["P", kv, hd]), k, axis=0)      # (P + T, kv, hd)
    values = g.op("Concat", g.input(f"past_v.{block}", FLOAT, ["P", kv, hd]), v, axis=0)
    q = g.op("Transpose", g.op("Reshape", q, g.ints([0, kv, heads.group, hd])), perm=[1, 2, 0, 3])  # (kv, grp, T, hd)
    keys_t = g.op("Unsqueeze", g.op("Transpose", keys, perm=[1, 2, 0]), g.ints([1]))       # (kv, 1, hd, P + T)
    scores = g.op("Add", g.op("Mul", g.op("MatMul", q, keys_t), g.scalar(1 / math.sqrt(hd))), "mask")
    probs = g.op("Softmax", scores, axis=-1)
    values = g.op("Unsqueeze", g.op("Transpose", values, perm=[1, 0, 2]), g.ints([1]))     # (kv, 1, P + T, hd)
    att = g.op("Transpose", g.op("MatMul", probs, values), perm=[2, 0, 1, 3])               # (T, kv, grp, hd)
    att = g.op("Reshape", att, g.ints([0, heads.query * hd]))
    return linear(g, att, w["attn_output"], f"{block}.attn_output")


def ffn(g: GraphBuilder, x: str, w: dict[str, np.ndarray], block: int, eps: float) -> str:
    """Block ``block``'s SwiGLU partial output (T, dim) of ``x``."""
    h = rms_norm(g, x, w["ffn_norm"], eps, f"{block}.ffn_norm")
    gate = linear(g, h, w["ffn_gate"], f"{block}.ffn_gate")
    up = linear(g, h, w["ffn_up"], f"{block}.ffn_up")
    return linear(g, g.op("Mul", g.op("Mul", gate, g.op("Sigmoid", gate)), up), w["ffn_down"], f"{block}.ffn_down")


def head(g: GraphBuilder, x: str, norm: np.ndarray, output: np.ndarray, eps: float) -> str:
    """The logits (K, vocab rows) of ``x``'s rows ``keep`` (int64 (K,))."""
    rows = g.op("Gather", x, g.input("keep", INT64, ["K"]), axis=0)
    return linear(g, rms_norm(g, rows, norm, eps, "output_norm"), output, "output")


def block_weights(weights: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
    """Block ``i``'s tensors by role (``decoder.Block``'s ``w``)."""
    prefix = f"blk.{i}."
    return {name[len(prefix):-len(".weight")]: w for name, w in weights.items() if name.startswith(prefix)}


def run_graph(cfg: LlmConfig, weights: dict[str, np.ndarray], blocks: range, embedding: np.ndarray | None,
              norm: np.ndarray | None, output: np.ndarray | None) -> onnx.ModelProto:
    """Blocks ``blocks`` of a stage of one device (whole heads and FFN), from ``ids`` through the embedding
    where given, else from ``x`` (T, dim); to the logits ``y`` of the rows ``keep`` where ``output`` is
    given (with ``norm``), else to the hidden state ``y`` (T, dim)."""
    g = GraphBuilder(f"blocks_{blocks.start}_{blocks.stop}")
    if embedding is not None:
        x = g.op("Gather", g.weight("token_embd", embedding), g.input("ids", INT64, ["T"]), axis=0)
    else:
        x = g.input("x", FLOAT, ["T", cfg.dim])
    position_inputs(g, cfg.head_dim)
    heads = Heads(cfg.kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim)
    for i in blocks:
        w = block_weights(weights, i)
        x = g.op("Add", x, attention(g, x, w, i, heads, cfg.eps))
        x = g.op("Add", x, ffn(g, x, w, i, cfg.eps))
    if output is not None and norm is not None:
        g.output("y", head(g, x, norm, output, cfg.eps), ["K", output.shape[0]])
    else:
        g.output("y", x, ["T", cfg.dim])
    return g.model()


def attention_graph(cfg: LlmConfig, w: dict[str, np.ndarray], block: int, kv_heads: int) -> onnx.ModelProto:
    """A tensor-parallel member's attention half of ``block`` (its ``kv_heads`` groups): ``x`` (T, dim) to its
    partial ``y`` (T, dim)."""
    g = GraphBuilder(f"attention_{block}")
    position_inputs(g, cfg.head_dim)
    heads = Heads(kv_heads, cfg.heads // cfg.kv_heads, cfg.head_dim)
    g.output("y", attention(g, g.input("x", FLOAT, ["T", cfg.dim]), w, block, heads, cfg.eps), ["T", cfg.dim])
    return g.model()


def ffn_graph(cfg: LlmConfig, w: dict[str, np.ndarray], block: int) -> onnx.ModelProto:
    """A tensor-parallel member's FFN half of ``block`` (its columns): ``x`` (T, dim) to its partial ``y``."""
    g = GraphBuilder(f"ffn_{block}")
    g.output("y", ffn(g, g.input("x", FLOAT, ["T", cfg.dim]), w, block, cfg.eps), ["T", cfg.dim])
    return g.model()


def head_graph(cfg: LlmConfig, norm: np.ndarray, output: np.ndarray) -> onnx.ModelProto:
    """The final norm and LM head rows ``output`` (a member's, or all): ``x`` (T, dim), ``keep`` to ``y``."""
    g = GraphBuilder("head")
    g.output("y", head(g, g.input("x", FLOAT, ["T", cfg.dim]), norm, output, cfg.eps), ["K", output.shape[0]])
    return g.model()
