"""hetsplit run with real processes and tensors: outputs verified, measurements present, nothing left."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import RunOptions, run_plan
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.onnx"
    return toy_model(path), path


def plan_of(graph, bounds):
    return Plan(graph.name, "local", "hand", [Stage(f"local-cpu{i}", graph.names[a:b])
                                             for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])


def test_three_stage_run_with_relays_is_verified_and_measured(toy, tmp_path):
    graph, path = toy
    bounds = [0, 4, 6, 9]  # the middle stage relays the stem output and b0's output
    report = run_plan(plan_of(graph, bounds), graph, path,
                      RunOptions(inputs=6, timeout_s=20, run_dir=tmp_path / "run"), split_dir=tmp_path / "split")
    assert report.verify.ok and report.verify.outputs_checked == 6
    assert report.verify.max_abs_err < 1e-4
    assert [d.device for d in report.devices] == ["local-cpu0", "local-cpu1", "local-cpu2"]
    for s, d in enumerate(report.devices):
        assert d.compute_s > 0 and d.peak_rss_bytes > 0 and d.kind == "cpu"
        assert d.cpu_per_input_s > 0     # the process's CPU time (compute and its transfer threads)
        assert 0 < d.compute_cpu_per_input_s < d.cpu_per_input_s   # its sub-model's part: one thread
        assert d.recv_bytes == graph.cut_bytes[bounds[s]] and d.send_bytes == graph.cut_bytes[bounds[s + 1]]
    inner = [h for h in report.hops if "driver" not in (h.src, h.dst)]
    assert [h.nbytes for h in inner] == [graph.cut_bytes[4], graph.cut_bytes[6]]
    assert all(len(h.wire_all_s) == 6 and min(h.wire_all_s) > 0 for h in report.hops)
    assert report.throughput > 0 and report.latency_s > 0 and len(report.latencies_s) == 6
    assert report.latency_s == report.latencies_s[1]     # of the 2 sent alone, the first warms the run up
    assert report.driver_cpu_per_input_s > 0
    assert not processes_of(tmp_path / "run")
    depth = 2   # RunOptions' default
    for rank in (1, 2, 3):   # each worker posts input i + depth's receives before input i's sends
        logs = json.loads((tmp_path / "run" / f"rank{rank}.json").read_text())
        posted = [min(starts) for starts in zip(*(log["start"] for log in logs["recv"]))]
        sent = [min(starts) for starts in zip(*(log["start"] for log in logs["send"]))]
        assert len(posted) == len(sent) == 6
        assert all(posted[i + depth] <= sent[i] for i in range(6 - depth))


def test_one_stage_run(toy, tmp_path):
    graph, path = toy
    report = run_plan(plan_of(graph, [0, graph.num_layers]), graph, path,
                      RunOptions(inputs=3, latency_inputs=1, timeout_s=20, run_dir=tmp_path / "run"))
    assert report.verify.ok and len(report.devices) == 1
    assert not processes_of(tmp_path / "run")


@pytest.mark.slow
def test_resnet18_two_workers(tmp_path):
    from hetsplit.runtime import resolve_model

    graph, path = resolve_model("resnet18")
    c = np.cumsum(graph.macs)
    cut = int(np.searchsorted(c, c[-1] / 2)) + 1
    report = run_plan(plan_of(graph, [0, cut, graph.num_layers]), graph, path,
                      RunOptions(inputs=4, timeout_s=60, run_dir=tmp_path / "run"))
    assert report.verify.ok and report.verify.outputs_checked == 4
    assert not processes_of(tmp_path / "run")


def test_pinned_workers_run_on_their_own_cpus(toy, tmp_path):
    import os

    graph, path = toy
    report = run_plan(plan_of(graph, [0, 4, graph.num_layers]), graph, path,
                      RunOptions(inputs=3, latency_inputs=1, timeout_s=20, run_dir=tmp_path / "run", pin=True))
    assert report.verify.ok
    cpus = json.loads((tmp_path / "run" / "config.json").read_text())["cpus"]
    avail = sorted(os.sched_getaffinity(0))
    assert cpus == {"1": [avail[0]], "2": [avail[1 % len(avail)]]}
    for rank in ("1", "2"):  # the workers really ran there
        assert json.loads((tmp_path / "run" / f"rank{rank}.json").read_text())["cpus"] == cpus[rank]
