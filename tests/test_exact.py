"""``exact`` against the brute-force oracle on random instances, and its error messages."""

import numpy as np
import pytest
from _check import assert_evaluator_metrics, assert_solvers_match_oracle, close, oracle_or_none, seeds
from _instances import board_problem, random_problem, with_cut_costs
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


@pytest.mark.parametrize("seed, messages", [(s, False) for s in seeds(80, 5000)] + [(s, True) for s in seeds(40, 5400)])
def test_exact_and_pareto_equal_oracle_when_cuts_cost(seed, messages):
    """Every stage pays one segment (call, boundary bytes, its first layer's unfused extra) and, with
    ``messages``, the CPU of its messages' ends (``cluster.links``): the solvers' tables charge them as
    the evaluator does, so they stay exact."""
    p = with_cut_costs(random_problem(seed), seed, zero_type=seed % 2 == 0, messages=messages)
    assert p.costs.charges_cuts and p.cluster.links.charges_ends == (messages and p.num_devices > 1)
    assert_solvers_match_oracle(p)


@pytest.mark.parametrize("seed, messages", [(s, False) for s in seeds(20, 5100)] + [(s, True) for s in seeds(10, 5150)])
def test_exact_equals_oracle_on_boards_when_cuts_cost(seed, messages):
    """Whole boards as interchangeable units: the segment cost is per type, and units are classed with
    their links' message figures, so the symmetry holds."""
    p = with_cut_costs(board_problem(seed), seed, messages=messages)
    assert_solvers_match_oracle(p)


@pytest.mark.parametrize("seed, messages", [(s, False) for s in seeds(20, 5200)] + [(s, True) for s in seeds(20, 5250)])
def test_exact_with_constraints_when_cuts_cost(seed, messages):
    """A source and a sink: their messages' ends are charged only to the stages' devices."""
    p = with_cut_costs(random_problem(seed, source=True, sink=True), seed, messages=messages)
    assert_solvers_match_oracle(p, PipelineConstraints(first_stage_devices=(p.cluster.names[0],), max_stages=2))


def test_cut_costs_can_move_the_optimum():
    """Two equal devices and a free link: without cut costs splitting halves the bottleneck; when the
    second layer pays 2 s cut off from the first (it was fused into it), one device running
    everything wins."""
    from hetsplit.costs import CostTable, SplitProblem
    from hetsplit.costs.segment import SegmentCost

    g = chain_graph([10, 10], input_bytes=10)
    base = problem(g, cluster(["a", "a"], bandwidth=1e12), np.array([[1.0], [1.0]]), np.array([[1.0], [1.0]]))
    (plan,) = make_partitioner("exact").solve(base)
    assert len(plan.stages) == 2 and plan.metrics.bottleneck_s == 1.0
    c = base.costs
    dear = SplitProblem(g, base.cluster, CostTable(c.layer_names, c.types, c.time_s, c.energy_j, c.mem_bytes,
                                                    segment={"a": SegmentCost(call_s=0.5)},
                                                    unfused_s=np.array([[0.0], [2.0]])))
    (plan,) = make_partitioner("exact").solve(dear)
    assert len(plan.stages) == 1 and plan.metrics.bottleneck_s == pytest.approx(2.5)
    assert close(plan.metrics.bottleneck_s, brute_force(dear).min_bottleneck())


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


@pytest.mark.parametrize("cuts", [False, True])
def test_sparse_tie_break_equals_the_dense_one(cuts):
    ran = 0
    for seed in seeds(60, 700):
        p = random_problem(seed, repeat=False, n_layers=8)
        if cuts:
            p = with_cut_costs(p, seed)
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


@pytest.mark.parametrize("vector_limit", [0, None])
@pytest.mark.parametrize("seed, messages", [(s, False) for s in seeds(25, 5300)] + [(s, True) for s in seeds(15, 5350)])
def test_additive_value_dp_splits_a_stage_with_its_segment(seed, messages, vector_limit, monkeypatch):
    """The fast additive DP keeps ``value - pre_in[k]``: with cut costs (and message ends) a stage is
    still the start's part plus the end's, so the least-latency plan equals the oracle's (both sweeps)."""
    from hetsplit.search import value_dp as vdp

    if vector_limit is not None:
        monkeypatch.setattr(vdp, "VECTOR_LIMIT", vector_limit)
    p = with_cut_costs(random_problem(seed, source=messages or None, sink=messages or None), seed,
                       messages=messages)
    o = oracle_or_none(p)
    cm = build_classes(p)
    vr = vdp.value_dp(cm, np.inf, "latency", None)
    if o is None:
        assert vr is None
        return
    assert close(vr.primary, float(o.metrics.latency_s.min()))
