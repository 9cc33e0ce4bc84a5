"""One process of a run: ``python -m hetsplit.runtime.process RUN_DIR RANK``.

Rank 0 is the driver (serves the rendezvous, feeds inputs, collects and verifies outputs); rank
``s + 1`` runs stage ``s`` of a pipeline, or the ``s``-th device of a mapping (its loop is
``runtime.mapping_worker``). Each writes ``rank<R>.json`` into the run directory: its measurements,
or ``{"ok": false, "error": ...}`` naming the device and the cause. The process always ends with
``os._exit`` so no lingering transport thread can keep it alive.
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

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.cpu_throttle import join_group
from hetsplit.runtime.manifest import Manifest, TensorSpec, load_manifest
from hetsplit.runtime.nccl import NcclLinks, gpu_ranks
from hetsplit.runtime.pipe import EdgeLog, Receiver, Sender, Shared, Stop
from hetsplit.runtime.wire import LinkFailure, Wire, open_group, open_store


def limit_threads() -> None:
    """Torch only moves tensors here: one thread, so devices sharing a machine keep their cores."""
    import torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def connect(cfg: RunConfig, manifest: Manifest, rank: int, run_dir: Path) -> Wire:
    """Join the rendezvous and open the gloo group (rank 0 serves it and writes port.txt)."""
    world = manifest.world_size
    store = open_store(rank, world, cfg.master_addr, cfg.master_port, cfg.startup_timeout_s)
    if rank == 0:
        tmp = run_dir / "port.txt.tmp"
        tmp.write_text(str(store.port))
        tmp.rename(run_dir / "port.txt")
    me = manifest.worker(rank).device
    try:
        pg = open_group(store, rank, world, cfg.addr(rank), cfg.startup_timeout_s)
    except RuntimeError as exc:
        raise RuntimeFailure(f"device {me}: could not connect to the other processes within "
                             f"{cfg.startup_timeout_s:g} s ({str(exc).splitlines()[0]})") from None
    wire = Wire(pg, me, cfg.timeout_s)
    wire._store = store  # keep the store (and, on rank 0, its server) alive for the whole run
    gpus = gpu_ranks(manifest, cfg.kinds)
    if rank in gpus and any(e.rank in gpus for w in manifest.stages if w.rank in gpus for e in w.send):
        wire.nccl = NcclLinks.open(store, rank, gpus, cfg.timeout_s, me)
    return wire


def wait_threads(shared: Shared, *threads) -> None:
    for t in threads:
        while t.is_alive():
            t.join(0.05)
    if shared.error is not None:
        raise shared.error


def peak_rss_bytes() -> int:
    """This worker's own peak RSS: the kernel's VmHWM. ``ru_maxrss`` is not used where VmHWM exists:
    a child started by fork + exec inherits its launcher's peak there."""
    from hetsplit.costs.profiler.memory import peak_rss_bytes as vm_hwm

    own = vm_hwm()
    return own if own is not None else int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


# ---- a stage -----------------------------------------------------------------------------------

def run_worker(cfg: RunConfig, manifest: Manifest, rank: int, run_dir: Path) -> dict:
    from hetsplit.runtime.executor import make_executor

    spec = manifest.worker(rank)
    threads = int(cfg.threads.get(spec.device, 1))
    exe = make_executor(manifest, rank, threads, cfg.kinds.get(spec.device, "cpu"))
    received = {t.name: t for e in spec.recv for t in e.tensors}
    exe.run({n: np.zeros(received[n].shape, received[n].dtype) for n in spec.inputs})  # warm-up: first-run allocations
    wire = connect(cfg, manifest, rank, run_dir)
    wire.handshake(spec.recv, spec.send)
    join_group(cfg.cgroups.get(str(rank)))
    shared = Shared()
    n = cfg.inputs
    rx = Receiver(wire, spec.recv, n, cfg.depth, shared)
    tx = Sender(wire, spec.send, n, shared, [cfg.delay(rank, e.rank) for e in spec.send], release=rx.release)
    if hasattr(exe, "keep"):  # outputs bound for another GPU stay on the device
        exe.keep = {t.name for e in spec.send if wire.on_gpu(e) for t in e.tensors}
    meter = energy_meter(cfg.kinds.get(spec.device, "cpu"))
    meter.start()
    rx.start(), tx.start()
    compute, idle = [], []
    compute_cpu = 0.0             # this thread's CPU inside the sub-model (all of it with one compute thread)
    cpu0 = time.process_time()
    try:
        fault = cfg.faults.get(str(rank))
        for i in range(n):
            if fault and i == int(fault.get("after", 0)):
                inject(fault["kind"])
            t0 = time.time()
            _, frame = rx.take()
            t1, c1 = time.time(), time.thread_time()
            outs = exe.run({name: frame[name] for name in spec.inputs})
            t2 = time.time()
            compute_cpu += time.thread_time() - c1
            idle.append(t1 - t0)
            compute.append(t2 - t1)
            tx.submit(i, {**frame, **outs}, frame)
    except Stop:
        pass
    except BaseException as exc:  # noqa: BLE001
        shared.fail(exc)
    wait_threads(shared, rx, tx)
    cpu = time.process_time() - cpu0
    energy = meter.stop()
    return {"compute_s": compute, "idle_s": idle, "threads": threads, "kind": cfg.kinds.get(spec.device, "cpu"),
            "process_cpu_s": cpu, "compute_cpu_s": compute_cpu,
            "energy_j": energy, "energy_meter": meter.name if energy is not None else meter.reason,
            "recv": [log.to_dict() for log in rx.logs], "send": [log.to_dict() for log in tx.logs]}


