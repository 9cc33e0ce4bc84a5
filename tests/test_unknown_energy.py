"""Energy that is not known is not zero: a device type whose energy nobody measured or estimated
(CostTable.energy_known) makes a plan's energy unknown, and every energy objective refuses the problem."""

import json
import math

import numpy as np
import pytest

from hetsplit.costs import CostTable
from hetsplit.costs.profile import Profile, profile_from_dict, profile_to_dict
from hetsplit.errors import ProfileError
from hetsplit.estimate import estimate
from hetsplit.estimate.batch import metrics_at
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.estimate.pipeline import evaluate_pipelines
from hetsplit.plan import Plan, Stage
from hetsplit.search import make_partitioner
from hetsplit.search.explore import ExploreOptions, explore
from hetsplit.search.hierarchical import HierarchicalOptions, hierarchical_explore
from hetsplit.workflow import PlanRequest, search_plans

from factories import chain_graph, cluster, problem

L = 4


def _problem(unknown: tuple[str, ...] = ("b",)):
    """4 chained layers on d0 (type a) and d1 (type b); type b's energy unknown by default."""
    g = chain_graph([8] * L)
    cl = cluster(["a", "b"], bandwidth=1e9, energy_per_byte=1e-9)
    p = problem(g, cl, np.array([[1.0, 0.5]] * L), np.array([[2.0, 0.0]] * L))
    p.costs.energy_known = np.array([t not in unknown for t in p.costs.types])
    return p


def _pipeline(devices: list[str], cut: int = 2) -> Plan:
    names = [f"l{i}" for i in range(L)]
    stages = [Stage(devices[0], names)] if len(devices) == 1 else \
        [Stage(devices[0], names[:cut]), Stage(devices[1], names[cut:])]
    return Plan("toy", "toy-cluster", "test", stages)


def test_the_table_carries_energy_known_through_select_and_concat():
    t = CostTable(["x"], ["a", "b", "c"], [[1, 1, 1]], [[1, 0, 1]], [1], energy_known=[True, False, True])
    assert t.unknown_energy_types == ["b"]
    assert list(t.select(["c", "b"]).energy_known) == [True, False]
    joined = CostTable.concat([t.select(["a"]), t.select(["b"]), CostTable(["x"], ["d"], [[1]], [[1]], [1])])
    assert list(joined.energy_known) == [True, False, True] and joined.unknown_energy_types == ["b"]
    assert CostTable(["x"], ["a"], [[1]], [[1]], [1]).unknown_energy_types == []
    with pytest.raises(ProfileError, match="energy_known has 1 entries for 2 device types"):
        CostTable(["x"], ["a", "b"], [[1, 1]], [[1, 1]], [1], energy_known=[True])


def test_a_profile_column_says_its_energy_is_unknown_and_a_profiler_without_energy_marks_it():
    doc = {"format": "hetsplit.profile/1", "model": "m", "layers": [{"name": "x", "out_bytes": 4}],
           "device_types": {"gpu": {"time_s": [1e-3], "energy_j": [0.0], "energy_known": False},
                            "cpu": {"time_s": [2e-3], "energy_j": [0.1]}}}
    prof = profile_from_dict(doc)
    assert prof.costs.unknown_energy_types == ["gpu"] and "no energy figure" in prof.costs.sources["gpu"]
    again = profile_from_dict(json.loads(json.dumps(profile_to_dict(prof))))
    assert again.costs.unknown_energy_types == ["gpu"]
    with pytest.raises(ProfileError, match=r"device_types.gpu.energy_known is 'no'"):
        profile_from_dict({**doc, "device_types": {"gpu": {**doc["device_types"]["gpu"], "energy_known": "no"}}})
    # what a profiler returns when it could neither measure nor estimate (status unavailable)
    made = Profile(prof.graph, prof.costs.select(["cpu"]), {"energy": {"status": "unavailable", "meter": "none"}})
    assert made.costs.unknown_energy_types == ["cpu"]
    kept = Profile(prof.graph, prof.costs.select(["cpu"]), {"energy": {"status": "estimated"}})
    assert kept.costs.unknown_energy_types == []


