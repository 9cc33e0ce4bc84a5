"""One process of a run: ``python -m hetsplit.runtime.process RUN_DIR RANK``.

Rank 0 is the driver (``runtime.driver``: serves the rendezvous, feeds inputs, collects and verifies
outputs); rank ``r >= 1`` runs the program of the plan's ``r``-th device (``runtime.worker``). Each
writes ``rank<R>.json`` into the run directory: its measurements (with ``job_cpu_s``, the CPU its process
spent on the run: every thread, set-up and verification included), or ``{"ok": false, "error": ...}``
naming the device and the cause. The process always ends with ``os._exit`` so no lingering
transport thread can keep it alive.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Callable

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.wire import LinkFailure
from hetsplit.torch_threads import limit_threads


def peak_rss_bytes() -> int:
    """This process's own peak RSS: the kernel's VmHWM. ``ru_maxrss`` is not used where VmHWM exists:
    a child started by fork + exec inherits its launcher's peak there."""
    from hetsplit.costs.profiler.memory import peak_rss_bytes as vm_hwm

    own = vm_hwm()
    return own if own is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


def inject(kind: str) -> None:
    """Rehearse a fault: 'die' (killed outright) or 'stall' (stopped: its links stall)."""
    os.kill(os.getpid(), signal.SIGKILL if kind == "die" else signal.SIGSTOP)


def energy_meter(kind: str):
    """RAPL for CPUs, NVML for GPUs (whole package / board: devices sharing one share its reading)."""
    from hetsplit.costs.meters import meter_for

    return meter_for(kind)


# What a process runs: given its config, rank and run directory, its device name and its work
# (a callable returning its measurements), so a failure while loading already names the device.
Work = Callable[[RunConfig, int, Path], tuple[str, Callable[[], dict]]]


def manifest_work(cfg: RunConfig, rank: int, run_dir: Path) -> tuple[str, Callable[[], dict]]:
    """The driver or a device's worker of a manifest (``cfg.manifest``)."""
    from hetsplit.runtime.driver import run_driver
    from hetsplit.runtime.manifest import load_manifest
    from hetsplit.runtime.worker import run_worker

    manifest = load_manifest(cfg.manifest)
    device = manifest.worker(rank).device
    if rank == 0:
        return device, lambda: run_driver(cfg, manifest, run_dir)
    return device, lambda: run_worker(cfg, manifest, rank, run_dir)


def main(argv: list[str], work: Work = manifest_work) -> int:
    """Run rank ``argv[1]`` of the run in ``argv[0]``; write ``rank<R>.json`` and exit (never raises)."""
    from hetsplit.runtime.zygote import FORKED

    code = run_rank(Path(argv[0]), int(argv[1]), work, dict(FORKED) or None, cpu_since=0.0)   # a fresh process
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


def run_rank(run_dir: Path, rank: int, work: Work = manifest_work, extra: dict | None = None,
             cpu_since: float | None = None) -> int:
    """Run rank ``rank`` of the run in ``run_dir`` and write ``rank<R>.json`` (with ``extra`` on success); the
    exit code it calls for (0: done, 1: failed, reported). Never raises; a warm process (``runtime.pool``)
    calls it once per run. ``job_cpu_s``: this process's CPU time since ``cpu_since`` (a
    ``time.process_time`` reading; None: from this call), what the run cost it."""
    out = run_dir / f"rank{rank}.json"
    device = f"rank {rank}"
    t0 = time.time()
    cpu0 = time.process_time() if cpu_since is None else cpu_since
    try:
        cfg = RunConfig.load(run_dir / "config.json")
        if cfg.cpus.get(str(rank)):
            os.sched_setaffinity(0, cfg.cpus[str(rank)])
        limit_threads()
        device, job = work(cfg, rank, run_dir)
        result = job()
        doc = {"ok": True, "rank": rank, "device": device, "t_start": t0, "t_end": time.time(),
               "job_cpu_s": time.process_time() - cpu0, "peak_rss_bytes": peak_rss_bytes(),
               "cpus": sorted(os.sched_getaffinity(0)), **(extra or {}), **result}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, never raised past here
        kind = exc.kind if isinstance(exc, LinkFailure) else "error"
        peer = exc.peer if isinstance(exc, LinkFailure) else None
        msg = str(exc) if isinstance(exc, RuntimeFailure) else f"device {device}: {type(exc).__name__}: {exc}"
        doc = {"ok": False, "rank": rank, "device": device, "error": msg, "kind": kind, "peer": peer,
               "t_fail": time.time(), "traceback": traceback.format_exc()}
        code = 1
    sys.stdout.flush(), sys.stderr.flush()
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.rename(out)
    return code


if __name__ == "__main__":
    main(sys.argv[1:])
