"""A device model fitted to measured profiles (``hetsplit calibrate`` writes its preset).

Each layer falls into a class (``layer_classes``): the op kind, with convolutions split by shape
(1x1, the thin-input stem, KxK, grouped, depthwise), fully connected layers of one row ("gemv":
memory-bound, onnxruntime's GEMV path) apart from GEMMs, and additions that onnxruntime fuses into the
convolution before them ("eltwise_fused": an ONNX Add/Sum layer whose input is a bare Conv that feeds
nothing else). Per class:

  time = per_mac_s x MACs + per_byte_s x (input + output bytes) + per_param_byte_s x parameter bytes + fixed_s

(layers that only stream data, ``STREAMING_KINDS``, keep only fixed_s: their bytes are a shared term)

plus shared terms (``TERMS``) for the work a CPU runtime does outside its main kernel, the same
whatever the class, so one model family teaches another:

  stream_bytes             bytes read and written by the unfused element-wise / data-moving ONNX
                           ops of a layer (SiLU's Sigmoid and Mul after a conv, Concat, Split,
                           Resize, Transpose, a standalone BatchNorm...): one pass each
  activation_elements      elements through unfused exp-like activations (Sigmoid, Tanh, Erf, ...):
                           SiLU = Sigmoid + Mul costs one of these plus two streamed passes
  softmax_elements         elements of a softmax (max, exp, sum, scale over each row)
  softmax_rows             softmax rows (elements / the length of the reduced axis): per-row set-up
  reorder_bytes            bytes a streaming layer takes from or hands to convolutions: onnxruntime runs
                           conv chains in a blocked layout (NCHWc) and reorders tensors around a concat

energy = power_active x time. Parameters: ``coefficients: {class: [per_mac_s, per_byte_s,
per_param_byte_s, fixed_s]}`` (a 3-number entry of hetsplit-classes/1, [per_mac_s, per_byte_s, fixed_s]
with parameters counted as bytes moved, still loads)
(a ``default`` entry for classes the fit never saw; an unseen convolution shape uses ``conv``, an
unseen GEMV ``gemm``),
``terms: {term: seconds per unit}`` (optional, 0 when absent), ``power_active`` (W), ``overhead_s``
(a per-layer framework overhead, added to every layer).
"""

from __future__ import annotations

import numpy as np

from hetsplit.cluster.types import Device
from hetsplit.costs.models.base import LayerCosts, default_mem_bytes, register_model
from hetsplit.costs.models.layer_attrs import pair
from hetsplit.errors import ClusterError
from hetsplit.graph.types import (
    CONV,
    DWCONV,
    ELTWISE,
    GEMM,
    MAC_KINDS,
    NORM,
    OTHER,
    RESHAPE,
    SOFTMAX,
    Graph,
    Layer,
)

CLASS_RULES = "hetsplit-classes/2"
TERMS = ("stream_bytes", "activation_elements", "softmax_elements", "softmax_rows", "reorder_bytes")
NCOEF = 4                                                            # per class: MACs, bytes, param bytes, 1
STREAMING_KINDS = (ELTWISE, NORM, SOFTMAX, RESHAPE, OTHER)          # no MACs, no window: pure data movement
FALLBACK = {"conv1x1": "conv", "conv_stem": "conv", "conv_grouped": "conv", "dwconv": "conv", "gemv": "gemm"}
SHAPE_ONLY = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Shape", "Constant", "Dropout"})
FUSED_INTO_KERNEL = frozenset({"Relu", "Clip"})   # onnxruntime fuses these into Conv / Gemm (FusedConv, FusedGemm)
TRANSCENDENTAL = frozenset({"Sigmoid", "Tanh", "Erf", "Exp", "Log", "HardSwish", "HardSigmoid"})


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
            if groups > 1 and groups == c_in:
                op = "dwconv"
            elif kh * kw == 1:
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
            fused = is_add and any(_bare_conv(graph.layers[p]) and consumers.get(p, set()) == {i} for p in preds)
            op = "eltwise_fused" if fused else ELTWISE
        elif op == GEMM and int(a.get("m", 0) or 0) == 1:
            op = "gemv"
        out.append(op)
    return out


