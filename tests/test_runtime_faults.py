"""Faults end the run within a timeout, name the device and the cause, and leave no process behind: for every
plan kind (a pipeline, a sharded mapping, a tensor-parallel plan), a dead worker, a stalled link, a port in
use and a sub-model replaced by another model's."""

from __future__ import annotations

import shutil
import socket
import time
from pathlib import Path

import pytest

from hetsplit.errors import RuntimeFailure
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import RunOptions, load_manifest, run_manifest, split_model
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model
from plan_kinds import KINDS, make_case

pytestmark = pytest.mark.timeout(120)
TIMEOUT_S = 4.0


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    d = tmp_path_factory.mktemp("faults")
    graph = toy_model(d / "toy.onnx")
    n = graph.names
    plan = Plan(graph.name, "local", "hand", [Stage("cpu-a", n[:3]), Stage("cpu-b", n[3:6]), Stage("cpu-c", n[6:])])
    split_model(plan, graph, d / "toy.onnx", d / "split")
    return d / "split"


def run_failing(manifest, run_dir, **kw) -> tuple[str, float]:
    opts = RunOptions(inputs=6, timeout_s=TIMEOUT_S, startup_timeout_s=30, run_dir=run_dir, **kw)
    t0 = time.time()
    with pytest.raises(RuntimeFailure) as info:
        run_manifest(manifest, opts)
    elapsed = time.time() - t0
    assert not processes_of(run_dir), "processes were left behind"
    return str(info.value), elapsed


@pytest.fixture(scope="module")
def kinds(tmp_path_factory):
    """Each plan kind split over devices a, b, c (ranks 1, 2, 3)."""
    out = {}
    for kind in KINDS:
        d = tmp_path_factory.mktemp(kind)
        case = make_case(kind, d)
        out[kind] = split_model(case.plan, case.graph, case.model, d / "split").directory
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_a_worker_that_dies(kinds, tmp_path, kind):
    manifest = load_manifest(kinds[kind])
    assert manifest.worker(2).device == "b"
    msg, elapsed = run_failing(manifest, tmp_path / "run", faults={"2": {"kind": "die", "after": 2}})
    assert "device b" in msg and "died" in msg and "SIGKILL" in msg, msg
    assert elapsed < 30


@pytest.mark.parametrize("kind", KINDS)
def test_a_link_that_stalls(kinds, tmp_path, kind):
    msg, elapsed = run_failing(load_manifest(kinds[kind]), tmp_path / "run",
                               faults={"2": {"kind": "stall", "after": 2}})
    assert " b" in msg and "stalled" in msg and f"{TIMEOUT_S:g} s" in msg, msg
    assert elapsed < 30


@pytest.mark.parametrize("kind", KINDS)
def test_a_port_in_use(kinds, tmp_path, kind):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        msg, _ = run_failing(load_manifest(kinds[kind]), tmp_path / "run", port=port)
    assert "driver" in msg and f"port {port}" in msg and "in use" in msg
    assert not list((tmp_path / "run").glob("rank[1-9].log")), "workers started although the driver could not serve"


@pytest.mark.parametrize("kind", KINDS)
def test_a_sub_model_replaced_by_another_models(kinds, tmp_path, kind):
    bad = tmp_path / "split"
    shutil.copytree(kinds[kind], bad)
    manifest = load_manifest(bad)
    seg = next(s for s in manifest.worker(2).segments if s.submodel)
    toy_model(manifest.submodel_path(2, seg.index), channels=3, size=8)      # another model in b's file
    msg, _ = run_failing(load_manifest(bad), tmp_path / "run")
    assert "device b" in msg and "does not match the manifest" in msg, msg


def test_a_wrong_output_fails_verification(split, tmp_path):
    import numpy as np
    import onnx
    from onnx import numpy_helper

    bad = tmp_path / "split"
    shutil.copytree(split, bad)
    path = bad / "cpu-b-seg0.onnx"
    model = onnx.load(str(path))
    init = model.graph.initializer[0]
    init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * np.float32(2.0), init.name))
    onnx.save(model, str(path))
    msg, _ = run_failing(load_manifest(bad), tmp_path / "run")
    assert "differs from the unsplit model" in msg and "max abs error" in msg


def test_a_failed_run_without_a_run_dir_keeps_the_logs_its_message_names(split, tmp_path, monkeypatch):
    """The logs a run keeps in a temporary folder are removed after a run that succeeds, and kept after one
    that fails, so the log its message names is there to read."""
    import re
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))   # where the run's temporary folder goes
    manifest = load_manifest(split)
    report = run_manifest(manifest, RunOptions(inputs=3, timeout_s=TIMEOUT_S, startup_timeout_s=30))
    assert report.run_dir is None and not list(tmp_path.glob("hetsplit-run-*"))
    opts = RunOptions(inputs=6, timeout_s=TIMEOUT_S, startup_timeout_s=30, faults={"2": {"kind": "die", "after": 2}})
    with pytest.raises(RuntimeFailure) as info:
        run_manifest(manifest, opts)
    logs = re.findall(r"log: (\S+\.log)", str(info.value))
    assert logs, str(info.value)
    for log in logs:
        assert Path(log).is_file() and Path(log).is_relative_to(tmp_path), (log, str(info.value))
    folder = Path(logs[0]).parent
    assert folder.name.startswith("hetsplit-run-") and not processes_of(folder)


def test_the_device_blamed_for_a_stalled_or_lost_link_is_the_peer_that_stopped_answering(tmp_path):
    """What ``generate --recover`` leaves out: the rank that waited reports the stall, its peer is to blame;
    a rank that errs blames itself; a stall blaming a peer that reported its own death follows it there."""
    from hetsplit.runtime.launch import root_cause

    stall = {"ok": False, "device": "a", "peer": "b", "kind": "stall", "error": "device a: nothing arrived from b",
             "t_fail": 2.0}
    assert root_cause([stall], tmp_path).device == "b"
    assert root_cause([{**stall, "kind": "lost"}], tmp_path).device == "b"
    assert root_cause([{**stall, "kind": "error", "peer": None}], tmp_path).device == "a"
    died = {"ok": False, "device": "c", "kind": "died", "error": "device c died", "t_fail": 3.0}
    assert root_cause([{**stall, "peer": "c"}, died], tmp_path).device == "c"
