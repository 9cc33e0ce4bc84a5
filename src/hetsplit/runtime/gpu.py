"""The ``torch-cuda`` backend (``runtime.executor``): a sub-model run by ``graph.torch_interpreter``.

Runs on any torch device, so it is tested on the CPU against onnxruntime; a sub-model with an op the
interpreter lacks is refused up front, naming the ops and the device.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import torch

from hetsplit.errors import RuntimeFailure
from hetsplit.graph.torch_interpreter import TorchInterpreter
from hetsplit.runtime.executor import TORCH_CUDA, SegmentSpec, check_submodel
from hetsplit.runtime.manifest import TensorSpec


class TorchExecutor:
    """Executes a sub-model node by node with PyTorch on ``device`` (``cuda`` for GPU devices)."""

    backend = TORCH_CUDA

    def __init__(self, path: Path, spec: SegmentSpec, device: str = "cuda"):
        check_submodel(path, spec)
        self.device, self.name = torch.device(device), spec.device
        self.on_gpu = self.device.type == "cuda"
        try:
            self.interpreter = TorchInterpreter(onnx.load(str(path)), self.device)
        except ValueError as exc:
            raise RuntimeFailure(f"device {spec.device}: {path.name}: {exc}; run this device on the CPU "
                                 "(onnxruntime) instead") from None
        self.outputs = spec.output_names
        self.keep: set[str] = set()  # outputs returned as device tensors (they leave over NCCL)

    @torch.inference_mode()
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
        try:   # the call the GPU profiler times too (its segment cost)
            return self.interpreter.call(feeds, self.outputs, self.keep)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {self.name}: the sub-model failed on {self.device}: {exc}") from None


def pinned_empty(spec: TensorSpec) -> np.ndarray:
    """A page-locked host array for ``spec`` (a GPU rank's receive buffer: its copy to the GPU is async
    and runs at the bus's speed, not through a staging buffer). Needs CUDA."""
    dtype = torch.from_numpy(np.empty(0, spec.dtype)).dtype
    return torch.empty(spec.shape, dtype=dtype, pin_memory=True).numpy()


def host_allocator() -> Callable[[TensorSpec], np.ndarray]:
    """How a GPU rank allocates its host receive buffers: page-locked where CUDA is, else plain."""
    return pinned_empty if torch.cuda.is_available() else TensorSpec.empty


class TorchCudaExecutor(TorchExecutor):
    """A GPU device's executor: the interpreter on CUDA (tensors cross to other devices via host memory)."""

    def __init__(self, path: Path, spec: SegmentSpec):
        if not torch.cuda.is_available():
            raise RuntimeFailure(f"device {spec.device} is a GPU but this host has no CUDA device visible to PyTorch; "
                                 "run with --cpu-only to rehearse it on the CPU")
        super().__init__(path, spec, "cuda")
