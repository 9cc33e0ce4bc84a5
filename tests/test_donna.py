"""DONNA's Algorithm 1 on small cases worked out by hand."""

import numpy as np
import pytest

from hetsplit.errors import InfeasibleError
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.donna import donna_dp, normalizers

from _check import close, oracle_or_none
from _instances import random_problem, with_cut_costs
from factories import chain_graph, cluster, problem


def two_by_two():
    # l0, l1; d0 (type a) slow-ish and frugal, d1 (type b) fast on l0 and power hungry
    g = chain_graph([8, 8], input_bytes=4)
    cl = cluster(["a", "b"], bandwidth=8.0)
    t = np.array([[2.0, 1.0], [2.0, 3.0]])
    e = np.array([[1.0, 5.0], [1.0, 5.0]])
    return problem(g, cl, t, e)


def test_normalizers_by_hand():
    # time: largest whole-model compute (4 s) + largest cut transfer (8 B at 8 B/s = 1 s)
    # energy: largest whole-model compute energy (10 J) + no transfer energy
    assert normalizers(two_by_two()) == (5.0, 10.0)


@pytest.mark.parametrize("alpha, bounds, devices", [
    (1.0, [0, 1, 2], [1, 0]),   # fastest: d1 runs l0 (1 s), d0 runs l1 (2 s), 1 s transfer -> 2 s
    (0.6, [0, 1, 2], [1, 0]),   # 0.6*2/5 + 0.4*6/10 = 0.48 < all on d0: 0.6*4/5 + 0.4*2/10 = 0.56
    (0.4, [0, 2], [0]),         # all on d0: 0.32 + 0.08 = 0.44 < 0.16 + 0.36 = 0.52
    (0.0, [0, 2], [0]),         # least energy: everything on d0 (2 J)
])
def test_alpha_choices_match_hand_computation(alpha, bounds, devices):
    r = donna_dp(two_by_two(), alpha)
    assert (r.bounds, r.devices) == (bounds, devices)


def test_partitioner_returns_one_plan_per_alpha_with_evaluator_metrics():
    plans = make_partitioner("donna", alphas=(0.0, 1.0)).solve(two_by_two())
    assert [p.params["alpha"] for p in plans] == [0.0, 1.0]
    assert plans[0].metrics.energy_j == pytest.approx(2.0)
    assert plans[1].metrics.bottleneck_s == pytest.approx(2.0)
    assert [s.device for s in plans[1].stages] == ["d1", "d0"]


def test_each_device_runs_at_most_one_stage():
    # alternating costs would love d0, d1, d0, d1 -- DONNA may use each device once only
    g = chain_graph([1, 1, 1, 1])
    cl = cluster(["a", "b"], bandwidth=1e9)
    t = np.array([[1, 9], [9, 1], [1, 9], [9, 1]], float)
    r = donna_dp(problem(g, cl, t, np.ones((4, 2))), 1.0)
    assert len(set(r.devices)) == len(r.devices) <= 2


def test_memory_limits_and_first_stage_constraint():
    g = chain_graph([8, 8], input_bytes=4)
    cl = cluster(["a", "b"], bandwidth=8.0, memory=[1e9, 30.0])  # d1 cannot hold both layers
    p = problem(g, cl, np.array([[5.0, 1.0], [5.0, 1.0]]), np.ones((2, 2)))
    r = donna_dp(p, 1.0)
    assert r.devices != [1]
    forced = donna_dp(p, 1.0, PipelineConstraints(first_stage_devices=("d0",)))
    assert forced.devices[0] == 0


def test_infeasible_names_the_layer():
    g = chain_graph([8, 1000])
    p = problem(g, cluster(["a", "b"], memory=[100.0, 100.0]), np.ones((2, 2)), np.ones((2, 2)))
    with pytest.raises(InfeasibleError, match="layer 'l1'"):
        donna_dp(p, 0.5)


def literal_algorithm_1(p, alpha):
    """Algorithm 1 transcribed loop by loop (with hetsplit's cut bytes and memory check)."""
    from itertools import combinations

    n, d = p.num_layers, p.num_devices
    tn, en = normalizers(p)
    h = {}
    for u in range(d):
        h[(0, frozenset(), u)] = (0.0, 0.0, 0.0)
    pred = {}
    best, index = np.inf, None
    subsets = [frozenset(c) for r in range(d + 1) for c in combinations(range(d), r)]
    subsets.sort(key=lambda s: sum(1 << x for x in s))
    for i in range(n):
        for s in subsets:
            for u in range(d):
                if u in s or (i, s, u) not in h:
                    continue
                hc, ht, he = h[(i, s, u)]
                for j in range(i + 1, n + 1):
                    tcomp = p.stage_time(i, j, u) / tn
                    if not p.fits(i, j, u):
                        tcomp = np.inf
                    ecomp = p.stage_energy(i, j, u) / en
                    if j == n:
                        t, e = max(tcomp, ht), ecomp + he
                        c = alpha * t + (1 - alpha) * e
                        if np.isfinite(t) and c < best:
                            best, index = c, (i, s, u)
                        continue
                    for v in range(d):
                        if v == u or v in s:
                            continue
                        t = max(tcomp, p.cut_time(j, u, v) / tn, ht)
                        e = ecomp + p.cut_energy(j, u, v) / en + he
                        c = alpha * t + (1 - alpha) * e
                        key = (j, s | {u}, v)
                        if np.isfinite(t) and c < h.get(key, (np.inf,))[0]:
                            h[key] = (c, t, e)
                            pred[key] = (i, u)
    i, s, u = index
    bounds, devs = [n], [u]
    while i > 0:
        bounds.append(i)
        pi, pu = pred[(i, s, u)]
        s = s - {pu}
        i, u = pi, pu
        devs.append(u)
    bounds.append(0)
    return bounds[::-1], devs[::-1], best


