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
also cut into one segment per layer and each layer timed alone the same way (every split's passes
interleaved with the others'); a layer whose share of the
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
from hetsplit.runtime.segment_timing import DEFAULT_TIMING, Timing, time_splits
from hetsplit.runtime.split import split_model

CUTS = (1, 2, 4, 8)
FUSED_SHARE = 0.5    # a layer whose whole-model share is below this part of its own time alone was fused away


def layer_ranges(num_layers: int, k: int) -> list[np.ndarray]:
    """``k`` runs of consecutive layers of about equal counts (fewer when the model has fewer layers)."""
    return [r for r in np.array_split(np.arange(num_layers), min(k, num_layers)) if r.size]


def probe_rows(graph: Graph, onnx_path: Path, layer_s: np.ndarray, timing: Timing = DEFAULT_TIMING,
               cuts: tuple[int, ...] = CUTS) -> tuple[list[dict[str, Any]], np.ndarray]:
    """Per segment of every cut: its boundary bytes, its call time and its layers' time (``layer_s``,
    seconds per layer of ``graph``); and per layer, its time alone as a segment with its boundary bytes
    (L x 2). Every split's passes interleaved (``time_splits``), so load that drifts slows them alike."""
    cut_ranges = [layer_ranges(graph.num_layers, k) for k in cuts]
    plans = [{graph.names[int(i)]: f"seg{j}" for j, r in enumerate(ranges) for i in r} for ranges in cut_ranges]
    plans.append({n: f"seg{i}" for i, n in enumerate(graph.names)})          # every layer alone
    with tempfile.TemporaryDirectory(prefix="hetsplit-segprobe-") as tmp:
        manifests = []
        for k, assign in enumerate(plans):
            typed: dict[str, Placement] = dict(assign)
            manifests.append(split_model(Plan(graph.name, "runtime", "segment probe", assign=typed), graph,
                                         onnx_path, Path(tmp) / f"split{k}"))
        timed = time_splits(manifests, timing=timing)
    rows: list[dict[str, Any]] = []
    for ranges, segs in zip(cut_ranges, timed):
        for j, seg in enumerate(segs):
            mine = ranges[int(seg.device.removeprefix("seg"))]
            rows.append({"cut": len(ranges), "segment": j, "boundary_bytes": seg.boundary_bytes,
                         "measured_s": seg.seconds, "layers_s": float(layer_s[mine].sum())})
    alone = np.zeros((graph.num_layers, 2))
    for seg in timed[-1]:
        alone[int(seg.device.removeprefix("seg"))] = (seg.seconds, seg.boundary_bytes)
    return rows, alone


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


def probe_segment_cost(graph: Graph, onnx_path: Path, layer_s: np.ndarray, timing: Timing = DEFAULT_TIMING,
                       cuts: tuple[int, ...] = CUTS) -> SegmentProbe:
    """What the probe finds on ``graph`` (``probe_rows``, ``fit_scaled``, ``unfused_from``)."""
    rows, alone = probe_rows(graph, onnx_path, layer_s, timing, cuts)
    scale, call_s, byte_s = fit_scaled(rows)
    done = sorted({r["cut"] for r in rows})
    cost = SegmentCost(call_s, byte_s, 0.0, (
        f"measured: the model cut into {'/'.join(map(str, done))} segments of consecutive layers, split as the "
        f"runtime splits a plan and each run as a worker's onnxruntime call ({timing.describe()}; {len(rows)} "
        f"segments), segment time fitted as the profile's layer times x{scale:.3f} + call + bytes x its boundary "
        "bytes"))
    segment_s = np.array([cost.seconds(b) for b in alone[:, 1]])
    return SegmentProbe(cost, scale, rows, unfused_from(alone[:, 0], np.asarray(layer_s, dtype=float) * scale,
                                                         segment_s))


@dataclass(frozen=True)
class SegmentProbe:
    """The probe's findings: the type's segment cost, the scale of the profile's layer times to the probe's
    machine, the rows fitted, and per layer its unfused extra."""

    cost: SegmentCost
    scale: float
    rows: list[dict[str, Any]]
    unfused_s: np.ndarray


def unfused_from(alone_s: np.ndarray, layer_s: np.ndarray, segment_s: np.ndarray) -> np.ndarray:
    """Per layer: what it pays beyond its whole-model share when cut off from the layer before it, from its
    time alone as a segment (``alone_s``), its share (``layer_s``) and its segment's fitted cost
    (``segment_s``); 0 for layer 0 and wherever the share is not under ``FUSED_SHARE`` of its own time."""
    own = np.maximum(np.asarray(alone_s, dtype=float) - segment_s, 0.0)
    extra = np.where(layer_s < FUSED_SHARE * own, own - layer_s, 0.0)
    extra[:1] = 0.0
    return extra
