"""Siracusa-class MCU: an 8-core RISC-V cluster with L1/L2 on chip and weights in off-chip L3.

After Bochem et al. (Transformers on low-power MCUs, seed 002) and Prasad et al. (Siracusa, JSSC 2024).
int8: the chip keeps and sends ``act_bytes`` per activation element (``element_bytes``: the
estimator deploys the model at that size, ``costs/build.deployed_graph``). Per layer on one chip (a
shard of a layer is a layer of its own, with its share of the MACs and weights):

  weights   held H = params x weight_bytes; read per inference R = H, except for an embedding
            lookup (``param_bytes_read`` below its params): R = the rows it looks up (and any other
            weights of the layer)
  activations A = (in + out elements) x act_bytes
  compute   GEMM (conv, gemm/matmul with m > 1): MACs / (gemm_macs_per_cycle x gemm_efficiency x clock)
            GEMV (gemm/matmul with m == 1):      MACs / (gemv_macs_per_cycle x clock)
            other layers:                        elements / (elementwise_per_cycle x clock)
            plus kernel_overhead_cycles per layer (set-up, tiling loop, core synchronization), so
            small slices of a layer do not scale down linearly
  L2        the cluster DMA moves R + A between L2 and L1 at l2_l1_bandwidth, overlapped with the
            compute: the layer waits max(0, (R + A) / l2_l1_bandwidth - compute)
  L3        where the chip keeps its weights (``placement``), judged on its *dense* weights (lookup
            tables stay off chip: a lookup reads its rows from L3 every inference); with the budget
            B = l2_bytes - l2_reserved_bytes:
              resident   its share of the whole model <= B: no L3 traffic;
              prefetched 2 x its share of a segment (a Transformer block, ``graph/segments.py``) <= B:
                         the segment's weights load from L3 at l3_bandwidth into the second L2 buffer
                         while the segment before runs (double buffering). The loads are jobs of the
                         chip's memory channel (``estimate/memory.py``), not part of the layer's time;
              streamed   otherwise: the layer's weights and activations pass L3 -> L2 -> L1 in tiles
                         while it runs, at l3_bandwidth x l3_stream_efficiency, and it waits for them
  energy    E = P x compute + N_L3 E_L3 + N_L2<->L1 E_L2 (Bochem et al.'s E_Total per chip, T_comp
            being the compute time; chip-to-chip transfers are the links' cost); a prefetch load
            costs its bytes x E_L3.

``costs(graph)`` is the per-layer table the planners search on: one chip holding the whole graph,
each prefetched layer's load hidden behind that layer alone. A plan's figures come from
``estimate``, which places each chip's own share (``estimate/memory.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hetsplit.costs.models.base import AnalyticalDeviceModel, LayerCosts, model_params, register_model
from hetsplit.costs.models.layer_attrs import elements
from hetsplit.errors import ClusterError
from hetsplit.graph.segments import segments
from hetsplit.graph.types import CONV, DWCONV, GEMM, MATMUL, RESHAPE, Graph, Layer

RESIDENT, PREFETCHED, STREAMED = "resident", "prefetched", "streamed"
MODEL_NAME = "mcu"     # devices with ``model: mcu`` use this model
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
    kernel_overhead_cycles: float = 0.0

    @classmethod
    def from_params(cls, params: dict[str, Any], where: str) -> "McuParams":
        params = model_params(params)   # a device's segment figures are not the model's
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
        if p.l3_stream_efficiency > 1 or p.gemm_efficiency > 1:
            raise ClusterError(f"{where}: gemm_efficiency and l3_stream_efficiency must be in (0, 1]")
        if p.l2_reserved_bytes >= p.l2_bytes:
            raise ClusterError(f"{where}: l2_reserved_bytes must be below l2_bytes")
        return p

    @property
    def weight_budget(self) -> float:
        return self.l2_bytes - self.l2_reserved_bytes


@dataclass(frozen=True)
class McuTaskCost:
    """One layer (or several, summed) on a chip: time in parts, the bytes it moves, its energy."""

    compute_s: float = 0.0
    l2_s: float = 0.0          # waiting for L2 <-> L1 traffic the DMA does not hide behind compute
    l3_s: float = 0.0          # waiting for L3 (streamed weights and activations, looked-up rows)
    l2_bytes: float = 0.0      # N_L2<->L1
    l3_bytes: float = 0.0      # N_L3<->L2 (prefetch loads are the memory channel's, not here)
    energy_j: float = 0.0

    @property
    def time_s(self) -> float:
        return self.compute_s + self.l2_s + self.l3_s

    def __add__(self, other: "McuTaskCost") -> "McuTaskCost":
        return McuTaskCost(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))


@dataclass(frozen=True)
class WeightShare:
    """The dense weights (bytes) one chip holds: per segment it runs, and over the whole model (the
    graph may be one block of it)."""

    segment_bytes: tuple[float, ...]
    model_bytes: float


def _is_gemv(layer: Layer) -> bool:
    return layer.op in (GEMM, MATMUL) and int(layer.attrs.get("m", 2) or 2) == 1


class McuModel:
    """Siracusa-like MCU costs of layers, and where a chip keeps its weights (module docstring)."""

    def __init__(self, params: McuParams, label: str = "siracusa") -> None:
        self.p = params
        self.label = label

    # ---- bytes ------------------------------------------------------------------------------------
    def held(self, layer: Layer) -> float:
        """Bytes of the layer's weights the chip keeps (an embedding: its whole table)."""
        return elements(layer, layer.param_bytes) * self.p.weight_bytes

    def read(self, layer: Layer) -> float:
        """Bytes of its weights one inference reads (an embedding lookup: the rows it looks up)."""
        nbytes = min(layer.param_bytes, int(layer.attrs.get("param_bytes_read", layer.param_bytes)))
        return elements(layer, nbytes) * self.p.weight_bytes

    def is_lookup(self, layer: Layer) -> bool:
        return self.read(layer) < self.held(layer)

    def dense(self, layer: Layer) -> float:
        """Bytes of weights that compete for L2 (every weight but a lookup table's, which stays in L3)."""
        return 0.0 if self.is_lookup(layer) else self.held(layer)

    def activations(self, layer: Layer) -> float:
        """Bytes of the layer's input and output activations."""
        return (elements(layer, layer.in_bytes) + elements(layer, layer.out_bytes)) * self.p.act_bytes

    def memory(self, layer: Layer) -> float:
        """Bytes the layer keeps: its weights and its output."""
        return self.held(layer) + elements(layer, layer.out_bytes) * self.p.act_bytes

    # ---- time and energy --------------------------------------------------------------------------
    def on_chip_parts(self, layer: Layer) -> tuple[float, float]:
        """(compute time, bytes moved L2 <-> L1) of one layer; the cluster DMA overlaps the two."""
        p = self.p
        moved = self.read(layer) + self.activations(layer)
        if layer.op in (CONV, DWCONV, GEMM, MATMUL):
            rate = p.gemv_macs_per_cycle if _is_gemv(layer) else p.gemm_macs_per_cycle * p.gemm_efficiency
            compute = layer.macs / (rate * p.clock_hz)
        elif layer.op == RESHAPE:
            return 0.0, moved
        else:
            elems = float(layer.attrs.get("elements", 0) or 0) or elements(layer, layer.out_bytes)
            compute = elems / (p.elementwise_per_cycle * p.clock_hz)
        return compute + p.kernel_overhead_cycles / p.clock_hz, moved

    def task_cost(self, layer: Layer | None, regime: str) -> McuTaskCost:
        """One layer on a chip whose weights of its segment are ``regime`` (None: a task that only
        forwards a message costs nothing)."""
        if layer is None:
            return McuTaskCost()
        p = self.p
        compute, moved = self.on_chip_parts(layer)
        streamed = regime == STREAMED
        l3 = (self.read(layer) if streamed or self.is_lookup(layer) else 0.0) + \
            (self.activations(layer) if streamed else 0.0)
        return McuTaskCost(compute, max(0.0, moved / p.l2_l1_bandwidth - compute),
                           l3 / (p.l3_bandwidth * p.l3_stream_efficiency), moved, l3,
                           p.power_active * compute + l3 * p.l3_energy_per_byte + moved * p.l2_energy_per_byte)

    def load(self, weight_bytes: float) -> tuple[float, float]:
        """(seconds, joules) of prefetching ``weight_bytes`` of weights from L3 into L2."""
        return weight_bytes / self.p.l3_bandwidth, weight_bytes * self.p.l3_energy_per_byte

    # ---- where the weights live -------------------------------------------------------------------
    def placement(self, share: WeightShare) -> tuple[str, ...]:
        """The regime of each segment of ``share`` (module docstring, "L3")."""
        budget = self.p.weight_budget
        if share.model_bytes <= budget:
            return (RESIDENT,) * len(share.segment_bytes)
        return tuple(PREFETCHED if 2 * w <= budget else STREAMED for w in share.segment_bytes)

    def costs(self, graph: Graph) -> LayerCosts:
        """The per-layer table: one chip holding the whole graph (module docstring)."""
        seg = segments(graph).of_layer
        per_segment = np.zeros(max(seg) + 1)
        for layer, s in zip(graph.layers, seg):
            per_segment[s] += self.dense(layer)
        regimes = self.placement(WeightShare(tuple(per_segment), float(per_segment.sum())))
        time, energy = [], []
        for layer, s in zip(graph.layers, seg):
            c = self.task_cost(layer, regimes[s])
            load_s, load_j = self.load(self.dense(layer)) if regimes[s] == PREFETCHED else (0.0, 0.0)
            time.append(max(c.time_s, load_s))
            energy.append(c.energy_j + load_j)
        return LayerCosts(time_s=np.array(time), energy_j=np.array(energy),
                          mem_bytes=np.array([self.memory(layer) for layer in graph.layers]),
                          source=f"analytical MCU model after Bochem et al. ({self.label})")


@register_model(MODEL_NAME)
class McuDeviceModel(AnalyticalDeviceModel):
    """The ``mcu`` device model: an McuModel configured from a device's params."""

    params_type, model_type = McuParams, McuModel

    @property
    def element_bytes(self) -> float:
        """Bytes per activation element the chip keeps and sends."""
        assert isinstance(self.model, McuModel)
        return self.model.p.act_bytes
