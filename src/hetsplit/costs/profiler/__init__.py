"""The profiler: measured per-layer costs on this machine, or a modelled device's estimate.

- ``profile_cpu(graph, onnx_path, ...)``: onnxruntime per-layer latency inside the whole model,
  memory, energy (RAPL when readable).
- ``profile_cuda_torch(...)``: the same on an NVIDIA GPU with PyTorch (``torch_cuda``).
- ``modelled_profile(graph, device)``: any preset's estimated costs in the same format.
- ``profile_model(spec, device, ...)``: what ``hetsplit profile`` does.
- ``resolve_device(name)``: ``local-cpu``, ``local-gpu`` or a preset name / file.
"""

from hetsplit.costs.profiler.devices import LOCAL, LOCAL_CPU, LOCAL_GPU, resolve_device
from hetsplit.costs.profiler.local import layer_times, profile_cpu
from hetsplit.costs.profiler.modelled import modelled_profile
from hetsplit.costs.profiler.run import load_for_profiling, profile_model

__all__ = ["LOCAL", "LOCAL_CPU", "LOCAL_GPU", "layer_times", "load_for_profiling", "modelled_profile",
           "profile_cpu", "profile_model", "resolve_device"]
