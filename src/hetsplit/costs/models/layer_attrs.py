"""Reading the layer attributes the device models share (the ONNX importer's attrs contract)."""

from __future__ import annotations

from typing import Any

from hetsplit.graph.types import Layer


def pair(value: Any, default: int = 1) -> tuple[int, int]:
    """(h, w) of a kernel / stride / size attribute given as an int, a pair or None."""
    if value is None:
        return default, default
    if isinstance(value, (int, float)):
        return int(value), int(value)
    seq = list(value)
    return (int(seq[0]), int(seq[-1])) if seq else (default, default)


def elements(layer: Layer, nbytes: float) -> float:
    """Number of tensor elements in ``nbytes`` of this layer's data (``elem_bytes``, default 4)."""
    return nbytes / float(layer.attrs.get("elem_bytes", 4) or 4)
