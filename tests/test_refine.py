"""Measuring the finalists (``plan --refine``) and the CPU segment probe (``hetsplit profile`` on local-cpu).

The measurements run for real (onnxruntime on this machine's CPU, small zoo models); no test asserts a
wall-clock figure: the ranking test builds a case whose modelled segment cost is wrong by orders of
magnitude, so that only the measurement can put the plans in their real order.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from hetsplit.cli.main import main
from hetsplit.costs.profile import profile_from_dict, profile_to_dict
from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.segment import SegmentCost
from hetsplit.errors import UsageError
from hetsplit.estimate import estimate_plan
from hetsplit.graph import zoo
from hetsplit.plan import Plan
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Combine, Shard, Stage
from hetsplit.runtime import split_model
from hetsplit.runtime.cpu_segment_probe import fit_scaled, unfused_from
from hetsplit.runtime.inputs import make_inputs
from hetsplit.runtime.segment_timing import (
    load_segment_executors,
    one_pass,
    time_segments,
)
from hetsplit.workflow import load_problem
from hetsplit.workflow.refine import (
    MEASURED,
    MODELLED,
    RefineOptions,
    finalists,
    measured_problem,
    refine_plans,
)

MODEL = "resnet8"


@pytest.fixture(scope="module")
def local_problem():
    return load_problem(MODEL, "local")


def ends_free(problem: SplitProblem) -> SplitProblem:
    """``problem`` with free message ends: a message's CPU at each end (posting, waking) is outside the
    executor call the refinement times, so it stays modelled on top; the exact checks run without it."""
    cl = replace(problem.cluster, message_cpu_s=None, message_cpu_byte_s=None)
    return SplitProblem(problem.graph, cl, problem.costs, problem.scope)


@pytest.fixture(scope="module")
def problem(local_problem):
    return ends_free(local_problem)


def pipeline(problem, cut: int) -> Plan:
    names = problem.graph.names
    plan = Plan(problem.graph.name, problem.cluster.name, "test",
                stages=[Stage("local-cpu0", names[:cut]), Stage("local-cpu1", names[cut:])])
    plan.metrics = estimate_plan(problem, plan)
    return plan


def alternating(problem) -> Plan:
    plan = Plan(problem.graph.name, problem.cluster.name, "test",
                assign={n: f"local-cpu{k % 2}" for k, n in enumerate(problem.graph.names)})
    plan.metrics = estimate_plan(problem, plan)
    return plan


def sharded(problem) -> Plan:
    """Everything on local-cpu0 but the first block's first conv, its output channels split over both."""
    names = problem.graph.names
    assign = {n: "local-cpu0" for n in names}
    assign[names[1]] = (Shard("local-cpu0", "out", 0, 8), Shard("local-cpu1", "out", 8, 16))
    plan = Plan(problem.graph.name, problem.cluster.name, "test", assign=assign,
                combine={names[1]: Combine("concat", "local-cpu0")})
    plan.metrics = estimate_plan(problem, plan)
    return plan


def single(problem) -> Plan:
    plan = Plan(problem.graph.name, problem.cluster.name, "single", stages=[Stage("local-cpu0", problem.graph.names)])
    plan.metrics = estimate_plan(problem, plan)
    return plan


# ---- the segments of a split, timed in one process ---------------------------------------------------

def test_one_pass_through_a_split_computes_the_whole_models_outputs(problem, tmp_path):
    plan = alternating(problem)
    manifest = split_model(plan, problem.graph, zoo.onnx_path(MODEL), tmp_path / "split")
    feeds = make_inputs(manifest.inputs, 1, 0)[0]
    driver: dict = {}
    took = one_pass(manifest, load_segment_executors(manifest), feeds, {"local-cpu0"}, driver=driver)
    # every segment of the timed device has a figure, none of the other's
    timed = {(w.rank, s.index) for w in manifest.stages if w.device == "local-cpu0" for s in w.segments}
    assert set(took) == timed and all(v >= 0 for v in took.values())
    # the tensors the split handed back to the driver are the whole model's outputs
    whole = ort.InferenceSession(str(zoo.onnx_path(MODEL)), providers=["CPUExecutionProvider"])
    for out, want in zip(whole.get_outputs(), whole.run(None, feeds)):
        np.testing.assert_allclose(driver[out.name], want, rtol=1e-4, atol=1e-5)


