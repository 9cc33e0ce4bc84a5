"""``hetsplit profile``'s job as one library call: load a model, measure or model it, return a Profile."""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, Iterator

from hetsplit.costs.meters import meter_for
from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler.devices import LOCAL_CPU, LOCAL_GPU, resolve_device
from hetsplit.costs.profiler.local import profile_cpu
from hetsplit.costs.profiler.modelled import modelled_profile
from hetsplit.costs.profiler.ort_timing import default_threads
from hetsplit.errors import ProfileError
from hetsplit.graph.input_shapes import InputShapes
from hetsplit.graph.types import Graph
from hetsplit.limits import check_memory
from hetsplit.units import format_quantity


MAX_REPEATS = 100_000      # measured runs or warm-ups: more is a mistake, not a setting


def measure_bytes(graph: Graph) -> float:
    """A lower bound of the memory measuring ``graph`` takes: its weights, its inputs and the largest
    layer's tensors in and out, twice (the runtime's buffers and the copies the profiler reads)."""
    widest = max((layer.in_bytes + layer.out_bytes for layer in graph.layers), default=0)
    return graph.total_param_bytes + graph.input_bytes + 2 * widest


def load_for_profiling(spec: str, input_shapes: InputShapes | None = None) -> tuple[Graph, Path | None, str | None]:
    """(graph, full ONNX path or None, zoo name or None) of a zoo name or an .onnx file (its symbolic
    input dims fixed by ``input_shapes``)."""
    from hetsplit.graph import zoo

    if spec in zoo.names():
        return zoo.load(spec, input_shapes), None, spec
    path = Path(spec)
    if path.suffix == ".onnx":
        if not path.is_file():
            raise ProfileError(f"{path}: no such ONNX file")
        from hetsplit.graph.onnx_import import load_onnx

        return load_onnx(path, input_shapes=input_shapes), path, None
    raise ProfileError(f"{spec!r} is neither a zoo model ({', '.join(zoo.names())}) nor an .onnx file; "
                       "a .json profile has no shapes to measure or model")


def profile_model(spec: str, device: str = LOCAL_CPU, *, repeats: int = 20, warmup: int = 5,
                  threads: int | None = None, power_w: float | None = None,
                  params: dict[str, Any] | None = None, statistic: str = "median",
                  clock: str = "wall", co_load: int = 0, input_shapes: InputShapes | None = None) -> Profile:
    """Measure ``spec`` on this machine (local-cpu / local-gpu) or write a preset's modelled profile.

    ``params`` override a modelled device's parameters (e.g. ``{"l2_bytes": 4194304}``).
    ``co_load`` (local-cpu only): other cores kept busy with the same model while measuring.
    ``input_shapes`` fix the model's symbolic input dims; the profile records them (``meta["input_shapes"]``).
    """
    graph, onnx_file, zoo_name = load_for_profiling(spec, input_shapes)
    prof = _profile(graph, onnx_file, zoo_name, device, repeats, warmup, threads, power_w, params, statistic,
                    clock, co_load)
    if graph.meta.get("input_shapes"):
        prof.meta["input_shapes"] = graph.meta["input_shapes"]
    return prof


def _profile(graph: Graph, onnx_file: Path | None, zoo_name: str | None, device: str, repeats: int, warmup: int,
             threads: int | None, power_w: float | None, params: dict[str, Any] | None, statistic: str, clock: str,
             co_load: int) -> Profile:
    for flag, value, low in (("--repeats", repeats, 1), ("--warmup", warmup, 0)):
        if not low <= value <= MAX_REPEATS:
            raise ProfileError(f"{flag} {value}: give a whole number of runs from {low} to {MAX_REPEATS:,}")
    if device in (LOCAL_CPU, LOCAL_GPU):
        check_memory(measure_bytes(graph), f"measuring {graph.name} (weights "
                     f"{format_quantity(graph.total_param_bytes, 'B')}, inputs {format_quantity(graph.input_bytes, 'B')})",
                     "give smaller --input-shape dims")
    if co_load and device != LOCAL_CPU:
        raise ProfileError(f"--co-load measures under load on this machine's CPU: it needs --device {LOCAL_CPU}, "
                           f"not {device}")
    if device == LOCAL_CPU:
        dev = resolve_device(device, threads)
        n = threads or default_threads()
        watts = power_w if power_w is not None else float(dev.params["power_active"]) * n / dev.params["threads"]
        with runnable_onnx(graph, onnx_file, zoo_name) as run_file:
            prof = profile_cpu(graph, run_file, device_type=LOCAL_CPU, threads=n, warmup=warmup, repeats=repeats,
                               meter=meter_for("cpu"), power_w=watts, statistic=statistic, clock=clock,
                               co_load=co_load)
        if onnx_file is not None:
            prof.meta["onnx"] = str(onnx_file)
        if power_w is None:
            prof.meta["energy"]["estimated_power_source"] = "assumption: 10 W per busy core (no --power given)"
        return prof
    if device == LOCAL_GPU:
        dev = resolve_device(device)                # fails clearly without CUDA
        watts = power_w if power_w is not None else float(dev.params["power_active"])
        prof = profile_on_torch(graph, onnx_file, zoo_name, "cuda", LOCAL_GPU, warmup, repeats, watts)
        if power_w is None and prof.meta["energy"]["status"] == "estimated":
            prof.meta["energy"]["estimated_power_source"] = f"assumption: {watts:g} W (no meter reading, no --power)"
        return prof
    dev = resolve_device(device)
    if params:
        from hetsplit.units import parse_param

        parsed = {k: parse_param(k, v, f"--param {k}") for k, v in params.items()}
        dev = replace(dev, params={**dev.params, **parsed})
    return modelled_profile(graph, dev)


