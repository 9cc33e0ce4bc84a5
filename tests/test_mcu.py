"""The Siracusa MCU model: hand-computed layers, where a chip keeps its weights, the per-layer table."""

from __future__ import annotations

import pytest
from devmodel_graphs import chain, gemm

from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.models import device_model
from hetsplit.costs.models.base import element_bytes
from hetsplit.costs.models.mcu import PREFETCHED, RESIDENT, STREAMED, McuModel, McuParams, WeightShare
from hetsplit.errors import ClusterError

P = 8 * 13e-3  # W


def siracusa() -> Device:
    p = load_preset("siracusa")
    return Device("mcu0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)


def test_gemv_layer_by_hand_is_memory_bound():
    g = chain("one", [gemm("fc", 512, 512)])
    m = McuModel(McuParams())
    c = m.task_cost(g.layers[0], RESIDENT)
    weights = 512 * 512 + 512                   # int8 weights + bias
    moved = weights + 512 + 512                 # + input and output activations
    compute = 512 * 512 / (8 * 500e6)           # GEMV at 8 MAC/cycle: 65.5 us
    assert compute < moved / 1e9                # L2 -> L1 traffic dominates: 263.7 us
    assert c.l3_bytes == 0 and c.l2_bytes == moved
    assert (c.compute_s, c.l2_s, c.l3_s) == pytest.approx((compute, moved / 1e9 - compute, 0.0))
    assert c.time_s == pytest.approx(moved / 1e9)
    assert c.energy_j == pytest.approx(P * compute + moved * 2e-12)      # P T_comp: compute time only
    (table,) = m.costs(g).time_s                # alone, the layer is resident: the table says the same
    assert table == pytest.approx(c.time_s)


def test_gemm_layer_is_compute_bound():
    g = chain("one", [gemm("fc", 512, 512, m=64)])
    (t,) = McuModel(McuParams()).costs(g).time_s
    assert t == pytest.approx(64 * 512 * 512 / (15.5 * 0.75 * 500e6))


def test_streamed_layer_energy_formula_and_prefetch():
    big = [gemm("w1", 1024, 1024), gemm("w2", 1024, 1024)]   # 2 x 1.05 MB int8 > 1.75 MiB budget
    m = McuModel(McuParams())
    costs = m.costs(chain("two", big))
    w = 1024 * 1024 + 1024
    acts = 1024 + 1024
    compute = 1024 * 1024 / (8 * 500e6)
    t_on = (w + acts) / 1e9
    assert m.placement(WeightShare((w, w), 2 * w)) == (STREAMED,) * 2   # 2 W does not fit: no double buffering
    streamed = t_on + (w + acts) / (1e9 * 0.45)                     # weights and activations pass L3
    assert costs.time_s[0] == pytest.approx(streamed)
    assert costs.energy_j[0] == pytest.approx(P * compute + (w + acts) * 100e-12 + (w + acts) * 2e-12)
    small = [gemm(f"w{i}", 512, 512) for i in range(8)]     # 8 x 0.26 MB: no residency, but 2 W fits
    pre = m.costs(chain("eight", small))
    w = 512 * 512 + 512
    assert m.placement(WeightShare((w,) * 8, 8 * w)) == (PREFETCHED,) * 8   # layer by layer, without blocks
    assert pre.time_s[0] == pytest.approx(max((w + 1024) / 1e9, w / 1e9))   # the table: its load hidden by itself
    assert pre.energy_j[0] == pytest.approx(P * 512 * 512 / (8 * 500e6) + (w + 1024) * 2e-12 + w * 100e-12)


def test_placement_judges_the_model_share_then_each_segment():
    m = McuModel(McuParams())
    budget = McuParams().weight_budget
    assert m.placement(WeightShare((budget / 2, budget / 2), budget)) == (RESIDENT, RESIDENT)
    assert m.placement(WeightShare((budget / 2, budget / 2 + 1), budget + 1)) == (PREFETCHED, STREAMED)
    assert m.placement(WeightShare((0.0,), 4 * budget)) == (PREFETCHED,)


def test_the_chip_runs_int8_and_says_so():
    assert element_bytes(siracusa()) == 1
    dev = siracusa()
    assert element_bytes(Device("cpu0", "cpu", "cpu", 1e9, "roofline", {"peak_macs": 1e9, "mem_bandwidth": 1e9, "power_active": 1.0})) \
        is None and device_model(dev).element_bytes == 1


def test_bad_parameters_name_the_device():
    with pytest.raises(ClusterError, match="mcu0.*gemm_efficiency"):
        device_model(Device("mcu0", "mcu", "mcu", 1e6, "mcu", {"gemm_efficiency": 2.0}))
    with pytest.raises(ClusterError, match="unknown MCU model parameter"):
        McuParams.from_params({"l4_bytes": 1}, "device 'mcu0'")


def test_kernel_overhead_may_be_zero_but_not_negative():
    assert McuParams.from_params({"kernel_overhead_cycles": 0}, "mcu0").kernel_overhead_cycles == 0
    with pytest.raises(ClusterError, match="kernel_overhead_cycles"):
        McuParams.from_params({"kernel_overhead_cycles": -1}, "mcu0")
