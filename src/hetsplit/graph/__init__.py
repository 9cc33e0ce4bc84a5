"""Model graphs: ONNX import, layer grouping, per-layer costs, and the model zoo."""

from hetsplit.graph.types import INPUT, LAYER_KINDS, MAC_KINDS, Graph, Layer, Tensor

__all__ = ["INPUT", "LAYER_KINDS", "MAC_KINDS", "Graph", "Layer", "Tensor"]
