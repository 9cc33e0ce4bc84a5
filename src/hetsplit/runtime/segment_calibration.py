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

from hetsplit.costs.segment_fit import FLOOR_S, fit_segments  # noqa: F401  (the fit lives in costs)
from hetsplit.errors import HetsplitError

WORKERS = ("local-cpu0", "local-cpu1")


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


def describe(fixed_s: float, byte_s: float, rows: list[dict[str, Any]]) -> str:
    """One phrase for the calibration's source text."""
    excess = [r["measured_s"] - r["layers_s"] for r in rows]
    return (f"a segment's call {fixed_s * 1e3:.3f} ms + {byte_s * 1e9:.3f} ns per boundary byte beyond its layers "
            f"(toy mapped layer by layer, {len(rows)} segments, median excess "
            f"{statistics.median(excess) * 1e3:.3f} ms)")
