"""SIGKILL of ``hetsplit run --emulate-links --emulate-devices`` mid-stream leaves its network namespaces
and CPU cgroups behind; the next run, even one without emulation, removes them, and nothing that is not
a killed hetsplit run's (skipped where namespaces or cgroups cannot be made here)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from hetsplit.cli.main import main
from hetsplit.plan.io import save_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime.cpu_throttle import Controller, find_controller, throttle_available
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.netem import emulation_available
from hetsplit.runtime.netns_cleanup import list_namespaces
from hetsplit.runtime.owned import owned_name, owner_of
from hetsplit.runtime.toy import toy_model

pytestmark = pytest.mark.timeout(120)
WHY = emulation_available() or throttle_available()
CLUSTER = """name: two
devices:
  - {name: edge, type: slow, kind: cpu, memory: 8GiB, peak_macs: 2e9/s, mem_bandwidth: 10GB/s, power_active: 5W}
  - {name: cloud, type: fast, kind: cpu, memory: 8GiB, peak_macs: 4e9/s, mem_bandwidth: 10GB/s, power_active: 5W}
links:
  default: {bandwidth: 20MB/s, latency: 1ms}
"""


def wait_for(predicate, within_s: float) -> bool:
    end = time.time() + within_s
    while time.time() < end:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


def owned_by(pid: int, ctl: Controller) -> tuple[list[str], list[str]]:
    """The namespaces and cgroups whose names say ``pid`` made them."""
    return ([n for n in list_namespaces() if owner_of(n) == pid], [g for g in ctl.groups() if owner_of(g) == pid])


@pytest.mark.skipif(WHY is not None, reason=f"needs network namespaces and the cgroup cpu controller: {WHY}")
def test_the_next_run_removes_what_a_killed_emulated_run_left_and_nothing_else(tmp_path, capsys):
    ctl = find_controller()
    assert isinstance(ctl, Controller)
    graph = toy_model(tmp_path / "toy.onnx")
    n = graph.names
    save_plan(Plan(graph.name, "two", "hand", [Stage("edge", n[:4]), Stage("cloud", n[4:])]), tmp_path / "plan.json")
    (tmp_path / "two.yaml").write_text(CLUSTER)
    run_dir = tmp_path / "killed"
    tag = uuid.uuid4().hex[:5]
    others_ns = [f"hstest{tag}", f"hetsplit-x{tag}", owned_name(tag, "r0")]   # foreign, lookalike, owner alive
    others_cg = [f"hstest{tag}", owned_name(tag, "r1")]
    cli = subprocess.Popen([sys.executable, "-m", "hetsplit.cli.main", "run", str(tmp_path / "plan.json"),
                            str(tmp_path / "toy.onnx"), "--cluster", str(tmp_path / "two.yaml"), "-n", "100000",
                            "--timeout", "60", "--emulate-links", "--emulate-devices", "--run-dir", str(run_dir)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        for name in others_ns:
            subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
        for name in others_cg:
            (ctl.root / name).mkdir()
        # mid-stream: its 3 namespaces are up and both workers have moved into their (throttled) cgroups
        def streaming() -> bool:
            assert cli.poll() is None, f"the emulated run ended (exit {cli.returncode}) before it was killed"
            ns, cg = owned_by(cli.pid, ctl)
            return len(ns) == 3 and len(cg) == 2 and all(ctl.pids_in(g) for g in cg)

        assert wait_for(streaming, 90), "the emulated run never started streaming"
        os.kill(cli.pid, signal.SIGKILL)
        cli.wait(timeout=10)
        left_ns, left_cg = owned_by(cli.pid, ctl)
        assert len(left_ns) == 3 and len(left_cg) == 2   # a SIGKILL leaves them: the next run must remove them
        assert wait_for(lambda: not processes_of(run_dir), 5.0), "workers outlived the killed CLI"

        assert main(["run", str(tmp_path / "plan.json"), str(tmp_path / "toy.onnx"), "--cluster",
                     str(tmp_path / "two.yaml"), "-n", "2", "--latency-inputs", "0", "--timeout", "30"]) == 0

        assert owned_by(cli.pid, ctl) == ([], [])
        assert set(others_ns) <= set(list_namespaces())
        assert all((ctl.root / g).is_dir() for g in others_cg)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.wait(timeout=10)
        for name in others_ns:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        for name in others_cg:
            if (ctl.root / name).is_dir():
                (ctl.root / name).rmdir()
        if main(["doctor"]) != 0:   # whatever the killed run left if an assertion above failed
            pytest.fail("hetsplit doctor could not clean up after the test")
        capsys.readouterr()
