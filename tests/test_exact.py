"""``exact`` against the brute-force oracle on random instances, and its error messages."""

import numpy as np
import pytest
from _check import assert_evaluator_metrics, close, oracle_or_none, seeds
from _instances import random_problem
from factories import chain_graph, cluster, problem

from hetsplit.errors import InfeasibleError
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.classes import build_classes
from hetsplit.search.oracle import brute_force


@pytest.mark.parametrize("seed", seeds(120))
def test_exact_equals_oracle(seed):
    p = random_problem(seed)
    o = oracle_or_none(p)
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
    o = oracle_or_none(p)
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
    o = oracle_or_none(p, c)
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
        with pytest.raises(InfeasibleError, match=r"layer 'l1' fits on no device that runs it: it needs 5.87 KiB .*"
                                                  r"the largest such device has 2.93 KiB"):
            make_partitioner(algo).solve(p)


def test_layer_no_type_can_run_is_named():
    g = chain_graph([8, 8], input_bytes=4)
    t = np.array([[1.0], [np.inf]])
    p = problem(g, cluster(["a"]), t, np.ones((2, 1)))
    with pytest.raises(InfeasibleError, match="layer 'l1' has no time on any device type .* no device can run it"):
        make_partitioner("exact").solve(p)


def test_sparse_tie_break_equals_the_dense_one():
    ran = 0
    for seed in seeds(60, 700):
        p = random_problem(seed, repeat=False, n_layers=8)
        try:
            (dense,) = make_partitioner("exact").solve(p)
        except InfeasibleError:
            continue
        cm = build_classes(p)
        if not (cm.counts == 1).all():
            continue
        need = 2 * 8 * (p.num_layers + 1) * cm.num_classes * cm.num_multisets
        # a budget under the dense tables but over the sparse states forces the sparse DP
        (sparse,) = make_partitioner("exact", tie_break_budget_bytes=need - 1).solve(p)
        assert close(sparse.metrics.bottleneck_s, dense.metrics.bottleneck_s)
        if sparse.params["tie_break"] == "energy, latency":
            ran += 1
            assert close(sparse.metrics.energy_j, dense.metrics.energy_j)
        else:
            assert 64 * sparse.params["tie_break_states"] > need - 1
    assert ran >= 5
