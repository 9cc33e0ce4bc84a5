"""ReRAM compute-in-memory chip, an analytical model derived from DNN+NeuroSim V1.3.

Each weight layer (conv, dwconv, gemm) is mapped onto 128x128 RRAM subarrays; inputs are applied
bit-serially (one array read per input bit) and 8 columns share one ADC, so one input vector costs
``input_bits x cols_per_adc`` clock cycles per subarray. Per layer:

  cells per weight  nCPS  = ceil(weight_bits / cell_bits)
  input vectors     N_vec = ((H - K + 1) / s) x ((W - K + 1) / s)   (NeuroSim: no padding; or the
                            layer's real output size with ``input_vectors: actual``); 1 for gemm x m
  conventional      subarrays = ceil(Cin K^2 / R) x ceil(Cout nCPS / C)
  novel mapping     subarrays = K^2 x ceil(Cin / R) x ceil(Cout nCPS / C)  (K > 1, Cin K^2 >= R)
  duplication       D = clip(floor(tiles x tile_subarrays / subarrays), 1, max_duplication)
  array + ADC       T_adc = N_vec x input_bits x cols_per_adc x t_clk / D
  accumulation      T_acc = accumulation_factor x T_adc
  buffer + H-tree   T_buf = bits moved / (buffer_bits_per_cycle / t_clk), bits moved =
                            N_vec x rows x input_bits / K (inputs, reused along one kernel axis)
                            + N_vec x Cout x activation_bits (outputs)
  energy            N_vec x input_bits x subarrays x (adc_array(rows) + shift_add + switching)
                    + bits moved x (buffer + interconnect energy per bit) + leakage_power x time
  adc_array(rows)   = adc_array_base + adc_array_per_row x active rows per subarray

Layers without weights (pool, eltwise, norm, softmax, reshape, other) run on the chip's digital
periphery (NeuroSim has max-pool and activation units next to the global buffer): their data crosses
the global buffer, and each element costs ``digital_energy_per_op`` at ``digital_ops_per_cycle``.
Activation-by-activation products (matmul, attention) would need the crossbar rewritten for every
input; RRAM writes are slow and wear the cells, so the model marks them ``inf`` (cannot run).

Defaults are NeuroSim V1.3's (Param.cpp) and its VGG8/CIFAR-10 results; see the preset
``neurosim-rram.yaml`` for the source of each. ``buffer_bits_per_cycle`` and ``tile_subarrays`` are
the two figures fitted to NeuroSim's whole-chip VGG8 result (1.36 ms, ~74% of it buffer traffic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from hetsplit.costs.models.base import AnalyticalDeviceModel, LayerCosts, model_params, register_model
from hetsplit.costs.models.layer_attrs import elements, pair
from hetsplit.errors import ClusterError, ModelError
from hetsplit.graph.types import ATTENTION, CONV, DWCONV, GEMM, MATMUL, Graph, Layer

WEIGHT_KINDS = (CONV, DWCONV, GEMM)
UNSUPPORTED = (MATMUL, ATTENTION)


@dataclass(frozen=True)
class CimParams:
    """NeuroSim V1.3 defaults (RRAM 1T1R, 22 nm, 128x128, 2-bit cells, 8-bit weights/inputs)."""

    subarray_rows: int = 128
    subarray_cols: int = 128
    cell_bits: int = 2
    weight_bits: int = 8
    input_bits: int = 8
    activation_bits: int = 8
    cols_per_adc: int = 8
    clock_s: float = 2.04e-9               # synchronous clock period set by the sensing delay
    novel_mapping: bool = True
    input_vectors: str = "neurosim"        # "neurosim" (no padding) or "actual" (layer out_hw)
    accumulation_factor: float = 1.8       # shift-add / accumulation time over array+ADC time
    tile_subarrays: int = 128              # subarrays per tile a layer may fill with copies
    max_duplication: int = 8               # NeuroSim speedUpDegree
    buffer_bits_per_cycle: float = 20.0    # global buffer + H-tree throughput (fitted, see docstring)
    adc_array_base_j: float = 5.62e-12     # per subarray read per input bit, 0 active rows
    adc_array_per_row_j: float = 0.1584e-12  # ... plus this per active row (25.9 pJ at 128 rows)
    shift_add_j: float = 5.45e-12          # per subarray read per input bit
    switching_j: float = 5.65e-12          # row / mux switching per subarray read per input bit
    buffer_energy_per_byte: float = 8 * 0.07e-12       # J/byte (0.07 pJ/bit)
    interconnect_energy_per_byte: float = 8 * 0.6e-12  # J/byte (0.6 pJ/bit)
    digital_ops_per_cycle: float = 64.0    # periphery element ops per clock (pool, add, ...)
    digital_energy_per_op_j: float = 0.05e-12
    leakage_power: float = 0.85e-3         # W, whole chip

    @classmethod
    def from_params(cls, params: dict[str, Any], where: str) -> "CimParams":
        params = model_params(params)   # a device's segment figures are not the model's
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(params) - set(known) - {"source"})
        if unknown:
            raise ClusterError(f"{where}: unknown CIM model parameter(s) {unknown}; known: {sorted(known)}")
        values: dict[str, Any] = {}
        for key, value in params.items():
            if key not in known:
                continue
            default = known[key].default
            try:
                if isinstance(default, bool):
                    values[key] = value if isinstance(value, bool) else str(value).lower() in ("true", "1", "yes")
                elif isinstance(default, int):
                    values[key] = int(value)
                elif isinstance(default, float):
                    values[key] = float(value)
                else:
                    values[key] = str(value)
            except (TypeError, ValueError):
                raise ClusterError(f"{where}: CIM parameter {key}={value!r} is not a {type(default).__name__}") from None
        p = cls(**values)
        if p.input_vectors not in ("neurosim", "actual"):
            raise ClusterError(f"{where}: input_vectors must be 'neurosim' or 'actual', got {p.input_vectors!r}")
        for key in ("subarray_rows", "subarray_cols", "cell_bits", "weight_bits", "input_bits", "cols_per_adc",
                    "tile_subarrays", "max_duplication"):
            if getattr(p, key) < 1:
                raise ClusterError(f"{where}: CIM parameter {key} must be >= 1, got {getattr(p, key)}")
        if not (p.clock_s > 0 and p.buffer_bits_per_cycle > 0 and p.digital_ops_per_cycle > 0):
            raise ClusterError(f"{where}: clock_s, buffer_bits_per_cycle and digital_ops_per_cycle must be > 0")
        return p


@dataclass(frozen=True)
class CrossbarMapping:
    """How one weight layer lands on the subarrays."""

    rows: int            # weight-matrix rows (inputs per vector)
    cols: int            # weight-matrix columns (outputs x cells per weight)
    subarrays: int
    rows_per_subarray: float  # mean active rows in a subarray read
    novel: bool
    n_vec: int           # input vectors per inference
    reuse: int           # input reuse along one kernel axis (K for convs, 1 for gemm)
    duplication: int


@dataclass(frozen=True)
class CimLayerCost:
    """Latency and energy parts of one layer (seconds, joules)."""

    t_array: float = 0.0
    t_accumulate: float = 0.0
    t_buffer: float = 0.0
    t_digital: float = 0.0
    e_array: float = 0.0
    e_buffer: float = 0.0
    e_digital: float = 0.0
    bits_moved: float = 0.0

    @property
    def time_s(self) -> float:
        return self.t_array + self.t_accumulate + self.t_buffer + self.t_digital

    @property
    def dynamic_j(self) -> float:
        return self.e_array + self.e_buffer + self.e_digital


class CimModel:
    """Per-layer latency and energy of a NeuroSim-like RRAM CIM chip (layer by layer, no pipeline)."""

    def __init__(self, params: CimParams, label: str = "neurosim-rram") -> None:
        self.p = params
        self.label = label

    # ---- mapping ----------------------------------------------------------------------------------
    def _dominant_kernel_area(self, graph: Graph) -> int:
        areas = [k[0] * k[1] for k in (pair(l.attrs.get("kernel")) for l in graph.layers if l.op == CONV)
                 if k[0] * k[1] > 1]
        return max(set(areas), key=areas.count) if areas else 9

    def mapping(self, layer: Layer, dominant_area: int = 9) -> CrossbarMapping:
        """The crossbar mapping of a conv / dwconv / gemm layer (attrs as the graph contract gives)."""
        p, a = self.p, layer.attrs
        ncps = math.ceil(p.weight_bits / p.cell_bits)
        if layer.op == GEMM:
            try:
                k_in, n_out = int(a["k"]), int(a["n"])
            except KeyError as exc:
                raise ModelError(f"layer {layer.name!r}: CIM model needs gemm attrs k and n, missing {exc}") from None
            m = int(a.get("m", 1) or 1)
            rows, cols = k_in, n_out * ncps
            subarrays = math.ceil(rows / p.subarray_rows) * math.ceil(cols / p.subarray_cols)
            dup = self._duplication(subarrays)
            return CrossbarMapping(rows, cols, subarrays, rows / math.ceil(rows / p.subarray_rows), False, m, 1, dup)
        try:
            c_in, c_out = int(a["c_in"]), int(a["c_out"])
        except KeyError as exc:
            raise ModelError(f"layer {layer.name!r}: CIM model needs conv attrs c_in and c_out, missing {exc}") from None
        kh, kw = pair(a.get("kernel"))
        sh, sw = pair(a.get("stride"))
        groups = int(a.get("groups", 1) or 1)
        n_vec = self._input_vectors(layer, kh, kw, sh, sw)
        cin_g, cout_g = c_in // groups, c_out // groups
        area = kh * kw
        novel = (p.novel_mapping and area > 1 and area == dominant_area and cin_g * area >= p.subarray_rows
                 and groups == 1)
        if novel:
            per_kernel = math.ceil(cin_g / p.subarray_rows) * math.ceil(cout_g * ncps / p.subarray_cols)
            subarrays = area * per_kernel
            rows_per = cin_g / math.ceil(cin_g / p.subarray_rows)
        else:
            rows_g = cin_g * area
            subarrays = groups * math.ceil(rows_g / p.subarray_rows) * math.ceil(cout_g * ncps / p.subarray_cols)
            rows_per = rows_g / math.ceil(rows_g / p.subarray_rows)
        dup = self._duplication(subarrays)
        return CrossbarMapping(c_in * area, c_out * ncps, subarrays, rows_per, novel, n_vec, max(kh, 1), dup)

    def _input_vectors(self, layer: Layer, kh: int, kw: int, sh: int, sw: int) -> int:
        a = layer.attrs
        if self.p.input_vectors == "neurosim" and "in_hw" in a:
            h, w = pair(a["in_hw"])
            return max(1, (h - kh + 1) // sh) * max(1, (w - kw + 1) // sw)
        if "out_hw" in a:
            oh, ow = pair(a["out_hw"])
            return oh * ow
        raise ModelError(f"layer {layer.name!r}: CIM model needs conv attrs in_hw or out_hw")

    def _duplication(self, subarrays: int) -> int:
        p = self.p
        tiles = math.ceil(subarrays / p.tile_subarrays)
        return int(min(p.max_duplication, max(1, (tiles * p.tile_subarrays) // subarrays)))

    # ---- costs ------------------------------------------------------------------------------------
    def layer_cost(self, layer: Layer, dominant_area: int = 9) -> CimLayerCost | None:
        """Cost parts of one layer; None where the chip cannot run it."""
        p = self.p
        if layer.op in UNSUPPORTED:
            return None
        buffer_rate = p.buffer_bits_per_cycle / p.clock_s          # bits/s
        bit_energy = (p.buffer_energy_per_byte + p.interconnect_energy_per_byte) / 8
        if layer.op in WEIGHT_KINDS:
            m = self.mapping(layer, dominant_area)
            reads = m.n_vec * p.input_bits * m.subarrays            # subarray reads (one per input bit)
            t_array = m.n_vec * p.input_bits * p.cols_per_adc * p.clock_s / m.duplication
            e_read = (p.adc_array_base_j + p.adc_array_per_row_j * m.rows_per_subarray
                      + p.shift_add_j + p.switching_j)
            c_out = m.cols // math.ceil(p.weight_bits / p.cell_bits)
            bits = m.n_vec * m.rows * p.input_bits / m.reuse + m.n_vec * c_out * p.activation_bits
            ops: float = m.n_vec * c_out                                   # activation (ReLU) per output
            return CimLayerCost(t_array=t_array, t_accumulate=p.accumulation_factor * t_array,
                                t_buffer=bits / buffer_rate, t_digital=ops / p.digital_ops_per_cycle * p.clock_s,
                                e_array=reads * e_read, e_buffer=bits * bit_energy,
                                e_digital=ops * p.digital_energy_per_op_j, bits_moved=bits)
        # digital periphery: data in and out through the buffer, one op per input element
        in_elems = elements(layer, layer.in_bytes or layer.out_bytes)
        out_elems = elements(layer, layer.out_bytes)
        ops = float(layer.attrs.get("elements", 0) or 0) or max(in_elems, out_elems)
        if layer.op == "reshape":
            ops = 0.0
        bits = (in_elems + out_elems) * p.activation_bits
        return CimLayerCost(t_buffer=bits / buffer_rate, t_digital=ops / p.digital_ops_per_cycle * p.clock_s,
                            e_buffer=bits * bit_energy, e_digital=ops * p.digital_energy_per_op_j, bits_moved=bits)

    def breakdown(self, graph: Graph) -> list[CimLayerCost | None]:
        area = self._dominant_kernel_area(graph)
        return [self.layer_cost(layer, area) for layer in graph.layers]

    def costs(self, graph: Graph) -> LayerCosts:
        parts = self.breakdown(graph)
        time_s = np.array([np.inf if c is None else c.time_s for c in parts])
        energy = np.array([np.inf if c is None else c.dynamic_j + self.p.leakage_power * c.time_s for c in parts])
        return LayerCosts(time_s=time_s, energy_j=energy, mem_bytes=self.resident_bytes(graph),
                          source=f"analytical CIM model after DNN+NeuroSim V1.3 ({self.label})")

    def resident_bytes(self, graph: Graph) -> np.ndarray:
        """On-chip bytes per layer: weights at ``weight_bits`` in the arrays, outputs at ``activation_bits``."""
        return np.array([elements(layer, layer.param_bytes) * self.p.weight_bits / 8
                         + elements(layer, layer.out_bytes) * self.p.activation_bits / 8 for layer in graph.layers])


@register_model("cim")
class CimDeviceModel(AnalyticalDeviceModel):
    """The ``cim`` device model: a CimModel configured from a device's params."""

    params_type, model_type = CimParams, CimModel