def test_the_estimate_reports_unknown_energy_for_plans_using_such_a_device_and_only_those():
    p = _problem()
    plans = [_pipeline(["d0"]), _pipeline(["d1"]), _pipeline(["d0", "d1"])]
    batch = estimate(p, plans)
    assert batch.energy_j[0] == pytest.approx(2.0 * L) and math.isfinite(batch.edp[0])
    assert np.isnan(batch.energy_j[1:]).all() and np.isnan(batch.edp[1:]).all()
    assert np.isnan(batch.energy_per_device_j[2, 1]) and batch.energy_per_device_j[2, 0] > 0  # d0's is known
    assert math.isfinite(batch.throughput[2]) and batch.comm_energy_j[2] > 0                  # the rest stands
    for fidelity in ("closed", "simulated"):
        m = metrics_at(p, estimate(p, plans, fidelity), 2)
        assert math.isnan(m.energy_j) and math.isnan(m.energy_per_device_j["d1"])
        assert m.to_dict()["energy_j"] is None and m.to_dict()["energy_per_device_j"]["d1"] is None
    # an engine's unmasked batch (what searches hold) still gives Metrics with unknown energy
    raw = evaluate_pipelines(p, np.array([[0, 2, L]]), np.array([[0, 1]]))
    assert math.isfinite(raw.energy_j[0]) and math.isnan(metrics_at(p, raw, 0).energy_j)
    # with every type known nothing changes
    known = _problem(unknown=())
    assert np.isfinite(estimate(known, plans).energy_j).all()


def test_every_energy_objective_refuses_naming_the_type_its_devices_and_the_fix():
    p = _problem()
    with pytest.raises(ProfileError) as err:
        require_known_energy(p, "my objective")
    text = str(err.value)
    assert "my objective optimizes energy" in text and "'b' (d1)" in text and "--power" in text
    refusals = {
        "DONNA": lambda: make_partitioner("donna", alphas=(1.0, 0.5)).solve(p),
        "map-opt --objective energy": lambda: make_partitioner("map-opt", objective="energy",
                                                               time_budget_s=2).solve(p),
        "map-pareto": lambda: make_partitioner("map-pareto", time_budget_s=2).solve(p),
        "pareto": lambda: make_partitioner("pareto").solve(p),
        "explore": lambda: explore(p, ExploreOptions(objectives=("throughput", "energy"), pop_size=4, generations=1)),
        "hierarchical": lambda: hierarchical_explore(p, lambda plans: [], HierarchicalOptions()),
    }
    for asked_by, solve in refusals.items():
        with pytest.raises(ProfileError, match=r"optimizes energy.*'b' \(d1\)"):
            solve()
    # objectives that do not weigh energy still plan, and say the energy is unknown
    donna = make_partitioner("donna", alphas=(1.0,)).solve(p)
    assert math.isnan(donna[0].metrics.energy_j)
    assert make_partitioner("map-opt", time_budget_s=2).solve(p)[0].metrics.fits
    assert explore(p, ExploreOptions(encoding="spe", objectives=("throughput", "latency"), pop_size=4,
                                     generations=1)).plans
    # and with every energy known, the energy objectives run
    assert make_partitioner("pareto").solve(_problem(unknown=()))


def test_a_plan_search_with_unknown_energy_runs_donna_for_throughput_and_marks_the_front_without_energy():
    p = _problem()
    found = search_plans(p, PlanRequest(algorithms=("donna",)))
    assert {pl.params.get("alpha") for pl in found.plans if pl.algorithm == "donna"} == {1.0}
    assert found.front == ("throughput",)
    assert any("alpha 1 (throughput) only" in n and "b" in n for n in found.notes)
    assert any("leave energy out" in n for n in found.notes)
    with pytest.raises(ProfileError, match="DONNA with an alpha below 1"):
        search_plans(p, PlanRequest(algorithms=("donna",), alphas=(0.0, 1.0)))
    assert search_plans(_problem(unknown=()), PlanRequest(algorithms=("donna",))).notes == []


def test_tables_and_the_html_report_print_unknown_energy_as_unknown_also_after_a_plan_file(tmp_path):
    from rich.console import Console

    from hetsplit.plan import load_plans, save_plans
    from hetsplit.report.html import plans_html
    from hetsplit.report.tables import print_plans

    p = _problem()
    plans = [_pipeline(["d0"]), _pipeline(["d0", "d1"])]
    for plan in plans:
        plan.metrics = metrics_at(p, estimate(p, [plan]), 0)
    again = load_plans(save_plans(plans, tmp_path / "plans.json"))
    metrics = again[1].metrics
    assert metrics is not None and math.isnan(metrics.energy_j) and math.isnan(metrics.edp)  # unknown, not inf
    assert math.isnan(metrics.energy_per_device_j["d1"]) and math.isfinite(metrics.energy_per_device_j["d0"])
    for shown in (plans, again):
        console = Console(record=True, width=200)
        print_plans(shown, "t", console)
        rows = [line for line in console.export_text().splitlines() if "d0[2] → d1[2]" in line]
        assert len(rows) == 1 and rows[0].count("unknown") == 2          # energy and energy per device
        page = plans_html(shown, "t")
        assert "unknown" in page and "nan J" not in page and "inf J" not in page
