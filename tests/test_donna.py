"""DONNA's Algorithm 1 on small cases worked out by hand."""

import numpy as np
import pytest

from hetsplit.errors import InfeasibleError
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.donna import donna_dp, normalizers

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
