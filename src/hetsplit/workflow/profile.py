"""``hetsplit profile``'s job: a model's per-layer costs (``costs.profiler``) and, on this machine's CPU,
what a segment costs it beyond its layers and what a layer cut off from the one it was fused with pays,
measured through the runtime's own executor calls (``runtime.cpu_segment_probe``; the GPU profiler
measures its segment cost itself, ``costs.profiler.segment_probe``)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler import LOCAL_CPU, profile_model
from hetsplit.errors import ProfileError
from hetsplit.graph.input_shapes import InputShapes


@dataclass(frozen=True)
class ProfileRequest:
    """What ``profile`` measures (``costs.profiler.profile_model``'s settings) and whether, on ``local-cpu``,
    it also measures the segment cost (``segments``, with ``segment_repeats`` calls per segment)."""

    device: str = LOCAL_CPU
    repeats: int = 20
    warmup: int = 5
    threads: int | None = None
    power_w: float | None = None
    params: dict[str, str] | None = None
    statistic: str = "median"
    clock: str = "wall"
    co_load: int = 0
    input_shapes: InputShapes | None = None
    segments: bool = True
    segment_repeats: int = 5


def profile(spec: str, request: ProfileRequest = ProfileRequest()) -> Profile:
    """The profile of ``spec`` (zoo name or .onnx) on ``request.device``; on ``local-cpu`` with ``segments``,
    its type's segment cost too (``with_cpu_segment_cost``)."""
    prof = profile_model(spec, request.device, repeats=request.repeats, warmup=request.warmup,
                         threads=request.threads, power_w=request.power_w, params=request.params,
                         statistic=request.statistic, clock=request.clock, co_load=request.co_load,
                         input_shapes=request.input_shapes)
    if request.device == LOCAL_CPU and request.segments:
        with_cpu_segment_cost(prof, spec, request.segment_repeats)
    return prof


def model_file(spec: str) -> Path:
    """The full ONNX file (weights included) of a zoo name or an .onnx path."""
    from hetsplit.graph import zoo

    if spec in zoo.names():
        return zoo.onnx_path(spec)
    path = Path(spec)
    if not path.is_file():
        raise ProfileError(f"{spec!r} is neither a zoo model nor an .onnx file")
    return path


def with_cpu_segment_cost(prof: Profile, spec: str, repeats: int = 5) -> Profile:
    """``prof`` (a ``local-cpu`` profile of ``spec``) with its type's segment cost and unfused extras measured
    here: the model cut into segments (and into one segment per layer), each timed as a worker's onnxruntime
    call at the profile's threads, co-load, clock and statistic (``runtime.cpu_segment_probe``: the median
    unless the profile took the minimum; the CPU clock where the profile's whole model was timed by it, one
    thread); the rows the segment cost was
    fitted on in ``meta["segment_rows"]``, the unfused extras summed in ``meta["unfused"]``."""
    from hetsplit.costs.profiler.coload import CoLoad
    from hetsplit.runtime.cpu_segment_probe import FUSED_SHARE, probe_segment_cost
    from hetsplit.runtime.segment_timing import Timing

    path = model_file(spec)
    device_type = prof.costs.types[0]
    threads = int(prof.meta.get("threads", 1))
    clock = prof.meta.get("whole_model", {}).get("clock", "wall")
    timing = Timing(threads, clock if threads == 1 else "wall",
                    "min" if prof.meta.get("statistic") == "min" else "median", repeats)
    with CoLoad(path, int(prof.meta.get("co_load", 0) or 0), threads):
        found = probe_segment_cost(prof.graph, path, prof.costs.time_s[:, 0], timing)
    unfused = found.unfused_s
    prof.costs.segment[device_type] = found.cost
    assert prof.costs.unfused_s is not None
    prof.costs.unfused_s[:, 0] = unfused
    prof.meta["segment_rows"] = found.rows
    prof.meta["segment_probe_scale"] = found.scale
    prof.meta["unfused"] = {"layers": int((unfused > 0).sum()), "sum_s": float(unfused.sum()),
                            "note": f"each layer timed alone as a worker's call; a layer whose whole-model share is "
                                    f"under {FUSED_SHARE:g} of its own time (less its segment's fitted cost) pays "
                                    "the difference when a cut separates it from the layer before it"}
    return prof
