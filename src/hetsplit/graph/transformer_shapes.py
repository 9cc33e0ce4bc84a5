"""Transformer blocks as graphs built from their dimensions, for costing without an ONNX export.

``transformer_graph(TransformerShape(...))`` gives the layers an ONNX import of the same blocks would
give (fully connected projections, attention matmuls with heads, softmax, residual adds, norms), with
the residual tensors as real edges, so ``find_blocks`` and the tensor-parallel partitioner treat it
like any imported model. It covers both modes of Bochem et al. (seed 002):

- prompt: ``tokens`` = ``context`` = S, every projection a GEMM of S rows, attention S x S;
- autoregressive: ``tokens`` = 1 against a KV cache of ``context`` = S positions, every projection a
  GEMV, attention 1 x S (the cache is read by the attention matmuls: their input bytes).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.errors import ModelError
from hetsplit.graph.types import ELTWISE, GEMM, INPUT, MATMUL, NORM, SOFTMAX, Graph, Layer, Tensor

F32 = 4


@dataclass(frozen=True)
class TransformerShape:
    """Dimensions of a stack of Transformer blocks.

    ``gated``: a SwiGLU FFN (w1, w3, their product, w2) as in Llama; otherwise up (activation fused)
    and down as in BERT. ``pre_norm``: norms before attention and FFN (Llama); otherwise after the
    residual adds (BERT).
    """

    name: str
    embed: int
    ffn: int
    heads: int
    blocks: int = 1
    tokens: int = 1
    context: int = 128
    gated: bool = True
    pre_norm: bool = True

    def __post_init__(self) -> None:
        for key in ("embed", "ffn", "heads", "blocks", "tokens", "context"):
            if getattr(self, key) < 1:
                raise ModelError(f"transformer shape {self.name!r}: {key} must be >= 1, got {getattr(self, key)}")
        if self.embed % self.heads:
            raise ModelError(f"transformer shape {self.name!r}: embed {self.embed} is not a multiple of "
                             f"{self.heads} heads")

    @property
    def mode(self) -> str:
        return "autoregressive" if self.tokens == 1 and self.context > 1 else "prompt"


class _Builder:
    def __init__(self) -> None:
        self.layers: list[Layer] = []
        self.reads: list[list[int]] = []

    def add(self, layer: Layer, *inputs: int) -> int:
        self.layers.append(layer)
        self.reads.append(list(inputs))
        return len(self.layers) - 1

    def graph(self, name: str, input_bytes: int) -> Graph:
        tensors = [Tensor("tokens_embedded", INPUT, input_bytes, tuple(i for i, r in enumerate(self.reads)
                                                                      if INPUT in r))]
        last = len(self.layers) - 1
        for p, layer in enumerate(self.layers):
            readers = tuple(i for i, r in enumerate(self.reads) if p in r)
            tensors.append(Tensor(f"{layer.name}.out", p, layer.out_bytes, readers, is_output=p == last))
        return Graph(name, self.layers, tensors, source=f"transformer shape {name}")


def _gemm(name: str, m: int, k: int, n: int, activation: str | None = None) -> Layer:
    return Layer(name, GEMM, m * k * n, k * n * F32, m * n * F32, m * k * F32, onnx_ops=("MatMul",),
                 attrs=dict(m=m, k=k, n=n, activation=activation, elem_bytes=F32))


def _matmul(name: str, m: int, k: int, n: int, heads: int) -> Layer:
    return Layer(name, MATMUL, heads * m * k * n, 0, heads * m * n * F32, heads * (m * k + k * n) * F32,
                 onnx_ops=("MatMul",), attrs=dict(m=m, k=k, n=n, batch=heads, heads=heads, elem_bytes=F32))


def _elementwise(name: str, op: str, elements: int, inputs: int = 1) -> Layer:
    onnx = {ELTWISE: ("Add",), NORM: ("ReduceMean", "Mul"), SOFTMAX: ("Softmax",)}[op]
    return Layer(name, op, 0, 0, elements * F32, inputs * elements * F32, onnx_ops=onnx,
                 attrs=dict(elements=elements, elem_bytes=F32))


def transformer_graph(shape: TransformerShape) -> Graph:
    """The blocks of ``shape`` as a Graph (layer names ``b{i}.wq``, ``b{i}.scores``, ...)."""
    s, e, f, h, ctx = shape.tokens, shape.embed, shape.ffn, shape.heads, shape.context
    hd = e // h
    b = _Builder()
    x = INPUT
    for i in range(shape.blocks):
        p = f"b{i}."
        h_in = b.add(_elementwise(p + "attn_norm", NORM, s * e), x) if shape.pre_norm else x
        q = b.add(_gemm(p + "wq", s, e, e), h_in)
        k = b.add(_gemm(p + "wk", s, e, e), h_in)
        v = b.add(_gemm(p + "wv", s, e, e), h_in)
        scores = b.add(_matmul(p + "scores", s, hd, ctx, h), q, k)
        soft = b.add(_elementwise(p + "softmax", SOFTMAX, h * s * ctx), scores)
        context = b.add(_matmul(p + "context", s, ctx, hd, h), soft, v)
        o = b.add(_gemm(p + "wo", s, e, e), context)
        x = b.add(_elementwise(p + "attn_add", ELTWISE, s * e, 2), x, o)
        if not shape.pre_norm:
            x = b.add(_elementwise(p + "attn_norm", NORM, s * e), x)
        h_ffn = b.add(_elementwise(p + "ffn_norm", NORM, s * e), x) if shape.pre_norm else x
        if shape.gated:
            w1 = b.add(_gemm(p + "w1", s, e, f, "silu"), h_ffn)
            w3 = b.add(_gemm(p + "w3", s, e, f), h_ffn)
            inner = b.add(_elementwise(p + "gate", ELTWISE, s * f, 2), w1, w3)
        else:
            inner = b.add(_gemm(p + "up", s, e, f, "gelu"), h_ffn)
        down = b.add(_gemm(p + "w2" if shape.gated else p + "down", s, f, e), inner)
        x = b.add(_elementwise(p + "ffn_add", ELTWISE, s * e, 2), x, down)
        if not shape.pre_norm:
            x = b.add(_elementwise(p + "ffn_norm", NORM, s * e), x)
    return b.graph(shape.name, s * e * F32)
