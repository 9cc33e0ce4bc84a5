"""The driver (rank 0) of every run: feeds the model inputs, collects the outputs, verifies them.

``run_driver(cfg, manifest, run_dir)``: the first ``latency_inputs`` inputs go one at a time (the
unloaded latency), then the rest stream as fast as the devices take them. The driver only waits, so
handing each message between threads would cost more CPU than the message itself: it posts every
send at once (gloo sends are asynchronous) and keeps ``depth + 1`` receives preposted, each into a
fresh frame that becomes that input's output (no copy, no pool). A receive's completion is recorded
when its wait returns, which is at once: the driver waits for nothing else. A send's is recorded when
the driver checks it, just before the input's output. ``verify`` compares every output with the
unsplit model run in onnxruntime.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.inputs import make_inputs
from hetsplit.runtime.manifest import DRIVER, Manifest
from hetsplit.runtime.wire import connect
from hetsplit.runtime.inflight import MessageLog


def run_driver(cfg: RunConfig, manifest: Manifest, run_dir: Path) -> dict:
    """Feed ``cfg.inputs`` inputs and collect their outputs from one thread; the driver's measurements."""
    wire = connect(cfg, manifest.world_size, DRIVER, 0, run_dir)
    wire.handshake(manifest.driver.recv, manifest.driver.send)
    n, k = cfg.inputs, min(cfg.latency_inputs, cfg.inputs)
    inputs = make_inputs(manifest.inputs, n, cfg.seed)
    out_msgs, in_msgs = manifest.sent_by(0), manifest.received_by(0)
    tx_logs = [MessageLog(m.id, m.dst, m.nbytes) for m in out_msgs]
    rx_logs = [MessageLog(m.id, m.src, m.nbytes) for m in in_msgs]
    frames: list[dict[str, np.ndarray]] = []
    recvs: list[list] = []
    sends: list[list] = []

    def post_recv() -> None:
        frame = {t.spec.name: t.spec.empty() for m in in_msgs for t in m.tensors}
        works = []
        for m, log in zip(in_msgs, rx_logs):
            log.start.append(time.time())
            works.append(wire.post(m.edge(False), [frame[t.spec.name] for t in m.tensors], sending=False))
        frames.append(frame)
        recvs.append(works)

    def post_send(i: int) -> None:
        works = []
        for m, log in zip(out_msgs, tx_logs):
            log.start.append(time.time())
            works.append(wire.post(m.edge(True), m.arrays(inputs[i]), sending=True))
        sends.append(works)

    t_out: list[float] = []
    wire.ready(manifest.names)          # every worker set up: the first input's latency is the plan's
    cpu0 = time.process_time()
    for i in range(min(n, cfg.depth + 1)):
        post_recv()
    for i in range(n):
        if i < k:                       # unloaded latency: one input in flight
            post_send(i)
        elif i == k:                    # then stream the rest as fast as the devices take them
            for j in range(k, n):
                post_send(j)
        for m, log, works in zip(out_msgs, tx_logs, sends[i]):
            wire.wait(works, m.edge(True), sending=True)
            log.done.append(time.time())
        for m, log, works in zip(in_msgs, rx_logs, recvs[i]):
            wire.wait(works, m.edge(False), sending=False)
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
    from hetsplit.runtime.reference import reference_outputs

    src = Path(manifest.source_model)
    if not src.is_file():
        raise RuntimeFailure(f"driver: cannot verify: the unsplit model {src} is not on this host")
    names = [t.name for t in manifest.outputs]
    max_abs, max_rel, worst = 0.0, 0.0, None
    for i, (feed, got) in enumerate(zip(inputs, outputs)):
        ref = reference_outputs(src, names, feed)
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
