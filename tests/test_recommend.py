"""Never recommend a loss: a split is recommended over the best single device only when its predicted
gain exceeds its kind's measured error; the plan table, the HTML report and the plan set show that
device's row and the note."""

import json
import math

import numpy as np
import pytest
from rich.console import Console

from hetsplit.cli.main import main
from hetsplit.estimate.accuracy import (MAPPING, MEASURED, PIPELINE, SINGLE, TENSOR_PARALLEL, MeasuredRun, gain,
                                        kind_error, plan_kind, recommend)
from hetsplit.plan import Plan, Stage
from hetsplit.plan.types import Metrics, Shard
from hetsplit.report.html import plans_html
from hetsplit.report.tables import print_plans
from hetsplit.workflow import PlanRequest, ReportDetails, recommend_plans, search_plans

from factories import chain_graph, cluster, problem

FIFTEEN = {PIPELINE: (MeasuredRun("a pipeline", "closed", 1 / 1.15, 1.0, "a test run"),)}


def _plan(devices: list[str], throughput: float, latency_s: float = 1.0, energy_j: float = 1.0,
          fits: bool = True) -> Plan:
    stages = [Stage(d, [f"l{k}"]) for k, d in enumerate(devices)]
    m = Metrics(throughput, 1 / throughput, f"stage {devices[0]}", latency_s, energy_j, {d: 0.0 for d in devices},
                {d: 0.0 for d in devices}, {d: 0.0 for d in devices}, fits, energy_j * latency_s)
    return Plan("m", "c", "test", stages, metrics=m)


def _kinds(plans: list[Plan]) -> list[str]:
    return [SINGLE if len(set(p.devices)) == 1 else PIPELINE for p in plans]


# The closed form's figures for the H200 runs with cuts charged (bench/h200_check.py's data: GPU profiles
# rescaled to their whole-model pass, the segment call and the message end fitted on the map-opt run):
# throughput, latency
H200_CLOSED = {"resnet50 map-opt cpu0+gpu0": (132.65, 17.669e-3),
               "mobilebert tensor-parallel cpu0+gpu0": (5.566, 179.65e-3)}   # run input by input


def test_the_measured_errors_name_their_runs_and_match_the_recorded_figures():
    # bench/data/h200-16c/summary.json: what the runs measured
    summary = json.load(open("bench/data/h200-16c/summary.json"))
    runs = {r["run"]: r for r in summary["runs"]}
    for kind, name in ((MAPPING, "resnet50 map-opt cpu0+gpu0"), (TENSOR_PARALLEL, "mobilebert tensor-parallel cpu0+gpu0")):
        r = runs[name]
        thr, lat = H200_CLOSED[name]
        (entry,) = [m for m in MEASURED[kind] if "H200 host" in m.plan]
        assert entry.throughput_ratio == pytest.approx(r["throughput"] / thr, rel=2e-3)
        assert entry.latency_ratio == pytest.approx(r["latency_s"] / lat, rel=2e-3)
        assert "bench/data/h200-16c" in entry.source
        for metric in ("throughput", "latency"):     # a kind errs by its worst run
            assert kind_error(kind, metric).error == max(m.error(metric) for m in MEASURED[kind])
            assert kind_error(kind, metric).error >= entry.error(metric)
    assert kind_error(PIPELINE, "throughput").error == pytest.approx(1 / 0.83 - 1)   # MobileBERT's pipeline x0.83
    assert kind_error(MAPPING, "throughput").error == pytest.approx(1 / 0.85 - 1)    # ResNet-50 map-opt's x0.85
    assert kind_error(PIPELINE, "energy") == kind_error(PIPELINE, "throughput")     # energy errs as busy time
    for runs_of_kind in MEASURED.values():
        assert all(r.source and r.estimate and r.throughput_ratio > 0 and r.latency_ratio > 0 for r in runs_of_kind)


