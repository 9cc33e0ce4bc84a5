"""Whole boards as interchangeable units: detection, and ``exact``/``pareto`` against the oracle."""

import numpy as np
import pytest
from _check import assert_evaluator_metrics, assert_solvers_match_oracle, close, oracle_or_none, seeds
from _instances import board_problem

from hetsplit.cluster import load_cluster
from hetsplit.costs.build import build_problem
from hetsplit.graph import load_model
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.classes import build_classes


@pytest.mark.parametrize("seed", seeds(150, 3000))
def test_boards_equal_oracle(seed):
    p = board_problem(seed)
    cm = build_classes(p)
    boards = p.num_devices // 2 - (1 if p.cluster.source or p.cluster.sink else 0)
    if boards >= 2:   # the boards without source or sink form one unit class
        assert any(len(c) == boards and len(c[0]) == 2 for c in cm.units)
    assert_solvers_match_oracle(p)


@pytest.mark.parametrize("seed", seeds(40, 3200))
def test_boards_with_constraints(seed):
    # at most 3 stages, the first on a CPU: boards stay interchangeable, the state space is cut
    p = board_problem(seed, n_boards=3, n_layers=6, source=False, sink=False)
    c = PipelineConstraints(first_stage_devices=tuple(n for n in p.cluster.names if n.endswith("cpu")), max_stages=3)
    assert any(len(u) == 3 for u in build_classes(p, c).units)
    assert_solvers_match_oracle(p, c)
    for plan in make_partitioner("pareto", constraints=c).solve(p) if oracle_or_none(p, c) else []:
        assert plan.stages[0].device.endswith("cpu") and len(plan.stages) <= 3


@pytest.mark.parametrize("seed", seeds(10, 3400))
def test_boards_of_three_pes(seed):
    p = board_problem(seed, n_boards=3, n_layers=5, source=False, sink=False, pes=3)
    assert [(len(c), len(c[0])) for c in build_classes(p).units] == [(3, 3)]
    assert_solvers_match_oracle(p)


@pytest.mark.parametrize("seed", seeds(20, 3100))
def test_one_perturbed_link_falls_back_and_stays_exact(seed):
    p = board_problem(seed, n_boards=3, n_layers=5, source=True, sink=False, perturb=True)
    cm = build_classes(p)
    assert all(len(c) == 1 and len(c[0]) == 1 for c in cm.units)   # six distinct devices
    assert_solvers_match_oracle(p)


def test_inner_link_of_one_board_differs():
    p = board_problem(3, n_boards=3, n_layers=5, source=False, sink=False)
    p.cluster.bandwidth[4, 5] *= 2           # board 2's CPU -> GPU link only
    cm = build_classes(p)
    assert sorted(len(c) for c in cm.units if len(c[0]) == 2) == [2]   # boards 0 and 1 remain a class
    assert_solvers_match_oracle(p)


def test_jetson_boards_are_units():
    p = build_problem(load_model("vgg8"), load_cluster("jetson-xavier-nx-8"))
    cm = build_classes(p)
    names = [[[p.cluster.names[d] for d in u] for u in c] for c in cm.units]
    # board 0 holds the source, so it stays two single devices; boards 1..7 are one class of units
    assert [["nx0-cpu"]] in names and [["nx0-gpu"]] in names
    (boards,) = [c for c in names if len(c) > 1]
    assert sorted(u[0] for u in boards) == [f"nx{b}-cpu" for b in range(1, 8)]
    assert all(u[1] == u[0].replace("cpu", "gpu") for u in boards)
    assert cm.num_multisets == 4 * 120   # 2 x 2 for board 0, C(7 + 3, 3) patterns of 7 boards


@pytest.mark.parametrize("seed", seeds(2, 3300))
def test_jetson_units_equal_the_device_level_dp(seed):
    # too big for brute force: the front over board units equals the front over 8 distinct devices
    from _instances import synthetic_on_cluster

    from hetsplit.search.exact import min_bottleneck
    from hetsplit.search.pareto_exact import pareto_sweep

    p = synthetic_on_cluster(seed, 24, load_cluster("jetson-xavier-nx-4"), model_memories=1.5)
    units, plain = build_classes(p), build_classes(p, units=False)
    assert units.num_multisets < plain.num_multisets
    fronts = [np.array([(vr.secondary, vr.primary) for vr in pareto_sweep(cm)]) for cm in (units, plain)]
    assert fronts[0].shape == fronts[1].shape and len(fronts[0]) > 3
    assert np.allclose(fronts[0], fronts[1], rtol=1e-9, atol=0)
    assert close(min_bottleneck(units)[0], min_bottleneck(plain)[0])
    plans = make_partitioner("pareto").solve(p)        # placed on named devices, the evaluator's metrics
    assert_evaluator_metrics(p, plans)
    assert np.allclose(sorted((q.metrics.bottleneck_s, q.metrics.energy_j) for q in plans), fronts[1][::-1],
                       rtol=1e-9, atol=0)
