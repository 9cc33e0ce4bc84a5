"""The Siracusa MCU model: hand-computed layers, L3 regimes, the fit-on-chip speedup of Bochem et al."""

from __future__ import annotations

import numpy as np
import pytest
from devmodel_graphs import chain, gemm, llama_blocks

from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.models import device_model
from hetsplit.costs.models.mcu import PREFETCHED, RESIDENT, STREAMED, McuModel, McuParams, with_weight_fraction
from hetsplit.errors import ClusterError

P = 8 * 13e-3  # W


def siracusa() -> Device:
    p = load_preset("siracusa")
    return Device("mcu0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)


def test_gemv_layer_by_hand_is_memory_bound():
    g = chain("one", [gemm("fc", 512, 512)])
    (c,) = McuModel(McuParams()).layer_breakdown(g)
    weights = 512 * 512 + 512                   # int8 weights + bias
    moved = weights + 512 + 512                 # + input and output activations
    compute = 512 * 512 / (8 * 500e6)           # GEMV at 8 MAC/cycle: 65.5 us
    assert compute < moved / 1e9                # L2 -> L1 traffic dominates: 263.7 us
    assert c.regime == RESIDENT and c.l3_bytes == 0
    assert c.time_s == pytest.approx(moved / 1e9)
    assert c.energy_j == pytest.approx(P * moved / 1e9 + moved * 2e-12)


def test_gemm_layer_is_compute_bound():
    g = chain("one", [gemm("fc", 512, 512, m=64)])
    (c,) = McuModel(McuParams()).layer_breakdown(g)
    assert c.time_s == pytest.approx(64 * 512 * 512 / (15.5 * 0.75 * 500e6))


def test_streamed_layer_energy_formula_and_prefetch():
    big = [gemm("w1", 1024, 1024), gemm("w2", 1024, 1024)]   # 2 x 1.05 MB int8 > 1.75 MiB budget
    costs = McuModel(McuParams()).layer_breakdown(chain("two", big))
    w = 1024 * 1024 + 1024
    t_on = (w + 2048) / 1e9
    assert costs[0].regime == STREAMED                      # 2 W does not fit: no double buffering
    assert costs[0].time_s == pytest.approx(t_on + w / (1e9 * 0.45))
    assert costs[0].energy_j == pytest.approx(P * costs[0].time_s + w * 100e-12 + (w + 2048) * 2e-12)
    small = [gemm(f"w{i}", 512, 512) for i in range(8)]     # 8 x 0.26 MB: no residency, but 2 W fits
    pre = McuModel(McuParams()).layer_breakdown(chain("eight", small))
    assert pre[0].regime == PREFETCHED
    assert pre[0].time_s == pytest.approx(max((512 * 512 + 512 + 1024) / 1e9, (512 * 512 + 512) / 1e9))


def test_time_drops_sharply_once_a_block_fits_on_chip():
    g = llama_blocks(8, seq=1)                  # TinyLlama-42M decoding, 8 blocks of 4.2 M weights
    block = range(15)
    times, regimes = {}, {}
    for n in (1, 4, 8, 32):
        c = McuModel(McuParams(weight_fraction=1 / n)).block_costs(g, block)
        times[n], regimes[n] = c.time_s, c.regime
    assert regimes == {1: STREAMED, 4: STREAMED, 8: PREFETCHED, 32: RESIDENT}
    assert times[1] / times[4] == pytest.approx(4, rel=0.1)   # linear while weights stream from L3
    assert times[1] / times[8] > 12                            # super-linear once a block fits (paper: 26.1x)
    assert times[4] / times[8] > 4                             # the drop: 2x the chips, > 4x faster


def test_weight_fraction_through_the_device_model():
    dev = siracusa()
    g = chain("two", [gemm("w1", 1024, 1024), gemm("w2", 1024, 1024)])
    whole = device_model(dev).layer_costs(g)
    half = device_model(with_weight_fraction(dev, 0.5)).layer_costs(g)
    assert np.all(whole.time_s / half.time_s > 3)               # 2 chips: resident, no L3 at all
    assert "0.5 of each layer" in half.source
    assert with_weight_fraction(dev, 0.5).type == "siracusa@0.5"


def test_bad_parameters_name_the_device():
    with pytest.raises(ClusterError, match="mcu0.*weight_fraction"):
        device_model(Device("mcu0", "mcu", "mcu", 1e6, "mcu", {"weight_fraction": 2.0}))
    with pytest.raises(ClusterError, match="unknown MCU model parameter"):
        McuParams.from_params({"l4_bytes": 1}, "device 'mcu0'")
