"""``hetsplit reproduce hierdse`` and ``explore --hierarchical``: the experiment runner with a fake measurer,
the claims on hand-made curves, one real measured run, the command line, and interrupted searches that
leave no worker, cgroup, namespace or scratch directory behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from hetsplit.cli.main import main
from hetsplit.experiments.hierdse import (EXPERIMENTS, MIN_MEASURED, SCRATCH, HierDseOptions, HierDseResults,
                                          MeasureOptions, RunMeasurer, check_claims, run, time_to_reach)
from hetsplit.report.hierdse_repro import write_report
from hetsplit.runtime.cpu_throttle import find_controller, throttle_available
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.netem import emulation_available
from hetsplit.runtime.netns_cleanup import list_namespaces
from hetsplit.runtime.owned import owner_of
from hetsplit.runtime.pool import owner_tag
from hetsplit.search import hierarchical
from hetsplit.search.encodings import make_encoding
from hetsplit.search.hierarchical import HierarchicalResult, Measurement, MeasuredPoint, StageRecord
from hetsplit.workflow import load_problem

pytestmark = pytest.mark.timeout(180)
MINE = f"{SCRATCH}{os.getpid()}-"      # this process's runs' scratch directories


class SteppedClock(hierarchical._Clock):
    """The search's clock on a time that moves only as the search works: a millisecond each time it is
    read, ``MEASURE_S`` each plan measured (``ModelMeasurer``); what a loaded machine does to the wall
    clock cannot move it."""

    now = 0.0
    MEASURE_S = 0.25

    def __init__(self, budget_s: float):
        super().__init__(budget_s)
        self.t0 = SteppedClock.now

    def elapsed(self) -> float:
        SteppedClock.now += 1e-3
        return SteppedClock.now - self.t0


class ModelMeasurer:
    """Measures nothing: objectives from the plan's cost-model metrics (fast, deterministic), each taking
    ``SteppedClock.MEASURE_S`` on the stepped clock."""

    def __call__(self, plan) -> Measurement:
        SteppedClock.now += SteppedClock.MEASURE_S
        m = plan.metrics
        return Measurement(m.throughput, max(m.memory_per_device_bytes.values()),
                           max(m.energy_per_device_j.values()), 0.0)


def test_reproduction_with_a_fake_measurer_writes_curves_claims_and_results(tmp_path, monkeypatch):
    monkeypatch.setattr(hierarchical, "_Clock", SteppedClock)
    opts = HierDseOptions(model="resnet18", budget_s=4.5, measured_pop=4, analytic_pop=10, analytic_gens=3)
    results = run(opts, measurer=lambda problem: ModelMeasurer())
    assert list(results.runs) == list(EXPERIMENTS) and results.layers > 10
    for name, r in results.runs.items():
        # a measurement starts only when it is expected to end within the budget: none ends after it
        assert r.points and all(p.t_s <= r.options.budget_s for p in r.points), name
        assert all(p.devices == 8 for p in r.points) or name == "3s-2l-SPE"
    assert {s.devices for s in results.runs["3s-2l-SPE"].stages} == {2, 4, 8}
    claims = check_claims(results)
    assert len(claims.claims) == 3
    k = min(len(results.runs[n].points) for n in ("1s-non-SPE", "1s-non-NE"))
    ne = claims.get("spe-beats-ne")       # a verdict only on as many measured plans each, and enough of them
    assert (ne.label, ne.evaluations) == (("inconclusive", k) if k < MIN_MEASURED else ("direction", 2 * k))
    paths = write_report(tmp_path, results, claims)
    assert [p.name for p in paths] == ["search_time.png", "claims.md", "claims.json", "results.json"]
    assert all(p.stat().st_size > 0 for p in paths)
    md = (tmp_path / "claims.md").read_text()
    assert "| 3s-2l-SPE | " in md and "| 1s-non-NE | " in md and "70 h" in md
    assert md.index(f"**{claims.summary()}**") < md.index("## Setup")
    assert json.loads((tmp_path / "claims.json").read_text())["claims"] == claims.to_dict()["claims"]
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["format"] == "hetsplit.hierdse-repro/1" and set(doc["runs"]) == set(EXPERIMENTS)
    assert len(doc["runs"]["1s-non-SPE"]["points"]) == len(results.runs["1s-non-SPE"].points)


def _result(name: str, points: list[tuple[float, float, float, float]], devices: int = 8,
            stages: tuple[int, ...] = ()) -> HierarchicalResult:
    """A result whose measured points are (t, throughput, memory, energy), on ``devices`` PEs; ``stages``: the
    PEs of each of its stages (none: not recorded)."""
    pts = [MeasuredPoint(t, 1, devices, np.array([1 / thr, mem, e]), None, Measurement(thr, mem, e))
           for t, thr, mem, e in points]
    return HierarchicalResult(EXPERIMENTS[name], [], [], np.zeros((0, 3)), pts,
                              [StageRecord(k + 1, d) for k, d in enumerate(stages)], max(p[0] for p in points))


def _padded(points: list[tuple[float, float, float, float]], n: int = MIN_MEASURED) -> list:
    """``points`` after enough poor plans measured at t = 1 s to reach ``n`` points."""
    return [(1.0, 1.0, 1e3, 10.0)] * (n - len(points)) + points


def test_claims_follow_the_curves():
    runs = {"3s-2l-SPE": _result("3s-2l-SPE", _padded([(10, 20, 100, 1.0), (50, 40, 80, 0.5), (200, 50, 70, 0.4)])),
            "1s-non-SPE": _result("1s-non-SPE", _padded([(10, 10, 150, 2.0), (150, 30, 90, 0.6), (200, 35, 90, 0.6)])),
            "1s-non-NE": _result("1s-non-NE", _padded([(10, 12, 140, 1.5), (200, 15, 100, 0.5)]))}
    results = HierDseResults(HierDseOptions(), runs, 600.0, 140)
    claims = check_claims(results)
    assert claims.get("hierarchy-better").verdict == "holds"
    ne = claims.get("spe-beats-ne")       # after 30 plans each: NE's last is its 30th, SPE's 30th is (150, 30, 90, 0.6)
    assert ne.label == "direction" and ne.evaluations == 2 * MIN_MEASURED
    assert ne.verdict == "partly" and "worse in energy per device" in ne.evidence
    speed = claims.get("hierarchy-sooner")
    assert speed.verdict == "holds" and "throughput after 50 s" in speed.evidence
    assert time_to_reach(runs["1s-non-NE"], np.array([1 / 35, 90, 0.6])) == [None, None, 200.0]


def test_spe_and_ne_are_compared_after_as_many_plans_each():
    """SPE's later, better plans do not count against an NE that measured fewer."""
    spe = _padded([(10, 10, 150, 2.0)] * 5, n=MIN_MEASURED + 10) + [(300, 99, 1, 0.01)]
    ne = _padded([(10, 12, 140, 1.5)])
    runs = {"1s-non-SPE": _result("1s-non-SPE", spe), "1s-non-NE": _result("1s-non-NE", ne)}
    claim = check_claims(HierDseResults(HierDseOptions(), runs, 600.0, 140)).get("spe-beats-ne")
    assert claim.verdict == "does not hold" and f"after {MIN_MEASURED} measured plans each" in claim.evidence


