"""reproduce hybrid: the runner explores every chromosome, the report writes claims with numbers."""

from __future__ import annotations

import json

import numpy as np

from hetsplit.cli.main import main
from hetsplit.estimate import estimate_plan
from hetsplit.experiments.hybrid import HybridConfig, run
from hetsplit.experiments.hybrid_claims import check_claims
from hetsplit.experiments.thesis_tables import (TABLE7, MemoryRun, ThesisTables, estimate_tables, table4_plan,
                                                table7_claims)
from hetsplit.plan.check import check_plan
from hetsplit.workflow import load_problem


def test_small_run_scores_runs_on_one_reference_and_grades_every_claim():
    cfg = HybridConfig(models=("alexnet",), settings=("cpu",), splits=(2, 4), pop_size=24, generations=4,
                       measured_picks="none")
    results = run(cfg)
    labels = [r.label for r in results.runs if r.objectives == ("energy-per-device", "memory-per-device", "latency")]
    assert labels == ["naive", "advanced p=2", "advanced p=4", "spe"]
    for r in results.runs:
        assert r.best.shape == (4, len(r.objectives)) and len(r.hypervolume) == 4
        assert (np.diff(r.hypervolume) >= -1e-12).all()            # elitist: the front never loses volume
    gap = results.gaps[0]
    assert gap.exact_points > 0 and 0 <= gap.spe_hv <= gap.exact_hv * (1 + 1e-9)  # the exact front dominates SPE's
    claims = check_claims(results)
    dse = claims.claims[:5]
    assert [c.label for c in dse] == ["direction"] * 3 + ["inconclusive", "direction"] and "alexnet cpu" in dse[0].evidence
    assert claims.get("gpus-do-not-help").label == "inconclusive"            # no cpu+gpu run: no verdict
    assert claims.get("t2-alexnet-energy").label == "fitted"                 # power_active came from Table 2
    assert claims.get("t2-alexnet-energy").fitted_params == ("power_active",)
    assert claims.get("t2-alexnet-latency").label == "held-out"
    assert claims.get("t7-alexnet-memory").label == "inconclusive"           # nothing was run for its memory
    assert {claims.get(f"t7-alexnet-{o}").evaluations for o in ("latency", "energy")} == {0}


def test_reproduce_hybrid_writes_claims_with_numbers(tmp_path):
    out = tmp_path / "hyb"
    assert main(["reproduce", "hybrid", "--models", "alexnet", "--quick", "--pop", "16", "--gens", "3",
                 "--out", str(out)]) == 0
    text = (out / "claims.md").read_text()
    assert "hybrid / vertical" in text and "| alexnet | cpu | naive |" in text
    doc = json.loads((out / "results.json").read_text())
    claims = doc["claims"]
    assert doc["config"]["pop_size"] == 16 and text.index(claims["summary"]) < text.index("## Set-up")
    memory = {c["key"]: c for c in claims["claims"]}["t7-alexnet-memory"]
    runs = doc["memory_runs"]["alexnet"]                   # --quick: the unpartitioned model and the best pick
    assert [r["label"] for r in runs][0] == "unpartitioned" and len(runs) == 2 and all(r["measured_bytes"] for r in runs)
    assert memory["label"] == "held-out" and memory["evaluations"] == 2
    assert memory["ours"] == 100 * (1 - runs[1]["measured_bytes"] / runs[0]["measured_bytes"])
    assert any(g["exact_points"] > 0 for g in doc["exact_gaps"])
    assert (out / "convergence-alexnet-cpu.png").stat().st_size > 0
    assert json.loads((out / "claims.json").read_text()) == claims and claims["format"] == "hetsplit.claims/1"
    assert {c["key"]: c["label"] for c in claims["claims"]}["t2-alexnet-params"] == "sanity"


def test_explore_command_writes_the_pareto_set_and_its_history(tmp_path, capsys):
    out = tmp_path / "ex"
    assert main(["explore", "alexnet", "-c", "jetson-xavier-nx-8-cpu", "--encoding", "advanced", "--splits", "4",
                 "--objectives", "latency", "memory-per-device", "--pop", "20", "--gens", "3", "--out", str(out)]) == 0
    doc = json.loads((out / "plans.json").read_text())
    assert doc["format"] == "hetsplit.planset/1" and doc["encoding"] == "advanced"
    assert doc["history"]["objectives"] == ["latency", "memory-per-device"] and len(doc["history"]["best"]) == 3
    assert all(p["pareto"] and p["format"] == "hetsplit.plan/2" for p in doc["plans"])
    assert (out / "convergence.png").exists() and (out / "hypervolume.png").exists()
    assert "evaluations" in capsys.readouterr().out


def test_explore_command_names_bad_options(capsys):
    assert main(["explore", "alexnet", "-c", "jetson-xavier-nx-4", "--splits", "9"]) == 2
    assert "--splits p must be in 1..8" in capsys.readouterr().err


def test_table4s_plan_splits_what_the_thesis_split_over_all_eight_cpus():
    problem = load_problem("alexnet", "jetson-xavier-nx-8-cpu")
    plan = table4_plan(problem)
    tg = check_plan(problem.graph, problem.cluster, plan)
    split = [name for name, where in plan.assign.items() if not isinstance(where, str)]
    assert split == ["features.0/Conv", "features.6/Conv", "features.10/Conv", "classifier.0/Gemm",
                     "classifier.2/Gemm", "classifier.4/Gemm"]                       # conv1, 3, 5 and every FC
    assert sorted(plan.devices) == problem.cluster.names and tg.messages()
    assert estimate_tables({"alexnet": problem}).table4 == estimate_plan(problem, plan, "closed")


def test_table7_memory_comes_from_runs_and_latency_waits_for_a_faithful_run():
    t = ThesisTables(memory_runs={"vgg16": [MemoryRun("unpartitioned", 6e8, 1000e6), MemoryRun("naive", 2e8, 400e6),
                                            MemoryRun("advanced p=2", 1e8, 300e6), MemoryRun("advanced p=4", 1e8, None,
                                                                                             "timed out")]})
    by = {c.key: c for c in table7_claims("vgg16", t, True)}
    mem = by["t7-vgg16-memory"]
    assert mem.ours == 70.0 and mem.paper == TABLE7["vgg16"]["memory"] and mem.verdict == "holds"
    assert "advanced p=2" in mem.evidence and mem.evaluations == 4
    assert by["t7-vgg16-memory-lower"].verdict == "holds"
    assert by["t7-vgg16-latency"].label == by["t7-vgg16-energy"].label == "inconclusive"
    assert "no run made" in by["t7-vgg16-latency"].evidence
    none = {c.key: c for c in table7_claims("vgg16", ThesisTables(), False)}
    assert none["t7-vgg16-memory"].label == "inconclusive" and none["t7-vgg16-memory"].evaluations == 0
