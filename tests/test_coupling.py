"""Transfers that share a wire: the source -> sink link in the exact solvers, last-stage
constraints, and shared ports (``search.coupling``)."""

from dataclasses import replace

import numpy as np
import pytest
from _check import assert_solvers_match_oracle, close, oracle_or_none, seeds
from _instances import coupled_problem, random_problem, with_cut_costs
from factories import chain_graph, cluster, problem

from hetsplit.errors import InfeasibleError
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.classes import build_classes
from hetsplit.search.coupling import PER_CUT_ONLY, shared_link
from hetsplit.search.exact import Exact, min_bottleneck
from hetsplit.search.oracle import brute_force, enumerate_plans


def hand_coupled(link_s: float):
    """Source d0, sink d1; l0 runs in 1 s on d1, 1.2 s on d2, l1 in 1 s on d0 (all else 3 s). The
    input and the output (8 bytes each) take ``link_s`` each on d0 -> d1; every other link 0.1 s.

    The per-cut optimum is d1 | d0 (1 s, 2 J): its first stage runs on the sink and its last on the
    source, so d0 -> d1 carries both transfers, 2 * link_s per input."""
    g = chain_graph([8, 8], input_bytes=8)
    bw = np.full((3, 3), 80.0)
    bw[0, 1] = 8 / link_s
    cl = cluster(["a", "b", "c"], bandwidth=bw, source="d0", sink="d1")
    t = np.array([[3.0, 1.0, 1.2], [1.0, 3.0, 3.0]])
    e = np.array([[1.0, 1.0, 2.0], [1.0, 1.0, 1.0]])
    return problem(g, cl, t, e)


def test_coupled_link_moves_the_optimum_off_the_per_cut_one():
    p = hand_coupled(link_s=0.8)
    assert close(shared_link(p).both_s, 1.6)
    per_cut, _ = min_bottleneck(build_classes(p))
    o = brute_force(p)
    assert per_cut == 1.0 and close(o.min_bottleneck(), 1.2)   # the coupling matters here
    (plan,) = make_partitioner("exact").solve(p)
    assert plan.devices == ["d2", "d0"] and close(plan.metrics.bottleneck_s, 1.2)
    assert "shared_link" in plan.params and close(plan.params["bottleneck_s"], 1.2)
    front = make_partitioner("pareto").solve(p)
    got = [(f.metrics.bottleneck_s, f.metrics.energy_j) for f in front]
    assert np.allclose(got, o.front()) and np.allclose(got, [(1.2, 3.0), (1.6, 2.0)])   # d1 | d0, lifted to K
    assert [f.params["front_index"] for f in front] == [0, 1] and all(f.pareto for f in front)
    assert_solvers_match_oracle(p)


def test_coupled_front_with_max_points_keeps_the_least_energy_points():
    p = hand_coupled(link_s=0.8)
    (plan,) = make_partitioner("pareto", max_points=1).solve(p)
    assert plan.devices == ["d1", "d0"] and close(plan.metrics.bottleneck_s, 1.6) and plan.metrics.energy_j == 2.0
    assert plan.params["front_index"] == 0 and plan.params["plan_set"] == "first stage on d1, last on d0"


def test_coupled_link_under_the_bottleneck_keeps_the_per_cut_answer():
    p = hand_coupled(link_s=0.4)          # K = 0.8 s < the 1 s stages: d1 | d0 is optimal as it is
    (plan,) = make_partitioner("exact").solve(p)
    assert plan.devices == ["d1", "d0"] and plan.metrics.bottleneck_s == 1.0
    assert "shared_link" not in plan.params
    assert all("shared_link" not in f.params for f in make_partitioner("pareto").solve(p))
    assert_solvers_match_oracle(p)


def test_no_shared_link_without_two_distinct_ends():
    p = hand_coupled(link_s=0.8)
    for source, sink in ((None, "d1"), ("d0", None), ("d1", "d1")):
        q = replace(p, cluster=replace(p.cluster, source=source, sink=sink))
        assert shared_link(q) is None
    assert shared_link(replace(p, cluster=replace(p.cluster, ports="shared"))) is None


@pytest.mark.parametrize("seed", seeds(80, 5000))
def test_coupled_random_instances_equal_oracle(seed):
    assert_solvers_match_oracle(coupled_problem(seed))


@pytest.mark.parametrize("seed", seeds(30, 5000))
def test_coupled_random_instances_equal_oracle_when_cuts_cost(seed):
    assert_solvers_match_oracle(with_cut_costs(coupled_problem(seed), seed))


def test_random_instances_where_the_coupling_matters():
    # the per-cut optimum is below the truth (so lies in the coupled set, with K above it) in enough
    # of the instances above for them to bite
    hits = 0
    for seed in seeds(80, 5000):
        p = coupled_problem(seed)
        o = oracle_or_none(p)
        if o is not None:
            per_cut, _ = min_bottleneck(build_classes(p))
            hits += per_cut < o.min_bottleneck() * (1 - 1e-9)
    assert hits >= 20


