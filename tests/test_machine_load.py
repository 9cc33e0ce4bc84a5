"""What other processes used of the machine, our own processes that this one never waited for (a run's
ranks, which report their CPU) not counted: fake counters for the rule, one real toy run for the reports."""

from __future__ import annotations

import json
import time

import pytest

from hetsplit.costs.machine_load import CpuClock, LoadWatch, others_share
from hetsplit.errors import HetsplitError
from hetsplit.runtime.measure import ranks_cpu_s
from hetsplit.runtime.process import run_rank


def readings(*clocks: CpuClock):
    """A clock that gives ``clocks`` in turn."""
    it = iter(clocks)
    return lambda: next(it)


# 10 s on 2 CPUs: the machine was busy 12 s, this process used 2 s: 10 s left to the others
BEFORE, AFTER = CpuClock(100.0, 500.0, 30.0, 2), CpuClock(110.0, 512.0, 32.0, 2)


def test_own_extra_cpu_is_not_the_others():
    assert others_share(BEFORE, AFTER) == pytest.approx(10.0 / 20.0)
    assert others_share(BEFORE, AFTER, own_extra_s=9.0) == pytest.approx(1.0 / 20.0)   # a run's ranks: 9 s
    assert others_share(BEFORE, AFTER, own_extra_s=12.0) == 0.0                        # never below nothing
    assert others_share(CpuClock(0.0, None, 0.0, 2), CpuClock(1.0, None, 0.0, 2), 1.0) is None   # unknown
    with pytest.raises(HetsplitError, match="own_extra_s"):
        others_share(BEFORE, AFTER, own_extra_s=-1.0)


def test_a_watch_takes_out_what_our_unwatched_processes_spent():
    watch = LoadWatch(readings(BEFORE, AFTER))
    assert watch.share is None                          # not watched yet
    with watch:
        assert watch.share is None and watch.share_less(1.0) is None     # still watching
    assert watch.share == pytest.approx(0.5)
    assert watch.share_less(9.0) == pytest.approx(0.05)
    assert watch.share == pytest.approx(0.5)            # asking does not change what was read
    with LoadWatch(readings(BEFORE, CpuClock(110.0, None, 32.0, 2))) as unknown:
        pass
    assert unknown.share_less(9.0) is None


def test_ranks_cpu_sums_this_hosts_ranks_and_is_unknown_when_one_is_silent():
    docs = {0: {"job_cpu_s": 1.5}, 1: {"job_cpu_s": 2.0}, 2: {"job_cpu_s": 4.0}, 3: {"ok": True}}
    assert ranks_cpu_s(docs, [0, 1, 2]) == pytest.approx(7.5)
    assert ranks_cpu_s(docs, [0, 2]) == pytest.approx(5.5)        # rank 1 ran on another host
    assert ranks_cpu_s(docs, [0, 3]) is None                       # rank 3 did not say
    assert ranks_cpu_s(docs, [0, 4]) is None                       # no report at all


def test_a_rank_reports_the_cpu_of_its_whole_job(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"manifest": "unused"}))
    burned = {}

    def work(cfg, rank, run_dir):
        def job() -> dict:
            t0 = time.process_time()
            while time.process_time() - t0 < 0.05:      # CPU, not wall time: a busy machine only slows it
                pass
            burned["s"] = time.process_time() - t0
            return {"process_cpu_s": 0.0}
        return "dev", job

    assert run_rank(tmp_path, 1, work) == 0
    doc = json.loads((tmp_path / "rank1.json").read_text())
    assert doc["ok"] and doc["job_cpu_s"] >= burned["s"] >= 0.05
    assert run_rank(tmp_path, 2, work, cpu_since=time.process_time() - 100.0) == 0    # a fresh process: since 0
    assert json.loads((tmp_path / "rank2.json").read_text())["job_cpu_s"] >= 100.0


@pytest.mark.processes
@pytest.mark.timeout(120)
def test_a_real_run_reports_its_ranks_cpu(tmp_path):
    from hetsplit.costs.machine_load import read_clock
    from hetsplit.plan.types import Plan, Stage
    from hetsplit.runtime import RunOptions, run_plan
    from hetsplit.runtime.toy import toy_model

    path = tmp_path / "toy.onnx"
    graph = toy_model(path)
    plan = Plan(graph.name, "local", "hand", [Stage("local-cpu0", graph.names[:4]), Stage("local-cpu1", graph.names[4:])])
    before = read_clock()                                # the real counters (the suite fakes machine_load's)
    report = run_plan(plan, graph, path, RunOptions(inputs=6, timeout_s=20, run_dir=tmp_path / "run"),
                      split_dir=tmp_path / "split")
    after = read_clock()
    docs = {r: json.loads((tmp_path / "run" / f"rank{r}.json").read_text()) for r in range(3)}
    for doc in docs.values():        # the whole job (load, stream, verification) holds the stream's CPU
        assert doc["job_cpu_s"] >= doc["process_cpu_s"] > 0
    assert report.ranks_cpu_s == pytest.approx(sum(d["job_cpu_s"] for d in docs.values()))
    if before.machine_busy_s is not None and after.machine_busy_s is not None:   # Linux
        # the ranks ran in the window: their CPU and ours are part of the machine's (ticks of 10 ms each CPU)
        busy = after.machine_busy_s - before.machine_busy_s
        assert report.ranks_cpu_s + (after.own_s - before.own_s) <= busy + 0.02 * after.cpus + 0.05
