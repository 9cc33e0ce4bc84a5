"""Model graphs: ONNX import, layer grouping, per-layer costs, and the model zoo.

- ``load_model(spec)``: a zoo name or an ``.onnx`` path -> ``Graph``
- ``load_onnx(path_or_proto, name=None)``: any ONNX model -> ``Graph``
- ``prepare_model(path_or_proto)``: the canonical ModelProto that a Graph's node and tensor names
  refer to (the runtime cuts sub-models from it)
- ``zoo``: ``names()``, ``load(name)``, ``onnx_path(name)``

See docs/architecture.md.
"""

from hetsplit.graph.types import INPUT, LAYER_KINDS, MAC_KINDS, Graph, Layer, Tensor
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.onnx_prepare import prepare_model, strip_weights
from hetsplit.graph import zoo
from hetsplit.graph.load import load_model

__all__ = ["INPUT", "LAYER_KINDS", "MAC_KINDS", "Graph", "Layer", "Tensor", "load_model", "load_onnx",
           "prepare_model", "strip_weights", "zoo"]