def inject(kind: str) -> None:
    """Rehearse a fault: 'die' (killed outright) or 'stall' (stopped: its links stall)."""
    os.kill(os.getpid(), signal.SIGKILL if kind == "die" else signal.SIGSTOP)


def energy_meter(kind: str):
    """RAPL for CPUs, NVML for GPUs (whole package / board: devices sharing one share its reading)."""
    from hetsplit.costs.meters import meter_for

    return meter_for(kind)


# ---- the driver ----------------------------------------------------------------------------------

def make_inputs(specs: list[TensorSpec], n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``n`` reproducible input sets (normal floats, small non-negative integers, random booleans)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feed = {}
        for t in specs:
            dt = np.dtype(t.dtype)
            if dt.kind == "f":
                feed[t.name] = rng.standard_normal(t.shape).astype(dt)
            elif dt.kind == "b":
                feed[t.name] = rng.random(t.shape) < 0.5
            else:
                feed[t.name] = rng.integers(0, 10, t.shape).astype(dt)
        out.append(feed)
    return out


def run_driver(cfg: RunConfig, manifest: Manifest, run_dir: Path) -> dict:
    """Feed the inputs and collect the outputs from one thread, with no receiver or sender thread.

    The driver only waits, so handing each message between threads would cost more CPU than the
    message itself: it posts every send at once (gloo sends are asynchronous) and keeps ``depth + 1``
    receives preposted, each into a fresh frame that becomes that input's output (no copy, no pool).
    A receive's completion is recorded when its wait returns, which is at once: the driver waits for
    nothing else. A send's is recorded when the driver checks it, just before the input's output.
    """
    spec = manifest.driver
    wire = connect(cfg, manifest, 0, run_dir)
    wire.handshake(spec.recv, spec.send)
    n, k = cfg.inputs, min(cfg.latency_inputs, cfg.inputs)
    inputs = make_inputs(manifest.inputs, n, cfg.seed)
    rx_logs = [EdgeLog(e.peer, e.nbytes) for e in spec.recv]
    tx_logs = [EdgeLog(e.peer, e.nbytes) for e in spec.send]
    frames: list[dict[str, np.ndarray]] = []
    recvs: list[list] = []
    sends: list[list] = []

    def post_recv() -> None:
        frame = {t.name: t.empty() for e in spec.recv for t in e.tensors}
        works = []
        for e, log in zip(spec.recv, rx_logs):
            log.start.append(time.time())
            works.append(wire.post(e, [frame[t.name] for t in e.tensors], sending=False))
        frames.append(frame)
        recvs.append(works)

    def post_send(i: int) -> None:
        works = []
        for e, log in zip(spec.send, tx_logs):
            log.start.append(time.time())
            works.append(wire.post(e, manifest.driver_arrays(inputs[i], e), sending=True))
        sends.append(works)

    t_out: list[float] = []
    cpu0 = time.process_time()
    for i in range(min(n, cfg.depth + 1)):
        post_recv()
    for i in range(n):
        if i < k:                       # unloaded latency: one input in flight
            post_send(i)
        elif i == k:                    # then stream the rest as fast as the pipeline takes them
            for j in range(k, n):
                post_send(j)
        for e, log, works in zip(spec.send, tx_logs, sends[i]):
            wire.wait(works, e, sending=True)
            log.done.append(time.time())
        for e, log, works in zip(spec.recv, rx_logs, recvs[i]):
            wire.wait(works, e, sending=False)
            log.done.append(time.time())
        t_out.append(time.time())
        sends[i] = recvs[i] = []        # drop the finished works and their tensors
        if i + cfg.depth + 1 < n:
            post_recv()
    cpu = time.process_time() - cpu0
    t_in = tx_logs[0].start if tx_logs else [0.0] * n
    result = {"t_in": t_in, "t_out": t_out, "latency_inputs": k, "process_cpu_s": cpu,
              "recv": [log.to_dict() for log in rx_logs], "send": [log.to_dict() for log in tx_logs]}
    if cfg.verify:
        result["verify"] = verify(manifest, inputs, frames, cfg)
    return result


def verify(manifest: Manifest, inputs: list[dict], outputs: list[dict], cfg: RunConfig) -> dict:
    """Compare every output with the unsplit model run in onnxruntime; fail on a mismatch."""
    import onnxruntime as ort

    src = Path(manifest.source_model)
    if not src.is_file():
        raise RuntimeFailure(f"driver: cannot verify: the unsplit model {src} is not on this host")
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(src), so, providers=["CPUExecutionProvider"])
    names = [t.name for t in manifest.outputs]
    max_abs, max_rel, worst = 0.0, 0.0, None
    for i, (feed, got) in enumerate(zip(inputs, outputs)):
        ref = dict(zip(names, sess.run(names, feed)))
        for name in names:
            a, b = np.asarray(got[name], dtype=np.float64), np.asarray(ref[name], dtype=np.float64)
            if a.shape != b.shape:
                raise RuntimeFailure(f"driver: output {name!r} of input {i} has shape {a.shape}, the unsplit model "
                                     f"gives {b.shape}")
            err = float(np.max(np.abs(a - b))) if a.size else 0.0
            scale = float(np.max(np.abs(b))) if b.size else 0.0
            rel = err / scale if scale > 0 else err
            if err > cfg.atol + cfg.rtol * scale:
                raise RuntimeFailure(f"driver: output {name!r} of input {i} differs from the unsplit model: max abs "
                                     f"error {err:.3g}, relative {rel:.3g} (allowed {cfg.atol:g} + {cfg.rtol:g} x "
                                     f"{scale:.3g})")
            if err >= max_abs:
                worst = f"{name} (input {i})"
            max_abs, max_rel = max(max_abs, err), max(max_rel, rel)
    return {"outputs_checked": len(outputs) * len(names), "max_abs_err": max_abs, "max_rel_err": max_rel,
            "worst": worst, "atol": cfg.atol, "rtol": cfg.rtol, "ok": True}


