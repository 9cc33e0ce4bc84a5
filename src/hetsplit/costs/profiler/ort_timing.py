"""Per-node kernel times from onnxruntime's built-in profiler, and whole-model timing without it."""

from __future__ import annotations

import json
import os
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import ProfileError

_INT_TYPES = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(int8)": np.int8,
              "tensor(uint8)": np.uint8, "tensor(bool)": np.bool_}
_FLOAT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


@dataclass
class NodeRuns:
    """Kernel times of every node in every profiled run, in execution order."""

    runs: list[list[tuple[str, float]]]          # per run: (onnxruntime node name, seconds)
    run_s: list[float]                           # onnxruntime's model_run duration of each run
    providers: list[str] = field(default_factory=list)
    cpu_s: list[float] = field(default_factory=list)  # the calling thread's CPU time of each run

    def cpu_share(self) -> np.ndarray:
        """Per run, CPU time / wall time (<= 1): the share of the run the core was ours."""
        if len(self.cpu_s) != len(self.run_s):
            return np.ones(len(self.run_s))
        wall = np.maximum(np.asarray(self.run_s), 1e-12)
        return np.clip(np.asarray(self.cpu_s) / wall, 0.0, 1.0)


def session_options(threads: int, profile_dir: Path | None = None) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if profile_dir is not None:
        so.enable_profiling = True
        so.profile_file_prefix = str(profile_dir / "ort")
    return so


def make_session(onnx_path: str | Path, threads: int, providers: list[str], profile_dir: Path | None = None) -> Any:
    import onnxruntime as ort

    try:
        return ort.InferenceSession(str(onnx_path), session_options(threads, profile_dir), providers=providers)
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ProfileError(f"{onnx_path}: onnxruntime cannot load the model ({exc})") from None


def example_inputs(session: Any, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching the session's inputs (``random_feeds``)."""
    types = {**_FLOAT_TYPES, **_INT_TYPES}
    for inp in session.get_inputs():
        if inp.type not in types:
            raise ProfileError(f"model input {inp.name!r} has type {inp.type}, which the profiler cannot fill")
    return random_feeds([(i.name, types[i.type], i.shape) for i in session.get_inputs()], seed)


def random_feeds(inputs: list[tuple[str, Any, list]], seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays for (name, numpy dtype, shape) inputs: dynamic dimensions as 1, floats standard
    normal, integers (token ids) in [0, 100)."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, dtype, dims in inputs:
        shape = [d if isinstance(d, int) and d > 0 else 1 for d in dims]
        dtype = np.dtype(dtype)
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind in "iub":
            feeds[name] = rng.integers(0, 100, size=shape).astype(dtype)
        else:
            raise ProfileError(f"model input {name!r} has type {dtype}, which the profiler cannot fill")
    return feeds


def time_whole_model(session: Any, feeds: dict, warmup: int, repeats: int, meter: Any = None) -> tuple[list[float], float | None]:
    """Wall-clock seconds of each of ``repeats`` runs after ``warmup``; and joules over them (or None)."""
    for _ in range(warmup):
        session.run(None, feeds)
    times = []
    if meter is not None:
        meter.start()
    for _ in range(repeats):
        t0 = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - t0)
    energy = meter.stop() if meter is not None else None
    return times, energy


def measure(onnx_path: str | Path, threads: int, warmup: int, repeats: int,
            providers: list[str] | None = None, meter: Any = None
            ) -> tuple[NodeRuns, list[float], list[float], float | None]:
    """Per-node kernel times (profiler on) and whole-model times (profiler off), interleaved.

    Two sessions of the same model run turn about, so both see the same machine load. Whole-model
    runs are timed by the wall clock and by this thread's CPU time (with one onnxruntime thread the
    kernels run on the calling thread, so CPU time is the run's latency minus the time other
    processes held the core). The energy meter, when it can read, wraps ``repeats`` more plain runs.
    """
    providers = providers or ["CPUExecutionProvider"]
    with tempfile.TemporaryDirectory(prefix="hetsplit-ort-") as tmp:
        profiled = make_session(onnx_path, threads, providers, Path(tmp))
        plain = make_session(onnx_path, threads, providers)
        feeds = example_inputs(profiled)
        for _ in range(warmup):
            profiled.run(None, feeds)
            plain.run(None, feeds)
        whole, cpu, profiled_cpu = [], [], []
        for _ in range(repeats):
            c0 = time.thread_time()
            profiled.run(None, feeds)
            profiled_cpu.append(time.thread_time() - c0)
            t0, c0 = time.perf_counter(), time.thread_time()
            plain.run(None, feeds)
            whole.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
        events = json.loads(Path(profiled.end_profiling()).read_text())
        used = profiled.get_providers()
    joules = None
    if meter is not None and getattr(meter, "available", False):
        _, joules = time_whole_model(plain, feeds, 0, repeats, meter)
    node_runs, run_s = parse_trace(events, warmup)
    return NodeRuns(node_runs, run_s, used, profiled_cpu[-len(run_s):]), whole, cpu, joules


def parse_trace(events: list[dict], skip_runs: int = 0) -> tuple[list[list[tuple[str, float]]], list[float]]:
    """Split a Chrome-trace event list into runs (``model_run`` spans) of (node, seconds) in order."""
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in events
                   if e.get("cat") == "Session" and e.get("name") == "model_run")
    spans = spans[skip_runs:]
    nodes = sorted((e["ts"], e["name"], e["dur"]) for e in events
                   if e.get("cat") == "Node" and str(e.get("name", "")).endswith("_kernel_time"))
    runs: list[list[tuple[str, float]]] = [[] for _ in spans]
    k = 0
    for ts, name, dur in nodes:
        while k < len(spans) and ts > spans[k][1]:
            k += 1
        if k == len(spans):
            break
        if ts >= spans[k][0]:
            runs[k].append((name[: -len("_kernel_time")], dur * 1e-6))
    if not spans or not any(runs):
        raise ProfileError("onnxruntime's profile has no model_run spans with node kernel times; "
                           "is this onnxruntime build profiling-enabled?")
    return runs, [(b - a) * 1e-6 for a, b in spans]


STATISTICS = ("median", "p10", "min")


def reduce(values: np.ndarray, statistic: str, axis: int = 0) -> np.ndarray:
    """The median, 10th percentile or minimum over runs (``axis``)."""
    if statistic == "median":
        return np.median(values, axis=axis)
    if statistic == "p10":
        return np.percentile(values, 10, axis=axis)
    if statistic == "min":
        return np.min(values, axis=axis)
    raise ProfileError(f"unknown statistic {statistic!r}; use one of {STATISTICS}")


def summary(values: list[float]) -> dict[str, float]:
    """Median, minimum, 10th and 90th percentile, and the relative spread (p90 - p10) / median."""
    arr = np.asarray(values, dtype=np.float64)
    med = float(np.median(arr))
    p10, p90 = (float(v) for v in np.percentile(arr, [10, 90]))
    return {"median_s": med, "p10_s": p10, "p90_s": p90, "min_s": float(arr.min()),
            "spread": (p90 - p10) / med if med > 0 else 0.0, "n": len(values), "mean_s": statistics.fmean(arr)}


def default_threads() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
