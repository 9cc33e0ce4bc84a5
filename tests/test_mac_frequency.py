"""The thesis's MAC / frequency model: times by hand, the fit recovers its own coefficients, bad params,
and the held-out comparison with hetsplit's calibrated model."""

from __future__ import annotations

import math
import numpy as np
import pytest
from devmodel_graphs import chain, conv, eltwise, gemm, pool

from hetsplit.cluster.types import Device
from hetsplit.costs.calibration import Measured
from hetsplit.costs.mac_frequency_fit import (
    MacFitOptions,
    fit_mac_frequency,
    fit_memory,
    predict_times,
    to_device_params,
)
from hetsplit.costs.models import device_model
from hetsplit.costs.models.base import default_mem_bytes
from hetsplit.costs.models.mac_frequency import device_memory, is_winograd, layer_kind, layer_times
from hetsplit.errors import ClusterError, ProfileError
from hetsplit.experiments.model_accuracy import compare_on_held_out, summarize
from hetsplit.graph.types import Graph

F = 2.0e9
COEF = {"conv-winograd": 8.0, "conv-im2col": 16.0, "gemm": 4.0, "pool": 0.5, "eltwise": 0.25, "dwconv": 2.0}
PARAMS = {"frequency_hz": F, "layer_coefficients": COEF, "energy_coefficient_w": 12.0,
          "memory_coefficient": 1.5, "memory_bias_bytes": 3e6}


def device(params: dict) -> Device:
    return Device("cpu0", "cpu", "cpu", 16e9, model="mac-frequency", params=params)


