"""IMC and DPU processing units: what each can run, hand-computed costs, planners respect inf."""

from __future__ import annotations

import math

import numpy as np
import pytest
from devmodel_graphs import chain, conv, eltwise, gemm, pool

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.cluster.presets import load_preset
from hetsplit.cluster.types import Device
from hetsplit.costs.build import build_problem
from hetsplit.costs.models import device_model
from hetsplit.costs.models.imc import ImcModel, ImcParams
from hetsplit.errors import ClusterError, ModelError
from hetsplit.search.base import make_partitioner, partitioner_names


def preset_device(name: str) -> Device:
    p = load_preset(name)
    return Device(f"{name}0", p.kind, p.type, p.memory_bytes, p.model, p.params, p.name)


def small_cnn():
    return chain("small", [conv("c1", 3, 64, 32), conv("c2", 64, 64, 32), pool("p1", 64, 32),
                           eltwise("add", 64 * 16 * 16), conv("c3", 64, 128, 16, activation="silu"),
                           gemm("fc", 128 * 16 * 16, 10)])


def test_imc_conv_by_hand():
    layer = conv("c2", 64, 300, 32)                       # rows 576 -> 3 tiles, cols 300 -> 2 tiles
    model = ImcModel(ImcParams())
    assert model.tiles_and_vectors(layer) == (3 * 2, 32 * 32)
    t, e = model.layer_cost(layer)
    io = layer.in_bytes + layer.out_bytes
    assert t == pytest.approx(1024 * 100e-9 * 1 + io / 4e9 + 20e-6)
    assert e == pytest.approx(1024 * 6 * 13e-9 + io * 20e-12 + 0.1 * t)
    few = ImcModel(ImcParams(crossbars=4))                # 6 tiles on 4 arrays: two rounds per vector
    assert few.layer_cost(layer)[0] == pytest.approx(1024 * 100e-9 * 2 + io / 4e9 + 20e-6)


def test_imc_runs_only_conv_and_gemm_with_relu_or_silu():
    g = small_cnn()
    costs = device_model(preset_device("imce-imc")).layer_costs(g)
    runs = np.isfinite(costs.time_s)
    assert runs.tolist() == [True, True, False, False, True, True]
    assert np.array_equal(np.isfinite(costs.energy_j), runs)
    sig = chain("s", [conv("c", 3, 8, 8, activation="sigmoid")])
    assert math.isinf(ImcModel(ImcParams()).costs(sig).time_s[0])


def test_dpu_runs_everything_and_convs_much_slower():
    g = small_cnn()
    dpu = device_model(preset_device("imce-dpu")).layer_costs(g)
    imc = device_model(preset_device("imce-imc")).layer_costs(g)
    assert np.all(np.isfinite(dpu.time_s)) and np.all(dpu.time_s > 0)
    convs = [0, 1, 4]
    assert np.all(dpu.time_s[convs] > imc.time_s[convs])
    assert np.all(dpu.time_s[[1, 4]] > 10 * imc.time_s[[1, 4]])   # the wide convolutions


def test_planners_respect_inf_through_the_cost_table():
    cluster = cluster_from_dict({"name": "imce", "devices": [{"name": "imc0", "preset": "imce-imc"},
                                                             {"name": "dpu0", "preset": "imce-dpu"}],
                                 "links": {"default": {"bandwidth": "4GB/s", "energy": "20pJ/B"}}})
    problem = build_problem(small_cnn(), cluster)
    t_imc = problem.costs.type_index("imce-imc")
    assert math.isinf(problem.costs.range_time(0, 6, t_imc))
    assert problem.costs.range_time(0, 2, t_imc) < problem.costs.range_time(0, 2, problem.costs.type_index("imce-dpu"))
    plans = make_partitioner("donna").solve(problem)
    assert plans
    for plan in plans:
        for stage in plan.stages:
            if stage.device == "imc0":
                assert not {"p1", "add"} & set(stage.layers)
        assert math.isfinite(plan.metrics.bottleneck_s)


def test_every_partitioner_keeps_imc_units_off_layers_they_cannot_run():
    cluster = cluster_from_dict({"name": "imce", "devices": [{"name": "imc0", "preset": "imce-imc"},
                                                             {"name": "imc1", "preset": "imce-imc"},
                                                             {"name": "dpu0", "preset": "imce-dpu"}],
                                 "links": {"default": {"bandwidth": "4GB/s", "energy": "20pJ/B"}}})
    problem = build_problem(small_cnn(), cluster)
    for name in partitioner_names():
        if name == "tensor-parallel":   # slices attention heads: a CNN is refused by name
            with pytest.raises(ModelError, match="no multi-head attention"):
                make_partitioner(name).solve(problem)
            continue
        plans = make_partitioner(name).solve(problem)
        assert plans, name
        for plan in plans:
            assert math.isfinite(plan.metrics.bottleneck_s), name
            for stage in plan.stages:
                if stage.device.startswith("imc"):
                    assert not {"p1", "add"} & set(stage.layers), (name, stage)


def test_bad_imc_parameter():
    with pytest.raises(ClusterError, match="crossbars"):
        ImcParams.from_params({"crossbars": 0}, "device 'imc0'")
