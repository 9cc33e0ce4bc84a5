"""What a segment costs this machine's CPU beyond its layers, measured with the runtime's own calls.

The model is cut into k segments of consecutive layers (k = 1, 2, 4, 8; about equal layer counts), split
into sub-models as the runtime splits any plan (``split_model``: the layers of segment j mapped to a device
of their own, so each device runs one segment), and every segment is timed through the worker's executor
call (``segment_timing.time_segments``: onnxruntime on the CPU, the profile's threads, clock and statistic).
A segment's time is fitted as ``scale x`` its layers' profiled time (``layer_s``, from the same machine's
whole-model profile) ``+ call_s + byte_s x`` its boundary bytes over every segment of every cut, each term
>= 0, by the least relative error (``fit_scaled``). ``scale`` takes up how the machine moved between the
profile and the probe (a shared machine's load slows every segment alike, which a fit of the excess alone
would read as a cost per call: ResNet-50 on the loaded 2-core VM, 1.26x, fitted 0.63 ms per call without
it); every cut computes the whole model once, so only what grows with the cuts is left to the call and
the bytes. The GPU profiler fits the excess alone (``costs.segment_fit``), its layers timed in the same run.

What a layer pays when a cut separates it from the layer before it (``CostTable.unfused_s``): the model is
also cut into one segment per layer and each layer timed alone the same way; a layer whose share of the
whole-model profile is under ``FUSED_SHARE`` of its time alone (less its segment's fitted cost) had its
work done inside another layer's fused kernel there (a residual Add folded into its convolution), and
pays the difference when cut off; every other layer pays nothing (its share already is its own work).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.segment import SegmentCost
from hetsplit.costs.segment_fit import FLOOR_S
from hetsplit.errors import HetsplitError
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Placement, Plan
from hetsplit.runtime.segment_timing import time_segments
from hetsplit.runtime.split import split_model

CUTS = (1, 2, 4, 8)
FUSED_SHARE = 0.5    # a layer whose whole-model share is below this part of its own time alone was fused away


def layer_ranges(num_layers: int, k: int) -> list[np.ndarray]:
    """``k`` runs of consecutive layers of about equal counts (fewer when the model has fewer layers)."""
    return [r for r in np.array_split(np.arange(num_layers), min(k, num_layers)) if r.size]


@dataclass(frozen=True)
class Timing:
    """How the probe times each call, as the profile timed its layers: ``threads``, the ``clock`` (wall, or
    cpu with one thread) and the ``statistic`` over ``repeats`` calls (median or min)."""

    threads: int = 1
    clock: str = "wall"
    statistic: str = "median"
    repeats: int = 5
    warmup: int = 1

    def describe(self) -> str:
        return f"{self.threads} thread(s), {self.statistic} of {self.repeats} by the {self.clock} clock"


def probe_rows(graph: Graph, onnx_path: Path, layer_s: np.ndarray, timing: Timing = Timing(),
               cuts: tuple[int, ...] = CUTS) -> list[dict[str, Any]]:
    """Per segment of every cut: its boundary bytes, its call time and its layers' time (``layer_s``,
    seconds per layer of ``graph``)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hetsplit-segprobe-") as tmp:
        for k in cuts:
            ranges = layer_ranges(graph.num_layers, k)
            assign: dict[str, Placement] = {graph.names[int(i)]: f"seg{j}" for j, r in enumerate(ranges) for i in r}
            plan = Plan(graph.name, "runtime", "segment probe", assign=assign)
            manifest = split_model(plan, graph, onnx_path, Path(tmp) / f"cut{k}")
            for j, seg in enumerate(time_segments(manifest, threads=timing.threads, repeats=timing.repeats,
                                                  warmup=timing.warmup, clock=timing.clock,
                                                  statistic=timing.statistic)):
                mine = ranges[int(seg.device.removeprefix("seg"))]
                rows.append({"cut": len(ranges), "segment": j, "boundary_bytes": seg.boundary_bytes,
                             "measured_s": seg.seconds, "layers_s": float(layer_s[mine].sum())})
    return rows


