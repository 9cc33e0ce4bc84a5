"""Per-layer latency of an ONNX model run by ``graph.torch_interpreter``: the code a GPU device's
segments run with (``runtime.gpu``), so its measured costs predict the run.

Each layer's time is the gap between timestamps taken at its first node and after its last, on the
device's own clock (CUDA events on a GPU, which see the kernels and the launch gaps between them as
the run does; ``perf_counter`` on the CPU, how the path is tested without a GPU). Nodes of no layer
(the few the graph folds away) count to the layer before them. Needs torch; guarded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.profile import Profile
from hetsplit.costs.profiler.ort_timing import random_feeds
from hetsplit.costs.profiler.torch_cuda import DeviceClock, torch_profile, whole_model_runs
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph


def layer_of_nodes(graph: Graph, node_names: list[str]) -> np.ndarray:
    """Per node (in run order), the layer it belongs to; a node of no layer joins the one before it."""
    owner = {node: i for i, layer in enumerate(graph.layers) for node in layer.nodes}
    out, last = np.zeros(len(node_names), dtype=np.int64), 0
    for k, name in enumerate(node_names):
        last = owner.get(name, last)
        out[k] = last
    return out


def profile_onnx_torch(graph: Graph, onnx_path: str | Path, *, device: str = "cuda", device_type: str = "local-gpu",
                       warmup: int = 5, repeats: int = 20, meter: Any = None, power_w: float | None = None
                       ) -> Profile:
    """Per-layer latency of the ONNX model at ``onnx_path`` (``graph``'s canonical model) run by the
    PyTorch interpreter on ``device`` ("cuda" or "cpu"), median of ``repeats`` runs; energy from
    ``meter``, else estimated from ``power_w``."""
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
    layers = layer_of_nodes(graph, [n.name for n in interp.nodes])
    bounds = np.flatnonzero(np.diff(layers)) + 1          # node index where the next layer starts
    starts, boundaries = np.concatenate([[0], bounds]), set(bounds.tolist())
    marks = DeviceClock(torch, device)
    per_run = np.zeros((repeats, graph.num_layers))
    with torch.inference_mode():
        for _ in range(warmup):
            interp.run(feeds)
        marks.sync()
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
        whole, joules = whole_model_runs(lambda: interp.run(feeds), marks, repeats, meter)
    source = (f"measured: hetsplit's ONNX interpreter on PyTorch {torch.__version__} ({marks.where()}), median of "
              f"{repeats} runs after {warmup} warm-up")
    prof = torch_profile(graph, device_type, per_run, whole, joules, meter, source, marks, power_w)
    prof.meta.update(warmup=warmup, executor="torch-interpreter")
    return prof
