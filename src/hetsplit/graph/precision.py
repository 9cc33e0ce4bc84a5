"""A model deployed at another element size: every floating-point tensor and weight at ``n`` bytes.

Devices that run a model quantized (int8 on a microcontroller) keep and send one byte per element
where the exported graph has four. ``at_element_bytes(graph, 1)`` is that deployment: the same
layers, work and element counts, with every floating-point size scaled by ``n / its element size``
(weights, activations, the tensors between layers, an embedding's rows read); integer tensors (token
ids) and the layers that make them keep their sizes. Messages, memory and device costs then all read
the deployed sizes.
"""

from __future__ import annotations

from dataclasses import replace

from hetsplit.errors import ModelError
from hetsplit.graph.types import INPUT, Graph, Layer, Tensor

FLOAT_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}
_SCALED_ATTRS = ("param_bytes_read", "lookup_bytes")


def _scale(nbytes: int, new: float, old: float) -> int:
    return int(round(nbytes * new / old))


def _tensor(t: Tensor, n: float) -> Tensor:
    old = FLOAT_BYTES.get(t.dtype)
    return t if old is None else replace(t, nbytes=_scale(t.nbytes, n, old))


def _layer(layer: Layer, n: float, int_in: int) -> Layer:
    old = float(layer.attrs.get("elem_bytes", 4) or 4)
    attrs = {**layer.attrs, "elem_bytes": n}
    for key in _SCALED_ATTRS:
        if key in attrs:
            attrs[key] = _scale(int(attrs[key]), n, old)
    return replace(layer, param_bytes=_scale(layer.param_bytes, n, old), out_bytes=_scale(layer.out_bytes, n, old),
                   in_bytes=_scale(layer.in_bytes - int_in, n, old) + int_in, attrs=attrs)


def at_element_bytes(graph: Graph, n: float) -> Graph:
    """``graph`` deployed at ``n`` bytes per floating-point element (module docstring)."""
    if not n > 0:
        raise ModelError(f"model {graph.name!r}: an element size must be > 0 bytes, got {n}")
    n = int(n) if float(n).is_integer() else float(n)
    int_in = [0] * graph.num_layers          # bytes of integer tensors each layer reads (they keep their size)
    int_out = [False] * graph.num_layers     # layers that make an integer tensor
    for t in graph.tensors:
        if t.dtype not in FLOAT_BYTES:
            for c in t.consumers:
                int_in[c] += t.nbytes
            if t.producer != INPUT:
                int_out[t.producer] = True
    layers = [layer if int_out[i] else _layer(layer, n, int_in[i]) for i, layer in enumerate(graph.layers)]
    return Graph(graph.name, layers, [_tensor(t, n) for t in graph.tensors], source=graph.source,
                 meta={**graph.meta, "element_bytes": n})
