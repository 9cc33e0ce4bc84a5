"""hetsplit split / run from the command line (runs across hosts: test_runtime_hosts, test_run_isolation)."""

from __future__ import annotations

import json
import os
import socket

import pytest

from hetsplit.cli.main import main
from hetsplit.plan.io import save_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    graph = toy_model(d / "toy.onnx")
    n = graph.names
    plan = Plan(graph.name, "local", "hand", [Stage("local-cpu0", n[:4]), Stage("local-cpu1", n[4:])])
    save_plan(plan, d / "plan.json")
    return d


def test_split_command_writes_sub_models_and_manifest(files, tmp_path, capsys):
    assert main(["split", str(files / "plan.json"), str(files / "toy.onnx"), "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "manifest.json").read_text())
    assert doc["format"] == "hetsplit.manifest/2" and len(doc["workers"]) == 3
    assert (tmp_path / "local-cpu0-seg0.onnx").is_file() and (tmp_path / "local-cpu1-seg0.onnx").is_file()


def test_run_command_compares_with_the_plan_and_writes_json(files, tmp_path, capsys):
    from hetsplit.runtime import resolve_model
    from hetsplit.cluster import load_cluster

    graph, _ = resolve_model(str(files / "toy.onnx"))
    cluster = load_cluster("local")
    add_metrics(files, graph, cluster)
    out = tmp_path / "cmp.json"
    code = main(["run", str(files / "plan.json"), str(files / "toy.onnx"), "-n", "5", "--timeout", "20",
                 "--cluster", "local", "--compare", "--out", str(out), "--run-dir", str(tmp_path / "run")])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["measured"]["verify"]["ok"] and doc["predicted"]["throughput"] > 0
    metrics = [r["metric"] for r in doc["rows"]]
    assert "throughput (1/s)" in metrics and any(m.startswith("transfer local-cpu0->local-cpu1") for m in metrics)
    assert any("`--here` compares" in n for n in doc["notes"])          # the local cluster: this machine's cores
    stream = doc["measured"]["stream_throughput"]     # beside the outputs' spacing: first input sent to last output
    assert 0 < stream and f"(whole stream {stream:.2f}/s)" in capsys.readouterr().out
    assert not processes_of(tmp_path / "run")


def add_metrics(files, graph, cluster) -> None:
    """Give the plan file predicted metrics (modelled costs on the local cluster)."""
    from hetsplit.costs import build_problem
    from hetsplit.estimate.evaluate import evaluate
    from hetsplit.plan.io import load_plan

    plan = load_plan(files / "plan.json")
    plan.metrics = evaluate(build_problem(graph, cluster), plan)
    save_plan(plan, files / "plan.json")


def test_run_command_failure_exits_2_with_the_cause(files, tmp_path, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        code = main(["run", str(files / "plan.json"), str(files / "toy.onnx"), "-n", "2", "--timeout", "10",
                     "--port", str(s.getsockname()[1]), "--run-dir", str(tmp_path / "run")])
    assert code == 2
    assert "in use" in capsys.readouterr().err
    assert not processes_of(tmp_path / "run")


def test_hosts_refused_up_front_when_malformed_or_combined_with_emulation(files, capsys):
    plan, model = str(files / "plan.json"), str(files / "toy.onnx")
    assert main(["run", plan, model, "--hosts", "local-cpu1"]) == 2
    assert "DEVICE=HOST" in capsys.readouterr().err
    assert main(["run", plan, model, "--hosts", "gpu9=10.0.0.2"]) == 2
    assert "gpu9" in capsys.readouterr().err
    assert main(["run", plan, model, "--hosts", "local-cpu1=10.0.0.2", "--emulate-links"]) == 2
    assert "does not combine with --hosts" in capsys.readouterr().err
    assert main(["run", plan, model, "--ssh"]) == 2
    assert "--hosts" in capsys.readouterr().err


def test_profile_notes_name_a_co_load_that_does_not_match_the_run():
    from hetsplit.workflow.run_notes import profile_notes

    meta = {"device": "local-cpu", "whole_model": {}, "threads": 1, "model": "resnet50"}
    assert profile_notes({**meta, "co_load": 1}, workers=2, cores=2) == []
    (note,) = profile_notes(meta, workers=2, cores=4)             # an old profile: no co_load, read as 0
    assert "co-load 0" in note and "slower" in note and "hetsplit profile resnet50" in note and "--co-load 1" in note
    assert "faster" in profile_notes({**meta, "co_load": 3}, workers=2, cores=4)[0]
    notes = profile_notes({**meta, "co_load": 1}, workers=3, cores=2)
    assert len(notes) == 1 and "time-share" in notes[0]
    assert profile_notes({"device": "neurosim-rram", "co_load": 0}, workers=2, cores=2) == []
    assert profile_notes({**meta, "co_load": 0}, workers=1, cores=2) == []
    assert "faster" in profile_notes({**meta, "co_load": 1}, workers=1, cores=2)[0]   # one stage: the machine idle


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="two workers on cores of their own")
def test_run_compare_notes_a_profile_taken_without_co_load(files, tmp_path):
    from hetsplit.costs.profile import save_profile
    from hetsplit.costs.profiler import profile_cpu
    from hetsplit.runtime import resolve_model

    graph, path = resolve_model(str(files / "toy.onnx"))
    save_profile(profile_cpu(graph, path, warmup=1, repeats=2), tmp_path / "prof.json")
    out = tmp_path / "cmp.json"
    code = main(["run", str(files / "plan.json"), str(files / "toy.onnx"), "-n", "4", "--timeout", "20",
                 "--cluster", "local", "--profile", str(tmp_path / "prof.json"), "--compare", "--pin",
                 "--out", str(out), "--run-dir", str(tmp_path / "run")])
    assert code == 0
    doc = json.loads(out.read_text())
    assert any("--co-load 1" in n for n in doc["notes"]) and all(d["kind"] == "cpu" for d in doc["measured"]["devices"])
    rows = {r["metric"]: r for r in doc["rows"]}   # the simulator's prediction beside the closed form's
    assert rows["throughput, simulated (1/s)"]["predicted"] == pytest.approx(doc["simulated"]["throughput"])
    assert rows["throughput, simulated (1/s)"]["predicted"] == pytest.approx(rows["throughput (1/s)"]["predicted"],
                                                                             rel=0.02)
    assert rows["latency, simulated (s)"]["predicted"] == pytest.approx(rows["latency (s)"]["predicted"], rel=1e-6)
    assert not processes_of(tmp_path / "run")


def test_overhead_note_when_the_runs_own_cpu_takes_a_share_of_full_cores():
    from hetsplit.runtime.report import DeviceRun, RunReport
    from hetsplit.workflow.run_notes import overhead_note

    def report(driver_s: float, extra_s: float) -> RunReport:
        devices = [DeviceRun(f"local-cpu{i}", 2e-3, 2e-3, cpu_per_input_s=2e-3 + extra_s) for i in range(2)]
        return RunReport("m", devices, [], 10, 1.0, 1.0, 1.0, [], None, 1.0, driver_cpu_per_input_s=driver_s)

    note = overhead_note(report(0.6e-3, 0.4e-3), cores=2)      # (0.6 + 2 x 0.4) / 2 = 0.7 ms of a 2 ms stage
    assert note is not None and "driver 0.60 ms" in note and "35%" in note
    assert overhead_note(report(0.6e-3, 0.4e-3), cores=4) is None   # spare cores take it
    assert overhead_note(report(0.05e-3, 0.02e-3), cores=2) is None
