"""runtime.pool: warm processes run two different plans in a row (real processes, verified outputs); a
dead warm worker ends the run with a message naming its device; the processes die with their parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from hetsplit.errors import RuntimeFailure, UsageError
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import RunOptions, run_plan
from hetsplit.runtime.pool import WorkerPool
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.onnx"
    return toy_model(path), path


@pytest.fixture(scope="module")
def pool():
    with WorkerPool() as p:
        yield p


def plan_of(graph, bounds):
    return Plan(graph.name, "local", "hand", [Stage(f"local-cpu{i}", graph.names[a:b])
                                             for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])


def _alive(pid: int) -> bool:
    try:
        state = open(f"/proc/{pid}/stat").read().split(") ")[-1][:1]
    except OSError:
        return False
    return state != "Z"


def test_a_pool_runs_two_different_plans_in_the_same_warm_processes(toy, pool, tmp_path):
    graph, path = toy
    pool.warm(2)
    started, pids = pool.started, {p.pid for ps in pool.idle.values() for p in ps}
    first = run_plan(plan_of(graph, [0, 4, graph.num_layers]), graph, path,
                     RunOptions(inputs=3, latency_inputs=1, timeout_s=20, pool=pool, run_dir=tmp_path / "a"))
    second = run_plan(plan_of(graph, [0, 6, graph.num_layers]), graph, path,
                      RunOptions(inputs=3, latency_inputs=1, timeout_s=20, pool=pool, run_dir=tmp_path / "b"))
    for report in (first, second):
        assert report.verify.ok and report.verify.outputs_checked == 3
        assert [d.device for d in report.devices] == ["local-cpu0", "local-cpu1"]
        assert all(d.compute_s > 0 and d.peak_rss_bytes > 0 for d in report.devices)
    assert pool.started == started    # no process started for either run: both found them warm
    assert {p.pid for ps in pool.idle.values() for p in ps} == pids
    assert (tmp_path / "b" / "rank1.log").exists()
    doc = json.loads((tmp_path / "b" / "rank1.json").read_text())   # the job's own peak, from where it began
    assert 0 < doc["start_rss_bytes"] <= doc["peak_rss_bytes"]


def test_a_warm_worker_that_dies_mid_run_ends_the_run_with_a_message(toy, pool, tmp_path):
    graph, path = toy
    opts = RunOptions(inputs=4, latency_inputs=1, timeout_s=20, pool=pool, run_dir=tmp_path / "run",
                      faults={"2": {"kind": "die", "after": 1}})
    t0 = time.perf_counter()
    with pytest.raises(RuntimeFailure, match=r"local-cpu1 \(rank 2\) died: killed by SIGKILL"):
        run_plan(plan_of(graph, [0, 4, graph.num_layers]), graph, path, opts)
    assert time.perf_counter() - t0 < 60
    after = run_plan(plan_of(graph, [0, 4, graph.num_layers]), graph, path,       # the pool recovers
                     RunOptions(inputs=2, latency_inputs=1, timeout_s=20, pool=pool, run_dir=tmp_path / "ok"))
    assert after.verify.ok


def test_closing_a_pool_ends_its_processes(pool):
    pool.warm(1)
    pids = [p.pid for ps in pool.idle.values() for p in ps]
    pool.close()
    assert pids and not any(_alive(p) for p in pids)


def test_a_pool_refuses_what_its_processes_cannot_do(toy, tmp_path):
    graph, path = toy
    with WorkerPool() as pool:
        with pytest.raises(UsageError, match="one compute thread"):
            run_plan(plan_of(graph, [0, graph.num_layers]), graph, path,
                     RunOptions(inputs=1, threads={"local-cpu0": 2}, pool=pool, run_dir=tmp_path / "a"))
        with pytest.raises(UsageError, match="CPUs only"):
            run_plan(plan_of(graph, [0, graph.num_layers]), graph, path,
                     RunOptions(inputs=1, kinds={"local-cpu0": "gpu"}, pool=pool, run_dir=tmp_path / "b"))
        assert pool.started == 0


def test_warm_processes_die_with_the_process_that_started_them(tmp_path):
    code = textwrap.dedent("""
        import sys, time
        from hetsplit.runtime.pool import WorkerPool
        pool = WorkerPool()
        pool.warm(1)
        print(" ".join(str(p.pid) for ps in pool.idle.values() for p in ps), flush=True)
        time.sleep(60)
    """)
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert len(pids) == 2 and all(_alive(p) for p in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait(timeout=10)
    deadline = time.time() + 10
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(_alive(p) for p in pids)
