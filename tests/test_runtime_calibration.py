"""The runtime's own costs: the fit (against known costs), the cache, the fallback, a real toy run,
and how the local prediction charges them (per process, per end)."""

from __future__ import annotations

import json

import pytest

from hetsplit.costs import calibration_store
from hetsplit.costs import local_calibration as lc
from hetsplit.estimate import RuntimeCosts, predict_here
from hetsplit.errors import HetsplitError
from hetsplit.estimate.processes import DRIVER, ends_cpu, message_ends, workers_problem
from hetsplit.workflow.here import profile_here
from hetsplit.plan.check import check_plan
from hetsplit.runtime import calibration as rc
from hetsplit.runtime import segment_calibration
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import resolve_model

WORKER_END, WORKER_BYTE, DRIVER_END, DRIVER_BYTE, LATENCY, WAIT = 2e-4, 1e-10, 8e-5, 5e-10, 1.5e-4, 1.2e-4


def toy_run(ends: int, nbytes: float, driver_ends: int, driver_bytes: float) -> dict:
    """What a toy run would measure on a machine with exactly the costs above."""
    return {"worker_ends": ends, "worker_bytes": nbytes,
            "worker_cpu_beyond_compute_s": ends * WORKER_END + nbytes * WORKER_BYTE,
            "driver_ends": driver_ends, "driver_bytes": driver_bytes,
            "driver_cpu_s": driver_ends * DRIVER_END + driver_bytes * DRIVER_BYTE,
            "latency_beyond_compute_s": 3 * LATENCY, "messages_on_path": 3, "end_wait_s": WAIT}


def test_fit_recovers_the_costs_per_end_and_per_byte():
    got = rc.fit([toy_run(4, 2e4, 2, 3e3), toy_run(4, 1.2e6, 2, 2e5)])
    assert got == pytest.approx((WORKER_END, DRIVER_END, WORKER_BYTE, DRIVER_BYTE, LATENCY, WAIT))


def test_latency_and_wait_come_from_the_run_with_small_tensors():
    small, large = toy_run(4, 2e4, 2, 3e3), toy_run(4, 1.2e6, 2, 2e5)
    large.update(end_wait_s=3 * WAIT, latency_beyond_compute_s=3 * 4 * LATENCY)   # bytes take time too
    *_, latency, wait = rc.fit([large, small])
    assert (latency, wait) == pytest.approx((LATENCY, WAIT))


def test_fit_never_charges_a_negative_byte_cost():
    small, large = toy_run(4, 2e4, 2, 3e3), toy_run(4, 1.2e6, 2, 2e5)
    large["worker_cpu_beyond_compute_s"] = small["worker_cpu_beyond_compute_s"] * 0.9   # noise: fewer CPU, more bytes
    worker_end, _, worker_byte, _, _, _ = rc.fit([small, large])
    assert worker_byte == 0.0
    assert worker_end == pytest.approx(0.95 * small["worker_cpu_beyond_compute_s"] / 4)
    # one run, or runs moving the same bytes per end, cannot tell bytes from ends: all on the ends
    assert rc.per_end_and_byte([(4, 4e4, 1e-3)]) == pytest.approx((2.5e-4, 0.0))


def test_turned_off_it_falls_back_to_the_loopback_link():
    costs = rc.runtime_costs()          # the suite sets HETSPLIT_LOCAL_CALIBRATION=off
    assert costs.source.startswith("FALLBACK") and "turned off" in costs.source
    assert costs.message_latency_s == pytest.approx(150e-6)
    assert costs.end_cpu_s(True, 1e6) + costs.end_cpu_s(False, 1e6) == pytest.approx(150e-6)


