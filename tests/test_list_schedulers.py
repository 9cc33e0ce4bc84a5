"""The list schedulers (HEFT, CPOP, PEFT, MinMin, MaxMin, ETF) worked by hand on one branching DAG.

Two units, u0 and u1, one second between them (64-byte tensors, latency 1 s); layer times
    c0 c1 c2 add c4 pool
u0   4  3  2   1  8    2
u1   2  6  3   2  4    5
Mean times 3, 4.5, 2.5, 1.5, 6, 3.5; mean transfer 1. Each plan carries its scheduler's run order,
so the estimator reports the scheduler's own makespan (no two messages share a link at once here).
"""

from __future__ import annotations

import numpy as np
import pytest

from _cut_costs import without_cut_costs
from _fork_dag import fork_problem, names
from hetsplit.search import make_partitioner
from hetsplit.search.list_scheduling import downward_ranks, layer_edge_bytes, static_levels, upward_ranks
from hetsplit.search.list_schedulers import LIST_SCHEDULERS, optimistic_cost_table
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.workflow import load_problem

TIME = np.array([[4.0, 3.0, 2.0, 1.0, 8.0, 2.0], [2.0, 6.0, 3.0, 2.0, 4.0, 5.0]]).T
UNITS = [("u0", "dpu"), ("u1", "imc")]   # two kinds: a cost column each
LAYERS = ("c0", "c1", "c2", "add", "c4", "pool")


@pytest.fixture
def nm() -> NodeMapping:
    return NodeMapping(fork_problem(UNITS, time=TIME, latency_s=1.0))


def test_ranks_by_hand(nm: NodeMapping) -> None:
    eb = layer_edge_bytes(nm)
    # rank_u: pool 3.5; c4 6+1+3.5; add 1.5+1+10.5; c1 4.5+1+13; c2 2.5+1+13; c0 3+1+18.5
    assert upward_ranks(nm, eb) == pytest.approx([22.5, 18.5, 16.5, 13.0, 10.5, 3.5])
    # rank_d: c0 0; c1, c2 0+3+1; add max(4+4.5+1, 4+2.5+1); c4 9.5+1.5+1; pool 12+6+1
    assert downward_ranks(nm, eb) == pytest.approx([0.0, 4.0, 4.0, 9.5, 12.0, 19.0])
    assert static_levels(nm) == pytest.approx([18.5, 15.5, 13.5, 11.0, 9.5, 3.5])
    # OCT: pool 0; c4 [min(2, 5+1), min(2+1, 5)]; add [min(8+2, 4+3+1), min(10+1, 7)]; c1 and c2
    # [min(1+8, 2+7+1), min(9+1, 9)]; c0 max over c1 [12, 13] and c2 [11, 12]
    assert optimistic_cost_table(nm, eb) == pytest.approx(np.array(
        [[12, 13], [9, 9], [9, 9], [8, 7], [2, 3], [0, 0]], dtype=float))


# scheduler: (device per layer, start per layer, makespan), worked by hand
BY_HAND = {
    # rank order c0 c1 c2 add c4 pool; earliest finish with insertion
    "heft": ("u1 u0 u1 u0 u1 u0", [0, 3, 2, 6, 8, 13], 15),
    # critical path c0 c1 add c4 pool (priority 22.5; c2 21) on u0 (18 s against 19 s on u1); c2's
    # earliest finish: u1 [5, 8] (u0: [7, 9])
    "cpop": ("u0 u0 u1 u0 u0 u0", [0, 4, 5, 9, 10, 18], 20),
    # rank_oct 12.5 9 9 7.5 2.5 0; finish + OCT: c0 u1 (2+13 < 4+12), c1 u0 (6+9), c2 u1 (5+9),
    # add u0 (7+8 < 9+7), c4 u1 (12+3 < 15+2), pool u0 (15+0 < 17+0)
    "peft": ("u1 u0 u1 u0 u1 u0", [0, 3, 2, 6, 8, 13], 15),
    # c0 u1 [0, 2]; ready c1 (best 6 on u0) and c2 (5 on u0, tie with u1): c2 first; c1 after it
    "minmin": ("u1 u0 u0 u0 u1 u0", [0, 5, 3, 8, 10, 15], 17),
    # the same ready set, c1 (6) before c2 (5); c2 then fits on u1 [2, 5]
    "maxmin": ("u1 u0 u1 u0 u1 u0", [0, 3, 2, 6, 8, 13], 15),
    # c0 may start at 0 anywhere: u0 (first); then c1 at 4 on u0 (level 15.5 > c2's 13.5); c2 at 5 on
    # u1; add at 8 on u1 (u0: 9); c4 at 10 on u1; pool at 14 on u1
    "etf": ("u0 u0 u1 u1 u1 u1", [0, 4, 5, 8, 10, 14], 19),
}


@pytest.mark.parametrize("name", sorted(BY_HAND))
def test_list_schedulers_by_hand(nm: NodeMapping, name: str) -> None:
    devices, start, makespan = BY_HAND[name]
    s = LIST_SCHEDULERS[name](nm)
    assert names(nm, s.device) == dict(zip(LAYERS, devices.split()))
    assert s.start == pytest.approx(start) and s.makespan == pytest.approx(makespan)
    plan, = make_partitioner(name).solve(nm.problem)       # the plan carries the schedule's run order
    assert plan.algorithm == name and plan.assign == dict(zip(LAYERS, devices.split()))
    order = sorted(range(6), key=lambda i: (start[i], i))
    for unit in ("u0", "u1"):
        assert plan.order.get(unit, []) == [LAYERS[i] for i in order if devices.split()[i] == unit]
    assert plan.metrics.latency_s == pytest.approx(makespan)
    assert plan.params["makespan_s"] == pytest.approx(makespan)


def test_cpop_without_a_device_for_the_whole_critical_path_places_it_like_the_rest() -> None:
    # imc units cannot run add or pool, the dpu cannot run the convs: no device runs the whole path
    time = np.array([[4.0, 3.0, 2.0, np.inf, 8.0, np.inf], [np.inf, np.inf, np.inf, 1.0, np.inf, 2.0]]).T
    nm = NodeMapping(fork_problem([("i0", "imc"), ("p0", "dpu")], time=time))
    s = LIST_SCHEDULERS["cpop"](nm)
    assert names(nm, s.device) == {"c0": "i0", "c1": "i0", "c2": "i0", "add": "p0", "c4": "i0", "pool": "p0"}
    assert s.makespan == pytest.approx(4 + 3 + 2 + 1 + 8 + 2)


@pytest.mark.parametrize("name", sorted(LIST_SCHEDULERS))
def test_list_scheduler_plans_report_their_schedule_on_the_zoo(name: str) -> None:
    """The estimator, following the run order, gives the scheduler's makespan up to what the textbook
    leaves out (messages queueing on a link, the input leaving the cluster's source): never less. With
    the presets' segment charges left out: the schedulers charge segments by a heuristic, not exactly."""
    problem = without_cut_costs(load_problem("yolov8n", "jetson-xavier-nx-4"))
    plan, = make_partitioner(name).solve(problem)
    assert plan.order and plan.metrics.fits
    assert plan.metrics.latency_s >= plan.params["makespan_s"] * (1 - 1e-9)
    assert plan.metrics.latency_s == pytest.approx(plan.params["makespan_s"], rel=0.05)
