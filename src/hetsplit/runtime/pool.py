"""Warm processes that run the ranks of run after run (``RunOptions.pool``), so a search that runs many
plans pays Python's, torch's and onnxruntime's start-up once, not once per process of every run.

Each process of a ``WorkerPool`` is ``python -m hetsplit.runtime.pool``: it imports what a rank needs,
then reads jobs (``RUN_DIR<TAB>RANK``) from its stdin, one at a time, and runs each exactly as a fresh
process would (``process.run_rank``: the same driver and worker programs, ``rank<R>.json``, its output
in ``rank<R>.log``), loading the run's sub-models anew. Between jobs it returns to its own cgroup (a
throttled worker joined its run's group), its CPU affinity, and frees what it can (garbage, malloc's
free pages) before resetting the kernel's peak-RSS mark, so ``peak_rss_bytes`` is again the job's own
peak; its report also holds ``start_rss_bytes``, the RSS it began the job with (what earlier jobs left
that could not be freed included), the baseline to measure the job's own memory from. The driver of a
run always runs in a process that has only ever been a driver: it keeps the unsplit model's session and
outputs for verification (``runtime.reference``), which must not count in a worker's memory.

``PoolLauncher`` is the ``Launcher`` of a pooled run: it hands each rank to a warm process instead of
starting one, and supervises them the same way (a rank is done once it has reported). A process that
dies mid-run ends the run with the launcher's message naming the device, and one still busy when a run
fails is killed; the pool starts fresh processes for the next run. Processes die with the process that
started them (``lifetime.die_with_parent``: start the pool from the main thread) and end when their
stdin closes (``close``); each carries ``owner_tag()`` on its command line. Link emulation wraps each
process in a network namespace when it starts, so a pooled run cannot emulate links; every rank runs
one compute thread, on a CPU.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Iterator

from hetsplit.errors import UsageError
from hetsplit.lifetime import die_with_parent
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launcher, Proc, child_env
from hetsplit.runtime.manifest import Manifest

DRIVER, WORKER = "driver", "worker"
TAG = "hetsplit-pool-"        # a warm process's argument: TAG + the pid of the process that started it


def owner_tag(pid: int | None = None) -> str:
    """The argument that marks the warm processes started by ``pid`` (default: this process), so
    ``launch.processes_of(owner_tag(pid))`` finds them."""
    return f"{TAG}{os.getpid() if pid is None else pid}"


class PooledRank:
    """A ``Popen``-like view of one rank of one run in a warm process: done (0) once it reported success,
    failed (1) once it reported a failure, the process's own exit code if it died first."""

    def __init__(self, popen: subprocess.Popen, run_dir: Path, rank: int):
        self.process, self.report = popen, Path(run_dir) / f"rank{rank}.json"

    @property
    def pid(self) -> int:
        return self.process.pid

    def reported(self) -> bool | None:
        """True: the rank reported success; False: a failure; None: no report yet."""
        try:
            return bool(json.loads(self.report.read_text()).get("ok"))
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def poll(self) -> int | None:
        ok = self.reported()
        if ok is not None:
            return 0 if ok else 1
        code = self.process.poll()
        return None if code is None else (code or 1)     # gone without a report is a failure

    @property
    def returncode(self) -> int | None:
        return self.poll()

    def kill(self) -> None:
        self.process.kill()

    def wait(self, timeout: float | None = None) -> int:
        code = self.poll()
        return code if code is not None else self.process.wait(timeout)


class WorkerPool:
    """Warm rank processes, started on demand and reused; a context manager that ends them all."""

    def __init__(self, log: str | Path | None = None):
        self.log = Path(log) if log else None
        self.idle: dict[str, list[subprocess.Popen]] = {DRIVER: [], WORKER: []}
        self.started = 0          # processes started so far (runs that found them warm started none)

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def spawn(self) -> subprocess.Popen:
        out = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            p = subprocess.Popen([sys.executable, "-m", __name__, owner_tag()], stdin=subprocess.PIPE, stdout=out,
                                 stderr=subprocess.STDOUT, env=child_env(1), start_new_session=True,
                                 preexec_fn=die_with_parent())
        finally:
            if not isinstance(out, int):
                out.close()
        self.started += 1
        return p

    def warm(self, workers: int) -> None:
        """Start processes until a driver and ``workers`` workers are idle (they import in parallel)."""
        self._prune()
        self.idle[DRIVER] += [self.spawn() for _ in range(1 - len(self.idle[DRIVER]))]
        self.idle[WORKER] += [self.spawn() for _ in range(workers - len(self.idle[WORKER]))]

    def _prune(self) -> None:
        for role in self.idle:
            self.idle[role] = [p for p in self.idle[role] if p.poll() is None]

    def take(self, role: str) -> subprocess.Popen:
        """A live idle process for ``role`` (driver or worker), started if there is none."""
        self._prune()
        return self.idle[role].pop(0) if self.idle[role] else self.spawn()

    def submit(self, popen: subprocess.Popen, run_dir: Path, rank: int) -> None:
        """Hand ``popen`` rank ``rank`` of the run in ``run_dir`` (a dead process shows when polled)."""
        try:
            assert popen.stdin is not None                   # opened with PIPE
            popen.stdin.write(f"{run_dir}\t{rank}\n".encode())
            popen.stdin.flush()
        except (BrokenPipeError, OSError):
            pass

    def release(self, role: str, rank: PooledRank) -> None:
        """Back to idle when it reported success and lives; else ended."""
        if rank.reported() is True and rank.process.poll() is None:
            self.idle[role].append(rank.process)
        else:
            _end(rank.process)

    def launcher(self, manifest: Manifest, cfg: RunConfig, run_dir: Path, ranks: list[int] | None = None,
                 wrap: Callable[[int], list[str]] | None = None) -> "PoolLauncher":
        return PoolLauncher(self, manifest, cfg, run_dir, ranks, wrap)

    def close(self) -> None:
        """End every idle process (closing its stdin ends it; one that lingers is killed)."""
        for role in self.idle:
            for p in self.idle[role]:
                _end(p)
            self.idle[role] = []


