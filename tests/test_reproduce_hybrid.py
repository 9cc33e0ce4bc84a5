"""reproduce hybrid: the runner explores every chromosome, the report writes claims with numbers."""

from __future__ import annotations

import json

import numpy as np

from hetsplit.cli.main import main
from hetsplit.experiments.hybrid import HybridConfig, check_claims, run


def test_small_run_scores_runs_on_one_reference_and_grades_every_claim():
    cfg = HybridConfig(models=("alexnet",), settings=("cpu",), splits=(2, 4), pop_size=24, generations=4)
    results = run(cfg)
    labels = [r.label for r in results.runs if r.objectives == ("energy-per-device", "memory-per-device", "latency")]
    assert labels == ["naive", "advanced p=2", "advanced p=4", "spe"]
    for r in results.runs:
        assert r.best.shape == (4, len(r.objectives)) and len(r.hypervolume) == 4
        assert (np.diff(r.hypervolume) >= -1e-12).all()            # elitist: the front never loses volume
    gap = results.gaps[0]
    assert gap.exact_points > 0 and 0 <= gap.spe_hv <= gap.exact_hv * (1 + 1e-9)  # the exact front dominates SPE's
    claims = check_claims(results)
    assert len(claims) == 5
    assert {c.verdict for c in claims} <= {"holds", "partly", "does not hold", "not run"}
    assert claims[0].verdict != "not run" and "alexnet cpu" in claims[0].evidence


def test_reproduce_hybrid_writes_claims_with_numbers(tmp_path):
    out = tmp_path / "hyb"
    assert main(["reproduce", "hybrid", "--models", "alexnet", "--quick", "--pop", "16", "--gens", "3",
                 "--out", str(out)]) == 0
    text = (out / "claims.md").read_text()
    assert "[" in text and "hybrid / vertical" in text and "| alexnet | cpu | naive |" in text
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["pop_size"] == 16 and len(doc["claims"]) == 5
    assert any(g["exact_points"] > 0 for g in doc["exact_gaps"])
    assert (out / "convergence-alexnet-cpu.png").stat().st_size > 0


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
