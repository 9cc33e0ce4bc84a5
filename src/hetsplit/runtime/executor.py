"""Executors: one interface for running a segment's sub-model, and which backend a device gets.

A worker runs each of its segments with an ``Executor``: ``call(local)`` reads the segment's inputs from
an input's tensors (``local``, by name) and adds its outputs there, with what can be made once made at
load (the input and output names, one feeds dict reused by every call, onnxruntime's session called
without its Python wrapper's per-call checks of the feed names, which ``check_submodel`` made once);
``run(feeds) -> outputs`` is the same computation for a feed of its own (warm-up, tests). Backends,
chosen per device on the worker's own host (``choose_backend``):

- ``onnxruntime-cpu``: onnxruntime's CPU provider, limited to the device's threads (no spinning). Every
  device of kind ``cpu``, every device under ``--cpu-only``, and a ``gpu`` device on a host without CUDA;
- ``onnxruntime-cuda``: onnxruntime's CUDA provider, for a ``gpu`` device where that provider is installed;
- ``torch-cuda``: the PyTorch interpreter of ``runtime.gpu`` on CUDA, for a ``gpu`` device where
  onnxruntime has no CUDA provider (the CPU build). It keeps on the GPU what a later segment of the
  device reads or NCCL sends, and stages to host memory only what leaves over gloo (``route``, ``Staged``).

Every executor checks its sub-model against the manifest first (``check_submodel``): a sub-model from
another split fails naming the device.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np
import onnx

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Segment, TensorSpec
from hetsplit.runtime.shard_onnx import np_dtype

ORT_CPU, ORT_CUDA, TORCH_CUDA = "onnxruntime-cpu", "onnxruntime-cuda", "torch-cuda"


class Executor(Protocol):
    """Runs one sub-model: ``call(local)`` adds its outputs to ``local`` (an input's tensors by name, its
    inputs among them), ``run(feeds)`` returns them; ``backend`` says which backend it is, ``on_gpu`` where
    it computes, ``route`` where its outputs go (``runtime.gpu``: kept on the device or staged to the host;
    onnxruntime's are always host arrays)."""

    backend: str
    on_gpu: bool

    def call(self, local: dict[str, Any]) -> None: ...

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]: ...

    def route(self, device: set[str], host: set[str]) -> None: ...


@dataclass(frozen=True)
class SegmentSpec:
    """What an executor checks its sub-model against: the device, the segment's inputs and outputs."""

    device: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]

    @classmethod
    def of(cls, device: str, seg: Segment) -> "SegmentSpec":
        return cls(device, list(seg.inputs), list(seg.outputs))

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]


@dataclass(frozen=True)
class Host:
    """What this host offers the executors: a CUDA device visible to PyTorch, onnxruntime's providers."""

    cuda: bool
    providers: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def here(cls) -> "Host":
        import onnxruntime as ort
        import torch

        return cls(bool(torch.cuda.is_available()), tuple(ort.get_available_providers()))


def choose_backend(kind: str, host: Host, cpu_only: bool = False) -> str:
    """The backend of a device of ``kind`` (cpu | gpu) on ``host``: a GPU device runs on the GPU where
    the host has CUDA (onnxruntime's CUDA provider where installed, else PyTorch), unless ``cpu_only``."""
    if kind != "gpu" or cpu_only or not host.cuda:
        return ORT_CPU
    return ORT_CUDA if "CUDAExecutionProvider" in host.providers else TORCH_CUDA


def check_submodel(path: Path, spec: SegmentSpec) -> None:
    """Fail, naming the device, unless the sub-model's inputs and outputs are the manifest's."""
    where = f"device {spec.device}: sub-model {path.name}"
    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise RuntimeFailure(f"{where} is missing; split the plan again (hetsplit split)") from None
    except Exception as exc:  # noqa: BLE001 - any parse failure means a broken file
        raise RuntimeFailure(f"{where} is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    inits = {i.name for i in model.graph.initializer}
    for role, declared, wanted in (("input", model.graph.input, spec.inputs),
                                   ("output", model.graph.output, spec.outputs)):
        have = {vi.name: vi for vi in declared if vi.name not in inits}
        if set(have) != {t.name for t in wanted}:
            raise RuntimeFailure(f"{where} does not match the manifest: its {role}s are {sorted(have)}, the "
                                 f"manifest says {sorted(t.name for t in wanted)}; split again")
        for want in wanted:
            tt = have[want.name].type.tensor_type
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim)
            dtype = np_dtype(tt.elem_type)
            if shape != want.shape or dtype != want.dtype:
                raise RuntimeFailure(f"{where} does not match the manifest: {role} {want.name!r} is "
                                     f"{dtype}{list(shape)}, the manifest says {want.dtype}{list(want.shape)}; "
                                     "split again")


