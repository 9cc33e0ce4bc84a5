"""The NeuroSim-derived CIM model: hand-computed layers, the VGG8 check, DONNA's per-layer behaviour."""

from __future__ import annotations

import math

import numpy as np
import pytest
from devmodel_graphs import chain, conv, eltwise, gemm, matmul, pool, vgg8

from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.models import device_model
from hetsplit.costs.models.cim import CimModel, CimParams
from hetsplit.errors import ClusterError

T_CLK = 2.04e-9
# energy per subarray read per input bit with all 128 rows active: ADC+array + shift-add + switching
E_READ_FULL = (5.62 + 0.1584 * 128 + 5.45 + 5.65) * 1e-12


def preset_device(name: str) -> Device:
    p = load_preset(name)
    return Device(f"{name}0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)


def test_gemm_layer_by_hand():
    # k=256, n=64: rows 256 -> 2 row blocks; cols 64 x 4 cells = 256 -> 2 col blocks; 4 subarrays
    model = CimModel(CimParams())
    layer = gemm("fc", 256, 64)
    m = model.mapping(layer)
    assert (m.subarrays, m.n_vec, m.rows_per_subarray) == (4, 1, 128)
    assert m.duplication == 8  # 4 subarrays fill a 128-subarray tile 32 times, capped at 8
    c = model.layer_cost(layer)
    assert c.t_array == pytest.approx(1 * 8 * 8 * T_CLK / 8)
    assert c.t_accumulate == pytest.approx(1.8 * c.t_array)
    bits = 256 * 8 + 64 * 8                      # inputs in + outputs out
    assert c.bits_moved == bits
    assert c.t_buffer == pytest.approx(bits / (20 / T_CLK))
    assert c.t_digital == pytest.approx(64 / 64 * T_CLK)
    assert c.e_array == pytest.approx(1 * 8 * 4 * E_READ_FULL)
    assert c.e_buffer == pytest.approx(bits * 0.67e-12)
    assert c.e_digital == pytest.approx(64 * 0.05e-12)


def test_conv_conventional_and_novel_mapping():
    model = CimModel(CimParams())
    first = model.mapping(conv("c1", 3, 128, 32), dominant_area=9)
    # 27 rows < 128: conventional; 128 outputs x 4 cells = 512 cols -> 4 subarrays; no padding: 30x30
    assert (first.novel, first.subarrays, first.n_vec, first.duplication) == (False, 4, 900, 8)
    assert first.rows_per_subarray == 27
    second = model.mapping(conv("c2", 128, 128, 32), dominant_area=9)
    # novel: 9 kernel positions x ceil(128/128) x ceil(512/128) = 36 subarrays; 128 // 36 = 3 copies
    assert (second.novel, second.subarrays, second.duplication) == (True, 36, 3)
    conventional = CimModel(CimParams(novel_mapping=False)).mapping(conv("c2", 128, 128, 32))
    assert conventional.subarrays == math.ceil(128 * 9 / 128) * 4 == 36
    assert conventional.rows_per_subarray == 128
    c = model.layer_cost(conv("c2", 128, 128, 32))
    assert c.t_array == pytest.approx(900 * 8 * 8 * T_CLK / 3)
    assert c.e_array == pytest.approx(900 * 8 * 36 * E_READ_FULL)
    actual = CimModel(CimParams(input_vectors="actual")).mapping(conv("c1", 3, 128, 32))
    assert actual.n_vec == 32 * 32


def test_matmul_cannot_run_and_periphery_layers_can():
    g = chain("mixed", [gemm("fc", 64, 64), matmul("qk", 16, 64, 16), eltwise("add", 64), pool("p", 4, 8)])
    costs = CimModel(CimParams()).costs(g)
    assert np.isinf(costs.time_s[1]) and np.isinf(costs.energy_j[1])
    assert np.all(np.isfinite(costs.time_s[[0, 2, 3]])) and np.all(costs.time_s[[0, 2, 3]] > 0)
    # a pool layer moves its input and output through the buffer: (256 + 64) elements x 8 bits
    p = CimModel(CimParams()).layer_cost(pool("p", 4, 8))
    assert p.bits_moved == (4 * 64 + 4 * 16) * 8


def test_vgg8_within_25_percent_of_neurosim():
    costs = device_model(preset_device("neurosim-rram")).layer_costs(vgg8())
    assert costs.time_s.sum() == pytest.approx(1.36e-3, rel=0.25)
    assert costs.energy_j.sum() == pytest.approx(45e-6, rel=0.25)
    breakdown = CimModel(CimParams()).breakdown(vgg8())
    buffer_share = sum(c.t_buffer for c in breakdown) / sum(c.time_s for c in breakdown)
    assert 0.6 < buffer_share < 0.85  # NeuroSim: ~74% of VGG8's latency is buffer traffic


def test_donna_per_layer_behaviour_on_vgg8():
    g = vgg8()
    cim = device_model(preset_device("neurosim-rram")).layer_costs(g)
    cpu = device_model(preset_device("xeon-w3323")).layer_costs(g)
    gpu = device_model(preset_device("rtx3070ti")).layer_costs(g)
    convs = [i for i, layer in enumerate(g.layers) if layer.op == "conv"]
    fcs = [i for i, layer in enumerate(g.layers) if layer.op == "gemm"]
    # slower than the GPU on every convolution, slowest of all on the large early ones
    assert np.all(cim.time_s[convs] > gpu.time_s[convs])
    assert np.all(cim.time_s[convs[:2]] > np.maximum(cpu.time_s[convs[:2]], gpu.time_s[convs[:2]]))
    # but not on the last fully connected layers
    assert np.all(cim.time_s[fcs] < np.minimum(cpu.time_s[fcs], gpu.time_s[fcs]))
    # and the most energy-efficient device on every layer
    assert np.all(cim.energy_j < np.minimum(cpu.energy_j, gpu.energy_j))


def test_bad_parameters_name_the_device():
    with pytest.raises(ClusterError, match="cim0.*unknown CIM model parameter"):
        device_model(Device("cim0", "cim", "cim", 1e9, "cim", {"subarray_rowz": 64}))
    with pytest.raises(ClusterError, match="input_vectors"):
        CimParams.from_params({"input_vectors": "padded"}, "device 'x'")