@pytest.fixture
def measured(monkeypatch, tmp_path) -> list[int]:
    """Measuring on, cached under tmp_path, the toy runs faked (the list counts calibrations)."""
    monkeypatch.delenv(lc.ENV)
    monkeypatch.setenv("HETSPLIT_CACHE", str(tmp_path))
    calls: list[int] = []

    def fake(runs=rc.RUNS, rounds=2) -> tuple[RuntimeCosts, float]:
        calls.append(1)
        return RuntimeCosts(WORKER_END, DRIVER_END, WORKER_BYTE, DRIVER_BYTE, LATENCY, "runtime measured (fake)",
                            end_wait_s=WAIT), 0.0

    monkeypatch.setattr(rc, "calibrate", fake)
    return calls


def _cached():
    return calibration_store.cache_path(rc.runtime_key(), rc.FOLDER)


def test_measured_once_then_cached_per_machine(measured, monkeypatch):
    first = rc.runtime_costs()
    path = _cached()
    assert measured == [1] and path.is_file() and str(path) in first.source
    assert first.source.count("cached in") == 1 and rc.runtime_costs().source == first.source
    calibration_store.clear_memo()
    again = rc.runtime_costs()
    assert measured == [1] and again.worker_end_s == WORKER_END and again.message_latency_s == LATENCY
    assert again.end_wait_s == WAIT
    rc.runtime_costs(recalibrate=True)
    assert measured == [1, 1]
    monkeypatch.setattr(lc, "cpu_model", lambda: "another CPU")     # another machine: measured anew
    rc.runtime_costs()
    assert measured == [1, 1, 1]


def test_an_unreadable_cache_is_measured_again(measured):
    path = _cached()
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    costs = rc.runtime_costs()
    assert measured == [1] and costs.worker_end_s == WORKER_END
    assert json.loads(path.read_text())["value"]["worker_end_s"] == WORKER_END


def test_a_failed_toy_run_falls_back_with_the_reason(measured, monkeypatch):
    def broken(runs=rc.RUNS, rounds=2):
        raise HetsplitError("no workers here")

    monkeypatch.setattr(rc, "calibrate", broken)
    costs = rc.runtime_costs()
    assert costs.source.startswith("FALLBACK") and "no workers here" in costs.source


def test_real_toy_runs_measure_positive_costs():
    """Driver and two worker processes on two cores, real tensors: every cost the fit gives is
    plausible (a message end costs more than nothing and less than 50 ms here), and the processes
    run on two cores only while it measures."""
    import os

    before = os.sched_getaffinity(0)
    small = (rc.CalibrationRun(8, 16, 60), rc.CalibrationRun(8, 64, 40))
    costs, spread = rc.calibrate(small, rounds=1, segment_runs=small)
    assert os.sched_getaffinity(0) == before and spread == 0.0           # one round: nothing to disagree
    assert 0 < costs.worker_end_s < 0.05 and 0 < costs.driver_end_s < 0.05
    assert 0 < costs.message_latency_s < 0.05 and 0 <= costs.end_wait_s < 0.05
    assert costs.worker_byte_s >= 0 and costs.driver_byte_s >= 0
    # stage 0: the image in, two tensors out (b0_conv1's and the stem's, relayed); stage 1: two in, logits out
    assert [m["worker_ends"] for m in costs.measured] == [6, 6]
    assert [m["worker_bytes"] for m in costs.measured] == [4 * 8 * s * s * 4 + 3 * s * s * 4 + 40 for s in (16, 64)]
    assert "runtime measured on this machine" in costs.source
    # the toy mapped layer by layer: each of its 9 layers a segment of its own, in both segment runs
    rows = costs.measured_segments
    assert len(rows) == 18 and all(r["measured_s"] > 0 and r["layers_s"] >= 0 for r in rows)
    assert 0 <= costs.segment_s < 0.05 and 0 <= costs.segment_byte_s < 1e-8 and "a segment's call" in costs.source