def test_a_split_5_percent_faster_with_a_15_percent_error_is_not_recommended_and_one_2x_faster_is():
    single, slow_single = _plan(["g"], 100.0), _plan(["c"], 40.0)
    near = _plan(["c", "g"], 105.0)
    rec = recommend([near, single, slow_single], _kinds([near, single, slow_single]), [single, slow_single],
                    measured=FIFTEEN)
    assert rec.single is single and rec.single_index == 1
    assert rec.recommended == 1 and not rec.recommends_split
    v = rec.verdict(0)
    assert v.gain == pytest.approx(0.05) and v.error.error == pytest.approx(0.15) and not v.beats_single
    assert rec.note.startswith("g alone (plan #1) is recommended") and "+5%" in rec.note and "15%" in rec.note

    double = _plan(["c", "g"], 200.0)
    rec = recommend([near, double, single], _kinds([near, double, single]), [single, slow_single], measured=FIFTEEN)
    assert rec.recommended == 1 and rec.recommends_split
    assert rec.note.startswith("plan #1 (pipeline) is predicted +100% in throughput over g alone")


def test_gain_by_objective_and_what_unknown_or_missing_figures_do():
    single, slow = _plan(["g"], 100.0, latency_s=1.0, energy_j=10.0), _plan(["c"], 40.0)
    split = _plan(["c", "g"], 100.0, latency_s=0.5, energy_j=4.0)
    assert gain(split.metrics, single.metrics, "latency") == pytest.approx(1.0)
    assert gain(split.metrics, single.metrics, "energy") == pytest.approx(1.5)
    rec = recommend([split], _kinds([split]), [single], "latency", measured=FIFTEEN)
    assert rec.recommends_split and rec.single_index is None          # the set lacks the single device
    assert not recommend([split], _kinds([split]), [single], "throughput", measured=FIFTEEN).recommends_split
    unknown = _plan(["c", "g"], 300.0, energy_j=math.nan)
    rec = recommend([unknown], _kinds([unknown]), [single], "energy", measured=FIFTEEN)
    assert not rec.recommends_split and math.isnan(rec.verdicts[0].gain) and "known" in rec.note
    # no device holds the whole model: the best split by the objective, said so
    rec = recommend([split, unknown], _kinds([split, unknown]), [_plan(["g"], 500.0, fits=False)], measured=FIFTEEN)
    assert rec.recommended == 1 and rec.single is None and "no device holds the whole model" in rec.note
    # a plan that does not fit is never recommended
    rec = recommend([_plan(["c", "g"], 900.0, fits=False)], [PIPELINE], [single], measured=FIFTEEN)
    assert rec.verdicts == [] and not rec.recommends_split and rec.note.endswith("no split fits")
    # every search put the whole model on one device: said so, not that no split fits
    rec = recommend([single, slow], _kinds([single, slow]), [single, slow], measured=FIFTEEN)
    assert rec.recommended == 0 and "each plan found runs the whole model on one device" in rec.note


def _toy(b_times: list[float]):
    """4 layers; type a takes 1 s each (4 s alone), type b ``b_times``; links free."""
    g = chain_graph([8] * 4)
    cl = cluster(["a", "b"], bandwidth=1e15)
    return problem(g, cl, np.array([[1.0, b] for b in b_times]), np.ones((4, 2)))


def test_plan_kinds():
    p = _toy([1.0] * 4)
    names = p.graph.names
    assert plan_kind(p, Plan("toy", "c", "t", [Stage("d0", names)])) == SINGLE
    assert plan_kind(p, Plan("toy", "c", "t", [Stage("d0", names[:2]), Stage("d1", names[2:])])) == PIPELINE
    one_segment_each = {n: ("d0" if i < 2 else "d1") for i, n in enumerate(names)}
    assert plan_kind(p, Plan("toy", "c", "t", assign=one_segment_each)) == PIPELINE
    back_and_forth = {n: ("d0" if i % 2 == 0 else "d1") for i, n in enumerate(names)}
    assert plan_kind(p, Plan("toy", "c", "t", assign=back_and_forth)) == MAPPING
    shards = {**one_segment_each, names[1]: [Shard("d0", "out", 0, 1), Shard("d1", "out", 1, 2)]}
    assert plan_kind(p, Plan("toy", "c", "t", assign=shards)) == TENSOR_PARALLEL


