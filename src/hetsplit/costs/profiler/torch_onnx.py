"""Per-layer latency of an ONNX model run by ``graph.torch_interpreter``: the code a GPU device's
segments run with (``runtime.gpu``), so its measured costs predict the run.

Each layer is timed inside one whole-model pass, not alone: one timestamp at the pass's start, one where
each layer's first node starts and one at its end, on the device's own clock (CUDA events on a GPU, which
see the kernels and the launch gaps between them as the run does; ``perf_counter`` on the CPU, how the
path is tested without a GPU; any ``Clock`` a caller injects). A pass's layers thus add up to that pass.
The marks themselves cost a little host time, which a launch-bound model pays on its critical path (on
the H200, MobileBERT's ~600 marks made its pass 36% longer than the unmarked model), so the layer times
are scaled by (unmarked whole-model median) / (marked pass median): the layers then add up to the whole
model, and ``meta["marks"]`` records both figures and the factor. Nodes of no layer (the few the graph
folds away) count to the layer before them. Torch runs at a rank's thread count while it is timed
(``torch_threads.as_a_rank``): one thread, as the runtime's GPU worker runs the interpreter. Needs torch;
guarded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler.ort_timing import random_feeds
from hetsplit.costs.profiler.segment_probe import CUTS, measure_segments, segment_cost
from hetsplit.costs.profiler.torch_cuda import Clock, DeviceClock, torch_profile, whole_model_runs
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph
from hetsplit.torch_threads import RANK_THREADS, as_a_rank


def layer_of_nodes(graph: Graph, node_names: list[str]) -> np.ndarray:
    """Per node (in run order), the layer it belongs to; a node of no layer joins the one before it."""
    owner = {node: i for i, layer in enumerate(graph.layers) for node in layer.nodes}
    out, last = np.zeros(len(node_names), dtype=np.int64), 0
    for k, name in enumerate(node_names):
        last = owner.get(name, last)
        out[k] = last
    return out


def profile_onnx_torch(graph: Graph, onnx_path: str | Path, *, device: str = "cuda", device_type: str = "local-gpu",
                       warmup: int = 5, repeats: int = 20, meter: Any = None, power_w: float | None = None,
                       clock: Clock | None = None, segment_cuts: tuple[int, ...] | None = CUTS) -> Profile:
    """Per-layer latency of the ONNX model at ``onnx_path`` (``graph``'s canonical model) run by the
    PyTorch interpreter on ``device`` ("cuda" or "cpu"), median of ``repeats`` runs; energy from
    ``meter``, else estimated from ``power_w``; timestamps from ``clock`` (default: the device's own). With
    ``segment_cuts``, the type's segment cost too (``segment_probe``: the model cut into that many segments,
    each run as the runtime's call), in ``costs.segment``."""
    import onnx
    import torch

    from hetsplit.graph.torch_interpreter import TorchInterpreter

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ProfileError("the GPU profiler needs a CUDA GPU; none is visible")
    model = onnx.load(str(onnx_path))
    try:
        interp = TorchInterpreter(model, device)
    except ValueError as exc:
        raise ProfileError(f"{onnx_path}: {exc}; profile this model on local-cpu (onnxruntime)") from None
    feeds = random_feeds([(i.name, onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type),
                           [d.dim_value for d in i.type.tensor_type.shape.dim])
                          for i in model.graph.input if i.name not in interp.consts])
    marks = clock if clock is not None else DeviceClock(torch, device)
    with torch.inference_mode(), as_a_rank():      # timed as a rank's process runs it (``torch_threads``)
        for _ in range(warmup):
            interp.run(feeds)
        marks.sync()
        layers = layer_of_nodes(graph, [n.name for n in interp.nodes])
        per_run = layer_passes(interp, feeds, layers, graph.num_layers, marks, repeats)
        whole, joules = whole_model_runs(lambda: interp.run(feeds), marks, repeats, meter)
        per_run, marks_meta = unmarked(per_run, whole)
        rows = (measure_segments(interp, feeds, layers, np.median(per_run, axis=0), marks, segment_cuts,
                                 max(3, min(repeats, 10))) if segment_cuts else [])
    source = (f"measured: hetsplit's ONNX interpreter on PyTorch {torch.__version__} ({marks.where()}), median of "
              f"{repeats} runs after {warmup} warm-up, each layer inside the whole-model pass (scaled x"
              f"{marks_meta['layer_scale']:.3f} to the unmarked model), torch on {RANK_THREADS} thread as a rank")
    prof = torch_profile(graph, device_type, per_run, whole, joules, meter, source, marks, power_w)
    prof.meta.update(warmup=warmup, executor="torch-interpreter", marks=marks_meta, torch_threads=RANK_THREADS)
    if rows:
        prof.costs.segment[device_type] = segment_cost(rows, marks.where())
        prof.meta["segment_rows"] = rows
    return prof


def layer_passes(interp: Any, feeds: dict[str, Any], layers: np.ndarray, num_layers: int, marks: Clock,
                 repeats: int) -> np.ndarray:
    """``repeats`` x ``num_layers`` layer times, each row from one whole-model pass with a stamp where each
    layer starts (``layers``: the layer of each node in run order) and one at the end."""
    bounds = np.flatnonzero(np.diff(layers)) + 1          # node index where the next layer starts
    starts, boundaries = np.concatenate([[0], bounds]), set(bounds.tolist())
    per_run = np.zeros((repeats, num_layers))
    for r in range(repeats):
        env = interp.environment(feeds)
        stamps = [marks.mark()]
        for k, node in enumerate(interp.nodes):
            if k in boundaries:
                stamps.append(marks.mark())
            interp.step(env, node)
        stamps.append(marks.mark())
        marks.sync()
        for j, layer in enumerate(layers[starts]):
            per_run[r, layer] += marks.seconds(stamps[j], stamps[j + 1])
    return per_run


def unmarked(per_run: np.ndarray, whole: list[float]) -> tuple[np.ndarray, dict[str, Any]]:
    """``per_run`` scaled so its passes take the unmarked model's median time (``whole``): what the marks
    cost spread over the layers by their time; and what was done, for the profile's meta."""
    marked = float(np.median(per_run.sum(axis=1)))
    target = float(np.median(whole))
    factor = target / marked if marked > 0 and target > 0 else 1.0
    return per_run * factor, {"marked_pass_s": marked, "unmarked_whole_s": target, "layer_scale": factor,
                              "note": "layer times from one marked whole-model pass each, scaled by "
                                      "unmarked_whole_s / marked_pass_s to take the marks' own cost out"}
