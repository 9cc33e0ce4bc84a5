"""Plans on this machine's `local` cluster are also costed for the processes that would run them here
(the workers and the driver sharing the cores, the runtime's CPU per message), beside the plan table."""

from __future__ import annotations

import pytest

from hetsplit.cli.main import main
from hetsplit.estimate import RuntimeCosts, predict_here
from hetsplit.estimate.evaluate import evaluate
from hetsplit.estimate.processes import planned_profile
from hetsplit.runtime import calibration as rc
from hetsplit.plan.types import Plan, Stage
from hetsplit.workflow import PlanRequest, find_plans, load_problem, predict_plans_here

COSTS = RuntimeCosts(worker_end_s=2e-4, driver_end_s=8e-5, worker_byte_s=1e-10, driver_byte_s=5e-10,
                     message_latency_s=1.5e-4, source="given for the test", end_wait_s=1.2e-4)


@pytest.fixture
def given_runtime(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rc, "runtime_costs", lambda recalibrate=False: COSTS)


def test_each_distinct_placement_is_costed_fastest_first(given_runtime):
    problem = load_problem("resnet8", "local")
    plans = find_plans(problem, PlanRequest(algorithms=("donna", "exact")))
    found = predict_plans_here(problem, plans, cores=2)
    assert found is not None and found.runtime_source == COSTS.source and not found.failures
    shown = [i for i, _ in found.predictions]
    placements = [repr(sorted(plans[i].placements().items())) for i in shown]
    assert len(set(placements)) == len(shown) >= 2                     # the split and the single device
    assert set(placements) == {repr(sorted(p.placements().items())) for p in plans if p.metrics.fits}
    assert [plans[i].metrics.throughput for i in shown] == sorted((plans[i].metrics.throughput for i in shown),
                                                                  reverse=True)
    for i, pred in found.predictions:
        assert pred.units == plans[i].devices and pred.cores == 2
        again = predict_here(plans[i], problem.graph, planned_profile(problem), 2, COSTS)
        assert pred.predicted_throughput == pytest.approx(again.predicted_throughput)
        if len(pred.units) == 1:          # one worker and the driver on two cores: compute is the limit
            assert not pred.oversubscribed and pred.limited_by == "units"
            assert pred.predicted_throughput == pytest.approx(plans[i].metrics.throughput, rel=0.02)
        else:                             # two workers and the driver on two cores: the messages cost time
            assert pred.oversubscribed
            assert pred.predicted_throughput < 0.95 * plans[i].metrics.throughput


def test_at_most_limit_placements(given_runtime):
    problem = load_problem("resnet8", "local")
    plans = find_plans(problem, PlanRequest(algorithms=("donna", "exact")))
    found = predict_plans_here(problem, plans, limit=1, cores=2)
    assert found is not None and len(found.predictions) == 1
    assert found.predictions[0][0] == max(range(len(plans)), key=lambda i: plans[i].metrics.throughput)


def test_other_clusters_run_elsewhere():
    problem = load_problem("resnet8", "donna-2cpu-1gpu-1cim-hb-wcc")
    assert predict_plans_here(problem, find_plans(problem, PlanRequest())) is None


def test_without_the_calibration_latency_is_not_rescaled():
    problem = load_problem("resnet8", "local")          # the suite measures nothing: the roofline fallback
    assert planned_profile(problem).meta["unloaded_factor"] == 1.0


def test_plan_prints_the_here_table_for_local_only(given_runtime, capsys):
    assert main(["plan", "resnet8", "--cluster", "local"]) == 0
    out = capsys.readouterr().out
    assert "run here" in out and "here/planned" in out and COSTS.source in out.replace("\n", " ")
    assert main(["plan", "resnet8", "--cluster", "donna-2cpu-1gpu-1cim-hb-wcc"]) == 0
    assert "here/planned" not in capsys.readouterr().out


def test_notes_name_short_stages_and_plans_that_could_not_be_costed(given_runtime):
    problem = load_problem("resnet8", "local")         # stages of a fraction of a millisecond
    plans = find_plans(problem, PlanRequest(algorithms=("exact",)))
    found = predict_plans_here(problem, plans, cores=2)
    assert found is not None
    notes = found.notes("resnet8")
    assert "hetsplit run PLANS resnet8 --here" in notes[0] and COSTS.source in notes[0]
    assert "under 1 ms" in notes[1] and all(f"#{i}" in notes[1] for i, _ in found.predictions)
    found.failures.append((7, "a reason"))
    assert found.notes("resnet8")[-1] == "plan #7 could not be costed for running here: a reason"
    found.predictions = []
    assert not any("under 1 ms" in n for n in found.notes("resnet8"))


def test_a_plan_is_not_called_short_for_a_small_stage_beside_a_long_one(given_runtime):
    problem = load_problem("resnet18", "local")
    names = problem.graph.names
    plan = Plan(problem.graph.name, "local", "hand", [Stage("local-cpu0", names[:-1]), Stage("local-cpu1", names[-1:])])
    plan.metrics = evaluate(problem, plan)
    found = predict_plans_here(problem, [plan], cores=2)
    compute = found.predictions[0][1].compute_s
    assert compute["local-cpu1"] < 1e-3 <= compute["local-cpu0"]      # the fc alone, beside the rest
    assert not any("under 1 ms" in n for n in found.notes("resnet18"))
