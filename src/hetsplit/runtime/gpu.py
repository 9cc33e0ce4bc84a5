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
from hetsplit.runtime.executor import TORCH_CUDA, SegmentSpec, Staged, check_submodel
from hetsplit.runtime.manifest import TensorSpec


class TorchExecutor:
    """Executes a sub-model node by node with PyTorch on ``device`` (``cuda`` for GPU devices).

    Where its outputs go is ``route``d once at load: an output a later segment of this device reads, or
    that NCCL sends, stays a tensor on the device; one that crosses to another device over gloo (or goes
    back to the driver) is copied to host memory, page-locked on CUDA, by an asynchronous copy that is
    waited for only when the host copy is first read (a ``Staged`` output; both when both hold). A
    segment whose outputs all stay on the device returns without synchronizing, and the next one, queued
    behind it on the same stream, reads them where they are. Unrouted, every output is copied."""

    backend = TORCH_CUDA

    def __init__(self, path: Path, spec: SegmentSpec, device: str = "cuda"):
        check_submodel(path, spec)
        self.device, self.name = torch.device(device), spec.device
        self.on_gpu = self.cuda = self.device.type == "cuda"   # (a stand-in on the CPU may claim on_gpu)
        try:
            self.interpreter = TorchInterpreter(onnx.load(str(path)), self.device)
        except ValueError as exc:
            raise RuntimeFailure(f"device {spec.device}: {path.name}: {exc}; run this device on the CPU "
                                 "(onnxruntime) instead") from None
        self.inputs = tuple(t.name for t in spec.inputs)
        self.outputs = spec.output_names
        self.host_tensor: Callable[[np.ndarray], torch.Tensor] = torch.from_numpy   # a host input's tensor
        self._feeds: dict[str, Any] = dict.fromkeys(self.inputs)   # reused by every call
        self.route(set(), set(self.outputs))

    def route(self, device: set[str], host: set[str]) -> None:
        """Keep the outputs named in ``device`` on the device and copy those in ``host`` (or in neither) to
        host memory; per output, made once: (name, kept on the device, copied to the host)."""
        self.plan = [(name, name in device, name in host or name not in device) for name in self.outputs]
        self.staged = any(copied for _, _, copied in self.plan)

    def feed(self, x: Any) -> torch.Tensor:
        """An input as the interpreter takes it: a device tensor as it is, a host array as a tensor."""
        if isinstance(x, torch.Tensor):
            return x
        if isinstance(x, Staged):
            return x.device if x.device is not None else self.host_tensor(x.host)
        return self.host_tensor(x)

    def to_host(self, name: str, t: torch.Tensor) -> np.ndarray:
        """Start copying output ``name`` (``t``) to host memory (page-locked on CUDA, asynchronous); the
        array it fills."""
        host = torch.empty(t.shape, dtype=t.dtype, pin_memory=self.cuda)
        host.copy_(t, non_blocking=self.cuda)
        return host.numpy()

    def fence(self) -> Callable[[], None] | None:
        """What waits for the copies started so far (None: they are done, as on the CPU)."""
        if not self.cuda:
            return None
        done = torch.cuda.Event()
        done.record(torch.cuda.current_stream(self.device))
        return done.synchronize

    @torch.inference_mode()
    def call(self, local: dict[str, Any]) -> None:
        feeds = self._feeds
        for name in self.inputs:
            feeds[name] = self.feed(local[name])
        try:
            env = self.interpreter.run(feeds)
            copies = [(name, env[name] if kept else None, self.to_host(name, env[name]))
                      for name, kept, copied in self.plan if copied]
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {self.name}: the sub-model failed on {self.device}: {exc}") from None
        finally:
            for name in self.inputs:     # hold no input past its call
                feeds[name] = None
        for name, kept, copied in self.plan:
            if kept and not copied:
                local[name] = env[name]
        if copies:
            ready = self.fence()
            for name, on_device, host in copies:
                local[name] = Staged(on_device, host, ready)

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """The outputs for ``feeds``: host arrays, or device tensors for those routed to stay there only."""
        local = dict(feeds)
        self.call(local)
        return {name: local[name].host if isinstance(local[name], Staged) else local[name] for name in self.outputs}


def stream_fence() -> Callable[[], bool]:
    """Whether the work queued so far on this process's CUDA stream is done (asynchronous copies from host
    buffers included): a GPU rank's receive buffers are reused only then (``worker.BufferPool``)."""
    done = torch.cuda.Event()
    done.record()
    return done.query


def pinned_empty(spec: TensorSpec) -> np.ndarray:
    """A page-locked host array for ``spec`` (a GPU rank's receive buffer: its copy to the GPU is async
    and runs at the bus's speed, not through a staging buffer). Needs CUDA."""
    dtype = torch.from_numpy(np.empty(0, spec.dtype)).dtype
    return torch.empty(spec.shape, dtype=dtype, pin_memory=True).numpy()


def host_allocator() -> Callable[[TensorSpec], np.ndarray]:
    """How a GPU rank allocates its host receive buffers: page-locked where CUDA is, else plain."""
    return pinned_empty if torch.cuda.is_available() else TensorSpec.empty


def pool_fence() -> Callable[[], Callable[[], bool]] | None:
    """The fence of a GPU rank's receive buffers: ``stream_fence`` where CUDA is, else none needed."""
    return stream_fence if torch.cuda.is_available() else None


class TorchCudaExecutor(TorchExecutor):
    """A GPU device's executor: the interpreter on CUDA (tensors cross to other devices via host memory,
    or over NCCL to another GPU)."""

    def __init__(self, path: Path, spec: SegmentSpec):
        if not torch.cuda.is_available():
            raise RuntimeFailure(f"device {spec.device} is a GPU but this host has no CUDA device visible to PyTorch; "
                                 "run with --cpu-only to rehearse it on the CPU")
        super().__init__(path, spec, "cuda")
