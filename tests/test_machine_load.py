"""What other processes used of the machine, our own processes that this one never waits for (a run's
ranks, forked by the zygote, which report their CPU) not counted: fake counters for the rule, one real toy
run for the reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from hetsplit.costs import machine_load
from hetsplit.costs.machine_load import CpuClock, LoadWatch, count_own_cpu, others_share
from hetsplit.costs.machine_load import read_clock as real_read_clock     # the suite fakes machine_load's
from hetsplit.errors import HetsplitError
from hetsplit.runtime.launch import Launcher
from hetsplit.runtime.process import run_rank


@pytest.fixture(autouse=True)
def _reported_sum_restored(monkeypatch):
    monkeypatch.setattr(machine_load._Reported, "seconds", machine_load._Reported.seconds)


def fake_clock(busy: list[float]):
    """Counters of a 2-CPU machine read once a second: busy CPU as listed, this process's own 0.5 s a second
    plus what was reported (the module's real sum)."""
    state = {"t": 0.0}

    def clock() -> CpuClock:
        i = int(state["t"])
        state["t"] += 1.0
        return CpuClock(state["t"], busy[i], 0.5 * state["t"] + machine_load._Reported.seconds, 2)

    return clock


def test_reported_cpu_of_our_unwaited_processes_is_not_the_others():
    # one second, 2 CPUs: the machine was busy 1.8 s, this process used 0.5 s, its run's ranks 1.1 s
    with LoadWatch(fake_clock([10.0, 11.8])) as plain:
        pass
    assert plain.share == pytest.approx((1.8 - 0.5) / 2.0)          # the ranks counted as others: 65%
    with LoadWatch(fake_clock([10.0, 11.8])) as watch:
        count_own_cpu(1.1)
    assert watch.share == pytest.approx((1.8 - 0.5 - 1.1) / 2.0)     # 10%
    with LoadWatch(fake_clock([10.0, 11.8])) as over:
        count_own_cpu(5.0)                                            # more than the machine did: never below 0
    assert over.share == 0.0
    for bad in (-1.0, float("nan")):
        with pytest.raises(HetsplitError, match="count_own_cpu"):
            count_own_cpu(bad)


def test_the_real_clock_holds_what_was_reported():
    before = real_read_clock()
    count_own_cpu(100.0)
    after = real_read_clock()
    assert 100.0 - 1e-9 <= after.own_s - before.own_s < 101.0   # this process's own CPU between two reads: ticks
    # (the tolerance: the two sums are rounded at a process's CPU seconds so far, 100 s apart)
    assert others_share(before, after) in (0.0, None)       # 100 s reported within microseconds: none the others'


def test_a_launcher_counts_the_ranks_it_never_waits_for(monkeypatch):
    counted: list[float] = []
    monkeypatch.setattr(machine_load, "count_own_cpu", counted.append)
    popen = subprocess.Popen.__new__(subprocess.Popen)      # reaped by the launcher: os.times holds it
    forked = SimpleNamespace(pid=1)                          # forked by the zygote, a warm process's job
    launcher = Launcher.__new__(Launcher)
    launcher.procs = [SimpleNamespace(rank=0, popen=forked), SimpleNamespace(rank=1, popen=popen),
                      SimpleNamespace(rank=2, popen=forked), SimpleNamespace(rank=3, popen=forked)]
    launcher.count_unwaited_cpu({0: {"job_cpu_s": 1.5}, 1: {"job_cpu_s": 2.0}, 2: {"job_cpu_s": 0.25},
                                 3: {"ok": True}})             # rank 3 did not say: nothing counted for it
    assert counted == [1.5, 0.25]


def test_a_rank_reports_the_cpu_of_its_whole_job(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"manifest": "unused"}))
    burned = {}

    def work(cfg, rank, run_dir):
        def job() -> dict:
            t0 = time.process_time()
            while time.process_time() - t0 < 0.05:      # CPU, not wall time: a busy machine only slows it
                pass
            burned["s"] = time.process_time() - t0
            return {}
        return "dev", job

    assert run_rank(tmp_path, 1, work) == 0
    doc = json.loads((tmp_path / "rank1.json").read_text())
    assert doc["ok"] and doc["job_cpu_s"] >= burned["s"] >= 0.05
    assert run_rank(tmp_path, 2, work, cpu_since=time.process_time() - 100.0) == 0    # a fresh process: since 0
    assert json.loads((tmp_path / "rank2.json").read_text())["job_cpu_s"] >= 100.0


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_real_run_counts_its_ranks_cpu_as_ours(tmp_path, monkeypatch):
    from hetsplit.plan.types import Plan, Stage
    from hetsplit.runtime import RunOptions, run_plan
    from hetsplit.runtime.toy import toy_model

    counted: list[float] = []
    real = machine_load.count_own_cpu
    monkeypatch.setattr(machine_load, "count_own_cpu", lambda s: (counted.append(s), real(s)))
    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    plan = Plan(graph.name, "local", "hand", [Stage("local-cpu0", graph.names[:4]), Stage("local-cpu1", graph.names[4:])])
    before = real_read_clock()
    run_plan(plan, graph, path, RunOptions(inputs=6, timeout_s=20, run_dir=tmp_path / "run"),
             split_dir=tmp_path / "split")
    after = real_read_clock()
    docs = [json.loads((tmp_path / "run" / f"rank{r}.json").read_text()) for r in range(3)]
    for doc in docs:                 # the whole job (load, stream, verification) holds the stream's CPU
        assert doc["job_cpu_s"] >= doc["process_cpu_s"] > 0
    from hetsplit.runtime import zygote

    if os.environ.get(zygote.ENV, "1") != "0" and sys.platform.startswith("linux"):   # the ranks were forked
        assert sorted(counted) == sorted(d["job_cpu_s"] for d in docs)
        if before.machine_busy_s is not None and after.machine_busy_s is not None:
            # the ranks ran in the window: theirs and ours are part of the machine's busy time, which the
            # kernel samples in ticks (slack for that); a rank counted twice would be far above it
            busy = after.machine_busy_s - before.machine_busy_s
            assert after.own_s - before.own_s <= 1.1 * busy + 0.1
