"""Running one sub-model: onnxruntime on CPUs (thread-limited), checked against the manifest first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.manifest import Manifest, TensorSpec, WorkerSpec
from hetsplit.runtime.split import np_dtype


def check_submodel(path: Path, spec: WorkerSpec) -> None:
    """Fail, naming the device, unless the sub-model's inputs and outputs are the manifest's."""
    where = f"device {spec.device}: sub-model {path.name}"
    try:
        model = onnx.load(str(path), load_external_data=False)
    except FileNotFoundError:
        raise RuntimeFailure(f"{where} is missing; split the plan again (hetsplit split)") from None
    except Exception as exc:  # noqa: BLE001 - any parse failure means a broken file
        raise RuntimeFailure(f"{where} is not a readable ONNX model ({type(exc).__name__}: {exc})") from None
    wire = {t.name: t for e in spec.recv + spec.send for t in e.tensors}
    for role, declared, names in (("input", model.graph.input, spec.inputs), ("output", model.graph.output,
                                                                               spec.outputs)):
        inits = {i.name for i in model.graph.initializer}
        have = {vi.name: vi for vi in declared if vi.name not in inits}
        if set(have) != set(names):
            raise RuntimeFailure(f"{where} does not match the manifest: its {role}s are {sorted(have)}, the "
                                 f"manifest says {sorted(names)}; split again")
        for name in names:
            tt = have[name].type.tensor_type
            shape = tuple(int(d.dim_value) if d.HasField("dim_value") else -1 for d in tt.shape.dim)
            want: TensorSpec = wire[name]
            dtype = np_dtype(tt.elem_type)
            if shape != want.shape or dtype != want.dtype:
                raise RuntimeFailure(f"{where} does not match the manifest: {role} {name!r} is {dtype}{list(shape)}, "
                                     f"the manifest says {want.dtype}{list(want.shape)}; split again")


class OrtExecutor:
    """An onnxruntime session limited to ``threads`` compute threads (no spinning)."""

    def __init__(self, path: Path, spec: WorkerSpec, threads: int = 1):
        import onnxruntime as ort

        check_submodel(path, spec)
        so = ort.SessionOptions()
        so.intra_op_num_threads = max(1, threads)
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        so.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {spec.device}: onnxruntime cannot load {path.name}: {exc}") from None
        self.outputs = list(spec.outputs)
        self.device = spec.device

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        try:
            return dict(zip(self.outputs, self.session.run(self.outputs, feeds)))
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {self.device}: the sub-model failed on an input: {exc}") from None


def make_executor(manifest: Manifest, rank: int, threads: int, kind: str = "cpu") -> OrtExecutor:
    """The executor of one worker; GPU devices need CUDA on their host (otherwise a clear failure)."""
    spec = manifest.worker(rank)
    path = manifest.submodel_path(rank)
    if kind == "gpu":
        from hetsplit.runtime.gpu import TorchCudaExecutor

        return TorchCudaExecutor(path, spec)
    return OrtExecutor(path, spec, threads)