@contextmanager
def runnable_onnx(graph: Graph, onnx_file: Path | None, zoo_name: str | None) -> Iterator[Path]:
    """The ONNX file whose node names ``graph``'s layers name: the zoo's own, or a user's file prepared
    (canonical names, symbolic dims fixed) into a temporary copy, weights beside it when external."""
    if onnx_file is None:
        from hetsplit.graph import zoo

        if zoo_name is None:
            raise ProfileError(f"model {graph.name!r}: no ONNX file and no zoo name to run")
        yield zoo.onnx_path(zoo_name)
        return
    import onnx
    from onnx.external_data_helper import load_external_data_for_model, uses_external_data

    from hetsplit.graph.onnx_prepare import prepare_model

    with tempfile.TemporaryDirectory(prefix="hetsplit-prepared-") as tmp:
        run_file = Path(tmp) / onnx_file.name
        prepared = prepare_model(onnx_file, input_shapes=graph.meta.get("input_shapes"))
        external = any(uses_external_data(t) for t in prepared.graph.initializer)
        if external:   # weights beside the graph: read them from there, write them beside the copy
            load_external_data_for_model(prepared, str(onnx_file.parent))
        onnx.save(prepared, run_file, save_as_external_data=external, all_tensors_to_one_file=True,
                  location=f"{onnx_file.name}.data")
        yield run_file


def profile_on_torch(graph: Graph, onnx_file: Path | None, zoo_name: str | None, device: str, device_type: str,
                     warmup: int, repeats: int, power_w: float | None = None) -> Profile:
    """Per-layer times of the model run by hetsplit's PyTorch interpreter (what a GPU device's segments
    run with) on ``device`` ("cuda" for ``local-gpu``; "cpu" is how the path is tested without a GPU);
    energy from the GPU's meter, else estimated from ``power_w``."""
    from hetsplit.costs.profiler.torch_onnx import profile_onnx_torch

    with runnable_onnx(graph, onnx_file, zoo_name) as run_file:
        prof = profile_onnx_torch(graph, run_file, device=device, device_type=device_type, warmup=warmup,
                                  repeats=repeats, meter=meter_for("gpu") if device == "cuda" else None,
                                  power_w=power_w)
    if onnx_file is not None:
        prof.meta["onnx"] = str(onnx_file)
    return prof


def profile_module_on(graph: Graph, module: Any, input_shape: tuple[int, ...], device: str = LOCAL_GPU,
                      warmup: int = 5, repeats: int = 20) -> Profile:
    """Per-layer times of a torch ``module`` (the one ``graph`` was exported from, its layers matched
    by the exporter's node names) on this machine's CUDA GPU (``local-gpu``: a clear error without one)
    or, through PyTorch, on its CPU (``torch-cpu``, how the path is tested without a GPU)."""
    from hetsplit.costs.profiler.torch_cuda import profile_torch

    if device == LOCAL_GPU:
        gpu = resolve_device(LOCAL_GPU)             # fails clearly without CUDA
        return profile_torch(graph, module, input_shape, device="cuda", warmup=warmup, repeats=repeats,
                             meter=meter_for("gpu"), power_w=float(gpu.params["power_active"]))
    if device == TORCH_CPU:
        return profile_torch(graph, module, input_shape, device="cpu", device_type=TORCH_CPU, warmup=warmup,
                             repeats=repeats)
    raise ProfileError(f"a torch module is measured on {LOCAL_GPU} (or {TORCH_CPU}), not {device!r}; for "
                       f"{LOCAL_CPU} profile the exported .onnx file (onnxruntime)")


TORCH_CPU = "torch-cpu"
