"""Per-layer latency of a zoo model with PyTorch: CUDA events around leaf modules on an NVIDIA GPU
(perf_counter on the CPU, which is how the path is tested on machines without a GPU).

Layers are matched to modules through the exporter's node names: ``/layer/layer.0/layer.0.0/conv1/
conv1.0/Conv`` comes from module ``layer.0.0.conv1.0`` (each scope repeats its parent's name when
the parent is a container). Leaf modules without a layer (BatchNorm, which the
exporter folded) count to the layer that ran before them. Work done outside leaf modules (functional
adds, flatten) is in the whole-model time but in no layer: the reported gap shows it. Needs torch with CUDA; guarded.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import numpy as np

from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler.memory import live_bytes_per_layer
from hetsplit.costs.profiler.ort_timing import summary
from hetsplit.costs.table import CostTable
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph


def module_path(node_name: str) -> str:
    """The module qualified name an exported ONNX node name comes from ('' for top-level ops)."""
    scopes = node_name.strip("/").split("/")[:-1]
    path: list[str] = []
    prev = ""
    for scope in scopes:
        if prev and scope.startswith(prev + "."):
            path.append(scope[len(prev) + 1:])
        else:
            path.append(scope)
        prev = scope
    return ".".join(path)


def layer_of_modules(graph: Graph) -> dict[str, int]:
    """Module qualified name -> layer index, from each layer's first node with a module scope."""
    out: dict[str, int] = {}
    for i, layer in enumerate(graph.layers):
        for node in layer.nodes:
            path = module_path(node)
            if path:
                out.setdefault(path, i)
    return out


class Clock(Protocol):
    """Where the profiler's timestamps come from (injectable: a test times the profiler's logic with a
    clock of its own). ``mark`` takes a timestamp, ``sync`` waits for the device and ends one pass (the
    stamps of a pass are read with ``seconds`` after its ``sync``, before the next pass's first ``mark``),
    ``where`` names the device; ``cuda`` says whether it is a GPU's."""

    cuda: bool

    def mark(self) -> Any: ...

    def sync(self) -> None: ...

    def seconds(self, a: Any, b: Any) -> float: ...

    def where(self) -> str: ...


class DeviceClock:
    """Timestamps on the device's own clock: CUDA events on a GPU, perf_counter on the CPU.

    The events are made once and reused pass after pass (``sync`` hands them all back): recording one is
    then all a mark costs, where making one per mark cost ~20 us of host time, which a launch-bound model
    (MobileBERT: ~600 layers) pays on its critical path."""

    def __init__(self, torch: Any, device: str) -> None:
        self.torch, self.cuda = torch, device.startswith("cuda")
        self.events: list[Any] = []
        self.used = 0

    def mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter()
        if self.used == len(self.events):
            self.events.append(self.torch.cuda.Event(enable_timing=True))
        ev = self.events[self.used]
        self.used += 1
        ev.record()
        return ev

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()
        self.used = 0

    def seconds(self, a: Any, b: Any) -> float:
        return a.elapsed_time(b) * 1e-3 if self.cuda else b - a

    def where(self) -> str:
        return self.torch.cuda.get_device_name(0) if self.cuda else "CPU"


