"""Every ``plan`` algorithm honours ``--time-budget`` (``search.base.Deadline``).

A search with partial answers (pareto's sweep, brute force's batches, DONNA's alphas) returns its
best plans so far marked ``cut_by_time_budget`` ("not proven optimal"); one without (the DPs, the
greedy mappers, tensor-parallel) raises ``TimeBudgetSpent`` naming the algorithm, the budget and
what to do. The clock is a fake that ticks once per read, so no test depends on wall-clock time;
a generous budget changes no plan.
"""

from __future__ import annotations

import pytest

import hetsplit.search.base as base
import hetsplit.search.oracle as oracle
from hetsplit.errors import HetsplitError
from hetsplit.search import make_partitioner, partitioner_names, partitioner_options
from hetsplit.search.base import Deadline, TimeBudgetSpent

from _instances import random_problem

RAISING = ["exact", "pipeedge", "lblp", "heft", "cpop", "peft", "minmin", "maxmin", "etf", "wb", "rr", "rd"]
CUTTING = ["pareto", "bruteforce", "donna"]
HUGE = 1e9   # a budget nothing here spends


class Ticks:
    """A clock that advances one second at every read."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        self.t += 1.0
        return self.t


@pytest.fixture
def ticks(monkeypatch: pytest.MonkeyPatch) -> Ticks:
    clock = Ticks()
    monkeypatch.setattr(base, "now", clock)
    return clock


def problem():
    return random_problem(5, n_layers=7, n_dev=3, mem_slack=2.0, inf_prob=0.0)


def key(plans):
    return [(p.algorithm, [(s.device, tuple(s.layers)) for s in p.stages], dict(p.assign)) for p in plans]


def test_every_algorithm_that_plans_takes_a_time_budget():
    """Only the one-evaluation baseline (single) has nothing to stop; map-opt/map-pareto run to it."""
    assert {n for n in partitioner_names() if "time_budget_s" not in partitioner_options(n)} == {"single"}


def test_the_deadline_checks_and_marks_on_its_clock(ticks):
    d = Deadline("x", 2.5)          # end at t = 3.5
    assert not d.spent() and not d.spent()
    with pytest.raises(TimeBudgetSpent, match=r"x: --time-budget 2.5 s ran out before its DP finished.*larger "
                                              r"--time-budget, or a heuristic algorithm"):
        d.check("its DP")
    assert not Deadline("y").spent()            # no budget: never spent
    assert issubclass(TimeBudgetSpent, HetsplitError)   # the CLI exits 2 on it


@pytest.mark.parametrize("name", RAISING)
def test_a_spent_budget_raises_naming_the_algorithm(name, ticks):
    with pytest.raises(TimeBudgetSpent, match=rf"^{name}: --time-budget 1e-09 s ran out"):
        make_partitioner(name, time_budget_s=1e-9).solve(problem())


def test_tensor_parallel_raises_on_a_spent_budget(ticks):
    from hetsplit.workflow import load_problem

    p = load_problem("tinyllama-42m", "siracusa-4")
    with pytest.raises(TimeBudgetSpent, match=r"^tensor-parallel: --time-budget 1e-09 s"):
        make_partitioner("tensor-parallel", time_budget_s=1e-9).solve(p)
    assert key(make_partitioner("tensor-parallel", time_budget_s=HUGE).solve(p)) == \
        key(make_partitioner("tensor-parallel").solve(p))


@pytest.mark.parametrize("name", ["pareto", "bruteforce"])
def test_a_budget_spent_before_any_plan_raises(name, ticks):
    with pytest.raises(TimeBudgetSpent, match=rf"^{name}: --time-budget"):
        make_partitioner(name, time_budget_s=1e-9).solve(problem())


def test_pareto_cut_mid_sweep_returns_the_points_found_marked(ticks):
    p = problem()
    full = make_partitioner("pareto").solve(p)
    assert len(full) >= 2
    # the first DP reads the clock once per layer; the budget lasts it and not the second
    cut = make_partitioner("pareto", time_budget_s=p.num_layers + 0.5).solve(p)
    assert 1 <= len(cut) < len(full)
    assert all("not proven optimal" in q.params["cut_by_time_budget"] for q in cut)
    assert {str(k) for k in key(cut)} <= {str(k) for k in key(full)}   # the least-energy end of the front
    assert min(q.costed.energy_j for q in cut) == min(q.costed.energy_j for q in full)


def test_bruteforce_cut_after_one_batch_returns_that_batchs_front_marked(ticks, monkeypatch):
    monkeypatch.setattr(oracle, "CHUNK", 5)
    p = problem()
    b, d = oracle.enumerate_plans(p)
    assert len(b) > 5
    # clock reads: 3 while enumerating (one per number of stages), then one per batch: batch 2 is cut
    cut = make_partitioner("bruteforce", time_budget_s=4.5).solve(p)
    assert cut and all("fitting plans evaluated before the budget ran out" in q.params["cut_by_time_budget"]
                       and "not proven optimal" in q.params["cut_by_time_budget"] for q in cut)
    m = oracle.evaluate_pipelines(p, b[:5], d[:5])
    keep = m.fits & (m.bottleneck_s < float("inf"))
    first = oracle.OracleResult(b[:5][keep], d[:5][keep], oracle.evaluate_pipelines(p, b[:5][keep], d[:5][keep]))
    assert key(cut) == key(oracle.BruteForce()._front(p, first))


@pytest.mark.parametrize("name", RAISING + CUTTING)
def test_a_generous_budget_changes_nothing(name):
    p = problem()
    plans = make_partitioner(name, time_budget_s=HUGE).solve(p)
    assert key(plans) == key(make_partitioner(name).solve(p))
    assert not any("cut_by_time_budget" in q.params for q in plans)


def test_the_plan_search_refuses_a_dp_past_its_budget_with_the_message(ticks):
    from hetsplit.workflow import PlanRequest, search_plans

    with pytest.raises(TimeBudgetSpent, match="exact: --time-budget 1e-09 s ran out"):
        search_plans(problem(), PlanRequest(algorithms=("exact",), time_budget_s=1e-9, baselines=False))
    found = search_plans(problem(), PlanRequest(algorithms=("pareto",), time_budget_s=problem().num_layers + 0.5,
                                                baselines=False))
    assert any("pareto was cut by --time-budget" in n and "not proven optimal" in n for n in found.notes), found.notes


def test_the_cli_exits_2_naming_the_algorithm_and_what_to_do(capsys):
    from hetsplit.cli.main import main

    code = main(["plan", "resnet8", "--cluster", "imce-4", "--algo", "pipeedge", "--no-baselines",
                 "--time-budget", "1e-9"])
    err = capsys.readouterr().err
    assert code == 2 and "pipeedge: --time-budget 1e-09 s ran out" in err and "heuristic algorithm" in err
    assert "Traceback" not in err


def test_pareto_on_a_shared_link_keeps_the_plan_sets_it_finished(ticks):
    """On a link both the input and the output cross (``search.coupling``), pareto sweeps one plan set
    after another: a budget that runs out in a later set keeps the points of the sets before it, marked,
    so a larger budget never gives less (before: it raised, dropping them)."""
    from test_coupling import hand_coupled

    p = hand_coupled(link_s=0.8)
    start = ticks.t
    full = make_partitioner("pareto").solve(p)
    reads = int(ticks.t - start)           # the clock reads of a whole run (no budget: none)
    start = ticks.t
    make_partitioner("pareto", time_budget_s=HUGE).solve(p)
    reads = int(ticks.t - start)
    assert any("shared_link" in q.params for q in full) and reads > 3
    answered = []
    for budget in range(1, reads + 2):
        try:
            got = make_partitioner("pareto", time_budget_s=budget - 0.5).solve(p)
        except TimeBudgetSpent:
            assert not answered, f"budget {budget - 0.5} raised after {answered[-1]} answered"
            continue
        answered.append(budget - 0.5)
        cut = [q for q in got if "cut_by_time_budget" in q.params]
        assert got and (cut == got or key(got) == key(full)), budget
    assert answered and key(make_partitioner("pareto", time_budget_s=reads + 0.5).solve(p)) == key(full)


@pytest.mark.parametrize("name", ["lblp", "wb"])
def test_the_greedy_mappers_read_the_budget_once_per_placed_layer(name, ticks):
    """LBLP and WB place layer after layer: the budget is read at each one, so a budget that lasts the
    set-up but not the pass stops it inside the pass."""
    p = problem()
    start = ticks.t
    make_partitioner(name, time_budget_s=HUGE).solve(p)
    reads = int(ticks.t - start)
    assert reads >= p.num_layers + 2      # the set-up, every placed layer, the end
    with pytest.raises(TimeBudgetSpent, match=rf"^{name}: --time-budget"):
        make_partitioner(name, time_budget_s=reads - p.num_layers // 2 - 0.5).solve(p)
