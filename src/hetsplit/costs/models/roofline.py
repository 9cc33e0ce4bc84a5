"""Roofline device model for CPUs and GPUs: each layer is compute- or memory-bound.

time = max(MACs / (peak MAC/s x efficiency[op]), bytes moved / (memory bandwidth x mem_efficiency))
       + overhead_s (a fixed per-layer cost: kernel launch, framework dispatch)
energy = power_active x time

Parameters (SI, from the device's ``params``; presets state the source of each):
  peak_macs        MAC/s at full use of every core / SM
  mem_bandwidth    bytes/s of the device memory
  power_active     W drawn while computing
  efficiency       {layer kind: fraction of peak reached}; key "default" for the rest
  mem_efficiency   fraction of memory bandwidth reached (default 0.7)
  overhead_s       fixed seconds per layer (default 0), or {layer kind: seconds}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsplit.cluster.types import Device
from hetsplit.costs.models.base import LayerCosts, default_mem_bytes, register_model
from hetsplit.errors import ClusterError
from hetsplit.graph.types import Graph

DEFAULT_EFFICIENCY = {"conv": 0.5, "dwconv": 0.1, "gemm": 0.5, "matmul": 0.4, "default": 0.3}


@dataclass
class RooflineParams:
    peak_macs: float
    mem_bandwidth: float
    power_active: float
    efficiency: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_EFFICIENCY))
    mem_efficiency: float = 0.7
    overhead_s: float | dict[str, float] = 0.0

    @classmethod
    def from_device(cls, device: Device) -> "RooflineParams":
        p: dict[str, Any] = device.params
        missing = [k for k in ("peak_macs", "mem_bandwidth", "power_active") if k not in p]
        if missing:
            raise ClusterError(
                f"device {device.name!r}: the roofline model needs {missing}; add them to the device "
                "(e.g. peak_macs: 1.2e11/s, mem_bandwidth: 50GB/s, power_active: 65W) or use a preset")
        eff = dict(DEFAULT_EFFICIENCY)
        eff.update(p.get("efficiency", {}))
        for kind, value in eff.items():
            if not 0 < float(value) <= 1:
                raise ClusterError(f"device {device.name!r}: efficiency[{kind!r}] = {value} must be in (0, 1]")
        return cls(float(p["peak_macs"]), float(p["mem_bandwidth"]), float(p["power_active"]), eff,
                   float(p.get("mem_efficiency", 0.7)), p.get("overhead_s", 0.0))


@register_model("roofline")
class RooflineModel:
    """Compute-bound vs memory-bound per layer, with per-op-class efficiency factors."""

    def __init__(self, device: Device) -> None:
        self.device = device
        self.p = RooflineParams.from_device(device)

    def layer_costs(self, graph: Graph) -> LayerCosts:
        ops = [layer.op for layer in graph.layers]
        eff = np.array([self.p.efficiency.get(op, self.p.efficiency["default"]) for op in ops])
        compute_s = graph.macs / (self.p.peak_macs * eff)
        moved = graph.param_bytes + graph.in_bytes + graph.out_bytes
        memory_s = moved / (self.p.mem_bandwidth * self.p.mem_efficiency)
        if isinstance(self.p.overhead_s, dict):
            default = float(self.p.overhead_s.get("default", 0.0))
            overhead = np.array([float(self.p.overhead_s.get(op, default)) for op in ops])
        else:
            overhead = np.full(len(ops), float(self.p.overhead_s))
        time_s = np.maximum(compute_s, memory_s) + overhead
        return LayerCosts(time_s=time_s, energy_j=time_s * self.p.power_active,
                          mem_bytes=default_mem_bytes(graph),
                          source=f"roofline model ({self.device.preset or 'custom parameters'})")