def test_a_plan_search_recommends_by_the_rule_and_the_table_shows_the_best_single_device_and_the_note():
    # a pipeline a[3] -> b[1] at 3.81 s against a alone at 4 s: +5%, under the pipelines' measured error
    near = _toy([100.0, 100.0, 100.0, 3.81])
    found = search_plans(near, PlanRequest(algorithms=("exact",), baselines=False))
    rec = found.recommendation
    assert [p.devices for p in found.plans] == [["d0", "d1"]] and rec.single.devices == ["d0"]
    assert rec.single_index is None and rec.recommended is None and not rec.recommends_split
    assert rec.verdicts[0].gain == pytest.approx(4 / 3.81 - 1)
    console = Console(record=True, width=250)
    print_plans(found.plans, "toy", console, found.front, rec)
    text = console.export_text()
    assert "best single device (single d0)" in text and "vs best single" in text
    err = kind_error(PIPELINE, "throughput").error
    assert err > 0.05 and f"+5% (err {err:.0%} pipeline)" in text
    assert "recommended (throughput): d0 alone is recommended: the best split, plan #0 (pipeline), is predicted +5%" \
        in text
    assert f"measured error of the estimate, pipeline: {err:.0%}" in text and "bench/plan_ranking.py" in text
    page = plans_html(found.plans, "toy", ReportDetails({"name": "c", "devices": [], "links": []},
                                                         recommendation=rec))
    assert "best single device (single d0)" in page and "class='recommended'" in page and "d0 alone is recommended" in page

    # split evenly, the pipeline is 2x faster than either device alone: recommended
    even = _toy([1.0] * 4)
    rec = search_plans(even, PlanRequest(algorithms=("exact",))).recommendation
    assert rec.recommends_split and rec.recommended == 0 and rec.verdicts[0].gain == pytest.approx(1.0)
    assert rec.single_index is not None    # the single-device baselines are in the set
    assert recommend_plans(even, search_plans(even, PlanRequest(algorithms=("exact",))).plans).recommended == 0


def test_plan_json_carries_the_recommendation(tmp_path, capsys):
    assert main(["plan", "resnet8", "--cluster", "imce-4", "--algo", "donna", "--alpha", "1", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rec = doc["recommendation"]
    assert rec["objective"] == "throughput" and rec["best_single_device"]["device"]
    assert all({"index", "kind", "gain", "error", "error_measured_by"} <= set(s) for s in rec["splits"])
    assert rec["recommends_split"] == (rec["recommended"] is not None
                                       and rec["recommended"] != rec["best_single_device"]["index"])


def test_the_recorded_h200_figures_are_what_the_closed_form_gives_on_the_h200_data():
    """The figures above are the closed form's on the H200 data as bench/h200_check.py prepares it."""
    import sys
    import tempfile
    from pathlib import Path

    from hetsplit.estimate import estimate

    sys.path.insert(0, "bench")
    import h200_check as h

    plans = {"resnet50 map-opt cpu0+gpu0": h.RUNS[0], "mobilebert tensor-parallel cpu0+gpu0": h.RUNS[2]}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        h.prepare(h.DATA, work, h.RUNS[0])
        problems = h.problems(work)
        for name, run in plans.items():
            got = estimate(problems[run.model], [h.plan_of(work, run)], "closed")
            thr, lat = H200_CLOSED[name]
            assert float(got.throughput[0]) == pytest.approx(thr, rel=2e-3)
            assert float(got.latency_s[0]) == pytest.approx(lat, rel=2e-3)
