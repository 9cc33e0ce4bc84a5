"""``exact`` against the brute-force oracle on random instances, and its error messages."""

import numpy as np
import pytest

from hetsplit.errors import InfeasibleError
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.oracle import brute_force
from hetsplit.search.pipeline_dp import build_classes

from _check import assert_evaluator_metrics, close, seeds
from _instances import random_problem
from factories import chain_graph, cluster, problem


def _oracle_or_none(p, c=PipelineConstraints()):
    try:
        return brute_force(p, c)
    except InfeasibleError:
        return None


@pytest.mark.parametrize("seed", seeds(120))
def test_exact_equals_oracle(seed):
    p = random_problem(seed)
    o = _oracle_or_none(p)
    if o is None:
        with pytest.raises(InfeasibleError):
            make_partitioner("exact").solve(p)
        return
    (plan,) = make_partitioner("exact").solve(p)
    assert_evaluator_metrics(p, [plan])
    best = o.min_bottleneck()
    assert close(plan.metrics.bottleneck_s, best)
    # tie-break: least energy among the optimal-bottleneck plans
    m = o.metrics
    assert close(plan.metrics.energy_j, m.energy_j[m.bottleneck_s <= best * (1 + 1e-9)].min())


@pytest.mark.parametrize("seed", seeds(40, 500))
def test_exact_without_tie_break_still_optimal(seed):
    p = random_problem(seed)
    o = _oracle_or_none(p)
    if o is None:
        return
    (plan,) = make_partitioner("exact", tie_break_budget_bytes=0).solve(p)
    assert plan.params["tie_break"].startswith("none")
    assert_evaluator_metrics(p, [plan])
    assert close(plan.metrics.bottleneck_s, o.min_bottleneck())


@pytest.mark.parametrize("seed", seeds(30, 900))
def test_exact_with_constraints(seed):
    p = random_problem(seed, source=True)
    c = PipelineConstraints(first_stage_devices=(p.cluster.names[0],), max_stages=2)
    o = _oracle_or_none(p, c)
    if o is None:
        with pytest.raises(InfeasibleError):
            make_partitioner("exact", constraints=c).solve(p)
        return
    (plan,) = make_partitioner("exact", constraints=c).solve(p)
    assert plan.stages[0].device == p.cluster.names[0] and len(plan.stages) <= 2
    assert close(plan.metrics.bottleneck_s, o.min_bottleneck())


def test_identical_devices_collapse_into_classes():
    p = random_problem(7, n_layers=6, n_dev=5, n_types=2, repeat=True, source=False, sink=False)
    cm = build_classes(p)
    assert cm.num_classes == len(p.cluster.types) < p.num_devices
    assert sorted(d for m in cm.members for d in m) == list(range(p.num_devices))
    o = brute_force(p)
    (plan,) = make_partitioner("exact").solve(p)
    assert close(plan.metrics.bottleneck_s, o.min_bottleneck())


def test_distinct_links_keep_devices_apart():
    p = random_problem(8, n_layers=4, n_dev=4, n_types=1, repeat=False, source=False, sink=False)
    assert build_classes(p).num_classes == 4


def test_layer_that_fits_nowhere_is_named():
    g = chain_graph([8, 1000, 8], input_bytes=4)
    t = np.ones((3, 1))
    mem = np.array([10.0, 5000.0, 10.0])
    p = problem(g, cluster(["a", "a"], memory=[3000.0, 2000.0]), t, t, mem)
    for algo in ("exact", "pareto", "pipeedge"):
        with pytest.raises(InfeasibleError, match=r"layer 'l1' fits nowhere: needs 6008 bytes, largest device has 3000"):
            make_partitioner(algo).solve(p)


def test_layer_no_type_can_run_is_named():
    g = chain_graph([8, 8], input_bytes=4)
    t = np.array([[1.0], [np.inf]])
    p = problem(g, cluster(["a"]), t, np.ones((2, 1)))
    with pytest.raises(InfeasibleError, match="layer 'l1' fits nowhere: no device type can run it"):
        make_partitioner("exact").solve(p)


@pytest.mark.parametrize("seed", seeds(40, 700))
def test_tie_break_over_useful_multisets_only_equals_the_full_one(seed):
    p = random_problem(seed)
    try:
        (full,) = make_partitioner("exact").solve(p)
    except InfeasibleError:
        return
    # a budget below the full tables forces the reduced (forward and backward reachable) axis
    need_full = 2 * 8 * (p.num_layers + 1) * build_classes(p).num_classes * build_classes(p).num_multisets
    (reduced,) = make_partitioner("exact", tie_break_budget_bytes=need_full - 1).solve(p)
    assert "tie_break_multisets" in reduced.params
    if reduced.params["tie_break"] == "energy, latency":
        assert close(reduced.metrics.energy_j, full.metrics.energy_j)
        assert close(reduced.metrics.bottleneck_s, full.metrics.bottleneck_s)
