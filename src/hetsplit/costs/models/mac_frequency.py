"""The MAC / frequency analytical model of the hybrid-partitioning thesis (seed 003, section 4.3).

Per layer, on one platform (device type):

  time   = ops / (frequency_hz x layer_coefficients[kind])                       (thesis eq. 4.7)
  memory = expected_memory x memory_coefficient   (+ memory_bias_bytes once per device, eq. 4.9)
  energy = time x energy_coefficient_w                                             (eq. 4.10)

``ops`` is the layer's MAC count; a layer without MACs (pool, element-wise, norm, softmax,
reshape...) counts the elements it reads, a pool its output elements x its window. A coefficient is
then "ops per cycle", fitted per platform and kind (``hetsplit.costs.mac_frequency_fit``), so any
constant frequency works: the coefficients absorb it.

Kinds are hetsplit's layer kinds (``LAYER_KINDS``) except that a convolution has two, one per
implementation the framework picks (ncnn's rule, as commonly stated):

  conv-winograd  3x3 kernel, stride 1, groups 1: Winograd F(2x2, 3x3) does 16 multiplies per 2x2
                 output tile instead of 36, so its ops are MACs / 2.25
  conv-im2col    every other convolution (im2col + GEMM): ops are its MACs

A convolution kind without a coefficient falls back to ``conv``, then to ``default``; any other kind
to ``default``.

Memory: eq. 4.9's bias is per device, not per layer (a device's memory = its layers' expected memory
x coefficient + bias). The model returns each layer's expected memory (``default_mem_bytes``) x
``memory_coefficient``; the bias is not in the cost table. Take it off the device's ``memory`` to make
plans leave room for it, or use ``device_memory`` for a device's total.

Parameters (device ``params``): ``frequency_hz`` (> 0), ``layer_coefficients`` ({kind: coefficient > 0},
kinds above plus ``conv`` and ``default``), ``energy_coefficient_w`` (W, >= 0), ``memory_coefficient``
(> 0, default 1), ``memory_bias_bytes`` (default 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsplit.costs.models.base import AnalyticalDeviceModel, LayerCosts, default_mem_bytes, model_params, register_model
from hetsplit.costs.models.layer_attrs import pair
from hetsplit.errors import ClusterError
from hetsplit.graph.types import CONV, LAYER_KINDS, MAC_KINDS, POOL, Graph, Layer

WINOGRAD, IM2COL, CONV_FALLBACK, DEFAULT = "conv-winograd", "conv-im2col", "conv", "default"
COEFFICIENT_KEYS = tuple(k for k in LAYER_KINDS if k != CONV) + (WINOGRAD, IM2COL, CONV_FALLBACK, DEFAULT)
WINOGRAD_MAC_FACTOR = 36 / 16   # F(2x2, 3x3): 36 multiplies of direct convolution per tile -> 16
PARAM_KEYS = ("frequency_hz", "layer_coefficients", "energy_coefficient_w", "memory_coefficient", "memory_bias_bytes")


def is_winograd(layer: Layer) -> bool:
    """A convolution the framework runs as Winograd: 3x3 kernel, stride 1, groups 1."""
    a = layer.attrs
    return (layer.op == CONV and pair(a.get("kernel"), 0) == (3, 3) and pair(a.get("stride")) == (1, 1)
            and int(a.get("groups", 1) or 1) == 1)


def layer_kind(layer: Layer) -> str:
    """The coefficient key of a layer: its op kind, a convolution's implementation for convs."""
    if layer.op == CONV:
        return WINOGRAD if is_winograd(layer) else IM2COL
    return layer.op


def layer_ops(layer: Layer) -> float:
    """Operations the model counts for a layer (see the module docstring)."""
    elem = float(layer.attrs.get("elem_bytes", 4) or 4)
    if layer.op in MAC_KINDS:
        return layer.macs / WINOGRAD_MAC_FACTOR if is_winograd(layer) else float(layer.macs)
    if layer.op == POOL and layer.attrs.get("kernel") is not None:
        kh, kw = pair(layer.attrs.get("kernel"))
        return layer.out_bytes / elem * kh * kw
    return layer.in_bytes / elem


def graph_kinds_ops(graph: Graph) -> tuple[list[str], np.ndarray]:
    """Every layer's coefficient key and operation count."""
    return [layer_kind(x) for x in graph.layers], np.array([layer_ops(x) for x in graph.layers], dtype=np.float64)


def coefficient_for(kind: str, coefficients: dict[str, float]) -> float | None:
    """The coefficient a kind uses: its own, ``conv`` for a convolution kind, then ``default``."""
    if kind in coefficients:
        return coefficients[kind]
    if kind in (WINOGRAD, IM2COL) and CONV_FALLBACK in coefficients:
        return coefficients[CONV_FALLBACK]
    return coefficients.get(DEFAULT)