@pytest.mark.parametrize("cuts", [False, True, "messages"])
@pytest.mark.parametrize("seed", range(25))
def test_vectorized_dp_equals_the_literal_pseudo_code(seed, cuts):
    rng = np.random.default_rng(seed)
    n, d = int(rng.integers(2, 8)), int(rng.integers(1, 5))
    skips = {0: [n - 1]} if n > 2 else None
    g = chain_graph(list(rng.integers(1, 50, n)), skips=skips)
    mem = list(rng.uniform(200, 600, d)) if seed % 3 == 0 else None
    cl = cluster([f"t{k}" for k in range(d)], bandwidth=rng.uniform(5, 50, (d, d)),
                 energy_per_byte=rng.uniform(0, 0.05, (d, d)), memory=mem)
    # round costs so that ties happen and the tie-breaking order is exercised
    t, e = np.round(rng.uniform(0.5, 3, (n, d)), 1), np.round(rng.uniform(0.5, 3, (n, d)), 1)
    p = problem(g, cl, t, e)
    if cuts:
        p = with_cut_costs(p, seed, messages=cuts == "messages")
    for alpha in (0.0, 0.3, 1.0):
        try:
            bounds, devs, cost = literal_algorithm_1(p, alpha)
        except TypeError:  # no feasible index
            with pytest.raises(InfeasibleError):
                donna_dp(p, alpha)
            continue
        r = donna_dp(p, alpha)
        assert r.cost == pytest.approx(cost)
        assert (bounds, devs) == (r.bounds, r.devices)


@pytest.mark.parametrize("seed, messages", [(s, False) for s in range(6000, 6040)] + [(s, True) for s in range(6040, 6070)])
def test_alpha_one_reaches_the_oracle_bottleneck_when_cuts_cost(seed, messages):
    """alpha = 1 is a min-max DP over (layers placed, devices used, next device): with every stage
    charged as one segment (and its messages' ends) it reaches the brute force's least bottleneck."""
    p = with_cut_costs(random_problem(seed, n_dev=int(np.random.default_rng(seed).integers(1, 5))), seed,
                       messages=messages)
    o = oracle_or_none(p)
    if o is None:
        with pytest.raises(InfeasibleError):
            donna_dp(p, 1.0)
        return
    (plan,) = make_partitioner("donna", alphas=(1.0,)).solve(p)
    assert close(plan.metrics.bottleneck_s, o.min_bottleneck())


@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_dp_equals_the_earlier_numpy_dp_exactly(seed):
    """The kernel (search/donna.py) against the all-numpy version it replaced (tests/_donna_reference.py):
    identical bounds, devices and costs, bit for bit, on random instances with ties, memories, cut costs,
    sources, sinks and first/last-stage constraints."""
    from _donna_reference import reference_donna_dp

    rng = np.random.default_rng(seed)
    p = random_problem(seed, n_layers=int(rng.integers(1, 12)), n_dev=int(rng.integers(1, 6)))
    if seed % 2:
        p = with_cut_costs(p, seed)
    d = p.num_devices
    cons = [PipelineConstraints()]
    if d > 1:
        cons.append(PipelineConstraints(first_stage_devices=(p.cluster.devices[0].name,),
                                        last_stage_devices=(p.cluster.devices[-1].name,), max_stages=2))
    for c in cons:
        for alpha in (0.0, 0.2, 0.5, 1.0):
            try:
                want = reference_donna_dp(p, alpha, c)
            except InfeasibleError:
                with pytest.raises(InfeasibleError):
                    donna_dp(p, alpha, c)
                continue
            got = donna_dp(p, alpha, c)
            assert (got.bounds, got.devices) == (want.bounds, want.devices)
            assert (got.cost, got.h_t, got.h_e) == (want.cost, want.h_t, want.h_e)


def test_a_time_budget_cuts_the_alpha_sweep_inside_a_dp_and_says_so(monkeypatch):
    """DONNA reads the clock once per layer row of each alpha's DP: the alpha that passes --time-budget
    stops there, the plans found are kept and marked, and the plan search turns the mark into a note; a
    budget that ends inside the first alpha has nothing to give and raises, naming DONNA and what to do.
    The clock is a fake that ticks one second per read."""
    import hetsplit.search.base as base
    from hetsplit.search.base import TimeBudgetSpent
    from hetsplit.workflow import PlanRequest, search_plans

    reads = iter(range(1, 10**6))
    monkeypatch.setattr(base, "now", lambda: float(next(reads)))
    p = random_problem(3, n_layers=6, n_dev=3)
    with pytest.raises(TimeBudgetSpent, match=r"^donna: --time-budget 3 s ran out before alpha 0 finished.*lblp"):
        make_partitioner("donna", time_budget_s=3).solve(p)         # 3 of the first alpha's 6 rows
    plans = make_partitioner("donna", time_budget_s=6.5).solve(p)   # the first alpha's 6 rows, not the second's
    assert len(plans) == 1 and "alphas 0.2, 0.4, 0.6, 0.8, 1 not run" in plans[0].params["cut_by_time_budget"]
    three = make_partitioner("donna", time_budget_s=3 * 6 + 0.5).solve(p)
    assert len(three) == 3 and "alphas 0.6, 0.8, 1 not run" in three[0].params["cut_by_time_budget"]
    assert len(make_partitioner("donna", time_budget_s=3600).solve(p)) == 6
    found = search_plans(p, PlanRequest(algorithms=("donna",), time_budget_s=6.5, baselines=False))
    assert any("donna was cut by --time-budget" in n for n in found.notes), found.notes