def test_a_search_with_too_few_measured_plans_is_inconclusive_and_says_how_many():
    runs = {"3s-2l-SPE": _result("3s-2l-SPE", _padded([(50, 40, 80, 0.5)]), devices=4, stages=(2, 4, 8)),  # none on 8
            "1s-non-SPE": _result("1s-non-SPE", _padded([(10, 10, 150, 2.0)])),
            "1s-non-NE": _result("1s-non-NE", [(10, 12, 140, 1.5)] * 7)}
    claims = check_claims(HierDseResults(HierDseOptions(), runs, 600.0, 140))
    ne = claims.get("spe-beats-ne")
    assert ne.label == "inconclusive" and ne.evaluations == 7 and ne.needed == MIN_MEASURED
    better = claims.get("hierarchy-better")
    assert better.label == "inconclusive" and better.evaluations == 0 and "measured 0 plans" in better.evidence


def test_every_verdict_says_how_many_plans_each_stage_measured():
    spe, ne = _padded([(10, 20, 100, 1.0)]), [(10, 12, 140, 1.5)] * 12
    runs = {"3s-2l-SPE": _result("3s-2l-SPE", spe, stages=(2, 4, 8)),
            "1s-non-SPE": _result("1s-non-SPE", spe, stages=(8,)), "1s-non-NE": _result("1s-non-NE", ne, stages=(8,))}
    for name, counts in (("3s-2l-SPE", (5, 7, MIN_MEASURED)), ("1s-non-SPE", (MIN_MEASURED,)), ("1s-non-NE", (12,))):
        for stage, n in zip(runs[name].stages, counts):
            stage.measured = n
    claims = check_claims(HierDseResults(HierDseOptions(), runs, 600.0, 140))
    better = claims.get("hierarchy-better")
    assert better.label == "direction"
    assert f"stage 1 (2 PEs) 5, stage 2 (4 PEs) 7, stage 3 (8 PEs) {MIN_MEASURED}" in better.evidence
    ne_claim = claims.get("spe-beats-ne")
    assert ne_claim.label == "inconclusive" and ne_claim.evaluations == 12
    assert "1s-non-NE: 12 plans measured (stage 1 (8 PEs) 12)" in ne_claim.evidence


