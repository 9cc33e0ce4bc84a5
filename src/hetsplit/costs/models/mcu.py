"""Siracusa-class MCU: an 8-core RISC-V cluster with L1/L2 on chip and weights in off-chip L3.

After Bochem et al. (Transformers on low-power MCUs, seed 002) and Prasad et al. (Siracusa, JSSC 2024).
int8 inference. Per layer, with f = ``weight_fraction`` (the share of the layer's weights and MACs
this chip holds when a layer is split over 1/f chips, tensor-parallel; 1 = the whole layer):

  weights   W = params x weight_bytes x f        activations A = (in + out elements) x act_bytes
  compute   GEMM (conv, gemm/matmul with m > 1): MACs f / (gemm_macs_per_cycle x gemm_efficiency x clock)
            GEMV (gemm/matmul with m == 1):      MACs f / (gemv_macs_per_cycle x clock)
            other layers:                        elements / (elementwise_per_cycle x clock)
            plus kernel_overhead_cycles per layer (set-up, tiling loop, core synchronization;
            default 0), so small slices of a layer do not scale down linearly
  on chip   t_on = max(compute, (W + A) / l2_l1_bandwidth)   (cluster DMA double-buffers L1)
  L3        budget = l2_bytes - l2_reserved_bytes, and the chip's weights Wtot = sum of W:
              resident   Wtot <= budget:   t = t_on, no L3 traffic
              prefetched 2 W  <= budget:   t = max(t_on, W / l3_bandwidth)  (next weights load while
                                           this layer runs: double buffering in L2)
              streamed   otherwise:        t = t_on + W / (l3_bandwidth x l3_stream_efficiency)
                                           (tiles pass L3 -> L2 -> L1 one after the other, in small
                                           bursts, with intermediate tensors spilled to L3 as well)
  energy    E = P t + N_L3<->L2 E_L3 + N_L2<->L1 E_L2     (Bochem et al., eq. for E_Total per chip;
            chip-to-chip transfers are the links' cost, not the device's)

``block_costs`` evaluates a group of layers (a Transformer block) the way the paper runs it: the
whole block's weights are double-buffered when twice the block fits in L2, which is what makes the
time per block drop sharply once a block's share of weights per chip fits on chip.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Iterable

import numpy as np

from hetsplit.cluster.types import Device
from hetsplit.costs.models.base import AnalyticalDeviceModel, LayerCosts, register_model
from hetsplit.costs.models.layer_attrs import elements
from hetsplit.errors import ClusterError
from hetsplit.graph.types import CONV, DWCONV, GEMM, MATMUL, RESHAPE, Graph, Layer

RESIDENT, PREFETCHED, STREAMED = "resident", "prefetched", "streamed"
MAY_BE_ZERO = frozenset({"kernel_overhead_cycles"})


@dataclass(frozen=True)
class McuParams:
    """Defaults: Siracusa cluster (Bochem et al.; Prasad et al. JSSC 2024; PULP-NN)."""

    clock_hz: float = 500e6
    gemm_macs_per_cycle: float = 15.5
    gemm_efficiency: float = 0.75
    gemv_macs_per_cycle: float = 8.0
    elementwise_per_cycle: float = 8.0
    l1_bytes: float = 256 * 1024
    l2_bytes: float = 2 * 1024**2
    l2_reserved_bytes: float = 256 * 1024
    l2_l1_bandwidth: float = 1e9
    l3_bandwidth: float = 1e9
    l3_stream_efficiency: float = 0.45
    l2_energy_per_byte: float = 2e-12
    l3_energy_per_byte: float = 100e-12
    power_active: float = 8 * 13e-3
    weight_bytes: float = 1.0
    act_bytes: float = 1.0
    weight_fraction: float = 1.0
    kernel_overhead_cycles: float = 0.0

    @classmethod
    def from_params(cls, params: dict[str, Any], where: str) -> "McuParams":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise ClusterError(f"{where}: unknown MCU model parameter(s) {unknown}; known: {sorted(known)}")
        try:
            p = cls(**{k: float(v) for k, v in params.items()})
        except (TypeError, ValueError) as exc:
            raise ClusterError(f"{where}: MCU parameters must be numbers ({exc})") from None
        for f in fields(cls):
            zero_ok = f.name in MAY_BE_ZERO
            if not (getattr(p, f.name) >= 0 if zero_ok else getattr(p, f.name) > 0):
                raise ClusterError(f"{where}: MCU parameter {f.name} must be {'>=' if zero_ok else '>'} 0, "
                                   f"got {getattr(p, f.name)}")
        if p.weight_fraction > 1 or p.l3_stream_efficiency > 1 or p.gemm_efficiency > 1:
            raise ClusterError(f"{where}: weight_fraction (the share of a layer one chip holds), gemm_efficiency "
                               "and l3_stream_efficiency must be in (0, 1]")
        if p.l2_reserved_bytes >= p.l2_bytes:
            raise ClusterError(f"{where}: l2_reserved_bytes must be below l2_bytes")
        return p

    @property
    def weight_budget(self) -> float:
        return self.l2_bytes - self.l2_reserved_bytes


@dataclass(frozen=True)
class McuCost:
    """Time and energy of a layer or block, with the L3 regime it ran in."""

    time_s: float
    energy_j: float
    regime: str
    l3_bytes: float
    l2_bytes: float


def _is_gemv(layer: Layer) -> bool:
    return layer.op in (GEMM, MATMUL) and int(layer.attrs.get("m", 2) or 2) == 1


class McuModel:
    """Siracusa-like MCU costs; ``weight_fraction`` < 1 models one chip of a tensor-parallel split."""

    def __init__(self, params: McuParams, label: str = "siracusa") -> None:
        self.p = params
        self.label = label

    def weights(self, layer: Layer) -> float:
        """Bytes of this chip's share of the layer's weights (int8 by default)."""
        return elements(layer, layer.param_bytes) * self.p.weight_bytes * self.p.weight_fraction

    def activations(self, layer: Layer) -> float:
        """Bytes of the layer's input and output activations (int8 by default)."""
        return (elements(layer, layer.in_bytes) + elements(layer, layer.out_bytes)) * self.p.act_bytes

    def on_chip_parts(self, layer: Layer) -> tuple[float, float]:
        """(compute time, bytes moved L2 <-> L1) of one layer; the cluster DMA overlaps the two."""
        p = self.p
        f = p.weight_fraction if layer.op in (CONV, DWCONV, GEMM, MATMUL) else 1.0
        moved = self.weights(layer) + self.activations(layer)
        if layer.op in (CONV, DWCONV, GEMM, MATMUL):
            rate = p.gemv_macs_per_cycle if _is_gemv(layer) else p.gemm_macs_per_cycle * p.gemm_efficiency
            compute = layer.macs * f / (rate * p.clock_hz)
        elif layer.op == RESHAPE:
            return 0.0, moved
        else:
            elems = float(layer.attrs.get("elements", 0) or 0) or elements(layer, layer.out_bytes)
            compute = elems / (p.elementwise_per_cycle * p.clock_hz)
        return compute + p.kernel_overhead_cycles / p.clock_hz, moved

    def on_chip_time(self, layer: Layer) -> tuple[float, float]:
        """(time without L3, bytes moved L2 <-> L1) of one layer."""
        compute, moved = self.on_chip_parts(layer)
        return max(compute, moved / self.p.l2_l1_bandwidth), moved

    def _cost(self, t_on: float, l2_moved: float, weights: float, regime: str) -> McuCost:
        p = self.p
        if regime == RESIDENT:
            t, l3 = t_on, 0.0
        elif regime == PREFETCHED:
            t, l3 = max(t_on, weights / p.l3_bandwidth), weights
        else:
            t, l3 = t_on + weights / (p.l3_bandwidth * p.l3_stream_efficiency), weights
        energy = p.power_active * t + l3 * p.l3_energy_per_byte + l2_moved * p.l2_energy_per_byte
        return McuCost(t, energy, regime, l3, l2_moved)

    def _regime(self, weights: float, all_weights: float) -> str:
        budget = self.p.weight_budget
        if all_weights <= budget:
            return RESIDENT
        return PREFETCHED if 2 * weights <= budget else STREAMED

    def layer_breakdown(self, graph: Graph) -> list[McuCost]:
        """Each layer on its own, the chip holding (its share of) every layer of ``graph``."""
        total = sum(self.weights(layer) for layer in graph.layers)
        out = []
        for layer in graph.layers:
            t_on, moved = self.on_chip_time(layer)
            w = self.weights(layer)
            out.append(self._cost(t_on, moved, w, self._regime(w, total) if w > 0 else RESIDENT))
        return out

    def block_costs(self, graph: Graph, layers: Iterable[int], model_weight_bytes: float | None = None) -> McuCost:
        """One block of layers run as Bochem et al. run a Transformer block.

        The block's weights (this chip's share) are double-buffered in L2 when twice them fit; all
        weights stay resident when the chip's share of the whole model (``model_weight_bytes``,
        default: every layer of ``graph``) fits; otherwise every layer's weights are streamed.
        """
        idx = list(layers)
        block = [graph.layers[i] for i in idx]
        total = (sum(self.weights(layer) for layer in graph.layers) if model_weight_bytes is None
                 else model_weight_bytes * self.p.weight_fraction)
        w_block = sum(self.weights(layer) for layer in block)
        parts = [self.on_chip_time(layer) for layer in block]
        t_on, moved = sum(t for t, _ in parts), sum(m for _, m in parts)
        regime = self._regime(w_block, total)
        if regime != STREAMED:
            return self._cost(t_on, moved, w_block, regime)
        costs = [self._cost(t, m, self.weights(layer), STREAMED) for layer, (t, m) in zip(block, parts)]
        return McuCost(sum(c.time_s for c in costs), sum(c.energy_j for c in costs), STREAMED,
                       sum(c.l3_bytes for c in costs), moved)

    def costs(self, graph: Graph) -> LayerCosts:
        parts = self.layer_breakdown(graph)
        mem = np.array([self.weights(layer) + (elements(layer, layer.out_bytes) * self.p.act_bytes)
                        for layer in graph.layers])
        share = "" if self.p.weight_fraction == 1 else f", {self.p.weight_fraction:g} of each layer's weights"
        return LayerCosts(time_s=np.array([c.time_s for c in parts]), energy_j=np.array([c.energy_j for c in parts]),
                          mem_bytes=mem, source=f"analytical MCU model after Bochem et al. ({self.label}{share})")


def with_weight_fraction(device: Device, fraction: float) -> Device:
    """A copy of an MCU device holding ``fraction`` of every layer (one chip of 1/fraction)."""
    from dataclasses import replace

    return replace(device, params={**device.params, "weight_fraction": float(fraction)},
                   type=f"{device.type}@{fraction:g}")


@register_model("mcu")
class McuDeviceModel(AnalyticalDeviceModel):
    """The ``mcu`` device model: an McuModel configured from a device's params."""

    params_type, model_type = McuParams, McuModel