def fit_scaled(rows: list[dict[str, Any]]) -> tuple[float, float, float]:
    """``(scale, call_s, byte_s)``, each >= 0: ``measured_s ~ scale x layers_s + call_s + byte_s x
    boundary_bytes`` with the least relative error over ``rows``."""
    if not rows:
        raise HetsplitError("segment probe: no segment was measured")
    from scipy.optimize import nnls

    y = np.array([r["measured_s"] for r in rows], dtype=float)
    a = np.array([[r["layers_s"], 1.0, r["boundary_bytes"]] for r in rows], dtype=float)
    w = 1.0 / np.maximum(y, FLOOR_S)
    norm = np.maximum(np.abs(a * w[:, None]).max(axis=0), 1e-300)      # columns of one size for the solver
    coef, _ = nnls(a * w[:, None] / norm, y * w)
    scale, call_s, byte_s = (coef / norm).tolist()
    return scale, call_s, byte_s


def probe_segment_cost(graph: Graph, onnx_path: Path, layer_s: np.ndarray, timing: Timing = Timing(),
                       cuts: tuple[int, ...] = CUTS) -> tuple[SegmentCost, float, list[dict[str, Any]]]:
    """The fitted ``SegmentCost`` of this machine's CPU on ``graph`` (its source saying how), the scale of the
    profile's layer times to the probe's machine (``fit_scaled``) and the rows."""
    rows = probe_rows(graph, onnx_path, layer_s, timing, cuts)
    scale, call_s, byte_s = fit_scaled(rows)
    done = sorted({r["cut"] for r in rows})
    return SegmentCost(call_s, byte_s, 0.0, (
        f"measured: the model cut into {'/'.join(map(str, done))} segments of consecutive layers, split as the "
        f"runtime splits a plan and each run as a worker's onnxruntime call ({timing.describe()}; {len(rows)} "
        f"segments), segment time fitted as the profile's layer times x{scale:.3f} + call + bytes x its boundary "
        "bytes")), scale, rows


def unfused_from(alone_s: np.ndarray, layer_s: np.ndarray, segment_s: np.ndarray) -> np.ndarray:
    """Per layer: what it pays beyond its whole-model share when cut off from the layer before it, from its
    time alone as a segment (``alone_s``), its share (``layer_s``) and its segment's fitted cost
    (``segment_s``); 0 for layer 0 and wherever the share is not under ``FUSED_SHARE`` of its own time."""
    own = np.maximum(np.asarray(alone_s, dtype=float) - segment_s, 0.0)
    extra = np.where(layer_s < FUSED_SHARE * own, own - layer_s, 0.0)
    extra[:1] = 0.0
    return extra


def probe_unfused(graph: Graph, onnx_path: Path, layer_s: np.ndarray, cost: SegmentCost,
                  timing: Timing = Timing()) -> np.ndarray:
    """``unfused_from`` with every layer of ``graph`` timed alone, one segment each, as a worker's call
    (``layer_s``: the profile's layer times at the probe's machine, ``fit_scaled``'s scale applied)."""
    alone = np.zeros(graph.num_layers)
    segment = np.zeros(graph.num_layers)
    with tempfile.TemporaryDirectory(prefix="hetsplit-unfused-") as tmp:
        assign: dict[str, Placement] = {n: f"layer{i}" for i, n in enumerate(graph.names)}
        plan = Plan(graph.name, "runtime", "unfused probe", assign=assign)
        manifest = split_model(plan, graph, onnx_path, Path(tmp) / "layers")
        for seg in time_segments(manifest, threads=timing.threads, repeats=timing.repeats, warmup=timing.warmup,
                                 clock=timing.clock, statistic=timing.statistic):
            i = int(seg.device.removeprefix("layer"))
            alone[i], segment[i] = seg.seconds, cost.seconds(seg.boundary_bytes)
    return unfused_from(alone, np.asarray(layer_s, dtype=float), segment)
