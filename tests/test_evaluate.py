"""The pipeline evaluator on hand-computed cases, and its invariants."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from hetsplit.errors import PlanError
from hetsplit.estimate import evaluate, evaluate_pipelines, make_plan
from hetsplit.plan import Plan, Stage

from factories import chain_graph, cluster, problem


def test_cut_bytes_counts_a_skip_on_every_cut_it_crosses():
    # l0 -> l1 -> l2 -> l3 -> l4, and l0 also feeds l3: t0 crosses cuts 1, 2 and 3
    g = chain_graph([8, 16, 32, 64, 2], input_bytes=4, skips={0: [3]})
    assert list(g.cut_bytes) == [4, 8, 8 + 16, 8 + 32, 64, 2]


def test_three_stage_plan_with_skip_across_two_cuts_by_hand():
    g = chain_graph([8, 16, 32, 64, 2], input_bytes=4, skips={0: [3]})
    cl = cluster(["a", "b", "c"], bandwidth=8.0, energy_per_byte=0.5, latency_s=0.25)
    t = np.array([[1, 2, 4], [1, 2, 4], [1, 2, 4], [1, 2, 4], [1, 2, 4]], float)
    e = np.array([[3, 2, 1]] * 5, float)
    p = problem(g, cl, t, e)
    # stages: d0 runs l0..l1, d1 runs l2, d2 runs l3..l4: cuts 2 (24 B) and 3 (40 B)
    m = evaluate(p, Plan("toy", "toy-cluster", "hand", [Stage("d0", ["l0", "l1"]), Stage("d1", ["l2"]),
                                                           Stage("d2", ["l3", "l4"])]))
    comp = {"d0": 2.0, "d1": 2.0, "d2": 8.0}
    transfers = [0.25 + 24 / 8, 0.25 + 40 / 8]            # 3.25 s and 5.25 s
    assert m.compute_s_per_device == comp
    assert m.bottleneck_s == pytest.approx(8.0) and m.bottleneck == "stage d2"
    assert m.throughput == pytest.approx(1 / 8)
    assert m.latency_s == pytest.approx(sum(comp.values()) + sum(transfers))
    comm_e = 0.5 * (24 + 40)
    assert m.energy_j == pytest.approx(2 * 3 + 1 * 2 + 2 * 1 + comm_e)
    assert m.energy_per_device_j == pytest.approx({"d0": 6 + 12, "d1": 2 + 20, "d2": 2})
    # memory: layers' (params 10 + out) + received + sent cut bytes
    assert m.memory_per_device_bytes["d1"] == pytest.approx((10 + 32) + 24 + 40)
    assert m.edp == pytest.approx(m.energy_j * m.latency_s)


def test_link_bottleneck_and_source_sink_transfers():
    g = chain_graph([100, 1], input_bytes=50)
    cl = cluster(["a", "b"], bandwidth=10.0, energy_per_byte=1.0, source="d1", sink="d1")
    p = problem(g, cl, np.ones((2, 2)), np.ones((2, 2)))
    m = evaluate(p, Plan("toy", "", "hand", [Stage("d0", ["l0"]), Stage("d1", ["l1"])]))
    # source d1 -> d0 sends 50 B (5 s); cut 1 sends 100 B (10 s); d1 is the sink (no output transfer)
    assert m.bottleneck_s == pytest.approx(10.0) and m.bottleneck == "link d0->d1"
    assert m.latency_s == pytest.approx(5 + 1 + 10 + 1)
    assert m.energy_per_device_j == pytest.approx({"d1": 50 + 1, "d0": 1 + 100})


def test_memory_that_does_not_fit_is_reported():
    g = chain_graph([8, 8])
    cl = cluster(["a", "b"], memory=[1e6, 20.0])
    p = problem(g, cl, np.ones((2, 2)), np.ones((2, 2)))
    assert evaluate(p, Plan("toy", "", "x", [Stage("d0", ["l0", "l1"])])).fits
    assert not evaluate(p, Plan("toy", "", "x", [Stage("d1", ["l0", "l1"])])).fits


def test_unrunnable_layer_gives_infinite_bottleneck_not_nan():
    g = chain_graph([8, 8, 8])
    cl = cluster(["a", "b"], bandwidth=1e9)
    t = np.array([[1, 1], [1, np.inf], [1, 1]])
    p = problem(g, cl, t, np.ones((3, 2)))
    m = evaluate(p, Plan("toy", "", "x", [Stage("d1", ["l0", "l1", "l2"])]))
    assert math.isinf(m.bottleneck_s) and m.throughput == 0.0
    ok = evaluate(p, Plan("toy", "", "x", [Stage("d1", ["l0"]), Stage("d0", ["l1"]), Stage("d1", ["l2"])]))
    assert ok.bottleneck_s == pytest.approx(2.0)  # d1 runs two stages: their compute adds up


@pytest.mark.parametrize("stages, message", [
    ([("d0", ["l1", "l0"])], "out of order"),
    ([("d0", ["l0"])], "places 1 of 2"),
    ([("dx", ["l0", "l1"])], "not in cluster"),
    ([("d0", ["l0", "nope"])], "no layer 'nope'"),
])
def test_bad_plans_are_rejected_with_a_reason(stages, message):
    g = chain_graph([8, 8])
    p = problem(g, cluster(["a"]), np.ones((2, 1)), np.ones((2, 1)))
    with pytest.raises(Exception, match=message):
        evaluate(p, Plan("toy", "", "x", [Stage(d, ls) for d, ls in stages]))


def test_batch_rejects_malformed_bounds():
    g = chain_graph([8, 8])
    p = problem(g, cluster(["a", "b"]), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(PlanError):
        evaluate_pipelines(p, [[0, 1, 1]], [[0, 1]])   # second stage empty but has a device


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 7), d=st.integers(1, 4), seed=st.integers(0, 10_000))
def test_one_device_plan_equals_that_devices_profile_sums(n, d, seed):
    rng = np.random.default_rng(seed)
    g = chain_graph(list(rng.integers(1, 100, n)), skips={0: [n - 1]} if n > 2 else None)
    cl = cluster([f"t{k}" for k in range(d)], bandwidth=rng.uniform(1, 10))
    t, e = rng.uniform(0.1, 5, (n, d)), rng.uniform(0.1, 5, (n, d))
    p = problem(g, cl, t, e)
    for k in range(d):
        m = make_plan(p, [0, n], [k], "single").metrics
        assert m.bottleneck_s == pytest.approx(t[:, k].sum())
        assert m.latency_s == pytest.approx(t[:, k].sum())
        assert m.energy_j == pytest.approx(e[:, k].sum())
        assert m.comm_energy_j == 0.0


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_batch_and_single_evaluation_agree(seed):
    rng = np.random.default_rng(seed)
    n, d = 6, 3
    g = chain_graph(list(rng.integers(1, 100, n)), skips={1: [4]})
    cl = cluster(["a", "b", "c"], bandwidth=rng.uniform(1, 10, (d, d)), energy_per_byte=rng.uniform(0, 1, (d, d)),
                 source="d2")
    p = problem(g, cl, rng.uniform(0.1, 5, (n, d)), rng.uniform(0.1, 5, (n, d)))
    bounds = np.array([[0, 2, 4, 6], [0, 3, 6, 6], [0, 6, 6, 6]])
    devs = np.array([[0, 1, 2], [2, 0, -1], [1, -1, -1]])
    batch = evaluate_pipelines(p, bounds, devs)
    for row in range(3):
        m = make_plan(p, bounds[row], devs[row], "x").metrics
        assert m.bottleneck_s == batch.bottleneck_s[row]
        assert m.energy_j == batch.energy_j[row]
        assert m.latency_s == batch.latency_s[row]
