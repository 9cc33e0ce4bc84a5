"""The brute-force oracle: complete enumeration, evaluator metrics, constraints, infeasibility."""

import numpy as np
import pytest

from hetsplit.errors import HetsplitError, InfeasibleError
from hetsplit.estimate.evaluate import evaluate
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.oracle import brute_force, count_plans, enumerate_plans

from _instances import random_problem
from factories import chain_graph, cluster, problem


def test_enumeration_is_complete_and_distinct():
    p = random_problem(3, n_layers=5, n_dev=3, source=False)
    b, d = enumerate_plans(p)
    assert len(b) == count_plans(5, 3, 3) == 3 * 1 + 6 * 4 + 6 * 6
    rows = {(tuple(x), tuple(y)) for x, y in zip(b, d)}
    assert len(rows) == len(b)
    for y in d:  # each device at most once
        used = y[y >= 0]
        assert len(set(used)) == len(used)


def test_first_stage_and_max_stages_constraints():
    p = random_problem(4, n_layers=4, n_dev=3)
    c = PipelineConstraints(first_stage_devices=("d1",), max_stages=2)
    b, d = enumerate_plans(p, c)
    assert (d[:, 0] == 1).all() and d.shape[1] == 2
    assert len(b) == 1 + 2 * 3


def test_two_device_case_by_hand():
    # l0 fast on d1, l1 fast on d0; a 1 s transfer of 8 bytes between them
    g = chain_graph([8, 8], input_bytes=4)
    p = problem(g, cluster(["a", "b"], bandwidth=8.0), np.array([[2.0, 1.0], [2.0, 3.0]]),
                np.array([[1.0, 5.0], [1.0, 5.0]]))
    r = brute_force(p)
    assert r.min_bottleneck() == 2.0
    assert r.front().tolist() == [[2.0, 6.0], [4.0, 2.0]]  # d1|d0 and everything on d0
    plans = make_partitioner("bruteforce").solve(p)
    assert [pl.metrics.bottleneck_s for pl in plans] == [2.0, 4.0]
    for pl in plans:
        assert evaluate(p, pl) == pl.metrics


def test_two_device_case_by_hand_when_cuts_cost():
    # the case above; a segment on type a costs 0.5 s + 0.125 s per boundary byte and l1 on a pays
    # 1 s more cut off from l0; type b is charged nothing (an explicit zero)
    from hetsplit.costs import CostTable, SplitProblem
    from hetsplit.costs.segment import SegmentCost

    g = chain_graph([8, 8], input_bytes=4)
    base = problem(g, cluster(["a", "b"], bandwidth=8.0), np.array([[2.0, 1.0], [2.0, 3.0]]),
                   np.array([[1.0, 5.0], [1.0, 5.0]]))
    c = base.costs
    p = SplitProblem(g, base.cluster, CostTable(
        c.layer_names, c.types, c.time_s, c.energy_j, c.mem_bytes,
        segment={"a": SegmentCost(call_s=0.5, byte_s=0.125), "b": SegmentCost(source="zero")},
        unfused_s=np.array([[0.0, 0.0], [1.0, 0.0]])))
    r = brute_force(p)
    got = {(tuple(b[b < 2].tolist()), tuple(d[d >= 0].tolist())): (m_b, m_l)
           for b, d, m_b, m_l in zip(r.bounds, r.devices, r.metrics.bottleneck_s, r.metrics.latency_s)}
    # d1|d0: l0 on b 1 s, 1 s transfer, l1 on a 2 + 0.5 + 0.125 x (8 + 8) + 1 = 5.5 s
    assert got[((0, 1), (1, 0))] == (5.5, 7.5)
    # d0|d1: l0 on a 2 + 0.5 + 0.125 x (4 + 8) = 4 s, then 1 s, then 3 s
    assert got[((0, 1), (0, 1))] == (4.0, 8.0)
    assert got[((0,), (0,))] == (6.0, 6.0)      # 4 + 0.5 + 0.125 x (4 + 8)
    assert got[((0,), (1,))] == (4.0, 4.0)
    assert r.min_bottleneck() == 4.0
    assert r.front().tolist() == [[4.0, 6.0], [6.0, 2.0]]  # d0|d1 and everything on d0


def test_memory_limit_removes_plans_and_infeasible_raises():
    g = chain_graph([8, 8], input_bytes=4)
    t = np.ones((2, 1))
    p = problem(g, cluster(["a", "a"], memory=[1e12, 1e12]), t, t)
    assert len(brute_force(p).bounds) == 4
    tight = problem(g, cluster(["a", "a"], memory=[1.0, 1.0]), t, t)
    with pytest.raises(InfeasibleError):
        brute_force(tight)


def test_refuses_huge_instances():
    p = random_problem(1, n_layers=8, n_dev=5)
    with pytest.raises(HetsplitError, match="brute force"):
        enumerate_plans(p, limit=100)
