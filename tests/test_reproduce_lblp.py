"""``hetsplit reproduce lblp`` (IMC paper, seed 001) on a reduced configuration: files, claims, invariants."""

import json
import re

import pytest

from hetsplit.cli.main import main
from hetsplit.estimate import estimate_plan
from hetsplit.experiments.claims import VERDICTS
from hetsplit.experiments.lblp import (PAPER_ALGORITHMS, LblpConfig, compare_search, default_unit_counts, run, solve,
                                       sweep_dpus)
from hetsplit.experiments.lblp_claims import PAPER_TABLE1, check_claims, table_one
from hetsplit.report.lblp_repro import write_report

SMALL = LblpConfig(models=("resnet8",), algorithms=PAPER_ALGORITHMS, unit_counts={"resnet8": (4, 14)},
                   rd_seeds=2, inputs=30, mix_model="resnet8", mix_units=(6,), mix_dpus=(1, 2),
                   mix_algorithms=("lblp", "wb"), table_model="resnet8", table_cluster="imce-6",
                   table_algorithms=("lblp", "wb"))


@pytest.fixture(scope="module")
def small():
    return run(SMALL)


def test_unit_counts_end_where_every_unit_holds_one_layer():
    assert default_unit_counts(14) == tuple(range(2, 15))
    assert default_unit_counts(30)[-3:] == (26, 28, 30) and 16 in default_unit_counts(30)
    assert default_unit_counts(87) == (2, 4, 8, 16, 32, 64, 87)
    assert sweep_dpus(30, 30, 9) == 9 and sweep_dpus(12, 30, 9) == 4   # imce-12: 8 IMC + 4 DPU, as Table I
    assert sweep_dpus(2, 30, 29) == 1                                   # always one unit of each kind


def test_one_layer_per_unit_when_units_equal_layers(small):
    sweep = small.sweep("resnet8")
    full = sweep.case(sweep.layers)
    assert full.units == 14 and full.dpus == sweep.dpu_layers
    for r in full.runs:
        assert sorted(len(v) for v in r.layers.values()) == [1] * 14, r.algorithm
    rates = [r.rate for r in full.runs]
    lats = [r.latency_s for r in full.runs]
    assert max(rates) == pytest.approx(min(rates), rel=1e-9)
    assert max(lats) == pytest.approx(min(lats), rel=1e-9)


def test_measurements_are_consistent(small):
    for case in [c for s in small.sweeps for c in s.cases] + small.mix + [small.table]:
        assert len(case.runs_of("rd")) in (0, SMALL.rd_seeds)
        for r in case.runs:
            assert all(0 <= u <= 1 + 1e-9 for u in r.utilization.values())
            assert sorted(i for v in r.layers.values() for i in v) == list(range(case.layers))
            assert r.rate == pytest.approx(r.model_rate, rel=0.05)   # simulator vs closed form
            assert r.latency_s >= r.unloaded_latency_s * (1 - 1e-9)


def test_report_files_and_claims(small, tmp_path):
    claims = check_claims(small)
    assert claims.claims and all(c.verdict in VERDICTS and re.search(r"\d", c.evidence) for c in claims.claims)
    assert {c.label for c in claims.claims} <= {"held-out", "direction"}      # no imce parameter was fitted
    assert not any("converge" in c.claim for c in claims.claims)              # a check that cannot fail is gone
    assert {c.key for c in claims.claims} >= {"lblp-best", "mix-lblp-better", "mix-more-dpus-lower-rate"}
    paths = write_report(tmp_path, small, claims, [compare_search(small)])
    for name in ("fig2_resnet8.png", "fig4_mix.png", "table1.md", "claims.md", "results.json"):
        assert (tmp_path / name).stat().st_size > 0 and tmp_path / name in paths
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["format"] == "hetsplit.lblp-repro/1" and len(data["sweeps"][0]["cases"]) == 2
    table = (tmp_path / "table1.md").read_text()
    assert "| LBLP | ours: utilization [%] |" in table and "| WB | ours: weights area [%] |" in table
    assert "paper:" not in table                     # the paper's Table I is of ResNet-18 on 12 units, not this
    assert "not run" in compare_search(small).summary()   # map-opt was not in this configuration


def test_cli_quick_slice(tmp_path, capsys):
    rc = main(["reproduce", "lblp", "--models", "resnet8", "--quick", "--algorithms", "lblp", "wb", "rr", "rd",
               "--out", str(tmp_path)])
    assert rc == 0
    out = capsys.readouterr().out
    assert re.search(r"^held-out results: \d+ of \d+ hold; derived: ", out) \
        and re.search(r"- \[held-out: (holds|partly|does not hold)\] ", out)
    assert (tmp_path / "fig2_resnet8.png").exists() and (tmp_path / "claims.md").exists()
    doc = json.loads((tmp_path / "claims.json").read_text())
    assert doc["format"] == "hetsplit.claims/1" and out.startswith(doc["summary"])
    assert not (tmp_path / "table1.md").exists()   # Table I needs resnet18


def test_latency_is_one_inputs_from_the_estimator(small):
    """The paper's latency measure is one input's, the planners' closed form: the runs carry that figure."""
    case = small.sweep("resnet8").case(4)
    from hetsplit.workflow import load_problem

    problem = load_problem("resnet8", case.cluster)
    plan, _ = solve(problem, "lblp", SMALL)
    (run_,) = case.runs_of("lblp")
    assert run_.unloaded_latency_s == estimate_plan(problem, plan, "closed").latency_s == case.latency("lblp")
    assert case.loaded("lblp") == run_.latency_s >= run_.unloaded_latency_s * (1 - 1e-9)


def test_table_one_sets_the_papers_units_beside_ours_largest_first(tmp_path):
    res = run(LblpConfig(models=("resnet18",), algorithms=("lblp", "wb"), unit_counts={"resnet18": (12,)}, inputs=30,
                         mix_units=(), table_algorithms=("lblp", "wb")))
    sides = table_one(res.table)
    assert [s.algorithm for s in sides] == ["lblp", "wb"]
    for s in sides:
        assert len(s.paper) == len(PAPER_TABLE1[s.algorithm]) == 7          # the paper's text lists 7 of 8
        assert len(s.ours) == res.table.imc == 8
        for units in (s.paper, s.ours):
            areas = [u.weights_pct for u in units]
            assert areas == sorted(areas, reverse=True) and max(areas) == 100.0
    claims = check_claims(res)
    util = claims.get("table1-utilization-lblp")
    assert util.paper == 78.3 and util.ours == pytest.approx(100 * sides[0].ours_mean_utilization)
    write_report(tmp_path, res, claims, [])
    md = (tmp_path / "claims.md").read_text()
    assert "| LBLP | paper: nodes | 9, 16, 24 | 10, 27, 30 |" in md and "| WB | ours: utilization [%] |" in md