def _bare_conv(layer: Layer) -> bool:
    """A convolution whose output leaves its kernel untouched (no activation after it): Conv+Add can fuse."""
    return layer.op == CONV and (not layer.onnx_ops or layer.onnx_ops[-1] == "Conv")


def layer_features(graph: Graph) -> np.ndarray:
    """L x 4: MACs, activation bytes (in + out), parameter bytes, 1; streaming layers keep only the 1.

    A streaming layer (concat, split, add, norm, softmax...) is memory-bound: its bytes count in the
    shared ``stream_bytes`` term, so a concat learns from every model's concats whatever class wraps it.
    A GEMV streams its weights once and keeps its input vector in cache: no activation-bytes term.
    """
    keep = np.array([layer.op not in STREAMING_KINDS for layer in graph.layers], dtype=np.float64)
    activations = keep * np.array([c != "gemv" for c in layer_classes(graph)])   # a GEMV's vector stays in cache
    return np.stack([graph.macs * keep, (graph.in_bytes + graph.out_bytes) * activations, graph.param_bytes * keep,
                     np.ones(graph.num_layers)], axis=1)


def main_out_bytes(layer: Layer) -> float:
    """Bytes of a MAC layer's kernel output: MACs / the reduction length x element size."""
    a = layer.attrs
    elem = float(a.get("elem_bytes", 4) or 4)
    if layer.op in (CONV, DWCONV):
        kh, kw = pair(a.get("kernel"))
        c_in, groups = int(a.get("c_in", 0) or 0), int(a.get("groups", 1) or 1)
        reduction = max(c_in // max(groups, 1), 1) * kh * kw
    else:
        reduction = int(a.get("k", 0) or 0)
    return layer.macs / reduction * elem if reduction > 0 else float(layer.out_bytes)


def softmax_row_length(graph: Graph, i: int) -> int:
    """Length of the axis a softmax layer reduces: ``attrs['axis']`` of its output shape, else the last."""
    shapes = [t.shape for t in graph.tensors if t.producer == i and t.shape]
    if not shapes:
        return 0
    shape = shapes[0]
    axis = int(graph.layers[i].attrs.get("axis", -1))
    return int(shape[axis]) if -len(shape) <= axis < len(shape) else int(shape[-1])


def reorder_bytes(graph: Graph) -> np.ndarray:
    """Per streaming layer: bytes it reads from convolutions plus bytes it hands to convolutions.

    onnxruntime runs chains of convolutions in a blocked channel layout (NCHWc); a concat, split,
    resize or norm between them needs its tensors reordered to plain NCHW and back.
    """
    conv = [layer.op in (CONV, DWCONV) for layer in graph.layers]
    streaming = [layer.op in STREAMING_KINDS for layer in graph.layers]
    out = np.zeros(graph.num_layers)
    for t in graph.tensors:
        if t.producer >= 0 and conv[t.producer]:
            for c in set(t.consumers):
                if streaming[c]:
                    out[c] += t.nbytes
        if t.producer >= 0 and streaming[t.producer] and any(conv[c] for c in t.consumers):
            out[t.producer] += t.nbytes
    return out


def term_features(graph: Graph) -> np.ndarray:
    """L x len(TERMS): the shared terms of every layer (see the module docstring)."""
    feats = np.zeros((graph.num_layers, len(TERMS)))
    feats[:, TERMS.index("reorder_bytes")] = reorder_bytes(graph)
    for i, (layer, cls) in enumerate(zip(graph.layers, layer_classes(graph))):
        if cls == "eltwise_fused":      # done inside the convolution's kernel
            feats[i] = 0.0
            continue
        elem = float(layer.attrs.get("elem_bytes", 4) or 4)
        if layer.op not in MAC_KINDS and layer.op not in STREAMING_KINDS:   # pools: their own class
            continue
        ops = [o for o in layer.onnx_ops if o not in SHAPE_ONLY]
        if layer.op in MAC_KINDS:
            size = main_out_bytes(layer)
            passes = [o for o in ops[1:] if o not in FUSED_INTO_KERNEL]
            streamed = 2.0 * size * len(passes)
        else:
            size = float(layer.out_bytes)
            passes = ops
            streamed = (float(layer.in_bytes) + size + 2.0 * size * (len(passes) - 1)) if passes else 0.0
        feats[i, 0] = streamed
        feats[i, 1] = size / elem * sum(o in TRANSCENDENTAL for o in passes)
        if layer.op == SOFTMAX:
            row = softmax_row_length(graph, i)
            feats[i, 2] = size / elem
            feats[i, 3] = size / elem / row if row > 0 else 0.0
    return feats


def class_coefficients(classes: list[str], coefficients: dict[str, list[float]]) -> np.ndarray:
    """L x 4 per-layer coefficients: the class's, its ``FALLBACK`` (conv, gemm) when unseen, else ``default``."""
    default = coefficients.get("default", [0.0] * NCOEF)
    rows = []
    for c in classes:
        if c not in coefficients and c in FALLBACK:
            c = FALLBACK[c]
        rows.append(coefficients.get(c, default))
    return np.array([as_four(r) for r in rows], dtype=np.float64).reshape(len(classes), NCOEF)


def as_four(values: list[float]) -> list[float]:
    """[per_mac_s, per_byte_s, per_param_byte_s, fixed_s]; hetsplit-classes/1's three numbers expanded."""
    vals = [float(v) for v in values]
    return [vals[0], vals[1], vals[1], vals[2]] if len(vals) == 3 else vals


def predict(graph: Graph, coefficients: dict[str, list[float]], terms: dict[str, float] | None = None,
            overhead_s: float = 0.0) -> np.ndarray:
    """Per-layer seconds from fitted per-class coefficients and shared term coefficients."""
    t = (layer_features(graph) * class_coefficients(layer_classes(graph), coefficients)).sum(axis=1)
    if terms:
        t = t + term_features(graph) @ np.array([float(terms.get(k, 0.0)) for k in TERMS])
    return t + overhead_s


@register_model("calibrated")
class CalibratedModel:
    """Per-class linear time model plus shared runtime terms, fitted by ``hetsplit calibrate``."""

    def __init__(self, device: Device) -> None:
        self.device = device
        p = device.params
        coef = p.get("coefficients")
        if not isinstance(coef, dict) or not coef:
            raise ClusterError(f"device {device.name!r}: the calibrated model needs 'coefficients' "
                               "({class: [per_mac_s, per_byte_s, per_param_byte_s, fixed_s]}); run `hetsplit calibrate` to write them")
        self.coefficients: dict[str, list[float]] = {}
        for cls, values in coef.items():
            vals = list(values) if isinstance(values, (list, tuple)) else []
            if len(vals) not in (3, NCOEF) or any(float(v) < 0 for v in vals):
                raise ClusterError(f"device {device.name!r}: coefficients.{cls} must be four numbers >= 0 "
                                   f"[per_mac_s, per_byte_s, per_param_byte_s, fixed_s], got {values!r}")
            self.coefficients[str(cls)] = as_four(vals)
        terms = p.get("terms", {}) or {}
        if not isinstance(terms, dict) or any(k not in TERMS or float(v) < 0 for k, v in terms.items()):
            raise ClusterError(f"device {device.name!r}: terms must map some of {list(TERMS)} to seconds >= 0, "
                               f"got {terms!r}")
        self.terms = {str(k): float(v) for k, v in terms.items()}
        if "power_active" not in p:
            raise ClusterError(f"device {device.name!r}: the calibrated model needs power_active (W)")
        self.power = float(p["power_active"])
        self.overhead = float(p.get("overhead_s", 0.0))

    def layer_costs(self, graph: Graph) -> LayerCosts:
        t = predict(graph, self.coefficients, self.terms, self.overhead)
        return LayerCosts(time_s=t, energy_j=t * self.power, mem_bytes=default_mem_bytes(graph),
                          source=f"calibrated model ({self.device.preset or self.device.name})")
