"""In-memory-computing processing units of the NeuroSoC IMC emulator (Bougioukou & Antonakopoulos).

Two unit kinds (seed 001, Sec. III): an **IMC** unit runs only convolutions and matrix-vector
products (gemm), optionally with a fused ReLU or SiLU; every other layer costs ``inf`` on it. A
**DPU** unit runs everything (add, pooling, concat, split, reshape) and convolutions much more slowly:
it is a digital core, modelled with the roofline model (registered here as ``dpu``).

IMC unit, weights stationary in ``crossbars`` arrays of ``crossbar_rows`` x ``crossbar_cols`` int8
cells (one weight per cell); a layer's weight matrix (rows = Cin/groups x K^2, cols = Cout, per group)
is cut into tiles, each tile one crossbar MVM per input vector:

  tiles   = groups x ceil(rows / crossbar_rows) x ceil(cols / crossbar_cols)
  vectors = output pixels (conv) or m (gemm)
  time    = vectors x mvm_time_s x ceil(tiles / crossbars) + (in + out bytes) / io_bandwidth + overhead_s
  energy  = vectors x tiles x mvm_energy_j + (in + out bytes) x io_energy_per_byte + power_static x time

The paper publishes only normalized rates, so the figures in ``imce-imc.yaml`` / ``imce-dpu.yaml``
are stated assumptions (typical analog IMC macros and an ARM core); replace them with measured ones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hetsplit.costs.models.base import AnalyticalDeviceModel, LayerCosts, model_params, register_model
from hetsplit.costs.models.layer_attrs import pair
from hetsplit.costs.models.roofline import RooflineModel
from hetsplit.errors import ClusterError, ModelError
from hetsplit.graph.types import CONV, DWCONV, GEMM, Graph, Layer

IMC_KINDS = (CONV, DWCONV, GEMM)
NO_ACTIVATION = ("", "none", "identity", "linear")


@dataclass(frozen=True)
class ImcParams:
    crossbar_rows: int = 256
    crossbar_cols: int = 256
    crossbars: int = 64
    mvm_time_s: float = 100e-9
    mvm_energy_j: float = 13e-9
    io_bandwidth: float = 4e9
    io_energy_per_byte: float = 20e-12
    power_static: float = 0.1
    overhead_s: float = 20e-6
    weight_bytes: float = 1.0
    fused_activations: tuple[str, ...] = ("relu", "silu")

    @classmethod
    def from_params(cls, params: dict[str, Any], where: str) -> "ImcParams":
        params = model_params(params)   # a device's segment figures are not the model's
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(params) - set(known))
        if unknown:
            raise ClusterError(f"{where}: unknown IMC model parameter(s) {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in params.items():
            if key == "fused_activations":
                items = [value] if isinstance(value, str) else list(value)
                values[key] = tuple(str(v).lower() for v in items)
                continue
            try:
                values[key] = int(value) if isinstance(known[key].default, int) else float(value)
            except (TypeError, ValueError):
                raise ClusterError(f"{where}: IMC parameter {key}={value!r} must be a number") from None
            if not values[key] > 0:
                raise ClusterError(f"{where}: IMC parameter {key} must be > 0, got {value!r}")
        return cls(**values)


class ImcModel:
    """Costs of an IMC processing unit; ``None`` (inf) for layers it cannot run."""

    def __init__(self, params: ImcParams, label: str = "imce-imc") -> None:
        self.p = params
        self.label = label

    def supports(self, layer: Layer) -> bool:
        if layer.op not in IMC_KINDS:
            return False
        act = str(layer.attrs.get("activation") or "").lower()
        return act in NO_ACTIVATION or act in self.p.fused_activations

    def tiles_and_vectors(self, layer: Layer) -> tuple[int, int]:
        p, a = self.p, layer.attrs
        try:
            if layer.op == GEMM:
                rows, cols, groups, vectors = int(a["k"]), int(a["n"]), 1, int(a.get("m", 1) or 1)
            else:
                kh, kw = pair(a.get("kernel"))
                groups = int(a.get("groups", 1) or 1)
                rows, cols = int(a["c_in"]) // groups * kh * kw, int(a["c_out"]) // groups
                oh, ow = pair(a["out_hw"])
                vectors = oh * ow
        except KeyError as exc:
            raise ModelError(f"layer {layer.name!r}: the IMC model needs {layer.op} attribute {exc}") from None
        tiles = groups * math.ceil(rows / p.crossbar_rows) * math.ceil(cols / p.crossbar_cols)
        return tiles, vectors

    def layer_cost(self, layer: Layer) -> tuple[float, float]:
        """(time_s, energy_j) of one layer; (inf, inf) where the unit cannot run it."""
        if not self.supports(layer):
            return math.inf, math.inf
        p = self.p
        tiles, vectors = self.tiles_and_vectors(layer)
        io = layer.in_bytes + layer.out_bytes
        time = vectors * p.mvm_time_s * math.ceil(tiles / p.crossbars) + io / p.io_bandwidth + p.overhead_s
        energy = vectors * tiles * p.mvm_energy_j + io * p.io_energy_per_byte + p.power_static * time
        return time, energy

    def costs(self, graph: Graph) -> LayerCosts:
        pairs = [self.layer_cost(layer) for layer in graph.layers]
        elem = np.array([float(layer.attrs.get("elem_bytes", 4) or 4) for layer in graph.layers])
        weights = graph.param_bytes / elem * self.p.weight_bytes   # int8 weights stay in the arrays
        return LayerCosts(time_s=np.array([t for t, _ in pairs]), energy_j=np.array([e for _, e in pairs]),
                          mem_bytes=weights + graph.out_bytes,
                          source=f"IMC unit model after Bougioukou & Antonakopoulos ({self.label})")


@register_model("imc")
class ImcDeviceModel(AnalyticalDeviceModel):
    """The ``imc`` device model: conv and gemm (with ReLU/SiLU) only."""

    params_type, model_type = ImcParams, ImcModel


@register_model("dpu")
class DpuDeviceModel(RooflineModel):
    """The ``dpu`` device model: a digital unit that runs every layer (the roofline model)."""

    def layer_costs(self, graph: Graph) -> LayerCosts:
        costs = super().layer_costs(graph)
        costs.source = f"DPU unit, roofline model ({self.device.preset or 'custom parameters'})"
        return costs