def _end(p: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(OSError):
        if p.stdin is not None:
            p.stdin.close()
    try:
        p.wait(timeout=2)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(p.pid, 9)
        p.kill()
        p.wait(timeout=10)


class PoolLauncher(Launcher):
    """A ``Launcher`` whose ranks run in ``pool``'s warm processes (see the module doc)."""

    def __init__(self, pool: WorkerPool, manifest: Manifest, cfg: RunConfig, run_dir: Path,
                 ranks: list[int] | None = None, wrap: Callable[[int], list[str]] | None = None):
        if wrap is not None:
            raise UsageError("a pooled run cannot emulate links (each process would have to start inside its "
                             "network namespace); run without the pool or without link emulation")
        many = {d: n for d, n in cfg.threads.items() if int(n) != 1}
        if many:
            raise UsageError(f"a pooled run gives every rank one compute thread, not {many}")
        gpus = sorted(d for d, kind in cfg.kinds.items() if kind == "gpu")
        if gpus and not cfg.cpu_only:
            raise UsageError(f"a pooled run computes on CPUs only ({', '.join(gpus)} would use a GPU, whose "
                             "CUDA and NCCL state a warm process would carry from run to run); run without the "
                             "pool, or CPU only")
        super().__init__(manifest, cfg, run_dir, ranks)
        self.pool = pool

    def start(self, rank: int) -> Proc:
        popen = self.pool.take(DRIVER if rank == 0 else WORKER)
        job = PooledRank(popen, self.run_dir, rank)
        self.pool.submit(popen, self.run_dir, rank)
        proc = Proc(rank, self.manifest.worker(rank).device, job, self.run_dir / f"rank{rank}.log")
        self.procs.append(proc)
        return proc

    def run(self) -> dict[int, dict]:
        try:
            return super().run()
        finally:
            for p in self.procs:
                assert isinstance(p.popen, PooledRank)       # start() makes every one
                self.pool.release(DRIVER if p.rank == 0 else WORKER, p.popen)


# ---- the warm process ------------------------------------------------------------------------------

def _cgroup_home() -> Path | None:
    """``cgroup.procs`` of this process's own cgroup in the cpu controller's hierarchy (None: no controller)."""
    from hetsplit.runtime.cpu_throttle import Controller, find_controller

    ctl = find_controller()
    if not isinstance(ctl, Controller):
        return None
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, rel = line.split(":", 2)
        if (ctl.version == "v2" and controllers == "") or (ctl.version != "v2" and "cpu" in controllers.split(",")):
            return ctl.root / rel.lstrip("/") / "cgroup.procs"
    return None


def fresh_peak() -> int | None:
    """Free what this process holds and no longer needs, reset the kernel's peak-RSS mark (VmHWM); the RSS
    it starts the next job with (None where unreadable)."""
    from hetsplit.costs.profiler.memory import reset_peak_rss, rss_bytes

    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    reset_peak_rss()
    return rss_bytes()


@contextlib.contextmanager
def _output_to(path: Path) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors 1 and 2) into ``path`` for a while."""
    sys.stdout.flush(), sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(fd, 1), os.dup2(fd, 2)
        yield
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os.dup2(saved[0], 1), os.dup2(saved[1], 2)
        for f in (fd, *saved):
            os.close(f)


def _pooled_work(home: Path | None):
    """``process.manifest_work`` that leaves its run's cgroup (back to ``home``) before it reports."""
    from hetsplit.runtime.process import manifest_work

    def work(cfg: RunConfig, rank: int, run_dir: Path):
        device, job = manifest_work(cfg, rank, run_dir)

        def run() -> dict:
            try:
                return job()
            finally:
                if cfg.cgroups.get(str(rank)) and home is not None:
                    home.write_text(f"{os.getpid()}\n")

        return device, run

    return work


def serve() -> None:
    """The warm process: run each job read from stdin; exit when stdin closes."""
    import onnxruntime  # noqa: F401 - what every rank imports, once

    from hetsplit.runtime import driver, worker  # noqa: F401
    from hetsplit.runtime.process import limit_threads, run_rank

    limit_threads()
    cpus, home = os.sched_getaffinity(0), _cgroup_home()
    work = _pooled_work(home)
    for line in sys.stdin:
        run_dir, rank = line.rstrip("\n").split("\t")
        start = fresh_peak()
        with _output_to(Path(run_dir) / f"rank{rank}.log"):
            run_rank(Path(run_dir), int(rank), work, {"start_rss_bytes": start})
        os.sched_setaffinity(0, cpus)
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    serve()
