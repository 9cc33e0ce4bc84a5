"""What a segment's executor call costs beyond its layers on this machine (``estimate.segments``).

The toy CNN (``runtime.toy``) is mapped layer by layer onto two workers in turn, so that every layer is a
segment of its own, and run for real at three tensor sizes (``runtime.calibration.SEGMENT_RUNS``). Its
layers are also profiled here as the ``local`` cluster's are (onnxruntime's kernel times inside the whole
model, one thread, co-loaded by the other worker's core). Each segment's median compute in the run less
its layers' profiled time is what the call added; over the segments of every run, ``fixed_s + byte_s x``
the bytes crossing the segment's boundary (``TaskGraph.segment_boundary_bytes``) is fitted to it with the
least relative error, neither below 0. Only the toy is fitted: the models and plans it is used for are
held out.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import HetsplitError

WORKERS = ("local-cpu0", "local-cpu1")
FLOOR_S = 1e-5      # excesses below this weigh as much as it does in the fit (timer noise)


def measure_segments(channels: int, size: int, inputs: int, latency_inputs: int, workdir: Path) -> list[dict[str, Any]]:
    """Run the toy (``channels`` x ``size``^2 tensors) with its layers on the two workers in turn; per
    segment its boundary bytes, its median compute in the run and its layers' profiled time (s)."""
    from hetsplit.costs.profiler.local import profile_cpu
    from hetsplit.plan.check import check_plan
    from hetsplit.plan.types import Plan
    from hetsplit.runtime import RunOptions, run_manifest, split_model
    from hetsplit.runtime.compile import plan_cluster
    from hetsplit.runtime.toy import toy_model

    here = workdir / f"segments-{channels}x{size}"
    here.mkdir(parents=True, exist_ok=True)
    graph = toy_model(here / "toy.onnx", channels=channels, size=size, blocks=2)
    plan = Plan(graph.name, "local", "segment calibration",
                assign={name: WORKERS[k % 2] for k, name in enumerate(graph.names)})
    # co-loaded as the two workers load each other (none on a one-core machine)
    co_load = max(0, min(len(WORKERS), len(os.sched_getaffinity(0))) - 1)
    profile = profile_cpu(graph, here / "toy.onnx", threads=1, co_load=co_load)
    layer_s = dict(zip(graph.names, profile.costs.time_s[:, 0]))
    manifest = split_model(plan, graph, here / "toy.onnx", here / "split")
    run_manifest(manifest, RunOptions(inputs=inputs, latency_inputs=latency_inputs, timeout_s=60,
                                      run_dir=here / "run"))
    tg = check_plan(graph, plan_cluster(plan), plan)
    boundary = iter(tg.segment_boundary_bytes())
    rows = []
    for worker in manifest.stages:
        doc = json.loads((here / "run" / f"rank{worker.rank}.json").read_text())
        per_input = np.asarray(doc["segment_compute_s"][latency_inputs:], dtype=float)
        for k, segment in enumerate(worker.segments):
            device, nbytes = next(boundary)
            if tg.cluster.names[device] != worker.device:
                raise HetsplitError(f"segment calibration: the TaskGraph's segments of {tg.cluster.names[device]} "
                                    f"do not line up with the manifest's of {worker.device}")
            rows.append({"device": worker.device, "segment": k, "boundary_bytes": nbytes,
                         "measured_s": float(np.median(per_input[:, k])),
                         "layers_s": float(sum(layer_s[t] for t in segment.tasks))})
    return rows


def fit_segments(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """``(fixed_s, byte_s)``: the line through each segment's excess (measured less its layers) over its
    boundary bytes that fits them with the least relative error (the excesses span 0.03-1.4 ms here, and
    a plan's segments are mostly small ones, which an absolute fit would leave to the largest), neither
    below 0 (a negative one is pinned at 0 and the other refitted)."""
    if not rows:
        raise HetsplitError("segment calibration: no segment was measured")
    x = np.array([r["boundary_bytes"] for r in rows], dtype=float)
    y = np.array([r["measured_s"] - r["layers_s"] for r in rows], dtype=float)
    w = 1.0 / np.maximum(np.abs(y), FLOOR_S)
    ones = np.ones_like(x)

    def line(*columns: np.ndarray) -> np.ndarray:
        return np.linalg.lstsq(np.column_stack(columns) * w[:, None], y * w, rcond=None)[0]

    fixed_s, byte_s = line(ones, x) if np.ptp(x) > 0 else (0.0, -1.0)
    if byte_s < 0:                         # a falling line, or no spread in bytes to fit one: a level
        fixed_s, byte_s = line(ones)[0], 0.0
    if fixed_s < 0:                        # a line through below 0: through 0 instead
        fixed_s, byte_s = 0.0, line(x)[0]
    return max(0.0, float(fixed_s)), max(0.0, float(byte_s))


def describe(fixed_s: float, byte_s: float, rows: list[dict[str, Any]]) -> str:
    """One phrase for the calibration's source text."""
    excess = [r["measured_s"] - r["layers_s"] for r in rows]
    return (f"a segment's call {fixed_s * 1e3:.3f} ms + {byte_s * 1e9:.3f} ns per boundary byte beyond its layers "
            f"(toy mapped layer by layer, {len(rows)} segments, median excess "
            f"{statistics.median(excess) * 1e3:.3f} ms)")