def profile_torch(graph: Graph, module: Any, input_shape: tuple[int, ...], *, device: str = "cuda",
                  device_type: str = "local-gpu", warmup: int = 5, repeats: int = 20, meter: Any = None,
                  power_w: float | None = None) -> Profile:
    """Per-layer latency of a PyTorch module (a zoo model's builder) on ``device`` ("cuda" or "cpu")."""
    try:
        import torch
    except ImportError:
        raise ProfileError("the PyTorch profiler needs torch") from None
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProfileError("the GPU profiler needs a CUDA GPU; none is visible")
    mapping = layer_of_modules(graph)
    marks = DeviceClock(torch, device)
    module = module.to(device).eval()
    x = torch.randn(*input_shape, device=device)
    starts: dict[str, Any] = {}
    spans: list[tuple[int, Any, Any]] = []
    handles = []
    last = [0]                      # leaf modules with no layer (eager BatchNorm...) join the one before
    for name, sub in module.named_modules():
        if list(sub.children()):
            continue

        def pre(_m, _inp, name=name):
            starts[name] = marks.mark()

        def post(_m, _inp, _out, name=name):
            layer = mapping.get(name, last[0])
            last[0] = layer
            spans.append((layer, starts[name], marks.mark()))

        handles += [sub.register_forward_pre_hook(pre), sub.register_forward_hook(post)]
    per_run = np.zeros((repeats, graph.num_layers))
    with torch.inference_mode():
        for _ in range(warmup):
            module(x)
        for r in range(repeats):
            spans.clear()
            module(x)
            marks.sync()
            for layer, a, b in spans:
                per_run[r, layer] += marks.seconds(a, b)
        for h in handles:
            h.remove()
        whole, joules = whole_model_runs(lambda: module(x), marks, repeats, meter)
    source = (f"measured: PyTorch {torch.__version__} eager on {marks.where()}, median of {repeats} runs after "
              f"{warmup} warm-up")
    prof = torch_profile(graph, device_type, per_run, whole, joules, meter, source, marks, power_w)
    prof.meta["warmup"] = warmup
    prof.meta["layers_without_module"] = [graph.names[i] for i in range(graph.num_layers)
                                          if i not in set(mapping.values())]
    return prof


ENERGY_WINDOW_S = 1.0   # an energy counter ticks every few tens of ms (NVML): a shorter window can read 0 J


def whole_model_runs(run: Any, marks: Clock, repeats: int, meter: Any = None) -> tuple[list[float], float | None]:
    """Whole-model times of ``run()`` (at least ``repeats`` runs) and, with a meter, joules per run over a
    window of at least ``ENERGY_WINDOW_S`` (None when the meter cannot read, or read nothing)."""
    whole: list[float] = []
    if meter is not None:
        meter.start()
    t0 = time.perf_counter()
    while len(whole) < repeats or (meter is not None and time.perf_counter() - t0 < ENERGY_WINDOW_S):
        a = marks.mark()
        run()
        b = marks.mark()
        marks.sync()
        whole.append(marks.seconds(a, b))
    joules = meter.stop() if meter is not None else None
    return whole, (joules / len(whole) if joules is not None and joules > 0 else None)


def torch_profile(graph: Graph, device_type: str, per_run: np.ndarray, whole: list[float], joules: float | None,
                  meter: Any, source: str, marks: Clock, power_w: float | None = None) -> Profile:
    """A one-column Profile from per-run layer times (runs x layers), whole-model times and joules per run,
    shared out over the layers by their time; without a reading, ``power_w`` x layer time (status
    estimated), else zeros (status unavailable)."""
    import torch

    med = np.median(per_run, axis=0)
    stats = summary(whole)
    reason = getattr(meter, "reason", "") or getattr(meter, "name", "none")
    if meter is not None and getattr(meter, "available", False) and joules is None:
        reason = f"{meter.name}: read no energy over {len(whole)} runs ({sum(whole):.2f} s)"
    if joules is not None:
        energy = joules * med / med.sum() if med.sum() > 0 else np.zeros_like(med)
        energy_meta = {"status": "measured", "meter": reason, "per_inference_j": joules}
    elif power_w is not None:
        energy = med * float(power_w)
        energy_meta = {"status": "estimated", "meter": reason, "estimated_power_w": float(power_w),
                       "note": "energy_j = estimated_power_w x layer time"}
    else:
        energy = np.zeros_like(med)
        energy_meta = {"status": "unavailable", "meter": reason,
                       "note": "no meter reading and no power figure: energy_j is 0"}
    table = CostTable(graph.names, [device_type], med[:, None], energy[:, None],
                      live_bytes_per_layer(graph)[:, None], {device_type: source})
    meta = {"source": source, "device": device_type, "repeats": len(per_run), "statistic": "median",
            "whole_model": {**stats, "time_s": stats["median_s"], "statistic": "median", "clock": "wall"},
            "layer_sum_s": float(med.sum()), "gap": float(med.sum()) / stats["median_s"] - 1,
            "energy": energy_meta,
            "memory": {"peak_cuda_bytes": int(torch.cuda.max_memory_allocated()) if marks.cuda else None}}
    return Profile(graph, table, meta)