def layer_times(graph: Graph, frequency_hz: float, coefficients: dict[str, float], where: str) -> np.ndarray:
    """Seconds per layer: ops / (frequency x coefficient[kind]) (eq. 4.7)."""
    kinds, ops = graph_kinds_ops(graph)
    coef = np.empty(len(kinds))
    for i, kind in enumerate(kinds):
        c = coefficient_for(kind, coefficients)
        if c is None:
            raise ClusterError(f"{where}: layer_coefficients has no entry for kind {kind!r} (layer "
                               f"{graph.layers[i].name!r} of {graph.name!r}) and no 'default'; add one of them")
        coef[i] = c
    return ops / (frequency_hz * coef)


def device_memory(expected_bytes: float, coefficient: float, bias_bytes: float) -> float:
    """A device's memory from the expected memory of all it holds (eq. 4.9): expected x coefficient + bias."""
    return expected_bytes * coefficient + bias_bytes


def _number(params: dict[str, Any], key: str, where: str, default: float | None, low: float | None,
            strict: bool) -> float:
    if key not in params:
        if default is None:
            raise ClusterError(f"{where}: the mac-frequency model needs {key!r}; add it to the device's params "
                               "(or write them with hetsplit.costs.mac_frequency_fit.to_device_params)")
        return default
    try:
        value = float(params[key])
    except (TypeError, ValueError):
        raise ClusterError(f"{where}: {key} must be a number, got {params[key]!r}") from None
    if not math.isfinite(value) or (low is not None and (value <= low if strict else value < low)):
        bound = f"{'>' if strict else '>='} {low:g}" if low is not None else "finite"
        raise ClusterError(f"{where}: {key} must be {bound}, got {params[key]!r}")
    return value


@dataclass(frozen=True)
class MacFrequencyParams:
    """The thesis model's parameters for one platform, in SI units."""

    frequency_hz: float
    energy_coefficient_w: float
    layer_coefficients: dict[str, float] = field(default_factory=dict)
    memory_coefficient: float = 1.0
    memory_bias_bytes: float = 0.0

    @classmethod
    def from_params(cls, params: dict[str, Any], where: str) -> "MacFrequencyParams":
        params = model_params(params)   # a device's segment figures are not the model's
        unknown = sorted(set(params) - set(PARAM_KEYS))
        if unknown:
            raise ClusterError(f"{where}: unknown mac-frequency model parameter(s) {unknown}; known: {list(PARAM_KEYS)}")
        coef = params.get("layer_coefficients")
        if not isinstance(coef, dict) or not coef:
            raise ClusterError(f"{where}: the mac-frequency model needs 'layer_coefficients' ({{kind: coefficient}}, "
                               f"kinds {list(COEFFICIENT_KEYS)})")
        coefficients: dict[str, float] = {}
        for kind, value in coef.items():
            if kind not in COEFFICIENT_KEYS:
                raise ClusterError(f"{where}: layer_coefficients has unknown kind {kind!r}; use {list(COEFFICIENT_KEYS)}")
            coefficients[str(kind)] = _number(coef, kind, f"{where}: layer_coefficients", None, 0.0, True)
        return cls(frequency_hz=_number(params, "frequency_hz", where, None, 0.0, True),
                   energy_coefficient_w=_number(params, "energy_coefficient_w", where, None, 0.0, False),
                   layer_coefficients=coefficients,
                   memory_coefficient=_number(params, "memory_coefficient", where, 1.0, 0.0, True),
                   memory_bias_bytes=_number(params, "memory_bias_bytes", where, 0.0, None, False))


class MacFrequencyCosts:
    """Per-layer time, energy and memory of a graph under ``MacFrequencyParams``."""

    def __init__(self, params: MacFrequencyParams, label: str) -> None:
        self.p, self.label = params, label

    def costs(self, graph: Graph) -> LayerCosts:
        t = layer_times(graph, self.p.frequency_hz, self.p.layer_coefficients, f"mac-frequency device {self.label!r}")
        return LayerCosts(time_s=t, energy_j=t * self.p.energy_coefficient_w,
                          mem_bytes=default_mem_bytes(graph) * self.p.memory_coefficient,
                          source=f"mac-frequency model, thesis eq. 4.7-4.10 ({self.label})")

    def device_memory(self, expected_bytes: float) -> float:
        """This platform's memory for a device holding ``expected_bytes`` (bias included)."""
        return device_memory(expected_bytes, self.p.memory_coefficient, self.p.memory_bias_bytes)


@register_model("mac-frequency")
class MacFrequencyModel(AnalyticalDeviceModel):
    """The thesis's analytical model: MACs / (frequency x per-kind coefficient)."""

    params_type = MacFrequencyParams
    model_type = MacFrequencyCosts
