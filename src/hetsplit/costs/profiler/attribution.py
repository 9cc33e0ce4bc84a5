"""Attribute onnxruntime's per-node times to hetsplit layers (``Layer.nodes`` = ONNX node names).

onnxruntime renames nodes it fuses or re-lays-out: a Conv+Relu in NCHWc layout becomes
``<output tensor>_nchwc`` (the tensor named ``<node>_output_0`` by the exporter); a Gemm+Relu becomes
``fused <gemm node>``; other fusions keep their first node's name inside theirs; inserted layout
nodes (``ReorderOutput``) have names of their own. ``NodeAttributor`` tries, in order: the exact
name; the name without a ``fused `` prefix, ``_nchwc`` and ``_output_N``; the longest original
node name it contains. What stays unknown is charged, by the caller, to the
layer of the node that ran just before it (execution order), and counted.
"""

from __future__ import annotations

import re
from functools import lru_cache

from hetsplit.graph.types import Graph

_REWRITES = (re.compile(r"^fused "), re.compile(r"_nchwc$"), re.compile(r"_output_\d+$"),
             re.compile(r"_kernel_time$"))


class NodeAttributor:
    """Maps onnxruntime node names to layer indices (None when it cannot tell)."""

    def __init__(self, graph: Graph) -> None:
        self.by_node: dict[str, int] = {}
        for i, layer in enumerate(graph.layers):
            for node in layer.nodes:
                self.by_node.setdefault(node, i)
        for tensor in graph.tensors:                 # boundary tensors name their producer layer
            if tensor.producer >= 0:
                self.by_node.setdefault(tensor.name, tensor.producer)
        self._by_length = sorted(self.by_node, key=len, reverse=True)
        self.layer_of = lru_cache(maxsize=None)(self._layer_of)

    def _layer_of(self, ort_name: str) -> int | None:
        name = ort_name
        if name in self.by_node:
            return self.by_node[name]
        for pattern in _REWRITES:
            name = pattern.sub("", name)
            if name in self.by_node:
                return self.by_node[name]
        for original in self._by_length:            # fused nodes carry their first node's name
            if len(original) > 3 and original in ort_name:
                return self.by_node[original]
        return None
