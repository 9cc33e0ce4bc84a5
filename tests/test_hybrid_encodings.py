"""Hybrid (vertical + LOP) encodings: decoding, restrictions, batch metrics = plan metrics, and the
GA against brute-force fronts on small problems."""

from __future__ import annotations

import itertools

import numpy as np
import onnx
import pytest
from onnx import helper

from graph_helpers import init, model
from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.costs.build import build_problem
from hetsplit.errors import HetsplitError
from hetsplit.graph.load import load_model
from hetsplit.plan.check import check_plan
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.pareto import pareto_mask
from hetsplit.search.encodings import AdvancedEncoding, make_encoding
from hetsplit.search.explore import ExploreOptions, explore, hypervolume, objective_matrix
from hetsplit.workflow import load_problem


def tiny_cnn(path) -> str:
    """conv(3->8)+relu, maxpool, conv(8->8)+relu, flatten, gemm(->10), softmax: 3 splittable layers."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
             helper.make_node("Flatten", ["r2"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["g"], transB=1, name="fc"),
             helper.make_node("Softmax", ["g"], ["y"], name="soft")]
    m = model(nodes, [("x", [1, 3, 16, 16])], ["y"],
              [init("w1", (8, 3, 3, 3)), init("b1", (8,)), init("w2", (8, 8, 3, 3)), init("b2", (8,)),
               init("w3", (10, 512)), init("b3", (10,))])
    p = path / "tiny.onnx"
    onnx.save(m, p)
    return str(p)


def small_cluster(pes: list[str]):
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": f"small-{len(pes)}",
                              "devices": [{"name": f"d{i}", "preset": f"xavier-nx-{pe}"} for i, pe in enumerate(pes)],
                              "links": {"default": "gbe"}, "source": "d0"})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return load_model(tiny_cnn(tmp_path_factory.mktemp("hyb")))


def random_population(enc, rng, n, zeros=0.0):
    x = rng.integers(0, enc.upper + 1, size=(n, enc.n_var))
    return np.where(rng.random(x.shape) < zeros, 0, x)


def assert_batch_matches_plans(problem, enc, x):
    batch = enc.evaluate(x)
    for i in range(len(x)):
        plan = enc.plan(x[i])
        check_plan(problem.graph, problem.cluster, plan)          # a valid plan/2 (or pipeline) plan
        m = evaluate(problem, plan)
        assert m.latency_s == pytest.approx(batch.latency_s[i], rel=1e-9)
        assert m.bottleneck_s == pytest.approx(batch.bottleneck_s[i], rel=1e-9)
        assert m.energy_j == pytest.approx(batch.energy_j[i], rel=1e-9)
        assert max(m.memory_per_device_bytes.values()) == pytest.approx(batch.memory_per_device_bytes[i].max(), rel=1e-9)
        assert max(m.energy_per_device_j.values()) == pytest.approx(batch.energy_per_device_j[i].max(), rel=1e-9)


@pytest.mark.parametrize("model_name,cluster_name", [("alexnet", "jetson-xavier-nx-4"), ("resnet8", "jetson-xavier-nx-4")])
@pytest.mark.parametrize("encoding,splits,zeros", [("naive", 0, 0.0), ("advanced", 2, 0.5), ("advanced", 3, 0.3),
                                                   ("spe", 0, 0.0)])
def test_every_chromosome_decodes_to_a_valid_plan_with_the_batch_metrics(model_name, cluster_name, encoding, splits,
                                                                          zeros):
    problem = load_problem(model_name, cluster_name)
    enc = make_encoding(problem, encoding, splits or 2)
    x = random_population(enc, np.random.default_rng(7), 24, zeros)
    x[0] = 0                                                       # the all-zero chromosome decodes too
    x[1] = enc.upper
    assert_batch_matches_plans(problem, enc, x)


def test_naive_splits_a_layer_over_its_distinct_devices_in_proportion(tiny):
    problem = build_problem(tiny, small_cluster(["cpu", "cpu", "gpu"]))
    enc = make_encoding(problem, "naive")
    names = problem.graph.names
    split = [names[i] for i in enc.template.split]
    assert len(split) == 3 and enc.n_var == 3 * 3 + (len(names) - 3)
    x = np.zeros(enc.n_var, dtype=np.int64)
    first = int(enc.template.split[0])
    x[enc.slot_gene[0]] = [2, 0, 2]                                # conv1: d2 twice, d0 once
    plan = enc.plan(x)
    shards = plan.assign[names[first]]
    assert [(s.device, s.start, s.stop) for s in shards] == [("d2", 0, 5), ("d0", 5, 8)]
    assert plan.combine[names[first]].on == "d0"                   # the next layer's device concatenates


def test_advanced_decodes_the_thesis_figure_11_example(tiny):
    """Figure 11's 5 x 5 chromosome on a conv ... fc ... network: Figure 9's mapping."""
    problem = build_problem(tiny, small_cluster(["cpu"] * 5))
    enc = AdvancedEncoding(problem, 5)
    names = problem.graph.names
    # re-index: the thesis has 2 splittable layers (conv, fc); here conv1=1, conv2=2, fc=3, so the
    # thesis's layer "2" (the fc) is our 3 and conv2 rides with conv1 wherever a row covers up to 3
    rows = np.array([[0, 0, 1, 3, 0],
                     [1, 3, 0, 0, 0],
                     [0, 1, 0, 0, 3],
                     [3, 1, 0, 0, 0],
                     [3, 0, 0, 0, 0]])
    plan = enc.plan(rows.ravel())
    by_layer = {n: ({p} if isinstance(p, str) else {s.device for s in p}) for n, p in plan.assign.items()}
    conv1, conv2, fc = (names[i] for i in enc.template.split)
    assert by_layer[conv1] == {"d2", "d0", "d1"}                   # rows 1-5: d2, d0, d1, d1, d0
    assert by_layer[conv2] == {"d3", "d1", "d4", "d0"}             # rows 1-5: d3, d1, d4, d0, d0
    assert by_layer[fc] == {"d3", "d1", "d4", "d0"}
    counts = {s.device: s.stop - s.start for s in plan.assign[conv1]}
    assert counts == {"d2": 1, "d0": 3, "d1": 4}   # 1/5, 2/5, 2/5 of 8 channels: [0, 8/5), [8/5, 24/5), [24/5, 8) floored
    for i, name in enumerate(names):                               # restriction 2
        if i not in enc.template.split:
            lead = max(s for s in enc.template.split if s <= i) if i > enc.template.split[0] else enc.template.split[0]
            first_dev = plan.assign[names[lead]]
            first_dev = first_dev if isinstance(first_dev, str) else first_dev[0].device
            assert plan.assign[name] == first_dev


def test_advanced_restrictions_hold_for_random_chromosomes():
    problem = load_problem("alexnet", "jetson-xavier-nx-8")
    for p in (2, 4, 6):
        enc = AdvancedEncoding(problem, p)
        x = random_population(enc, np.random.default_rng(p), 40, 0.4)
        a = enc.assignment(x)
        split = enc.template.split
        for row in range(len(x)):
            plan = enc.template.to_plan(a, row, "t")
            for s, i in enumerate(split):
                place = plan.assign[problem.graph.names[i]]
                assert isinstance(place, str) or len(place) <= p           # restriction 1
                lead = problem.cluster.names[a.slot_device[row, s, 0]]
                assert (place if isinstance(place, str) else place[0].device) == lead
            for i in range(problem.num_layers):
                if i in split:
                    continue
                owner = split[split <= i].max() if (split <= i).any() else split[0]
                assert plan.assign[problem.graph.names[i]] == \
                    problem.cluster.names[a.slot_device[row, int(np.flatnonzero(split == owner)[0]), 0]]


def brute_front(enc, objectives):
    space = np.array(list(itertools.product(*[range(u + 1) for u in enc.upper])), dtype=np.int64)
    batch = enc.evaluate(space)
    f = objective_matrix(batch, objectives)[batch.fits]
    f = np.unique(f, axis=0)
    return f[pareto_mask(f)]


@pytest.mark.parametrize("encoding,pes,splits", [("naive", ["cpu", "gpu"], 2), ("advanced", ["cpu", "cpu", "gpu"], 2),
                                                 ("spe", ["cpu", "gpu", "cpu"], 2)])
def test_the_ga_finds_the_brute_force_front_of_a_small_problem(tiny, encoding, pes, splits):
    problem = build_problem(tiny, small_cluster(pes))
    objectives = ("latency", "memory-per-device", "energy-per-device")
    enc = make_encoding(problem, encoding, splits)
    exact = brute_front(enc, objectives)
    result = explore(problem, ExploreOptions(encoding=encoding, splits=splits, objectives=objectives, pop_size=60,
                                             generations=40, seed=3))
    found = np.unique(result.front, axis=0)
    assert found.shape == exact.shape
    assert np.allclose(np.sort(found, axis=0), np.sort(exact, axis=0), rtol=1e-12)
    ref = exact.max(axis=0) * 1.1
    assert hypervolume(found, ref) == pytest.approx(hypervolume(exact, ref), rel=1e-12)
    for plan, row in zip(result.plans, result.front):                 # plans carry the front's metrics
        m = plan.metrics
        assert (m.latency_s, max(m.memory_per_device_bytes.values()), max(m.energy_per_device_j.values())) == \
            pytest.approx(tuple(row), rel=1e-9)


def test_explore_is_seeded_and_records_every_generation(tiny):
    problem = build_problem(tiny, small_cluster(["cpu", "cpu", "gpu"]))
    opts = ExploreOptions(encoding="advanced", splits=2, objectives=("latency", "throughput"), pop_size=20,
                          generations=5, seed=11)
    a, b = explore(problem, opts), explore(problem, opts)
    assert np.array_equal(a.front, b.front)
    assert [g.index for g in a.history] == [1, 2, 3, 4, 5]
    assert a.evaluations >= 20 * 5 - 20 and a.front.shape[1] == 2
    best = np.array([g.best for g in a.history])
    assert (np.diff(best, axis=0) <= 1e-15).all()        # NSGA-II is elitist: the best never gets worse


@pytest.mark.parametrize("opts,says", [(dict(encoding="greedy"), "unknown encoding"),
                                       (dict(objectives=("speed",)), "choose distinct names"),
                                       (dict(objectives=()), "choose distinct names"),
                                       (dict(pop_size=1), "--pop")])
def test_bad_explore_options_are_named(opts, says):
    with pytest.raises(HetsplitError, match=says):
        ExploreOptions(**opts)


def test_bad_splits_and_genes_are_named():
    problem = load_problem("alexnet", "jetson-xavier-nx-4")
    with pytest.raises(HetsplitError, match="--splits p must be in 1..8"):
        make_encoding(problem, "advanced", 9)
    enc = make_encoding(problem, "advanced", 2)
    with pytest.raises(HetsplitError, match="genes"):
        enc.evaluate(np.zeros((1, enc.n_var + 1), dtype=np.int64))
    with pytest.raises(HetsplitError, match="0..upper"):
        enc.evaluate(np.full((1, enc.n_var), 99, dtype=np.int64))


@pytest.mark.parametrize("encoding", ["naive", "advanced", "spe"])
def test_plans_in_one_batch_equal_plans_one_by_one(encoding):
    problem = load_problem("resnet8", "jetson-xavier-nx-4")
    enc = make_encoding(problem, encoding, 3)
    x = random_population(enc, np.random.default_rng(5), 12, 0.3)
    for fast, row in zip(enc.plans(x, {"seed": 1}), x):
        slow = enc.plan(row, {"seed": 1})
        assert fast.placements() == slow.placements()
        assert fast.combine == slow.combine and fast.params == slow.params
        for key, value in slow.metrics.to_dict().items():
            got = fast.metrics.to_dict()[key]
            assert got == (value if isinstance(value, str) else pytest.approx(value, rel=1e-9)), key


def _slots_by_broadcast(vals: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """The advanced decoding's slots computed the plain way (every layer against every value at once)."""
    n_dev = vals.shape[2]
    layer = np.arange(1, s + 1)
    key = np.where(vals[..., None] >= layer, vals[..., None] * n_dev + np.arange(n_dev)[:, None], np.iinfo(np.int64).max)
    slot = np.argmin(key, axis=2)
    used = np.take_along_axis(vals, slot, axis=2) >= layer
    return np.where(used, slot, slot[:, :1, :]).transpose(0, 2, 1), used.transpose(0, 2, 1)


@pytest.mark.parametrize("model,cluster,splits", [("resnet18", "jetson-xavier-nx-4", 3), ("resnet8", "jetson-xavier-nx-4", 1),
                                                  ("densenet121", "jetson-xavier-nx-8", 2)])
def test_the_compiled_advanced_decoding_is_the_broadcast_one(model, cluster, splits):
    from hetsplit.search.encodings import split_slots
    enc = make_encoding(load_problem(model, cluster), "advanced", splits)
    rng = np.random.default_rng(11)
    x = rng.integers(0, enc.upper + 1, size=(300, enc.n_var))
    x[::3] = np.where(rng.random(x[::3].shape) < 0.6, 0, x[::3])      # many ties and layers no value reaches
    s = len(enc.template.split)
    vals = x.reshape(len(x), splits, -1).copy()
    vals[np.arange(len(x)), 0, np.argmax(vals[:, 0, :], axis=1)] = s
    fast, plain = split_slots(vals, s), _slots_by_broadcast(vals, s)
    assert np.array_equal(fast[0], plain[0]) and np.array_equal(fast[1], plain[1])
    assert fast[1].all() if splits == 1 else (~fast[1]).any()     # row 0 covers every layer; others may not
