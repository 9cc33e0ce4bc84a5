"""Shards of a layer as layers of their own, so device models and profiles cost them unchanged.

A horizontal split slices one axis of a layer: ``out`` (output channels of a convolution, columns
of a fully connected layer, heads of an attention matmul) or ``in`` (input channels, rows). An
``out`` shard computes a slice of the output from the whole input; an ``in`` shard computes a
partial sum of the whole output from a slice of the input (the partials are summed afterwards).
Layers without weights (activations, softmax, norms over channels) can be ``out``-sharded only in
a chain behind a sharded producer: they follow its slicing (``axis_size`` is None for them).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hetsplit.errors import ModelError
from hetsplit.graph.types import CONV, DWCONV, ELTWISE, GEMM, MATMUL, Layer

CHAIN_KINDS = ("eltwise", "softmax", "pool", "norm", "reshape", "other")  # follow a sharded producer


def axis_size(layer: Layer, axis: str) -> int | None:
    """How many slices ``axis`` of ``layer`` has (None: it follows its producer's slicing).

    Raises ModelError naming the layer when it cannot be split along ``axis``.
    """
    a, op = layer.attrs, layer.op
    why = ""
    needs = {CONV: "c_out", DWCONV: "c_out", GEMM: "n"}
    if op in needs and needs[op] not in a:
        why = "its shape is unknown (a graph read from a profile has no channel counts)"
    elif op == CONV:
        groups = int(a.get("groups", 1))
        if axis == "out":
            return int(a["c_out"])
        if groups == 1 and not a.get("transposed"):
            return int(a["c_in"])
        why = "a grouped or transposed convolution splits only its output channels"
    elif op == DWCONV:
        if axis == "out":
            return int(a["c_out"])
        why = "a depthwise convolution has one input channel per output channel; split 'out'"
    elif op == GEMM:
        return int(a["n"] if axis == "out" else a["k"])
    elif op == MATMUL:
        if axis == "out" and "heads" in a:
            return int(a["heads"])
        why = "an activation x activation matmul splits only by heads ('out'), and this one has no heads"
    elif op in CHAIN_KINDS:
        if axis == "out":
            return None
        why = f"a {op} layer has no weights to split by input; it can only follow a sharded producer ('out')"
    else:
        why = f"layers of kind {op!r} cannot be split"
    raise ModelError(f"layer {layer.name!r} ({op}) cannot be split along {axis!r}: {why}")


def weight_bytes(layer: Layer) -> int:
    """Bytes of the sliced weight (the rest of ``param_bytes`` is the bias), from the layer's shape."""
    a = layer.attrs
    elem = int(a.get("elem_bytes", 4))
    if layer.op in (CONV, DWCONV) and "c_in" in a:
        kh, kw = (tuple(a.get("kernel", (1, 1))) + (1, 1))[:2]
        w = int(a["c_out"]) * int(a["c_in"]) // max(1, int(a.get("groups", 1))) * int(kh) * int(kw) * elem
        return min(w, layer.param_bytes)
    if layer.op == GEMM and "k" in a:
        return min(int(a["k"]) * int(a["n"]) * elem, layer.param_bytes)
    return layer.param_bytes


def shard_layer(layer: Layer, axis: str, start: int, stop: int, size: int, first: bool = True) -> Layer:
    """The shard ``[start, stop)`` of ``size`` along ``axis`` as a Layer: MACs, weights, tensor bytes
    and the shape attributes device models read, scaled exactly. ``first`` marks the in-shard that
    carries the bias (an in-split adds it once)."""
    if not 0 <= start < stop <= size:
        raise ModelError(f"layer {layer.name!r}: shard [{start}, {stop}) is outside its {axis} axis of {size}")
    n = stop - start

    def part(x: int) -> int:
        return x * n // size

    weights = weight_bytes(layer)
    bias = layer.param_bytes - weights
    attrs: dict[str, Any] = dict(layer.attrs)
    if axis == "out":
        params = part(weights) + part(bias)
        out_bytes, in_bytes = part(layer.out_bytes), layer.in_bytes
        if layer.op in (CONV, DWCONV):
            attrs["c_out"] = n
            if layer.op == DWCONV:
                attrs["c_in"], attrs["groups"] = n, n
                in_bytes = part(layer.in_bytes)
        elif layer.op == GEMM:
            attrs["n"] = n
        elif layer.op == MATMUL:
            attrs["heads"], attrs["batch"] = n, part(int(attrs.get("batch", size)))
            in_bytes = part(layer.in_bytes)
        else:  # a chain layer: every tensor it touches is sliced alike
            in_bytes = part(layer.in_bytes)
        if "elements" in attrs:
            attrs["elements"] = part(int(attrs["elements"]))
    else:
        params = part(weights) + (bias if first else 0)
        out_bytes, in_bytes = layer.out_bytes, part(layer.in_bytes)
        if layer.op == CONV:
            attrs["c_in"] = n
        elif layer.op == GEMM:
            attrs["k"] = n
    for key in ("param_bytes_read", "lookup_bytes"):   # an embedding's shard reads its share of the rows
        if key in attrs and layer.param_bytes:
            attrs[key] = int(attrs[key]) * params // layer.param_bytes
    return replace(layer, name=f"{layer.name}@{axis}[{start}:{stop}]", macs=part(layer.macs), param_bytes=params,
                   out_bytes=out_bytes, in_bytes=in_bytes, attrs=attrs)


def combine_layer(layer: Layer, kind: str, inputs: int) -> Layer:
    """The work of meeting ``inputs`` shards of ``layer``: a concat (a copy of the output) or a sum
    of ``inputs`` partial outputs, as an element-wise layer device models can cost."""
    elem = int(layer.attrs.get("elem_bytes", 4))
    elements = layer.out_bytes // max(1, elem)
    in_bytes = layer.out_bytes * (inputs if kind == "sum" else 1)
    return Layer(f"{layer.name}:{kind}", ELTWISE, 0, 0, layer.out_bytes, in_bytes, ("Sum",) if kind == "sum" else
                 ("Concat",), (), {"elements": elements, "elem_bytes": elem, "inputs": inputs})
