"""A pre-imported parent that forks the processes of runs, so a rank starts in milliseconds, not the
seconds Python takes to import torch and onnxruntime (about 2 s of CPU each, per process of every run).

``python -m hetsplit.runtime.zygote PAD`` imports what a rank needs (``PRELOAD``), starts no thread, and
reads requests from its stdin, one JSON line each: a module to run as ``__main__``, its arguments, the
environment, working directory and log file. It forks a child per request and answers
``started ID PID``; when a child ends it says ``exit PID CODE`` (``Popen.returncode``'s convention).
The child is what ``python -m MODULE ARGS`` started by the launcher would be: its own session (its
process group is its pid), stdin from /dev/null, stdout and stderr into the log, the environment given,
the kernel's peak-RSS mark reset, dying with the zygote, which dies with the process that started it
(``lifetime.die_with_parent``), and the command line of the process it stands for (written over the
zygote's ``PAD``), so ``launch.processes_of`` finds it by its run directory.

``Zygote`` is the launching side: ``spawn`` gives a ``Popen``-like ``Forked`` (``pid``, ``poll``,
``wait``, ``kill``, ``returncode``). ``shared()`` is the one zygote of this process, started on first
use and reused by every later run; it is only offered to the main thread (its death signal is tied to
the thread that started it), and ``ENV=0`` turns it off (every rank is then a fresh ``python -m``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import traceback
from pathlib import Path

ENV = "HETSPLIT_FORK_RANKS"                  # "0": start every rank as a fresh interpreter
PRELOAD = ("onnxruntime", "hetsplit.runtime.process", "hetsplit.runtime.driver", "hetsplit.runtime.worker")
PAD = 4096                                   # room on the zygote's command line for a child's own
PR_SET_PDEATHSIG = 1


# What a forked rank adds to its report: the RSS it began with (the pages it shares with the zygote that
# it has touched; libraries the zygote loaded count only once the rank touches them, so its peak RSS is
# below a fresh process's by what only the imports touched).
FORKED: dict[str, object] = {}


# ---- the zygote process ----------------------------------------------------------------------------

def set_cmdline(argv: list[str]) -> None:
    """Write ``argv`` over this process's command line (``/proc/self/cmdline``), truncated to its room."""
    fields = Path("/proc/self/stat").read_text().rsplit(") ", 1)[1].split()
    start, end = int(fields[45]), int(fields[46])      # arg_start, arg_end (fields 48 and 49)
    text = "\0".join(argv).encode()[:end - start - 1]
    ctypes.memmove(start, text + b"\0" * (end - start - len(text)), end - start)