def test_a_real_measured_run_of_a_pipeline_plan():
    problem = load_problem("resnet8", "jetson-xavier-nx-4")
    emulate = throttle_available() is None
    enc = make_encoding(problem, "spe", devices=8)
    plan = enc.plans(np.random.default_rng(3).integers(0, enc.upper + 1, size=(1, enc.n_var)))[0]
    with RunMeasurer("resnet8", problem, MeasureOptions(inputs=4, emulate_devices=emulate)) as measure:
        m = measure(plan)
        pool = [p.pid for ps in measure.pool.idle.values() for p in ps]
    assert m.error is None, m.error
    assert m.throughput > 0 and m.memory_per_device_bytes > 0 and m.energy_per_device_j > 0
    assert m.details.verified and (m.details.dilation is not None) == emulate
    iv = m.details.interval_s    # the spread of the streamed outputs' spacing, which the throughput is over
    assert iv.n == 3 and 0 < iv.min <= iv.median <= iv.max
    assert 1 / iv.max <= m.throughput <= 1 / iv.min
    assert not processes_of(MINE) and pool and not processes_of(owner_tag())


def test_explore_hierarchical_on_the_command_line(tmp_path, capsys):
    out = tmp_path / "hier"
    assert main(["explore", "resnet8", "-c", "local", "--hierarchical", "--measured-pop", "2", "--pop", "6",
                 "--gens", "2", "--budget", "25s", "--inputs", "3", "--no-emulate", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "stage 1: 2 devices" in text and "plans measured in" in text
    doc = json.loads((out / "plans.json").read_text())
    assert doc["plans"] and all("measured" in p["params"] for p in doc["plans"])
    assert (out / "search_time.png").stat().st_size > 0
    assert not processes_of(MINE)


@pytest.mark.parametrize("argv, message", [
    (["explore", "resnet8", "-c", "local", "--hierarchical", "--budget", "soon"], "--budget: cannot read 'soon'"),
    (["explore", "resnet8", "-c", "local", "--hierarchical", "--encoding", "naive"], "spe or ne"),
    (["reproduce", "hierdse", "--budget=-3m"], "--budget: cannot read '-3m'"),
])
def test_bad_options_exit_2(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def _scratch_dirs(pid: int) -> set[str]:
    """The scratch directories of the runs of process ``pid``."""
    return {p.name for p in Path("/dev/shm").glob(f"{SCRATCH}{pid}-*")} if Path("/dev/shm").is_dir() else set()


def _wait_for(what, within_s: float) -> bool:
    end = time.time() + within_s
    while time.time() < end:
        if what():
            return True
        time.sleep(0.2)
    return False


def _workers(pid: int) -> list[int]:
    """The run processes of a search (fresh ones name their scratch directory; warm ones their owner)."""
    return processes_of(f"{SCRATCH}{pid}-") + processes_of(owner_tag(pid))


def _cgroups_of(pid: int) -> list[str]:
    ctl = find_controller()
    return [] if isinstance(ctl, str) else [g for g in ctl.groups() if owner_of(g) == pid]


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_search_leaves_nothing_behind(sig, code, tmp_path):
    """Interrupted mid-run (workers up, throttled where cgroups work): the command ends with 130/143
    and no worker, cgroup or scratch directory of it remains."""
    emulate = throttle_available() is None
    cmd = [sys.executable, "-X", "faulthandler", "-m", "hetsplit.cli.main", "explore", "resnet8", "-c", "jetson-xavier-nx-4",
           "--hierarchical", "--stages", "1", "--measured-only", "--measured-pop", "2", "--budget", "120s",
           "--inputs", "5000"] + ([] if emulate else ["--no-emulate"])
    # Ctrl-C's default, as from a terminal: a test run started in the background (a non-interactive shell's
    # ``&``) ignores SIGINT, and so would the command, which then searched on after it (seen in CI runs)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        started = _wait_for(lambda: _workers(proc.pid) and (not emulate or _cgroups_of(proc.pid)), 90)
        assert started, "the search never started its workers"
        time.sleep(1.0)
        proc.send_signal(sig)
        try:
            assert proc.wait(timeout=30) == code, proc.stderr.read()
        except subprocess.TimeoutExpired:        # where it hangs: faulthandler prints every thread's stack
            proc.send_signal(signal.SIGABRT)
            _, err = proc.communicate(timeout=10)
            pytest.fail(f"still running 30 s after signal {sig}; its threads:\n{err[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _wait_for(lambda: not _workers(proc.pid), 5), _workers(proc.pid)
    assert not _cgroups_of(proc.pid)
    assert not _scratch_dirs(proc.pid)


@pytest.mark.skipif(emulation_available() is not None, reason=f"needs network namespaces: {emulation_available()}")
def test_a_terminated_emulated_run_removes_its_namespaces(tmp_path):
    assert main(["plan", "resnet8", "-c", "jetson-xavier-nx-4", "--algo", "exact", "--out", str(tmp_path / "p")]) == 0
    run_dir = tmp_path / "split"
    proc = subprocess.Popen([sys.executable, "-m", "hetsplit.cli.main", "run", str(tmp_path / "p" / "plans.json"),
                             "resnet8", "--emulate-links", "--inputs", "5000", "--split-dir", str(run_dir)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    mine = lambda: [n for n in list_namespaces() if owner_of(n) == proc.pid]  # noqa: E731
    try:
        assert _wait_for(lambda: mine() and processes_of(run_dir), 60), "the run never started"
        time.sleep(1.0)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 143, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not mine() and _wait_for(lambda: not processes_of(run_dir), 5)



def test_an_experiment_that_overruns_its_share_starves_none_after_it(monkeypatch):
    """A search may end one measurement past its budget; the experiments after it still get at least a
    quarter of an equal share (before, a long overrun left them a negative budget and the run failed)."""
    import time as _time
    from types import SimpleNamespace

    import hetsplit.experiments.hierdse as hierdse
    shares = []

    def overrunning(problem, measure, options, on_point):
        shares.append(options.budget_s)
        _time.sleep(options.budget_s + 0.4)
        return SimpleNamespace(points=[], options=options)

    monkeypatch.setattr(hierdse, "hierarchical_explore", overrunning)
    opts = HierDseOptions(model="resnet8", budget_s=0.6, measured_pop=4, analytic_pop=10, analytic_gens=3)
    run(opts, measurer=lambda problem: ModelMeasurer())
    assert len(shares) == len(EXPERIMENTS) and min(shares) >= 0.6 / len(EXPERIMENTS) / 4 - 1e-12