def test_the_prediction_charges_each_process_its_message_ends():
    graph, _ = resolve_model("resnet8")
    cut = 9
    plan = Plan(graph.name, "local", "hand", [Stage("a", graph.names[:cut]), Stage("b", graph.names[cut:])])
    profile = profile_here("resnet8", 2, repeats=1, warmup=0, co_load=0)
    costs = RuntimeCosts(WORKER_END, DRIVER_END, WORKER_BYTE, DRIVER_BYTE, LATENCY, "given", end_wait_s=WAIT)
    tg = check_plan(graph, workers_problem(graph, profile, plan.devices).cluster, plan)
    x, y = 3 * 32 * 32 * 4, 10 * 4                       # resnet8 (CIFAR): image in, 10 logits out
    cpu = ends_cpu(message_ends(tg), costs)
    cut_bytes = graph.cut_bytes[cut]
    assert cpu["a"] == pytest.approx(2 * WORKER_END + (x + cut_bytes) * WORKER_BYTE)
    assert cpu["b"] == pytest.approx(2 * WORKER_END + (cut_bytes + y) * WORKER_BYTE)
    assert cpu[DRIVER] == pytest.approx(2 * DRIVER_END + (x + y) * DRIVER_BYTE)
    one_core = predict_here(plan, graph, profile, cores=1, runtime=costs)
    many = predict_here(plan, graph, profile, cores=8, runtime=costs)
    assert one_core.oversubscribed and not many.oversubscribed
    assert one_core.message_end_count == {"a": 2, "b": 2, DRIVER: 2}
    assert one_core.unit_busy_s["a"] == pytest.approx(one_core.compute_s["a"] + cpu["a"] + 2 * WAIT)
    assert many.unit_busy_s["a"] == pytest.approx(many.compute_s["a"])        # its threads have cores
    assert one_core.total_work_s == pytest.approx(sum(one_core.compute_s.values()) + sum(cpu.values()))
    assert one_core.predicted_throughput == pytest.approx(1 / one_core.total_work_s)   # one core: all work serial
    assert one_core.limited_by == "cores" and one_core.message_latency_s == LATENCY
    assert one_core.predicted_latency_s == pytest.approx(one_core.simulated_latency_s + 2 * LATENCY)


def test_the_toy_runs_share_two_cores_and_keep_the_least_cpu(monkeypatch):
    """Three processes on two cores, as a pipeline with more processes than cores runs: the toy runs'
    affinity is confined (workers inherit it) and restored; of each run's rounds the least CPU is kept."""
    import os

    seen: list[int] = []
    rounds = iter([1.5, 1.0, 1.2, 1.1])          # CPU scale of each round: runs keep 1.0 and 1.1

    def fake(run, workdir):
        seen.append(len(os.sched_getaffinity(0)))
        scale = next(rounds)
        small = run == rc.RUNS[0]
        doc = toy_run(4, 2e4 if small else 1.2e6, 2, 3e3 if small else 2e5)
        return {**doc, "worker_cpu_beyond_compute_s": doc["worker_cpu_beyond_compute_s"] * scale}

    monkeypatch.setattr(rc, "measure_run", fake)
    monkeypatch.setattr(segment_calibration, "measure_segments", lambda *a: [
        {"boundary_bytes": 1e6, "measured_s": 2e-3, "layers_s": 1.9e-3}])
    before = os.sched_getaffinity(0)
    costs, spread = rc.calibrate(rounds=2)
    assert seen == [min(2, len(before))] * 4 and os.sched_getaffinity(0) == before
    w, d = 4 * WORKER_END + 2e4 * WORKER_BYTE, 2 * DRIVER_END + 3e3 * DRIVER_BYTE    # the first run's CPU
    assert spread == pytest.approx(0.5 * w / (w + d))    # its rounds: 1.5 w + d against w + d
    kept = [m["worker_cpu_beyond_compute_s"] for m in costs.measured]
    assert kept == pytest.approx([4 * WORKER_END + 2e4 * WORKER_BYTE, 1.1 * (4 * WORKER_END + 1.2e6 * WORKER_BYTE)])