# ---- entry ----------------------------------------------------------------------------------------

# What a process runs: given its config, rank and run directory, its device name and its work
# (a callable returning its measurements), so a failure while loading already names the device.
Work = Callable[[RunConfig, int, Path], tuple[str, Callable[[], dict]]]


def manifest_work(cfg: RunConfig, rank: int, run_dir: Path) -> tuple[str, Callable[[], dict]]:
    """The driver, a pipeline stage or a mapping device of a manifest (``cfg.manifest``)."""
    manifest = load_manifest(cfg.manifest)
    device = manifest.worker(rank).device
    if rank == 0:
        return device, lambda: run_driver(cfg, manifest, run_dir)
    if getattr(manifest, "is_mapping", False):
        from hetsplit.runtime.mapping_worker import run_mapping_worker

        return device, lambda: run_mapping_worker(cfg, manifest, rank, run_dir)
    return device, lambda: run_worker(cfg, manifest, rank, run_dir)


def main(argv: list[str], work: Work = manifest_work) -> int:
    """Run rank ``argv[1]`` of the run in ``argv[0]``; write ``rank<R>.json`` and exit (never raises)."""
    run_dir, rank = Path(argv[0]), int(argv[1])
    out = run_dir / f"rank{rank}.json"
    device = f"rank {rank}"
    t0 = time.time()
    try:
        cfg = RunConfig.load(run_dir / "config.json")
        if cfg.cpus.get(str(rank)):
            os.sched_setaffinity(0, cfg.cpus[str(rank)])
        limit_threads()
        device, job = work(cfg, rank, run_dir)
        result = job()
        doc = {"ok": True, "rank": rank, "device": device, "t_start": t0, "t_end": time.time(),
               "peak_rss_bytes": peak_rss_bytes(),
               "cpus": sorted(os.sched_getaffinity(0)), **result}
        code = 0
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, never raised past here
        kind = exc.kind if isinstance(exc, LinkFailure) else "error"
        peer = exc.peer if isinstance(exc, LinkFailure) else None
        msg = str(exc) if isinstance(exc, RuntimeFailure) else f"device {device}: {type(exc).__name__}: {exc}"
        doc = {"ok": False, "rank": rank, "device": device, "error": msg, "kind": kind, "peer": peer,
               "t_fail": time.time(), "traceback": traceback.format_exc()}
        code = 1
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc))
    tmp.rename(out)
    sys.stdout.flush(), sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    main(sys.argv[1:])
