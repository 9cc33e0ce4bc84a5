"""One figure per plan: ``plan``, ``simulate --inputs 1`` and ``explore`` print the same figures for
the same plan at the same fidelity (they all get them from ``estimate``)."""

from __future__ import annotations

import json

import pytest

from hetsplit.cli.main import main
from hetsplit.estimate import estimate_plan
from hetsplit.plan.io import load_plans
from hetsplit.workflow import load_problem

FIGURES = ("throughput", "bottleneck_s", "latency_s", "energy_j", "comm_energy_j", "comm_time_s")


def simulate_json(path, index: int, capsys) -> dict:
    assert main(["simulate", str(path), "--index", str(index), "--inputs", "1", "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("model, cluster, algos, extra", [
    ("yolov8n", "jetson-xavier-nx-4", ["heft", "lblp", "donna"], []),   # DAG mappings (one with an order), pipelines
    ("resnet18", "imce-12", ["lblp", "wb"], []),
    ("tinyllama-42m", "siracusa-4", ["tensor-parallel"], ["--decode", "16"]),   # MCUs: shared ports, weight loads
])
def test_plan_and_simulate_one_input_print_the_same_figures(model, cluster, algos, extra, tmp_path, capsys):
    out = tmp_path / "plans"
    assert main(["plan", model, "--cluster", cluster, "--algo", *algos, *extra, "--out", str(out), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)["plans"]
    for i, plan in enumerate(printed):
        sim = simulate_json(out / "plans.json", i, capsys)
        for key in FIGURES:
            assert sim["closed_form"][key] == pytest.approx(plan["metrics"][key], rel=1e-12), (plan["algorithm"], key)
        assert sim["unloaded_latency_s"] == pytest.approx(plan["metrics"]["latency_s"], rel=1e-9), plan["algorithm"]
        assert sim["energy_j"] == pytest.approx(plan["metrics"]["energy_j"], rel=1e-9)


def test_explore_prints_what_the_estimator_gives_its_plans(tmp_path, capsys):
    out = tmp_path / "explore"
    assert main(["explore", "alexnet", "--cluster", "jetson-xavier-nx-4", "--pop", "12", "--gens", "3",
                 "--objectives", "latency", "throughput", "energy", "--out", str(out)]) == 0
    capsys.readouterr()
    plans = load_plans(out / "plans.json")
    problem = load_problem("alexnet", "jetson-xavier-nx-4")
    assert plans
    for plan in plans:
        again = estimate_plan(problem, plan)
        for key in FIGURES:
            assert getattr(again, key) == pytest.approx(getattr(plan.metrics, key), rel=1e-12), key
        assert simulate_json(out / "plans.json", plans.index(plan), capsys)["unloaded_latency_s"] == \
            pytest.approx(plan.metrics.latency_s, rel=1e-9)
