"""Co-load: keep other cores busy with the same model while the profiler measures on pinned cores.

In a pipeline on one machine every stage computes at once and the cores share the L3 cache and
memory bandwidth (on a VM, also whatever the host shares); a layer measured with the rest of the
machine idle runs faster than it will there. ``CoLoad`` pins this process to its own cores, starts
``k`` helper processes, each pinned to cores of its own and running the model in a loop, waits
until each has run it once, and on exit stops and reaps them, also on an error or a
KeyboardInterrupt. A helper whose parent is gone ends by itself: its stdin pipe closes.

A helper is ``python -m hetsplit.costs.profiler.coload ONNX THREADS CPU[,CPU...]``.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from hetsplit.errors import ProfileError
from hetsplit.lifetime import die_with_parent

READY = b"ready\n"
START_TIMEOUT_S = 300.0
STOP_TIMEOUT_S = 5.0


def usable_cpus() -> list[int]:
    """The CPUs this process may run on, in order."""
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))


def cpu_sets(k: int, threads: int, cpus: list[int] | None = None) -> list[list[int]]:
    """``k + 1`` disjoint sets of ``threads`` CPUs: the measuring process's first, then one per helper."""
    cpus = usable_cpus() if cpus is None else cpus
    need = (k + 1) * threads
    if k < 0 or threads < 1:
        raise ProfileError(f"--co-load must be >= 0 and --threads >= 1, got {k} and {threads}")
    if need > len(cpus):
        helpers, per_set = len(cpus) // threads - 1, len(cpus) // (k + 1)   # what would fit, one or the other
        fixes = ([f"--co-load to at most {helpers}"] if helpers >= 0 else []) + \
            ([f"--threads to at most {per_set}"] if per_set >= 1 else [])
        raise ProfileError(f"--co-load {k} with --threads {threads} needs {need} cores (the measurement's and "
                           f"{k} helper(s)' own), but this process may use {len(cpus)} ({cpus}); "
                           f"lower {', or '.join(fixes) if fixes else '--co-load and --threads'}")
    return [cpus[i * threads:(i + 1) * threads] for i in range(k + 1)]


class CoLoad:
    """Context manager: ``k`` helpers run ``onnx_path`` on their own cores while the body measures."""

    def __init__(self, onnx_path: str | Path, k: int, threads: int = 1, start_timeout_s: float = START_TIMEOUT_S):
        self.onnx_path, self.k, self.threads = Path(onnx_path), k, threads
        self.start_timeout_s = start_timeout_s
        sets = cpu_sets(k, threads)
        self.own_cpus, self.helper_cpus = sets[0], sets[1:]
        self.procs: list[subprocess.Popen[bytes]] = []
        self._saved: list[int] | None = None

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def describe(self) -> dict[str, Any]:
        return {"co_load": self.k, "measured_on_cpus": self.own_cpus, "co_load_cpus": self.helper_cpus,
                "co_load_note": f"{self.k} other process(es), each pinned to its own core(s), ran the same model "
                                "in a loop during warm-up and measurement"}

    def __enter__(self) -> Self:
        if self.k == 0:
            return self
        self._saved = usable_cpus()
        try:
            os.sched_setaffinity(0, self.own_cpus)
            for cpus in self.helper_cpus:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "hetsplit.costs.profiler.coload", str(self.onnx_path), str(self.threads),
                     ",".join(map(str, cpus))],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    start_new_session=True,     # a Ctrl-C reaches this process, which stops the helpers
                    preexec_fn=die_with_parent()))  # and a SIGKILL of it kills them
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        waiting = {_piped(p.stdout).fileno(): p for p in self.procs}
        got = {fd: b"" for fd in waiting}
        while waiting:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ProfileError(f"--co-load: {len(waiting)} helper(s) did not run {self.onnx_path.name} once "
                                   f"within {self.start_timeout_s:g} s")
            readable, _, _ = select.select(list(waiting), [], [], min(left, 0.5))
            for fd in readable:
                chunk = os.read(fd, 64)
                got[fd] += chunk
                if got[fd].startswith(READY):
                    del waiting[fd]
                elif not chunk:            # EOF: the helper ended before it was ready
                    p = waiting[fd]
                    p.wait()
                    err = _piped(p.stderr).read().decode(errors="replace").strip().splitlines()
                    raise ProfileError(f"--co-load: a helper running {self.onnx_path.name} exited with code "
                                       f"{p.returncode} before it was ready: {err[-1] if err else 'no message'}")

    def stop(self) -> None:
        """End every helper (close its stdin, then SIGKILL whatever is left), reap it, restore affinity."""
        for p in self.procs:
            try:
                _piped(p.stdin).close()
            except OSError:
                pass
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for p in self.procs:
            try:
                p.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            for f in (p.stdout, p.stderr):
                _piped(f).close()
        if self._saved is not None:
            os.sched_setaffinity(0, self._saved)
            self._saved = None


# ---- the helper process ------------------------------------------------------------------------

def _exit_when_parent_goes() -> None:
    """Block on stdin; at EOF (the parent closed it, or died) end the process at once."""
    try:
        sys.stdin.buffer.read()
    finally:
        os._exit(0)


def helper_main(argv: list[str]) -> None:
    onnx_path, threads, cpus = argv[0], int(argv[1]), [int(c) for c in argv[2].split(",")]
    os.sched_setaffinity(0, cpus)
    threading.Thread(target=_exit_when_parent_goes, daemon=True).start()
    from hetsplit.costs.profiler.ort_timing import example_inputs, make_session

    session = make_session(onnx_path, threads, ["CPUExecutionProvider"])
    feeds = example_inputs(session)
    session.run(None, feeds)
    sys.stdout.buffer.write(READY)
    sys.stdout.flush()
    while True:                       # onnxruntime releases the GIL while it runs: the watcher stays live
        session.run(None, feeds)


if __name__ == "__main__":
    helper_main(sys.argv[1:])


def _piped(f: IO[bytes] | None) -> IO[bytes]:
    """A helper's stdin, stdout or stderr: every one is opened with ``subprocess.PIPE``."""
    if f is None:
        raise ProfileError("--co-load: a helper's pipe is missing")
    return f