def _child(req: dict, zygote: int, closing: list[int]) -> None:
    """In the forked child: become the process ``req`` asks for, run its module, exit (never returns)."""
    code = 1
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        os.setsid()
        ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != zygote:                     # the zygote died before the request took hold
            os._exit(1)
        null = os.open(os.devnull, os.O_RDONLY)
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        for fd, into in ((null, 0), (log, 1), (log, 2)):
            os.dup2(fd, into)
        os.close(null)
        os.close(log)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        extra = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p and p not in sys.path]
        sys.path[:0] = extra                          # the child's PYTHONPATH, as a fresh interpreter's
        argv = [req["module"], *req["args"]]
        set_cmdline([sys.executable, "-m", *argv])
        from hetsplit.costs.profiler.memory import reset_peak_rss, rss_bytes

        reset_peak_rss()
        FORKED["start_rss_bytes"] = rss_bytes()
        sys.argv = argv
        runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported in the log like an uncaught exception would be
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The zygote: preload, then fork a child per request until stdin closes."""
    for name in PRELOAD:
        importlib.import_module(name)
    me = os.getpid()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    out = sys.stdout.fileno()
    buf = b""

    def say(line: str) -> None:
        os.write(out, line.encode() + b"\n")

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            say(f"exit {pid} {os.waitstatus_to_exitcode(status)}")

    while True:
        ready = select.select([0, wake_r], [], [])[0]
        if wake_r in ready:
            os.read(wake_r, 4096)
            reap()
        if 0 not in ready:
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            break
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            req = json.loads(line)
            pid = os.fork()
            if pid == 0:
                _child(req, me, [wake_r, wake_w])
            say(f"started {req['id']} {pid}")
        reap()
    os._exit(0)


# ---- the launching side ----------------------------------------------------------------------------

class Forked:
    """A ``Popen``-like view of a process forked by a ``Zygote``."""

    def __init__(self, zygote: "Zygote", pid: int):
        self.zygote, self.pid = zygote, pid

    @property
    def returncode(self) -> int | None:
        return self.zygote.codes.get(self.pid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        with self.zygote.changed:
            if not self.zygote.changed.wait_for(lambda: self.returncode is not None, timeout):
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Zygote:
    """A zygote process and the thread that reads its answers."""

    def __init__(self, env: dict[str, str]):
        from hetsplit.lifetime import die_with_parent

        self.popen = subprocess.Popen([sys.executable, "-m", __name__, " " * PAD], stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                      start_new_session=True, preexec_fn=die_with_parent())
        self.codes: dict[int, int] = {}
        self.started: dict[int, int] = {}
        self.changed = threading.Condition()
        self.lock = threading.Lock()
        self.next_id = 0
        self.alive = True
        threading.Thread(target=self._read, name="zygote-reader", daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for raw in self.popen.stdout:
            what, a, b = raw.decode().split()
            with self.changed:
                if what == "started":
                    self.started[int(a)] = int(b)
                else:
                    self.codes[int(a)] = int(b)
                self.changed.notify_all()
        with self.changed:        # the zygote is gone, and its children with it (their death signal)
            self.alive = False
            for pid in self.started.values():
                self.codes.setdefault(pid, -signal.SIGKILL)
            self.changed.notify_all()

    def spawn(self, module: str, args: list[str], env: dict[str, str], log: Path, timeout_s: float) -> Forked:
        """Fork ``python -m module args`` (see the module doc); RuntimeError if the zygote cannot."""
        with self.lock:
            rid, self.next_id = self.next_id, self.next_id + 1
            req = {"id": rid, "module": module, "args": args, "env": env, "log": str(log), "cwd": os.getcwd()}
            assert self.popen.stdin is not None
            try:
                self.popen.stdin.write(json.dumps(req).encode() + b"\n")
                self.popen.stdin.flush()
            except OSError as exc:
                raise RuntimeError(f"the zygote is gone: {exc}") from exc
        with self.changed:
            if not self.changed.wait_for(lambda: rid in self.started or not self.alive, timeout_s):
                raise RuntimeError(f"the zygote did not fork within {timeout_s:g} s")
            if rid not in self.started:
                raise RuntimeError("the zygote is gone")
            return Forked(self, self.started[rid])

    def usable(self) -> bool:
        return self.alive and self.popen.poll() is None

    def close(self) -> None:
        if self.popen.stdin is not None:
            try:
                self.popen.stdin.close()
            except OSError:
                pass
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


_SHARED: dict[int, Zygote] = {}     # launching pid -> its zygote
_GUARD = threading.Lock()


def shared(env: dict[str, str]) -> Zygote | None:
    """This process's zygote (started with ``env`` on first use); None where forking ranks is off or this
    is not the main thread."""
    if os.environ.get(ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    with _GUARD:
        z = _SHARED.get(os.getpid())
        if z is None or not z.usable():
            z = _SHARED[os.getpid()] = Zygote(env)
            atexit.register(z.close)
        return z


def idle_rank_peak_rss_bytes(timeout_s: float = 120.0) -> int | None:
    """Peak RSS (VmHWM) of a rank forked as the runtime forks ranks that loads nothing (the baseline a
    rank's own memory is measured above); None where ranks are not forked here or it cannot be read."""
    import tempfile

    from hetsplit.runtime.launch import child_env

    z = shared(child_env(1))
    if z is None:
        return None
    with tempfile.TemporaryDirectory(prefix="hetsplit-idle-") as tmp:
        log = Path(tmp) / "idle.log"
        try:
            z.spawn(__name__, [IDLE], child_env(1), log, timeout_s).wait(timeout_s)
            return int(log.read_text().split()[-1])
        except (RuntimeError, subprocess.TimeoutExpired, OSError, ValueError, IndexError):
            return None


def _idle() -> None:
    """A forked rank that loads nothing: print its peak RSS."""
    from hetsplit.runtime.process import limit_threads, peak_rss_bytes

    limit_threads()
    print(peak_rss_bytes())


IDLE = "--idle"

if __name__ == "__main__":
    if sys.argv[1:] == [IDLE]:
        _idle()
    else:
        serve()