def test_sparse_tie_break_under_a_floor_equals_the_dense_one():
    # the coupled set is tie-broken at max(K, its per-cut optimum), a bound that need not be a
    # table value: the sparse DP (reach families at that bound) must agree with the dense one
    ran = 0
    for seed in seeds(40, 5000):
        p = coupled_problem(seed)
        if oracle_or_none(p) is None:
            continue
        (ps,) = [s for s in shared_link(p).plan_sets(p, PipelineConstraints()) if s.floor > 0]
        try:
            dense = Exact()._solve(p, ps.constraints, ps)
        except InfeasibleError:
            continue
        cm = build_classes(p, ps.constraints)
        need = 2 * 8 * (p.num_layers + 1) * cm.num_classes * cm.num_multisets
        sparse = Exact(tie_break_budget_bytes=need - 1)._solve(p, ps.constraints, ps)
        assert sparse.params["bottleneck_s"] == dense.params["bottleneck_s"] >= ps.floor
        assert sparse.metrics.bottleneck_s == dense.metrics.bottleneck_s
        if sparse.params["tie_break"] == "energy, latency":
            ran += dense.params["bottleneck_s"] == ps.floor
            assert close(sparse.metrics.energy_j, dense.metrics.energy_j)
    assert ran >= 10


@pytest.mark.parametrize("seed", seeds(60, 5200))
def test_uncoupled_bounds_are_the_evaluators_bit_for_bit(seed):
    # no second solve on the common path: the solver's bottleneck of its plan is the evaluator's
    p = random_problem(seed)
    if shared_link(p) is not None or oracle_or_none(p) is None:
        return
    plans = make_partitioner("exact").solve(p) + make_partitioner("pareto").solve(p)
    for plan in plans:
        assert plan.params["bottleneck_s"] == plan.metrics.bottleneck_s
        assert "shared_link" not in plan.params and "optimal_for" not in plan.params


# ---- last-stage constraints ------------------------------------------------------------------


def test_oracle_enumerates_only_allowed_last_stages():
    p = random_problem(4, n_layers=4, n_dev=3)
    c = PipelineConstraints(last_stage_devices=("d2",), max_stages=2)
    b, d = enumerate_plans(p, c)
    last = d[np.arange(len(d)), (d >= 0).sum(axis=1) - 1]
    assert (last == 2).all()
    assert len(b) == 1 + 2 * 3   # d2 alone, or (d0 or d1) | d2 at 3 cut positions


@pytest.mark.parametrize("seed", seeds(40, 5400))
def test_last_stage_constraint_equals_oracle(seed):
    p = random_problem(seed)
    names = p.cluster.names
    rng = np.random.default_rng(seed)
    last = tuple(n for n in names if rng.random() < 0.5) or (names[-1],)
    first = tuple(names[:1]) if rng.random() < 0.3 else None
    c = PipelineConstraints(first_stage_devices=first, last_stage_devices=last)
    assert_solvers_match_oracle(p, c)
    if oracle_or_none(p, c) is None:
        return
    for algo in ("exact", "pareto", "donna", "pipeedge"):
        for plan in make_partitioner(algo, constraints=c).solve(p):
            assert plan.stages[-1].device in last and (first is None or plan.stages[0].device in first)


def test_last_stage_constraint_separates_interchangeable_devices():
    g = chain_graph([8, 8, 8], input_bytes=4)
    t = np.array([[1.0], [2.0], [1.5]])
    p = problem(g, cluster(["a", "a", "a"], bandwidth=100.0), t, t)
    c = PipelineConstraints(last_stage_devices=("d0",))
    assert build_classes(p).num_classes == 1
    cm = build_classes(p, c)
    assert sorted(map(sorted, cm.members)) == [[0], [1, 2]]
    assert_solvers_match_oracle(p, c)


def test_an_unknown_last_stage_device_is_named():
    from hetsplit.errors import HetsplitError

    p = hand_coupled(link_s=0.8)
    with pytest.raises(HetsplitError, match="has no device 'gpu9'"):
        make_partitioner("exact", constraints=PipelineConstraints(last_stage_devices=("gpu9",))).solve(p)


# ---- shared ports ------------------------------------------------------------------------------


def shared_port_problem(bandwidth: float):
    """l0, l1, l2 run in 1 s on d0, d1, d2 (3 s elsewhere); every cut moves 8 bytes."""
    g = chain_graph([8, 8, 8], input_bytes=8)
    cl = replace(cluster(["a", "b", "c"], bandwidth=bandwidth), ports="shared")
    t = np.full((3, 3), 3.0)
    np.fill_diagonal(t, 1.0)
    return problem(g, cl, t, np.ones((3, 3)))


def test_shared_ports_say_what_the_plan_is_optimal_for():
    # 0.6 s per cut: the per-cut optimum d0 | d1 | d2 has 1 s stages, but d1's port carries 1.2 s
    p = shared_port_problem(bandwidth=8 / 0.6)
    for algo in ("exact", "pareto"):
        plans = make_partitioner(algo).solve(p)
        fastest = min(plans, key=lambda x: x.params["bottleneck_s"])
        assert fastest.devices == ["d0", "d1", "d2"] and fastest.params["bottleneck_s"] == 1.0
        assert close(fastest.metrics.bottleneck_s, 1.2) and fastest.metrics.bottleneck == "port d1"
        assert fastest.params["bottleneck_note"] == ("the estimator's bottleneck is 1.2 s (port d1), above "
                                                     "the 1 s the solver optimized")
        assert all(x.params["optimal_for"] == PER_CUT_ONLY for x in plans)


def test_shared_ports_without_a_difference_add_no_note():
    p = shared_port_problem(bandwidth=8 / 0.1)   # 0.2 s per port: the stages stay the bottleneck
    (plan,) = make_partitioner("exact").solve(p)
    assert plan.params["optimal_for"] == PER_CUT_ONLY and "bottleneck_note" not in plan.params
    assert plan.metrics.bottleneck_s == plan.params["bottleneck_s"] == 1.0