def net(name: str, width: int, hw: int) -> Graph:
    """Winograd conv, strided (im2col) conv, 1x1 conv, depthwise conv, pool, add, FC."""
    return chain(name, [conv("w", 3, width, hw), conv("s2", width, width, hw, stride=2),
                        conv("p", width, 2 * width, hw // 2, k=1), conv("dw", 2 * width, 2 * width, hw // 2, groups=2 * width),
                        pool("pool", 2 * width, hw // 2), eltwise("add", 2 * width * (hw // 4) ** 2),
                        gemm("fc", 2 * width * (hw // 4) ** 2, 10)])


def thesis_measured(graph: Graph, coefficients: dict[str, float] = COEF, energy_w: float | None = None) -> Measured:
    t = layer_times(graph, F, coefficients, "test")
    whole = float(t.sum())
    if energy_w is None:
        return Measured(graph.name, graph, t, whole)
    return Measured(graph.name, graph, t, whole, power_w=energy_w, power_source="measured energy (rapl)")


def test_times_by_hand_conv_im2col_winograd_and_gemm():
    g = chain("hand", [conv("c3", 16, 32, 8), conv("c3s2", 16, 32, 8, stride=2), gemm("fc", 512, 10)])
    costs = device_model(device(PARAMS)).layer_costs(g)
    # 3x3 stride 1: 8*8*32*16*9 = 294912 MACs, Winograd 294912 / 2.25 = 131072 multiplies
    # 3x3 stride 2: 4*4*32*16*9 = 73728 MACs (im2col); fc: 5120 MACs
    expected = [131072 / (F * 8.0), 73728 / (F * 16.0), 5120 / (F * 4.0)]
    assert costs.time_s == pytest.approx(expected, rel=1e-12)
    assert costs.energy_j == pytest.approx(np.array(expected) * 12.0, rel=1e-12)
    assert costs.mem_bytes == pytest.approx(default_mem_bytes(g) * 1.5)
    assert device_memory(1e6, 1.5, 3e6) == 4.5e6


def test_winograd_rule():
    assert is_winograd(conv("a", 16, 16, 8))
    assert not is_winograd(conv("b", 16, 16, 8, stride=2))
    assert not is_winograd(conv("c", 16, 16, 8, k=5))
    assert not is_winograd(conv("d", 16, 16, 8, groups=2))
    assert [layer_kind(x) for x in net("n", 8, 16).layers] == [
        "conv-winograd", "conv-im2col", "conv-im2col", "dwconv", "pool", "eltwise", "gemm"]


def test_conv_and_default_fallbacks():
    g = chain("fb", [conv("c3", 16, 32, 8), eltwise("e", 100)])
    t = layer_times(g, F, {"conv": 4.0, "default": 0.5}, "test")
    assert t == pytest.approx([131072 / (F * 4.0), 100 / (F * 0.5)])
    with pytest.raises(ClusterError, match="eltwise"):
        layer_times(g, F, {"conv": 4.0}, "test")


@pytest.mark.parametrize("params, key", [
    ({k: v for k, v in PARAMS.items() if k != "frequency_hz"}, "frequency_hz"),
    ({**PARAMS, "frequency_hz": 0}, "frequency_hz"),
    ({**PARAMS, "energy_coefficient_w": -1}, "energy_coefficient_w"),
    ({**PARAMS, "memory_coefficient": "lots"}, "memory_coefficient"),
    ({**PARAMS, "layer_coefficients": {"gemm": -2.0}}, "gemm"),
    ({**PARAMS, "layer_coefficients": {"convv": 2.0}}, "convv"),
    ({**PARAMS, "layer_coefficients": {}}, "layer_coefficients"),
    ({**PARAMS, "clock": 1e9}, "clock"),
])
def test_bad_params_name_device_and_key(params, key):
    with pytest.raises(ClusterError, match=key) as err:
        device_model(device(params))
    assert "cpu0" in str(err.value)


def test_fit_recovers_its_own_coefficients_energy_and_memory():
    models = [thesis_measured(net(f"n{w}", w, hw), energy_w=12.0) for w, hw in ((8, 16), (16, 32), (4, 8))]
    pairs = [(x, 1.5 * x + 3e6) for x in (1e6, 5e6, 2e7)]
    for how in ("mean", "median"):
        fitted = fit_mac_frequency(models, F, MacFitOptions(aggregate=how), memory_pairs=pairs)
        for kind, c in COEF.items():
            assert fitted.layer_coefficients[kind] == pytest.approx(c, rel=1e-9)
        assert fitted.layers["conv-winograd"] == 3
        assert fitted.energy_coefficient_w == pytest.approx(12.0, rel=1e-9)
        assert (fitted.memory_coefficient, fitted.memory_bias_bytes) == pytest.approx((1.5, 3e6))
    params = to_device_params(fitted)
    g = net("new", 12, 24)
    costs = device_model(device(params)).layer_costs(g)
    assert costs.time_s == pytest.approx(predict_times(fitted, g), rel=1e-12)
    assert costs.time_s == pytest.approx(layer_times(g, F, COEF, "test"), rel=1e-9)
    assert costs.energy_j == pytest.approx(costs.time_s * 12.0, rel=1e-9)


def test_fit_mean_against_median_and_unmeasured_energy():
    g = chain("fcs", [gemm("a", 100, 10), gemm("b", 100, 10), gemm("c", 100, 10)])
    t = 1000 / (F * np.array([1.0, 2.0, 6.0]))                  # per-layer coefficients 1, 2, 6
    m = Measured("fcs", g, t, float(t.sum()), power_w=10.0, power_source="assumption: 10 W per busy core")
    assert fit_mac_frequency([m], F).layer_coefficients["gemm"] == pytest.approx(3.0)
    assert fit_mac_frequency([m], F, MacFitOptions(aggregate="median")).layer_coefficients["gemm"] == pytest.approx(2.0)
    fitted = fit_mac_frequency([m], F)
    assert fitted.energy_coefficient_w is None and "not calibrated" in fitted.energy_note
    with pytest.raises(ProfileError, match="energy_coefficient_w"):
        to_device_params(fitted)
    assert to_device_params(fitted, energy_coefficient_w=7.0)["energy_coefficient_w"] == 7.0
    assert fit_mac_frequency([m], F, MacFitOptions(energy_from_estimates=True)).energy_coefficient_w > 0
    with pytest.raises(ProfileError, match="two different"):
        fit_memory([1e6, 1e6], [2e6, 2e6])


def test_compare_on_held_out_both_models():
    models = [thesis_measured(net(f"n{w}", w, hw)) for w, hw in ((8, 16), (16, 32), (4, 8), (12, 24))]
    rows = compare_on_held_out(models)
    assert [r.held_out for r in rows] == ["n8", "n16", "n4", "n12"]
    for r in rows:
        for a in (r.thesis, r.hetsplit):
            assert all(math.isfinite(v) for v in (a.whole_error, a.layer_mape, a.within_10))
        # data made by the thesis model: its fit on the other three predicts the held-out one exactly
        assert abs(r.thesis.whole_error) < 1e-9 and r.thesis.layer_mape < 1e-9 and r.thesis.within_10 == 1.0
        assert r.hetsplit.whole_predicted_s > 0
    s = summarize(rows)
    assert set(s) == {"thesis", "hetsplit"} and s["thesis"].held_out == 4
    assert s["thesis"].median_abs_whole_error < 1e-9
    with pytest.raises(ProfileError):
        compare_on_held_out(models[:1])
