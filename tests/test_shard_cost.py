"""A shard on a GPU-kind type launches as many kernels as its whole layer: it costs the layer's launch
part plus its share of the rest; CPU types and modelled GPUs keep their shard-to-whole ratio."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from factories import cluster
from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.table import CostTable
from hetsplit.estimate.task_costs import launch_part, task_costs
from hetsplit.graph import zoo
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Combine, Plan, Shard


def setup(gpu_kind: str, source: str, params: dict | None = None, seed: int = 0):
    graph = zoo.load("resnet8")
    cl = cluster(["c", "g"])
    devices = [cl.devices[0], replace(cl.devices[1], kind=gpu_kind, params={**cl.devices[1].params, **(params or {})})]
    cl = replace(cl, devices=devices)
    rng = np.random.default_rng(seed)
    time = rng.uniform(20e-6, 200e-6, size=(graph.num_layers, 2))
    table = CostTable(graph.names, ["c", "g"], time, time * 10, graph.param_bytes[:, None] + np.zeros((1, 2)),
                      {"c": "measured: test", "g": source})
    problem = SplitProblem(graph, cl, table)
    layer = next(layer for layer in graph.layers if layer.op == "conv")
    c_out = layer.attrs["c_out"]
    assign = {name: "d0" for name in graph.names}
    cut = c_out // 4
    assign[layer.name] = (Shard("d0", "out", 0, cut), Shard("d1", "out", cut, c_out))
    plan = Plan(graph.name, cl.name, "test", assign=assign, combine={layer.name: Combine("concat", "d0")})
    tg = check_plan(graph, cl, plan)
    shards = [k for k, t in enumerate(tg.tasks) if t.kind == "shard"]
    return problem, tg, shards, graph.names.index(layer.name)


def test_a_gpu_shard_pays_its_layers_launch_part_whole():
    base, tg, shards, layer = setup("cpu", "measured: gpu test")
    gpu, tg_g, shards_g, _ = setup("gpu", "measured: gpu test")
    today = task_costs(base, tg).time_s
    got = task_costs(gpu, tg_g).time_s
    whole = base.costs.time_s[layer, 1]
    floor = base.costs.time_s[:, 1].min()
    launch, source = launch_part(gpu, "g")
    assert launch is not None and np.all(launch == floor) and "floor" in source
    fixed = min(floor, whole)
    for k in shards:
        ratio = today[k, 1] / whole                       # the CPU type's cost is the share, as today
        assert got[k, 1] == pytest.approx(fixed + ratio * (whole - fixed), rel=1e-12)
        assert got[k, 1] >= today[k, 1] - 1e-18
        assert got[k, 0] == today[k, 0]                   # the CPU column is unchanged
    # the shards together pay the launch part once per shard
    assert got[shards, 1].sum() == pytest.approx(whole + (len(shards) - 1) * fixed, rel=1e-12)
    others = [k for k in range(tg.num_tasks) if k not in shards]
    np.testing.assert_array_equal(got[others], today[others])


def test_launch_s_given_per_layer_kind_and_capped_at_the_layer():
    params = {"launch_s": {"conv": 1.0, "default": 5e-6}}     # 1 s: more than the layer, so the whole layer
    gpu, tg, shards, layer = setup("gpu", "measured: gpu test", params)
    launch, source = launch_part(gpu, "g")
    ops = [lyr.op for lyr in gpu.graph.layers]
    assert launch is not None and launch[ops.index("conv")] == 1.0 and "device parameter" in source
    got = task_costs(gpu, tg).time_s
    np.testing.assert_allclose(got[shards, 1], gpu.costs.time_s[layer, 1])


@pytest.mark.parametrize("kind, source", [("cpu", "measured: cpu"), ("gpu", "modelled: roofline")])
def test_cpu_types_and_modelled_gpus_cost_shards_as_before(kind, source):
    base, tg, shards, _ = setup("cpu", source)
    other, tg2, _, _ = setup(kind, source)
    assert launch_part(other, "g")[0] is None
    np.testing.assert_array_equal(task_costs(other, tg2).time_s, task_costs(base, tg).time_s)
