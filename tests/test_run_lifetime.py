"""Workers end with their driver: SIGKILL of ``hetsplit run`` mid-stream leaves no process of the run
(the kernel's parent-death signal, armed in every child the launcher starts)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from hetsplit.lifetime import die_with_parent
from hetsplit.plan.io import save_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    d = tmp_path_factory.mktemp("lifetime")
    graph = toy_model(d / "toy.onnx")
    n = graph.names
    pipeline = Plan(graph.name, "local", "hand", [Stage("local-cpu0", n[:4]), Stage("local-cpu1", n[4:])])
    mapping = Plan(graph.name, "local", "hand", assign={name: ("local-cpu0" if i % 2 == 0 else "local-cpu1")
                                                          for i, name in enumerate(n)})
    save_plan(pipeline, d / "pipeline.json")
    save_plan(mapping, d / "mapping.json")
    return d


def wait_for(predicate, within_s: float) -> bool:
    end = time.time() + within_s
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.mark.parametrize("kind", ["pipeline", "mapping"])
def test_sigkill_of_the_cli_ends_every_process_of_the_run(toy, tmp_path, kind):
    run_dir = tmp_path / "run"
    cli = subprocess.Popen([sys.executable, "-m", "hetsplit.cli.main", "run", str(toy / f"{kind}.json"),
                            str(toy / "toy.onnx"), "--cluster", "local", "-n", "1000000", "--timeout", "60",
                            "--run-dir", str(run_dir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        # the driver and both workers are up and streaming once rank 1 has logged and 3 processes name the run
        assert wait_for(lambda: len(processes_of(run_dir)) >= 3 and (run_dir / "rank1.log").exists(), 60), \
            "the run never started its workers"
        time.sleep(1.0)
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)
        assert wait_for(lambda: not processes_of(run_dir), 5.0), \
            f"processes of the run outlived the CLI by 5 s: {processes_of(run_dir)}"
    finally:
        for pid in processes_of(run_dir):
            os.kill(pid, signal.SIGKILL)
        if cli.poll() is None:
            cli.kill()


def test_a_child_dies_when_its_parent_is_killed(tmp_path):
    """Without the launcher: a parent that starts `sleep` armed with die_with_parent, then is killed."""
    marker = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from hetsplit.lifetime import die_with_parent\n"
        "p = subprocess.Popen(['sleep', '60'], preexec_fn=die_with_parent())\n"
        f"open({str(marker)!r}, 'w').write(str(p.pid))\n"
        "time.sleep(60)\n")])
    try:
        assert wait_for(lambda: marker.exists() and marker.read_text(), 20)
        child = int(marker.read_text())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait(timeout=10)
        assert wait_for(lambda: not _alive(child), 5.0)
    finally:
        if parent.poll() is None:
            parent.kill()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return not f.read().rsplit(") ", 1)[-1].startswith("Z")
    except FileNotFoundError:
        return False


def test_without_linux_the_hook_is_absent(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    assert die_with_parent() is None
