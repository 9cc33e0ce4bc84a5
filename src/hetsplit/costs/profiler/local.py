"""Measure a model on this machine: per-layer latency inside the whole model, memory, energy.

``profile_cpu`` runs the model's ONNX file with onnxruntime (CPU execution provider, the given
thread count), once with the profiler on to get per-node kernel times over ``repeats`` runs after
``warmup``, and once with it off to get the whole-model time. Per-node times are summed per layer
(``NodeAttributor``); the layer time is the median over runs, with p10/p90 kept. Energy comes from
the meter (RAPL) when it can read, else it is estimated as ``power_w`` x time and marked so.
With ``co_load`` K > 0, K other cores run the same model throughout (``coload.CoLoad``), so each
layer is timed under the load it meets when K + 1 pipeline stages compute at once on this machine.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.meters import EnergyMeter, describe
from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler.attribution import NodeAttributor
from hetsplit.costs.profiler.coload import CoLoad
from hetsplit.costs.profiler.memory import (
    live_bytes_per_layer,
    peak_rss_bytes,
    reset_peak_rss,
    rss_bytes,
)
from hetsplit.costs.profiler.ort_timing import NodeRuns, measure, reduce, summary
from hetsplit.costs.table import CostTable
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph


def layer_times(graph: Graph, runs: NodeRuns) -> tuple[np.ndarray, dict[str, Any]]:
    """runs x layers seconds; unknown nodes go to the layer of the node that ran before them."""
    attr = NodeAttributor(graph)
    out = np.zeros((len(runs.runs), graph.num_layers))
    by_order: dict[str, int] = {}
    for r, run in enumerate(runs.runs):
        last: int | None = None
        pending = 0.0
        for name, seconds in run:
            layer = attr.layer_of(name)
            if layer is None:
                by_order[name] = by_order.get(name, 0) + 1
                if last is None:
                    pending += seconds        # before any known node: give it to the first known one
                    continue
                layer = last
            out[r, layer] += seconds + pending
            pending, last = 0.0, layer
    return out, {"nodes_attributed_by_order": sorted(by_order)}


def profile_cpu(graph: Graph, onnx_path: str | Path, *, device_type: str = "local-cpu", threads: int = 1,
                warmup: int = 5, repeats: int = 20, meter: EnergyMeter | None = None,
                power_w: float | None = None, statistic: str = "median", clock: str = "wall",
                co_load: int = 0) -> Profile:
    """A measured ``hetsplit.profile/1`` Profile of ``graph`` (from ``onnx_path``) on this CPU.

    ``statistic`` (median, p10 or min over the runs) gives both the layer times and the whole-model
    time; on a machine shared with other jobs ``min`` estimates the unloaded time best. The profile
    keeps the median, p10, p90 and min of every layer either way. ``clock="cpu"`` (one thread only)
    times the whole model by the thread's CPU time, which leaves out time the core served others; with
    the median or p10 it also scales each profiled run's layer times by that run's CPU time / wall
    time (preemption assumed spread over the run). The minimum is not scaled: a layer's fastest run
    is already one the core was not taken away in, and scaling it by a run-wide share biases it low.
    ``co_load`` K > 0 pins this process to ``threads`` cores and keeps K helpers, each on ``threads``
    cores of its own, running the same model from before warm-up until the measurement ends.
    """
    import onnxruntime as ort

    if clock not in ("wall", "cpu"):
        raise ProfileError(f"clock must be 'wall' or 'cpu', got {clock!r}")
    if clock == "cpu" and threads != 1:
        raise ProfileError(f"--clock cpu needs --threads 1 (CPU time of {threads} threads is not a latency)")

    rss0 = rss_bytes()
    peak_reset = reset_peak_rss()
    coload = CoLoad(onnx_path, co_load, threads)
    with coload:
        runs, wall, cpu, joules = measure(onnx_path, threads, warmup, repeats, ["CPUExecutionProvider"], meter)
    whole = cpu if clock == "cpu" else wall
    peak = peak_rss_bytes()
    per_run, attribution = layer_times(graph, runs)
    if clock == "cpu" and statistic != "min":   # take out the share of each run others held the core
        per_run = per_run * runs.cpu_share()[:, None]
    layer = reduce(per_run, statistic)
    whole_stats = summary(whole)
    whole_s = float(reduce(np.asarray(whole), statistic))
    layer_sum = float(layer.sum())

    if joules is not None and meter is not None:     # joules come from the meter
        per_inference = joules / repeats
        energy = per_inference * layer / layer_sum if layer_sum > 0 else np.zeros_like(layer)
        energy_meta = {"status": "measured", "meter": describe(meter), "per_inference_j": per_inference}
        if co_load:
            energy_meta["note"] = f"a package meter's reading includes the {co_load} co-load process(es)"
    else:
        watts = float(power_w) if power_w is not None else 0.0
        energy = layer * watts
        energy_meta = {"status": "estimated" if power_w is not None else "unavailable",
                       "meter": describe(meter) if meter is not None else "none",
                       "estimated_power_w": power_w,
                       "note": "energy_j = estimated_power_w x layer time" if power_w is not None
                       else "no meter and no power figure: energy_j is 0"}
    source = (f"measured: onnxruntime {ort.__version__} {runs.providers[0]}, {threads} thread(s), "
              f"{statistic} of {repeats} runs after {warmup} warm-up, whole model by {clock} clock"
              + (f", {co_load} other core(s) running the model meanwhile" if co_load else ""))
    table = CostTable(graph.names, [device_type], layer[:, None], energy[:, None],
                      live_bytes_per_layer(graph)[:, None], {device_type: source})
    pct = np.percentile(per_run, [10, 50, 90], axis=0)
    meta = {
        "source": source, "device": device_type, "threads": threads, "warmup": warmup, "repeats": repeats,
        "statistic": statistic, "onnx": str(onnx_path),
        **(coload.describe() if co_load else {"co_load": 0}),
        "whole_model": {**whole_stats, "time_s": whole_s, "statistic": statistic, "clock": clock,
                        "wall": summary(wall), "cpu": summary(cpu),
                        "profiled_run_median_s": float(np.median(runs.run_s))},
        "layer_sum_s": layer_sum,
        "gap": layer_sum / whole_s - 1.0,
        "layer_stats": {"p10_s": pct[0].tolist(), "median_s": pct[1].tolist(), "p90_s": pct[2].tolist(),
                        "min_s": per_run.min(axis=0).tolist()},
        "energy": energy_meta,
        "memory": {"rss_before_bytes": rss0, "peak_rss_bytes": peak if peak_reset else None,
                   "peak_rss_note": "process peak RSS (VmHWM) over the measured runs" if peak_reset
                   else "peak RSS could not be reset here; not reported",
                   "peak_live_bytes": float(live_bytes_per_layer(graph).max()),
                   "mem_bytes_note": "per-layer mem_bytes: weights + tensors alive across the layer (analytic)"},
        **attribution,
    }
    return Profile(graph, table, meta)