class Staged:
    """A GPU output on its way to host memory: ``device`` the tensor on the GPU (None: only its host copy
    is read), ``host`` its copy (a page-locked array filled by an asynchronous copy), which waits for that
    copy (``ready``) the first time it is read, so a segment whose outputs nobody reads on the host yet
    returns without synchronizing."""

    __slots__ = ("device", "_host", "_ready")

    def __init__(self, device: Any, host: np.ndarray, ready: Callable[[], None] | None):
        self.device, self._host, self._ready = device, host, ready

    @property
    def host(self) -> np.ndarray:
        if self._ready is not None:
            self._ready()
            self._ready = None
        return self._host


def as_numpy(x: Any) -> np.ndarray:
    """A host array of ``x`` (a numpy array, a ``Staged`` output, or a torch tensor on any device)."""
    if isinstance(x, np.ndarray):
        return x
    if isinstance(x, Staged):
        return x.host
    return x.detach().cpu().numpy() if hasattr(x, "detach") else np.asarray(x)


class OrtExecutor:
    """An onnxruntime session on ``provider``, limited to ``threads`` compute threads (no spinning)."""

    def __init__(self, path: Path, spec: SegmentSpec, threads: int = 1, cuda: bool = False):
        import onnxruntime as ort

        check_submodel(path, spec)
        so = ort.SessionOptions()
        so.intra_op_num_threads = max(1, threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        providers = ["CUDAExecutionProvider", "CPUExecutionProvider"] if cuda else ["CPUExecutionProvider"]
        try:
            self.session = ort.InferenceSession(str(path), so, providers=providers)
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {spec.device}: onnxruntime cannot load {path.name}: {exc}") from None
        self.backend, self.on_gpu = (ORT_CUDA if cuda else ORT_CPU), cuda
        self.inputs = tuple(t.name for t in spec.inputs)
        self.outputs = spec.output_names
        self.device = spec.device
        self._feeds: dict[str, Any] = dict.fromkeys(self.inputs)   # reused by every call
        # the session's own run: its Python wrapper checks the feed's names on every call (~10-25 us here),
        # which check_submodel did once against the manifest
        self._run = getattr(self.session, "_sess", self.session).run

    def route(self, device: set[str], host: set[str]) -> None:
        """Nothing to route: onnxruntime returns every output in host memory."""

    def call(self, local: dict[str, Any]) -> None:
        feeds = self._feeds
        for name in self.inputs:
            x = local[name]
            feeds[name] = x if type(x) is np.ndarray else as_numpy(x)
        try:
            local.update(zip(self.outputs, self._run(self.outputs, feeds, None)))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {self.device}: the sub-model failed on an input: {exc}") from None
        finally:
            for name in self.inputs:     # hold no input past its call
                feeds[name] = None

    def run(self, feeds: dict[str, Any]) -> dict[str, Any]:
        local = dict(feeds)
        self.call(local)
        return {name: local[name] for name in self.outputs}


def _torch_cuda(path: Path, spec: SegmentSpec, threads: int) -> Executor:
    from hetsplit.runtime.gpu import TorchCudaExecutor

    return TorchCudaExecutor(path, spec)


# backend -> factory(path, spec, threads); one entry per backend ``choose_backend`` names
BACKENDS: dict[str, Callable[[Path, SegmentSpec, int], Executor]] = {
    ORT_CPU: lambda path, spec, threads: OrtExecutor(path, spec, threads),
    ORT_CUDA: lambda path, spec, threads: OrtExecutor(path, spec, threads, cuda=True),
    TORCH_CUDA: _torch_cuda,
}


def make_executor(backend: str, path: Path, spec: SegmentSpec, threads: int = 1) -> Executor:
    """The executor of one segment on ``backend`` (one of ``BACKENDS``)."""
    return BACKENDS[backend](path, spec, threads)