def test_time_segments_gives_each_segment_its_boundary_bytes_and_a_figure_only_where_measured(problem, tmp_path):
    plan = pipeline(problem, problem.num_layers // 2)
    manifest = split_model(plan, problem.graph, zoo.onnx_path(MODEL), tmp_path / "split")
    times = time_segments(manifest, measure={"local-cpu1"}, repeats=2, warmup=0, clock="cpu")
    assert [(t.device, t.index) for t in times] == [("local-cpu0", 0), ("local-cpu1", 0)]
    assert np.isnan(times[0].seconds) and times[0].calls == 0
    assert times[1].seconds > 0 and times[1].calls == 2
    # the boundary: the cut's tensors in, the model outputs out, as the TaskGraph counts it
    tg = check_plan(problem.graph, problem.cluster, plan)
    assert [b for _, b in tg.segment_boundary_bytes()] == pytest.approx([t.boundary_bytes for t in times])
    with pytest.raises(Exception, match="cpu with one thread"):
        time_segments(manifest, threads=2, clock="cpu")


# ---- the refined problem: measured segments, the one estimator ----------------------------------------

@pytest.mark.parametrize("make", [lambda p: pipeline(p, 9), alternating, sharded, single],
                         ids=["pipeline", "mapping", "sharded", "single"])
def test_the_refined_estimate_charges_each_device_exactly_its_measured_segments(problem, local_problem, make):
    with_ends = local_problem
    assert with_ends.cluster.links.charges_ends and not problem.cluster.links.charges_ends
    plan = make(problem)
    tg = check_plan(problem.graph, problem.cluster, plan)
    rng = np.random.default_rng(3)
    measured = {d: [(tasks, float(rng.uniform(1e-4, 3e-3))) for tasks in segs] for d, segs in tg.segments.items()}
    refined = measured_problem(problem, tg, measured)
    metrics = estimate_plan(refined, plan, "closed")
    for d, segs in measured.items():
        name = problem.cluster.names[d]
        assert metrics.compute_s_per_device[name] == pytest.approx(sum(s for _, s in segs), rel=1e-9)
    assert not refined.costs.charges_cuts          # the cuts are inside the measured calls
    assert metrics.throughput == pytest.approx(1 / max(sum(s for _, s in segs) for segs in measured.values()),
                                               rel=1e-9)
    ends = estimate_plan(measured_problem(with_ends, tg, measured), plan, "closed")
    messages = any(len(segs) > 1 for segs in measured.values()) or len(measured) > 1
    for d in measured:
        name = problem.cluster.names[d]
        assert ends.compute_s_per_device[name] >= metrics.compute_s_per_device[name]
        if messages:
            assert ends.compute_s_per_device[name] > metrics.compute_s_per_device[name]


def test_a_device_not_measured_keeps_its_modelled_figures(problem):
    plan = pipeline(problem, 9)
    tg = check_plan(problem.graph, problem.cluster, plan)
    d0 = problem.cluster.index("local-cpu0")
    refined = measured_problem(problem, tg, {d0: [(tg.segments[d0][0], 5e-3)]})
    metrics = estimate_plan(refined, plan, "closed")
    assert metrics.compute_s_per_device["local-cpu0"] == pytest.approx(5e-3)
    assert metrics.compute_s_per_device["local-cpu1"] == pytest.approx(plan.metrics.compute_s_per_device["local-cpu1"])


def test_options_are_checked():
    for bad in ({"top": 0}, {"top": 2, "repeats": 0}, {"top": 2, "clock": "sundial"}, {"top": 2, "objective": "fame"}):
        with pytest.raises(UsageError):
            RefineOptions(**bad)


def test_finalists_are_the_best_distinct_placements_that_fit(problem):
    plans = [single(problem), pipeline(problem, 9), pipeline(problem, 9), alternating(problem)]
    plans[3].metrics = replace(plans[3].metrics, fits=False)
    top = finalists(plans, 5, "throughput")
    assert 3 not in top and len(top) == 2 and {1, 2} & set(top) and 0 in top
    assert plans[top[0]].metrics.throughput >= plans[top[1]].metrics.throughput


# ---- measured for real: a wrong modelled segment cost is corrected ------------------------------------

def test_refine_reorders_plans_whose_modelled_segment_cost_is_wrong():
    """ResNet-18 on two local cores, its segment cost modelled absurdly high per boundary byte (1 us/B): the
    model then ranks one device above a two-stage pipeline (each stage pays for the cut's bytes). Measured,
    the pipeline's busiest stage computes about half the model and the single device the whole: the
    refined ranking puts the pipeline first, whatever this machine's speed."""
    right = ends_free(load_problem("resnet18", "local"))
    wrong = replace(right, costs=replace(right.costs, segment={t: SegmentCost(byte_s=1e-6, source="deliberately wrong")
                                                               for t in right.costs.types}))
    cumulative = np.cumsum(right.costs.time_s[:, 0])
    cut = int(np.searchsorted(cumulative, cumulative[-1] / 2)) + 1
    plans = [pipeline(wrong, cut), single(wrong)]
    assert plans[1].metrics.throughput > plans[0].metrics.throughput        # the wrong model's order
    found = refine_plans(wrong, plans, RefineOptions(top=2, repeats=5, co_load=0))
    assert found.before == [1, 0] and found.after == [0, 1]
    assert plans[0].metrics.throughput > plans[1].metrics.throughput
    assert found.labels(2) == {0: MEASURED, 1: MEASURED}
    for r in found.plans:           # each device charged exactly its measured segments
        for device, seconds in r.refined.compute_s_per_device.items():
            assert seconds == pytest.approx(sum(s.measured_s for s in r.segments if s.device == device), rel=1e-9)
    extra = found.cut_extra(0)
    assert extra is not None and extra[0] > 0.05      # modelled: tens of ms of bytes; measured: what it was


@pytest.mark.parametrize("make", [alternating, sharded], ids=["mapping", "sharded"])
def test_the_runtimes_segments_are_the_estimates_and_each_is_charged_what_it_measured(problem, make):
    plans = [make(problem), make(problem)]          # the second: the same placement found again
    found = refine_plans(problem, plans, RefineOptions(top=1, repeats=1, warmup=0, co_load=0))
    (r,) = found.plans
    assert found.same == {1: 0} and plans[1].metrics is plans[0].metrics and found.labels(2)[1] == MEASURED
    tg = check_plan(problem.graph, problem.cluster, plans[0])
    assert len(r.segments) == sum(len(segs) for segs in tg.segments.values())
    assert all(s.measured_s >= 0 for s in r.segments) and r.label == MEASURED
    for device, seconds in plans[0].metrics.compute_s_per_device.items():
        assert seconds == pytest.approx(sum(s.measured_s for s in r.segments if s.device == device), rel=1e-9)


def test_a_cluster_with_no_device_here_keeps_every_figure_modelled():
    prob = load_problem(MODEL, "donna-2cpu-2gpu-pcie5")
    plan = Plan(prob.graph.name, prob.cluster.name, "single", stages=[Stage(prob.cluster.names[0], prob.graph.names)])
    plan.metrics = estimate_plan(prob, plan)
    before = plan.metrics
    found = refine_plans(prob, [plan], RefineOptions(top=1))
    assert not found.plans and plan.metrics is before and "stays modelled" in found.notes[0]
    assert found.labels(1) == {0: MODELLED}


# ---- the command line ----------------------------------------------------------------------------------

def test_plan_refine_marks_measured_figures_and_plain_plan_says_modelled(capsys):
    assert main(["plan", MODEL, "--cluster", "local", "--algo", "exact", "--refine", "2"]) == 0
    out = capsys.readouterr().out
    assert "refined: the best plans measured here" in out and "measured" in out
    assert main(["plan", MODEL, "--cluster", "local", "--algo", "exact", "--json", "--refine", "1"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["refine"]["plans"] and doc["refine"]["plans"][0]["figures"] == MEASURED
    assert main(["plan", MODEL, "--cluster", "local", "--algo", "exact"]) == 0
    assert "segment figures are modelled" in capsys.readouterr().out


def test_plan_refine_refuses_zero_and_a_profile(tmp_path, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["plan", MODEL, "--cluster", "local", "--refine", "0"])
    assert exited.value.code == 2
    prof = tmp_path / "prof.json"
    assert main(["profile", MODEL, "--threads", "1", "--repeats", "2", "--warmup", "0", "--no-segments",
                 "--out", str(prof)]) == 0
    capsys.readouterr()
    assert main(["plan", str(prof), "--cluster", "local", "--refine", "1"]) == 2
    assert "holds no model" in capsys.readouterr().err


# ---- hetsplit profile on local-cpu: the segment cost ---------------------------------------------------

def test_profile_on_local_cpu_measures_and_writes_the_segment_cost(tmp_path):
    out = tmp_path / "prof.json"
    assert main(["profile", MODEL, "--threads", "1", "--repeats", "3", "--warmup", "1", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    seg = doc["device_types"]["local-cpu"]["segment"]
    assert seg["call_s"] >= 0 and seg["byte_s"] >= 0 and seg["source"].startswith("measured")
    assert sorted({r["cut"] for r in doc["segment_rows"]}) == [1, 2, 4, 8]
    assert all(r["measured_s"] > 0 and r["layers_s"] > 0 for r in doc["segment_rows"])
    # it reads back as the type's segment cost, which every estimate then charges
    prof = profile_from_dict(doc)
    assert prof.costs.segment["local-cpu"].call_s == pytest.approx(seg["call_s"])
    assert profile_to_dict(prof)["device_types"]["local-cpu"]["segment"]["byte_s"] == pytest.approx(seg["byte_s"])
    # a layer cut off from the one before it: nothing for layer 0, never negative, and only where the
    # whole-model profile gave it less than half of what it took alone (a fused-away Add)
    unfused = np.asarray(doc["device_types"]["local-cpu"].get("unfused_s", [0.0] * len(doc["layers"])))
    assert unfused[0] == 0 and (unfused >= 0).all()
    share = np.asarray(doc["device_types"]["local-cpu"]["time_s"]) * doc["segment_probe_scale"]
    assert (share[unfused > 0] < unfused[unfused > 0]).all()
    assert doc["unfused"]["layers"] == int((unfused > 0).sum())
    assert main(["profile", MODEL, "--threads", "1", "--repeats", "2", "--no-segments", "--out", str(out)]) == 0
    assert "segment" not in json.loads(out.read_text())["device_types"]["local-cpu"]


def test_the_probe_fit_recovers_a_machine_scale_a_call_and_a_byte_cost():
    rng = np.random.default_rng(5)
    rows = [{"layers_s": float(x), "boundary_bytes": float(b), "measured_s": 1.3 * x + 4e-5 + 2e-10 * b}
            for x, b in zip(rng.uniform(1e-4, 5e-2, 15), rng.uniform(1e3, 6e6, 15))]
    scale, call_s, byte_s = fit_scaled(rows)
    assert (scale, call_s, byte_s) == pytest.approx((1.3, 4e-5, 2e-10), rel=1e-6)
    # a machine that merely slowed down between the profile and the probe: no cost per call or byte
    slowed = [{**r, "measured_s": 1.25 * r["layers_s"]} for r in rows]
    assert fit_scaled(slowed) == pytest.approx((1.25, 0.0, 0.0), abs=1e-12)


def test_unfused_extra_is_charged_only_to_a_layer_whose_share_was_fused_away():
    alone = np.array([5e-5, 4e-5, 3e-5, 6e-5])
    share = np.array([4e-5, 0.0, 2.5e-5, 1e-5])      # layer 1 fused away, layer 3 mostly
    segment = np.full(4, 1e-5)
    got = unfused_from(alone, share, segment)
    # layer 0 never pays; layer 1 pays its own time (3e-5); layer 2's share is its own work; layer 3: 5e-5 - 1e-5
    np.testing.assert_allclose(got, [0.0, 3e-5, 0.0, 4e-5])
    # a layer measured faster alone than its segment's fitted cost pays nothing
    assert unfused_from(np.array([1e-5, 5e-6]), np.array([0.0, 0.0]), np.full(2, 1e-5)).tolist() == [0.0, 0.0]
