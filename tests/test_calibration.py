"""Calibration: layer classes, features and shared terms by hand, NNLS recovers known coefficients,
accuracy metrics, the preset round trip."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import yaml
from devmodel_graphs import chain, conv, eltwise, gemm, pool

from hetsplit.cli.main import main
from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.calibration import Measured, evaluate, fit, measured_from_profile, preset_document
from hetsplit.costs.models import device_model
from hetsplit.costs.models.calibrated import TERMS, layer_classes, layer_features, predict, term_features
from hetsplit.costs.profile import Profile, save_profile
from hetsplit.costs.table import CostTable
from hetsplit.errors import ClusterError, ProfileError
from hetsplit.graph.types import INPUT, Graph, Tensor

TRUE = {"conv": [2e-11, 1e-10, 5e-11, 3e-6], "conv1x1": [4e-11, 2e-10, 1e-10, 2e-6], "conv_stem": [8e-11, 0.0, 0.0, 5e-6],
        "pool": [0.0, 5e-10, 0.0, 1e-6], "gemv": [1e-10, 0.0, 3e-10, 4e-6], "eltwise_fused": [0.0, 0.0, 0.0, 0.0],
        "eltwise": [0.0, 0.0, 0.0, 1e-6]}
TRUE_TERMS = {"stream_bytes": 2e-11, "activation_elements": 6e-10, "softmax_elements": 4e-10, "softmax_rows": 1e-7}


def residual_block_graph() -> Graph:
    """stem -> conv -> add(skip from stem): the add is fused (its conv input feeds only it)."""
    layers = [conv("stem", 3, 16, 16), conv("c1", 16, 16, 16),
              replace(eltwise("add", 16 * 16 * 16), onnx_ops=("Add", "Relu"))]
    tensors = [Tensor("x", INPUT, layers[0].in_bytes, (0,)), Tensor("s", 0, layers[0].out_bytes, (1, 2)),
               Tensor("c", 1, layers[1].out_bytes, (2,)), Tensor("y", 2, layers[2].out_bytes, (), is_output=True)]
    return Graph("res", layers, tensors)


def silu(layer):
    return replace(layer, onnx_ops=("Conv", "Sigmoid", "Mul"))


def cnn(name: str, width: int, hw: int) -> Graph:
    """stem, SiLU conv, 1x1 conv, pool, a concat (streaming), conv, FC: every feature varies with the shape."""
    return chain(name, [conv("stem", 3, width, hw), silu(conv("c1", width, width, hw)),
                        conv("p1", width, 2 * width, hw, k=1), pool("pool", 2 * width, hw),
                        replace(eltwise("cat", 2 * width * (hw // 2) ** 2), onnx_ops=("Concat",)),
                        conv("c2", 2 * width, 2 * width, hw // 2), gemm("fc", 2 * width * (hw // 2) ** 2, 10)])


def synthetic(graph: Graph, noise: float = 0.0, seed: int = 0) -> Measured:
    t = predict(graph, TRUE, TRUE_TERMS)
    if noise:
        t = t * (1 + np.random.default_rng(seed).normal(0, noise, t.shape))
    return Measured(graph.name, graph, t, float(t.sum()))


def test_layer_classes():
    assert layer_classes(residual_block_graph()) == ["conv_stem", "conv", "eltwise_fused"]
    g = chain("dw", [conv("dw", 32, 32, 8, groups=32), conv("pw", 32, 64, 8, k=1), eltwise("e", 10)])
    assert layer_classes(g) == ["dwconv", "conv1x1", "eltwise"]   # not an ONNX Add: not fused


def test_fit_recovers_known_coefficients_and_predicts_held_out_exactly():
    train = [synthetic(cnn(f"net{w}_{hw}", w, hw)) for w, hw in ((8, 32), (16, 16), (32, 8), (24, 24), (12, 28))]
    fitted = fit(train)
    held = synthetic(cnn("held", 20, 20))
    acc = evaluate(fitted, held)
    assert acc.whole_error == pytest.approx(0.0, abs=1e-6)
    assert acc.layer_mape == pytest.approx(0.0, abs=1e-6) and acc.within_10 == 1.0
    assert set(fitted.coefficients) >= {"conv", "conv1x1", "conv_stem", "pool", "gemv", "default"}
    assert set(fitted.terms) == set(TERMS)


def test_noisy_fit_stays_close_and_metrics_are_by_hand():
    train = [synthetic(cnn(f"n{w}", w, 16 + w), noise=0.05, seed=w) for w in (8, 12, 16, 20, 24, 28)]
    acc = evaluate(fit(train), synthetic(cnn("held", 18, 30)))
    assert abs(acc.whole_error) < 0.1
    g = chain("two", [gemm("a", 10, 10), gemm("b", 10, 10)])
    m = Measured("two", g, np.array([1.0, 0.0]), 2.0)            # scaled targets: [2, 0]; layer b fused away
    f = fit([Measured("x", g, np.array([1.0, 1.0]), 2.0)])
    f.coefficients = {"default": [0.0, 0.0, 1.5]}
    a = evaluate(f, m)
    assert (a.whole_predicted_s, a.zero_layers) == (3.0, 1)
    assert a.layer_mape == pytest.approx(0.25) and a.within_10 == 0.0
    assert a.weighted_layer_error == pytest.approx((0.5 + 1.5) / 2.0)


def test_preset_document_loads_and_predicts_like_the_fit(tmp_path):
    train = [synthetic(cnn(f"net{w}", w, 16)) for w in (8, 16, 32)]
    fitted = fit(train)
    fitted.power_w, fitted.power_source = 30.0, "test"
    path = tmp_path / "cpu-cal.yaml"
    path.write_text(yaml.safe_dump(preset_document(fitted, "cpu-cal", "cpu", 2**30, "local-cpu")))
    p = load_preset(str(path))
    assert p.model == "calibrated" and p.sources["params.coefficients"].startswith("hetsplit calibrate")
    dev = Device("c0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)
    g = cnn("x", 10, 20)
    costs = device_model(dev).layer_costs(g)
    assert costs.time_s == pytest.approx(fitted.predict(g))
    assert costs.energy_j == pytest.approx(30.0 * costs.time_s)


def test_calibrated_model_rejects_bad_coefficients():
    with pytest.raises(ClusterError, match="coefficients"):
        device_model(Device("c0", "cpu", "c", 1e9, "calibrated", {"power_active": 1.0}))
    with pytest.raises(ClusterError, match="coefficients.conv"):
        device_model(Device("c0", "cpu", "c", 1e9, "calibrated", {"coefficients": {"conv": [1, 2]}, "power_active": 1}))


def measured_profile(graph: Graph, times: np.ndarray, whole: float | None) -> Profile:
    table = CostTable(graph.names, ["local-cpu"], times[:, None], times[:, None] * 10, graph.out_bytes[:, None])
    meta = {"energy": {"status": "estimated", "estimated_power_w": 10.0}}
    if whole is not None:
        meta["whole_model"] = {"median_s": whole}
    return Profile(graph, table, meta)


def test_measured_from_profile_checks_what_it_needs():
    g = cnn("net", 8, 16)
    t = predict(g, TRUE)
    m = measured_from_profile(measured_profile(g, t, 2 * t.sum()), graph=g)
    assert m.target_s == pytest.approx(2 * t) and m.power_w == 10.0
    with pytest.raises(ProfileError, match="whole_model"):
        measured_from_profile(measured_profile(g, t, None), graph=g)
    with pytest.raises(ProfileError, match="device type 'gpu'"):
        measured_from_profile(measured_profile(g, t, 1.0), "gpu", graph=g)
    with pytest.raises(ProfileError, match="layers differ"):
        measured_from_profile(measured_profile(g, t, 1.0), graph=chain("other", list(g.layers[:-1])))


def test_cli_calibrate_on_measured_profiles(tmp_path, capsys):
    from hetsplit.graph import zoo

    paths = []
    for name, scale in (("resnet8", 1.0), ("resnet18", 1.1)):
        g = zoo.load(name)
        t = predict(g, TRUE) * scale
        paths.append(str(save_profile(measured_profile(g, t, float(t.sum())), tmp_path / f"{name}.json")))
    out, report = tmp_path / "cal.yaml", tmp_path / "acc.json"
    assert main(["calibrate", "--device", "local-cpu", paths[0], "--holdout", paths[1], "--out", str(out),
                 "--report", str(report)]) == 0
    assert load_preset(str(out)).model == "calibrated"
    assert "held out" in capsys.readouterr().out
    assert main(["calibrate", "--device", "local-gpu", paths[0]]) == 2


def test_the_shipped_calibrated_preset_is_a_usable_device():
    p = load_preset("epyc-milan-1t-calibrated")
    dev = Device("cpu0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)
    g = cnn("x", 16, 32)
    costs = device_model(dev).layer_costs(g)
    assert np.all(np.isfinite(costs.time_s)) and np.all(costs.time_s > 0)
    assert set(p.params["coefficients"]) >= {"conv", "conv1x1", "gemv", "pool", "default"}
    assert set(p.params["terms"]) == set(TERMS)


def test_classes_gemv_and_an_add_after_silu_is_not_fused():
    g = chain("x", [gemm("fc1", 64, 32), gemm("mm", 64, 32, m=8)])
    assert layer_classes(g) == ["gemv", "gemm"]
    res = residual_block_graph()
    layers = list(res.layers)
    layers[1] = silu(layers[1])               # Conv+Sigmoid+Mul -> Add: the add reads the Mul, no Conv+Add fusion
    assert layer_classes(Graph("res", layers, res.tensors)) == ["conv_stem", "conv", "eltwise"]


def test_layer_features_by_hand():
    g = chain("x", [conv("c", 8, 16, 10), replace(eltwise("cat", 100), onnx_ops=("Concat",)), gemm("fc", 64, 10)])
    f = layer_features(g)
    c = g.layers[0]
    assert f[0].tolist() == [c.macs, c.in_bytes + c.out_bytes, c.param_bytes, 1.0]
    assert f[1].tolist() == [0.0, 0.0, 0.0, 1.0]                     # streaming: bytes go to stream_bytes
    assert f[2].tolist() == [640.0, 0.0, (64 * 10 + 10) * 4, 1.0]     # GEMV: weights, not its input vector


def test_term_features_by_hand():
    cat_bn = replace(eltwise("catbn", 100), onnx_ops=("Concat", "BatchNormalization", "Relu"))
    layers = [silu(conv("c", 8, 16, 10)), replace(conv("r", 16, 16, 10), onnx_ops=("Conv", "Relu")),
              replace(eltwise("cat", 100), onnx_ops=("Concat", "Reshape")), cat_bn,
              replace(gemm("g", 32, 64, m=4), onnx_ops=("MatMul", "Sigmoid", "Mul")), pool("p", 4, 8)]
    f = term_features(chain("x", layers))
    out = 16 * 10 * 10 * 4                                            # the SiLU conv's output bytes
    assert f[0].tolist() == [2 * 2 * out, out / 4, 0.0, 0.0, 0.0]     # Sigmoid and Mul: a pass each, one activation
    assert f[1].tolist() == [0.0] * len(TERMS)                        # ReLU fused into the conv
    assert f[2].tolist() == [400.0 + 400.0, 0.0, 0.0, 0.0, out]      # Concat reads and writes; Reshape is free;
    #                                                                   it reads conv r's NCHWc output: a reorder
    assert f[3].tolist() == [400.0 + 400.0 + 2 * 2 * 400.0, 0.0, 0.0, 0.0, 0.0]   # + BN and Relu passes
    assert f[4].tolist() == [2 * 2 * 4 * 64 * 4, 4 * 64, 0.0, 0.0, 0.0]   # SiLU after a MatMul: m x n elements
    assert f[5].tolist() == [0.0] * len(TERMS)                        # pools: their own class


def test_reorder_bytes_between_convolutions():
    layers = [conv("a", 8, 8, 10), replace(eltwise("cat", 800), onnx_ops=("Concat",)), conv("b", 8, 8, 10),
              replace(eltwise("up", 800), onnx_ops=("Resize",)), replace(eltwise("add", 800), onnx_ops=("Add",))]
    f = term_features(chain("x", layers))
    assert f[:, 4].tolist() == [0.0, 3200.0 + 3200.0, 0.0, 3200.0, 0.0]   # cat: out of conv a, into conv b
    layers[3:] = [layers[4]]                                            # conv b -> Add: fused into b, no reorder
    assert term_features(chain("y", layers))[:, 4].tolist() == [0.0, 6400.0, 0.0, 0.0]


def softmax_graph(axis: int | None) -> Graph:
    attrs = {"elements": 8 * 128 * 16, "elem_bytes": 4, **({"axis": axis} if axis is not None else {})}
    sm = replace(eltwise("sm", 8 * 128 * 16, op="softmax"), onnx_ops=("Softmax",), attrs=attrs)
    tensors = [Tensor("x", INPUT, sm.in_bytes, (0,), shape=(1, 8, 128, 16)),
               Tensor("y", 0, sm.out_bytes, (), is_output=True, shape=(1, 8, 128, 16))]
    return Graph("sm", [sm], tensors)


def test_softmax_terms_count_rows_along_the_reduced_axis():
    n = 8 * 128 * 16
    last = term_features(softmax_graph(None))[0]
    assert last.tolist() == [2 * n * 4, 0.0, n, n / 16, 0.0]          # rows of 16 along the last axis
    assert term_features(softmax_graph(1))[0, 3] == n / 8             # axis 1: rows of 8


def test_fit_recovers_shared_terms_and_unseen_classes_fall_back():
    train = [synthetic(cnn(f"net{w}_{hw}", w, hw)) for w, hw in ((8, 32), (16, 16), (32, 8), (24, 24), (12, 28))]
    fitted = fit(train)
    assert fitted.terms["stream_bytes"] == pytest.approx(TRUE_TERMS["stream_bytes"], rel=1e-3)
    g = chain("unseen", [conv("dw", 32, 32, 8, groups=32), gemm("fc", 64, 32)])
    assert "dwconv" not in fitted.coefficients
    coef = {k: v for k, v in fitted.coefficients.items() if k != "gemv"} | {"gemm": [1e-9, 0.0, 0.0, 0.0]}
    expect = predict(g, {"dwconv": fitted.coefficients["conv"], "gemv": [1e-9, 0.0, 0.0, 0.0]})
    assert predict(g, coef) == pytest.approx(expect)                  # dwconv -> conv, gemv -> gemm


def test_three_number_coefficients_of_classes_1_still_load():
    dev = Device("c0", "cpu", "c", 1e9, "calibrated", {"coefficients": {"default": [1e-10, 2e-10, 1e-6]},
                                                         "power_active": 1.0})
    g = chain("x", [conv("c", 8, 16, 10)])
    c = g.layers[0]
    expect = 1e-10 * c.macs + 2e-10 * (c.in_bytes + c.out_bytes + c.param_bytes) + 1e-6
    assert device_model(dev).layer_costs(g).time_s[0] == pytest.approx(expect)
    with pytest.raises(ClusterError, match="terms"):
        device_model(Device("c0", "cpu", "c", 1e9, "calibrated",
                            {"coefficients": {"default": [0, 0, 0, 0]}, "terms": {"bogus": 1.0}, "power_active": 1}))
