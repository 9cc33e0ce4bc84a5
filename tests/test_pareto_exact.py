"""``pareto`` equals the oracle's front; DONNA's alpha plans never beat it."""

import numpy as np
import pytest
from _check import assert_evaluator_metrics, oracle_or_none, seeds
from _instances import random_problem, with_cut_costs
from factories import chain_graph, cluster, problem

from hetsplit.errors import InfeasibleError
from hetsplit.search import make_partitioner
from hetsplit.search.oracle import brute_force
from hetsplit.search.pareto_exact import compare_to_front


@pytest.mark.parametrize("seed, cuts", [(s, False) for s in seeds(100, 1000)] + [(s, True) for s in seeds(40, 1500)]
                         + [(s, "messages") for s in seeds(30, 1600)])
def test_front_equals_oracle(seed, cuts):
    """With ``cuts`` each stage pays one segment (and with ``messages`` its messages' ends); energy does
    not, so the front moves only along its bottleneck."""
    p = with_cut_costs(random_problem(seed), seed, messages=cuts == "messages") if cuts else random_problem(seed)
    o = oracle_or_none(p)
    if o is None:
        with pytest.raises(InfeasibleError):
            make_partitioner("pareto").solve(p)
        return
    front = make_partitioner("pareto").solve(p)
    assert_evaluator_metrics(p, front)
    got = np.array(sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front))
    want = o.front()
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-9, atol=0)
    assert all(f.pareto for f in front)


@pytest.mark.parametrize("seed", seeds(40, 2000))
def test_donna_never_beats_the_front(seed):
    p = random_problem(seed, n_dev=4)
    try:
        front = make_partitioner("pareto").solve(p)
    except InfeasibleError:
        return
    donna = make_partitioner("donna").solve(p)
    for d in compare_to_front(donna, front):
        if not d.plan.metrics.fits:
            continue
        # some front point is at least as good in both objectives
        fb = np.array([f.metrics.bottleneck_s for f in front])
        fe = np.array([f.metrics.energy_j for f in front])
        m = d.plan.metrics
        assert ((fb <= m.bottleneck_s * (1 + 1e-9)) & (fe <= m.energy_j * (1 + 1e-9))).any()
        assert d.energy_saving_j >= 0 and d.speedup >= 1.0


def test_front_reaches_a_non_convex_point_alpha_sums_miss():
    # per layer: fast (0.5 s, 5 J), frugal (5 s, 0.5 J), mid (3 s, 3 J); free links. Front:
    # (1, 10) all fast, (3, 8) fast|mid, (5, 3.5) mid|frugal, (10, 1) all frugal. (3, 8) lies above the
    # segment from (1, 10) to (5, 3.5), so no weighted sum of the objectives picks it.
    g = chain_graph([1, 1], input_bytes=1)
    t = np.array([[0.5, 5.0, 3.0], [0.5, 5.0, 3.0]])
    e = np.array([[5.0, 0.5, 3.0], [5.0, 0.5, 3.0]])
    p = problem(g, cluster(["fast", "frugal", "mid"], bandwidth=1e12), t, e, np.array([1.0, 1.0]))
    front = make_partitioner("pareto").solve(p)
    pts = sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front)
    assert np.allclose(pts, [(1, 10), (3, 8), (5, 3.5), (10, 1)])
    donna = make_partitioner("donna", alphas=tuple(np.linspace(0, 1, 51))).solve(p)
    assert not any(np.isclose(d.metrics.bottleneck_s, 3.0) for d in donna)


def test_compare_to_front_reports_savings():
    # a: 1 s and 4 J per layer, b: 1 s and 1 J per layer. Front: (1 s, 5 J) a|b, (2 s, 2 J) all on b.
    from hetsplit.estimate.evaluate import make_plan

    g = chain_graph([1, 1], input_bytes=1)
    p = problem(g, cluster(["a", "b"], bandwidth=1e12), np.ones((2, 2)), np.array([[4.0, 1.0], [4.0, 1.0]]))
    front = make_partitioner("pareto").solve(p)
    assert sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front) == [(1.0, 5.0), (2.0, 2.0)]
    all_a = make_plan(p, [0, 2], [0], "test")          # (2 s, 8 J)
    split = make_plan(p, [0, 1, 2], [1, 0], "test")    # (1 s, 5 J): on the front
    d_a, d_split = compare_to_front([all_a, split], front)
    assert d_a.dominated and np.isclose(d_a.energy_saving_j, 6.0) and np.isclose(d_a.energy_saving_frac, 0.75)
    assert np.isclose(d_a.speedup, 2.0)
    assert not d_split.dominated and d_split.energy_saving_j == 0.0 and d_split.speedup == 1.0


def test_state_budget_refuses_with_numbers():
    from hetsplit.errors import HetsplitError

    p = random_problem(5, n_layers=6, n_dev=5, repeat=False)
    for algo in ("pareto", "pipeedge"):
        with pytest.raises(HetsplitError, match=r"need .* GiB of DP tables"):
            make_partitioner(algo, state_budget_bytes=10).solve(p)


@pytest.mark.parametrize("seed", seeds(6, 2100))
def test_stage_starts_with_a_gap(seed):
    # a 1000-byte tensor lives across cut 3 only: a stage may start at 2 or 4 but not at 3 (it would
    # receive it), so the starts of a stage ending later are not one range of cuts
    rng = np.random.default_rng(seed)
    L = 9
    g = chain_graph([8, 8, 1000, 8, 8, 8, 8, 8, 8], input_bytes=4)
    cl = cluster(["a", "b", "c"], bandwidth=rng.uniform(10, 1000, size=(3, 3)), memory=[900.0, 900.0, 900.0])
    t, e = rng.uniform(0.5, 2.0, size=(L, 3)), rng.uniform(0.5, 2.0, size=(L, 3))
    p = problem(g, cl, t, e, np.full(L, 10.0))
    o = brute_force(p)
    front = make_partitioner("pareto").solve(p)
    assert_evaluator_metrics(p, front)
    got = np.array(sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front))
    assert np.allclose(got, o.front(), rtol=1e-9, atol=0)
    (plan,) = make_partitioner("exact").solve(p)
    assert np.isclose(plan.metrics.bottleneck_s, o.min_bottleneck(), rtol=1e-9, atol=0)


def test_a_stage_time_an_ulp_below_its_layer_time_stays_on_the_front():
    # l1 alone on d0 takes 0.9 s, but its stage time is the prefix difference (0.3 + 0.9) - 0.3, an
    # ulp below 0.9: a lower bound from the raw layer times would cut the fast point (d1 | d0) off
    g = chain_graph([1, 1], input_bytes=1)
    t = np.array([[0.3, 0.5], [0.9, 5.0]])
    e = np.array([[0.1, 1.0], [0.1, 1.0]])
    p = problem(g, cluster(["a", "b"], bandwidth=1e12), t, e)
    assert p.costs.range_time(1, 2, 0) < 0.9
    front = make_partitioner("pareto").solve(p)
    got = np.array(sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front))
    assert got.shape == (2, 2) and np.array_equal(got, brute_force(p).front())
