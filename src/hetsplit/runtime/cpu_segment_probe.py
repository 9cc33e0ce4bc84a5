"""What a segment costs this machine's CPU beyond its layers, measured with the runtime's own calls.

The model is cut into k segments of consecutive layers (k = 1, 2, 4, 8; about equal layer counts), split
into sub-models as the runtime splits any plan (``split_model``: the layers of segment j mapped to a device
of their own, so each device runs one segment), and every segment is timed through the worker's executor
call (``segment_timing.time_segments``: onnxruntime on the CPU, the profile's thread count). A segment's
median time less its layers' profiled time (``layer_s``, from the same machine's whole-model profile) is
what the cut added; ``costs.segment_fit.fit_segments`` fits ``call_s + byte_s x`` its boundary bytes to it
over every segment of every cut, as the GPU profiler does (``costs.profiler.segment_probe``).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.segment import SegmentCost
from hetsplit.costs.segment_fit import fit_segments
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.segment_timing import time_segments
from hetsplit.runtime.split import split_model

CUTS = (1, 2, 4, 8)


def layer_ranges(num_layers: int, k: int) -> list[np.ndarray]:
    """``k`` runs of consecutive layers of about equal counts (fewer when the model has fewer layers)."""
    return [r for r in np.array_split(np.arange(num_layers), min(k, num_layers)) if r.size]


def probe_rows(graph: Graph, onnx_path: Path, layer_s: np.ndarray, threads: int = 1, cuts: tuple[int, ...] = CUTS,
               repeats: int = 5, warmup: int = 1) -> list[dict[str, Any]]:
    """Per segment of every cut: its boundary bytes, its median call time and its layers' time (``layer_s``,
    seconds per layer of ``graph``)."""
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hetsplit-segprobe-") as tmp:
        for k in cuts:
            ranges = layer_ranges(graph.num_layers, k)
            assign = {graph.names[int(i)]: f"seg{j}" for j, r in enumerate(ranges) for i in r}
            plan = Plan(graph.name, "runtime", "segment probe", assign=assign)
            manifest = split_model(plan, graph, onnx_path, Path(tmp) / f"cut{k}")
            for j, seg in enumerate(time_segments(manifest, threads=threads, repeats=repeats, warmup=warmup)):
                mine = ranges[int(seg.device.removeprefix("seg"))]
                rows.append({"cut": len(ranges), "segment": j, "boundary_bytes": seg.boundary_bytes,
                             "measured_s": seg.seconds, "layers_s": float(layer_s[mine].sum())})
    return rows


def probe_segment_cost(graph: Graph, onnx_path: Path, layer_s: np.ndarray, threads: int = 1,
                       cuts: tuple[int, ...] = CUTS, repeats: int = 5) -> tuple[SegmentCost, list[dict[str, Any]]]:
    """The fitted ``SegmentCost`` of this machine's CPU on ``graph`` (its source saying how) and its rows."""
    rows = probe_rows(graph, onnx_path, layer_s, threads, cuts, repeats)
    call_s, byte_s = fit_segments(rows)
    done = sorted({r["cut"] for r in rows})
    return SegmentCost(call_s, byte_s, 0.0, (
        f"measured: the model cut into {'/'.join(map(str, done))} segments of consecutive layers, split as the "
        f"runtime splits a plan and each run as a worker's onnxruntime call ({threads} thread(s), median of "
        f"{repeats}; {len(rows)} segments), segment time less its layers' profiled time fitted as call + bytes x "
        "its boundary bytes")), rows
