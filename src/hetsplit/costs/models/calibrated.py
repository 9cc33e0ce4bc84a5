"""A device model fitted to measured profiles (``hetsplit calibrate`` writes its preset).

Each layer falls into a class (``layer_class``): the op kind, with convolutions split by shape
(1x1, the thin-input stem, KxK, grouped, depthwise) and additions that onnxruntime fuses into the
convolution before them ("eltwise_fused": an ONNX Add/Sum layer whose conv input feeds nothing else). Per class:

  time = per_mac_s x MACs + per_byte_s x (input + output + parameter bytes) + fixed_s
  energy = power_active x time

Parameters: ``coefficients: {class: [per_mac_s, per_byte_s, fixed_s]}`` (a ``default`` entry for
classes the fit never saw), ``power_active`` (W), ``overhead_s`` (a per-layer framework overhead,
added to every layer).
"""

from __future__ import annotations


import numpy as np

from hetsplit.cluster.types import Device
from hetsplit.costs.models.base import LayerCosts, default_mem_bytes, register_model
from hetsplit.costs.models.layer_attrs import pair
from hetsplit.errors import ClusterError
from hetsplit.graph.types import CONV, ELTWISE, Graph

CLASS_RULES = "hetsplit-classes/1"


def layer_classes(graph: Graph) -> list[str]:
    """The calibration class of every layer of ``graph``."""
    consumers: dict[int, set[int]] = {}
    for t in graph.tensors:
        if t.producer >= 0:
            consumers.setdefault(t.producer, set()).update(t.consumers)
    out = []
    for i, layer in enumerate(graph.layers):
        a, op = layer.attrs, layer.op
        if op == CONV:
            groups, c_in = int(a.get("groups", 1) or 1), int(a.get("c_in", 0) or 0)
            kh, kw = pair(a.get("kernel"))
            area = kh * kw
            if groups > 1 and groups == c_in:
                op = "dwconv"
            elif area == 1:
                op = "conv1x1"
            elif c_in and c_in <= 4:
                op = "conv_stem"
            elif groups > 1:
                op = "conv_grouped"
            else:
                op = "conv"
        elif op == ELTWISE:
            preds = [p for p in graph.predecessors[i] if p >= 0]
            is_add = bool(layer.onnx_ops) and layer.onnx_ops[0] in ("Add", "Sum")
            fused = is_add and any(graph.layers[p].op == CONV and consumers.get(p, set()) == {i} for p in preds)
            op = "eltwise_fused" if fused else ELTWISE
        out.append(op)
    return out


def layer_features(graph: Graph) -> np.ndarray:
    """L x 3: MACs, bytes moved (in + out + parameters), 1."""
    moved = graph.in_bytes + graph.out_bytes + graph.param_bytes
    return np.stack([graph.macs, moved, np.ones(graph.num_layers)], axis=1)


def predict(graph: Graph, coefficients: dict[str, list[float]], overhead_s: float = 0.0) -> np.ndarray:
    """Per-layer seconds from fitted coefficients (``default`` for classes without their own)."""
    feats = layer_features(graph)
    default = coefficients.get("default", [0.0, 0.0, 0.0])
    rows = np.array([coefficients.get(c, default) for c in layer_classes(graph)], dtype=np.float64)
    return (feats * rows).sum(axis=1) + overhead_s


@register_model("calibrated")
class CalibratedModel:
    """Per-class linear time model fitted by ``hetsplit calibrate``."""

    def __init__(self, device: Device) -> None:
        self.device = device
        p = device.params
        coef = p.get("coefficients")
        if not isinstance(coef, dict) or not coef:
            raise ClusterError(f"device {device.name!r}: the calibrated model needs 'coefficients' "
                               "({class: [per_mac_s, per_byte_s, fixed_s]}); run `hetsplit calibrate` to write them")
        self.coefficients: dict[str, list[float]] = {}
        for cls, values in coef.items():
            vals = list(values) if isinstance(values, (list, tuple)) else []
            if len(vals) != 3 or any(float(v) < 0 for v in vals):
                raise ClusterError(f"device {device.name!r}: coefficients.{cls} must be three numbers >= 0 "
                                   f"[per_mac_s, per_byte_s, fixed_s], got {values!r}")
            self.coefficients[str(cls)] = [float(v) for v in vals]
        if "power_active" not in p:
            raise ClusterError(f"device {device.name!r}: the calibrated model needs power_active (W)")
        self.power = float(p["power_active"])
        self.overhead = float(p.get("overhead_s", 0.0))

    def layer_costs(self, graph: Graph) -> LayerCosts:
        t = predict(graph, self.coefficients, self.overhead)
        return LayerCosts(time_s=t, energy_j=t * self.power, mem_bytes=default_mem_bytes(graph),
                          source=f"calibrated model ({self.device.preset or self.device.name})")
