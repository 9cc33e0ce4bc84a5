"""``pipeedge``: optimal bottleneck against the oracle; its last-output-only flaw, reproduced."""

import numpy as np
import pytest
from _check import assert_evaluator_metrics, close, oracle_or_none, seeds
from _instances import random_problem, with_cut_costs
from factories import chain_graph, cluster, problem

from hetsplit.errors import InfeasibleError
from hetsplit.search import make_partitioner
from hetsplit.search.oracle import brute_force
from hetsplit.search.pipeedge import last_output_cut_bytes


@pytest.mark.parametrize("seed, cuts", [(s, False) for s in seeds(60, 3000)] + [(s, True) for s in seeds(40, 3100)]
                         + [(s, "messages") for s in seeds(30, 3200)])
def test_pipeedge_reaches_the_optimal_bottleneck_and_never_beats_the_oracle(seed, cuts):
    """With ``cuts`` each stage pays one segment (call, boundary bytes, unfused first layer) in the DP's tables
    too; with ``messages`` also its messages' ends (``cluster.links``)."""
    p = with_cut_costs(random_problem(seed), seed, messages=cuts == "messages") if cuts else random_problem(seed)
    o = oracle_or_none(p)
    if o is None:
        with pytest.raises(InfeasibleError):
            make_partitioner("pipeedge").solve(p)
        return
    (plan,) = make_partitioner("pipeedge").solve(p)
    assert_evaluator_metrics(p, [plan])
    assert close(plan.metrics.bottleneck_s, o.min_bottleneck())


@pytest.mark.parametrize("seed", seeds(40, 4000))
def test_last_output_only_is_never_better(seed):
    p = random_problem(seed, n_layers=6)
    try:
        o = brute_force(p)
        (flawed,) = make_partitioner("pipeedge", last_output_only=True).solve(p)
    except InfeasibleError:
        return
    if flawed.metrics.fits:
        assert flawed.metrics.bottleneck_s >= o.min_bottleneck() * (1 - 1e-12)


def skip_instance():
    # l0 -> l1 -> l2 -> l3 and a big skip l0 -> l3 (1000 B) live across cuts 1, 2 and 3
    g = chain_graph([10, 10, 10, 10], input_bytes=10, skips={0: [3]})
    t = np.ones((4, 1))
    return problem(g, cluster(["a", "a"], bandwidth=100.0), t, t)


def test_last_output_only_ignores_skip_tensors():
    p = skip_instance()
    assert p.cut_bytes.tolist() == [10, 10, 20, 20, 10]
    assert last_output_cut_bytes(p).tolist() == [10, 10, 10, 10, 10]


def test_last_output_only_picks_a_worse_plan_on_skips():
    # a 1000-byte l0 output read by l1 and l3
    g = chain_graph([1000, 10, 10, 10], input_bytes=10, skips={0: [3]})
    t = np.ones((4, 1))
    p = problem(g, cluster(["a", "a"], bandwidth=100.0), t, t)
    # true cuts: 1000 B over cuts 1..3 (10 s each at 100 B/s): any split costs >= 10 s; one device: 4 s
    (true_plan,) = make_partitioner("pipeedge").solve(p)
    (flawed,) = make_partitioner("pipeedge", last_output_only=True).solve(p)
    assert true_plan.metrics.bottleneck_s == 4.0 and len(true_plan.stages) == 1
    # the flawed DP thinks cut 2 moves 10 B (0.1 s) and splits 2|2, really paying 10.1 s (1010 B)
    assert len(flawed.stages) == 2 and np.isclose(flawed.metrics.bottleneck_s, 10.1)
    assert flawed.params["dp_bottleneck_s"] == 2.0
