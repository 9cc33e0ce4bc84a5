"""Network namespaces left by an emulated run killed with SIGKILL are found and removed by the next
run or ``hetsplit doctor``; namespaces that are not hetsplit's, or whose owner lives, are left alone."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace

import pytest

from hetsplit.cli.main import main
from hetsplit.runtime.netem import Emulation, LinkMatrix, emulation_available
from hetsplit.runtime.netns_cleanup import (list_namespaces, namespace_name, owner_of, remove_stale_namespaces,
                                            stale_namespaces)

pytestmark = pytest.mark.timeout(60)
WHY = emulation_available()
needs_netns = pytest.mark.skipif(WHY is not None, reason=f"needs root with ip/tc and network namespaces: {WHY}")

# A run's process: sets up the emulation of a 2-rank run (namespaces, veth pair, tc), starts a worker
# inside rank 1's namespace in its own session (as the launcher does), reports, and waits to be killed.
OWNER = """
import json, subprocess, sys, time
from types import SimpleNamespace
from hetsplit.runtime.netem import Emulation, LinkMatrix
emu = Emulation(SimpleNamespace(world_size=2), LinkMatrix.uniform(2, 1e6, 0.001, driver=True)).__enter__()
worker = subprocess.Popen(emu.wrap(1) + ["sleep", "60"], start_new_session=True)
print(json.dumps({"namespaces": emu.namespaces, "worker": worker.pid}), flush=True)
time.sleep(60)
"""


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _add(name: str) -> str:
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True)
    return name


def _delete(*names: str) -> None:
    for n in names:
        subprocess.run(["ip", "netns", "del", n], capture_output=True)


def _gone(pid: int, within_s: float = 3.0) -> bool:
    """Whether ``pid`` ended (a zombie not yet reaped by whoever inherited it counts as ended)."""
    end = time.time() + within_s
    while time.time() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(") ", 1)[-1].startswith("Z"):
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False


def _kill(pid: int) -> None:
    try:
        os.kill(pid, 9)
    except ProcessLookupError:
        pass


def test_names_carry_the_owner():
    tag = uuid.uuid4().hex[:5]
    assert namespace_name(tag, "r3", pid=4242) == f"hetsplit-4242-{tag}-r3"
    assert owner_of(namespace_name(tag, "r0")) == os.getpid()
    assert owner_of(namespace_name(tag, "probe", pid=7)) == 7
    for other in ("hs1a2b3r0", "hsprobe1a2b3c", "hetsplit-x-abcde-r0", "hetsplit-12-abcde-r0-extra", "myns",
                  "hetsplit-0-abcde-r0", "xhetsplit-12-abcde-r0"):
        assert owner_of(other) is None, other
    # without a live process behind them they are stale, others never are
    dead = _dead_pid()
    names = [namespace_name(tag, "r0", pid=dead), namespace_name(tag, "r0"), "myns", "hetsplit-x-abcde-r0"]
    assert stale_namespaces(names) == [names[0]]
    with pytest.raises(ValueError):
        namespace_name("not hex", "r0")


@needs_netns
def test_namespaces_of_a_killed_run_are_removed_and_nothing_else():
    tag = uuid.uuid4().hex[:5]
    live = namespace_name(tag, "r0")                 # owned by this (live) process
    foreign = f"hstest{tag}"                          # not hetsplit's
    lookalike = f"hetsplit-x{tag}"                    # has the prefix but not the form: not hetsplit's either
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True)
    started: list[str] = []
    worker = None
    try:
        for n in (live, foreign, lookalike):
            started.append(_add(n))
        doc = json.loads(owner.stdout.readline())
        run_ns, worker = doc["namespaces"], doc["worker"]
        assert all(owner_of(n) == owner.pid for n in run_ns)
        veths = subprocess.run(["ip", "-n", run_ns[1], "-o", "link", "show", "type", "veth"], capture_output=True,
                               text=True).stdout.splitlines()
        assert len(veths) == 1   # its end of the pair to rank 0
        owner.kill()   # SIGKILL: the run cannot delete its namespaces; its worker lives on
        owner.wait(timeout=10)
        assert set(run_ns) <= set(list_namespaces())
        assert not _gone(worker, within_s=0.1)

        removed = remove_stale_namespaces()

        assert set(run_ns) <= set(removed)
        assert not {live, foreign, lookalike} & set(removed)
        here = set(list_namespaces())
        assert not set(run_ns) & here
        assert {live, foreign, lookalike} <= here
        assert _gone(worker), "the orphaned worker inside the stale namespace was not killed"
        assert not set(run_ns) & set(remove_stale_namespaces())   # nothing more to do
    finally:
        owner.kill()
        owner.wait(timeout=10)
        if worker is not None:
            _kill(worker)
        _delete(*started)
        if owner.stdout:
            owner.stdout.close()


@needs_netns
def test_the_next_emulated_run_removes_stale_namespaces(caplog):
    stale = namespace_name(uuid.uuid4().hex[:5], "r1", pid=_dead_pid())
    try:
        _add(stale)
        with caplog.at_level(logging.WARNING, logger="hetsplit.runtime.netns_cleanup"):
            with Emulation(SimpleNamespace(world_size=2), LinkMatrix.uniform(2, 1e7, driver=True)) as emu:
                assert stale in emu.removed_stale
                assert stale not in list_namespaces()
                assert set(emu.namespaces) <= set(list_namespaces())
            assert not set(emu.namespaces) & set(list_namespaces())   # its own are removed on exit
        lines = [r.getMessage() for r in caplog.records if stale in r.getMessage()]
        assert len(lines) == 1 and lines[0].startswith("removed ")
    finally:
        _delete(stale)


def test_doctor_dry_run_lists_the_items(capsys):
    stale = None
    try:
        if WHY is None:
            stale = _add(namespace_name(uuid.uuid4().hex[:5], "r0", pid=_dead_pid()))
        assert main(["doctor", "--dry-run"]) == 0
        out = capsys.readouterr().out
        for item in ("python", "onnxruntime", "torch", "link emulation", "energy meter (cpu)", "rapl:",
                     "stale namespaces"):
            assert item in out, (item, out)
        assert out.rstrip().endswith("healthy")
        if stale is not None:
            assert stale in out and "stale " in out
            assert stale in list_namespaces()      # a dry run only lists
            assert main(["doctor", "--json"]) == 0
            doc = json.loads(capsys.readouterr().out)
            assert doc["healthy"] and stale in json.dumps(doc["items"])
            assert stale not in list_namespaces()
    finally:
        if stale is not None:
            _delete(stale)


def test_doctor_rejects_bad_input():
    with pytest.raises(SystemExit) as exc:
        main(["doctor", "--no-such-flag"])
    assert exc.value.code == 2
