"""Ranks forked by the zygote stand for the ``python -m`` processes they replace: their own session, log,
environment and command line, ``Popen``'s exit codes, and no life beyond the zygote's."""

from __future__ import annotations

import os
import signal
import sys

import pytest

from hetsplit.runtime import zygote
from hetsplit.runtime.launch import child_env, processes_of

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def z():
    started = zygote.Zygote(child_env(1))
    yield started
    started.close()


def _module(tmp_path, body: str) -> tuple[str, dict[str, str]]:
    (tmp_path / "zygote_probe.py").write_text(body)
    env = {**child_env(1), "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path]), "PROBE": "given"}
    return "zygote_probe", env


def test_a_forked_child_has_its_session_log_environment_and_command_line(z, tmp_path):
    module, env = _module(tmp_path, "import os, sys\n"
                                    "print(os.getsid(0) == os.getpid(), os.environ['PROBE'], sys.argv[1:])\n"
                                    "print(open('/proc/self/cmdline', 'rb').read().split(b'\\0')[2:5])\n"
                                    "raise SystemExit(3)\n")
    proc = z.spawn(module, [str(tmp_path / "run"), "2"], env, tmp_path / "log", 60)
    assert proc.wait(60) == 3 and proc.returncode == 3
    first, second = (tmp_path / "log").read_text().splitlines()
    assert first == f"True given ['{tmp_path / 'run'}', '2']"
    assert second == str([module.encode(), str(tmp_path / "run").encode(), b"2"])


def test_a_killed_child_reads_as_popen_does_and_is_found_by_its_run_dir(z, tmp_path):
    module, env = _module(tmp_path, "import time\ntime.sleep(60)\n")
    proc = z.spawn(module, [str(tmp_path / "run"), "1"], env, tmp_path / "log", 60)
    import time

    deadline = time.time() + 30
    while not processes_of(tmp_path / "run") and time.time() < deadline:
        time.sleep(0.02)
    assert processes_of(tmp_path / "run") == [proc.pid] and proc.poll() is None
    proc.kill()
    assert proc.wait(30) == -signal.SIGKILL
    assert not processes_of(tmp_path / "run")


def test_children_die_with_the_zygote(tmp_path):
    own = zygote.Zygote(child_env(1))
    module, env = _module(tmp_path, "import time\ntime.sleep(60)\n")
    proc = own.spawn(module, [str(tmp_path / "run"), "1"], env, tmp_path / "log", 60)
    own.popen.kill()
    own.popen.wait()
    assert proc.wait(30) == -signal.SIGKILL
    import time

    deadline = time.time() + 10
    while processes_of(tmp_path / "run") and time.time() < deadline:
        time.sleep(0.02)
    assert not processes_of(tmp_path / "run")
