"""The ``torch-cuda`` backend (``runtime.executor``): a small ONNX interpreter for CNN ops in PyTorch.

The sub-model's nodes are executed one by one with ``torch.nn.functional`` on the device. The
interpreter covers the ops of the zoo's CNNs (conv, pooling, batch norm, element-wise, gemm,
concat, reshape ...) and refuses any other op up front, naming it and the device. It runs on any
torch device, so it is tested on the CPU against onnxruntime.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.executor import TORCH_CUDA, SegmentSpec, check_submodel

Op = Callable[[list[Any], dict[str, Any]], list[torch.Tensor]]


def _pads2d(x: torch.Tensor, pads: list[int], value: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """Symmetric pads go to the op; asymmetric ones are applied with F.pad first."""
    if not pads:
        return x, [0, 0]
    top, left, bottom, right = pads
    if top == bottom and left == right:
        return x, [top, left]
    return F.pad(x, [left, right, top, bottom], value=value), [0, 0]


def _conv(xs, a):
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    x, pad = _pads2d(x, a.get("pads", []))
    return [F.conv2d(x, w, b, a.get("strides", [1, 1]), pad, a.get("dilations", [1, 1]), a.get("group", 1))]


def _maxpool(xs, a):
    x, pad = _pads2d(xs[0], a.get("pads", []), float("-inf"))
    return [F.max_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pad,
                         a.get("dilations", [1, 1]), bool(a.get("ceil_mode", 0)))]


def _avgpool(xs, a):
    x, pad = _pads2d(xs[0], a.get("pads", []))
    return [F.avg_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pad, bool(a.get("ceil_mode", 0)),
                         bool(a.get("count_include_pad", 0)))]


def _gemm(xs, a):
    x, w = xs[0], xs[1]
    x = x.t() if a.get("transA", 0) else x
    w = w.t() if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    if len(xs) > 2 and xs[2] is not None:
        y = y + a.get("beta", 1.0) * xs[2]
    return [y]


def _bn(xs, a):
    x, scale, bias, mean, var = xs
    return [F.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))]


def _clip(xs, a):
    lo = xs[1] if len(xs) > 1 and xs[1] is not None else a.get("min")
    hi = xs[2] if len(xs) > 2 and xs[2] is not None else a.get("max")
    return [torch.clamp(xs[0], None if lo is None else float(lo), None if hi is None else float(hi))]


def _reshape(xs, a):
    shape = [int(v) for v in xs[1].tolist()]
    if not a.get("allowzero", 0):
        shape = [xs[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return [xs[0].reshape(shape)]


OPS: dict[str, Op] = {
    "Conv": _conv, "MaxPool": _maxpool, "AveragePool": _avgpool, "Gemm": _gemm, "BatchNormalization": _bn,
    "Clip": _clip, "Reshape": _reshape,
    "Relu": lambda xs, a: [F.relu(xs[0])],
    "Sigmoid": lambda xs, a: [torch.sigmoid(xs[0])],
    "Tanh": lambda xs, a: [torch.tanh(xs[0])],
    "HardSigmoid": lambda xs, a: [torch.clamp(a.get("alpha", 0.2) * xs[0] + a.get("beta", 0.5), 0, 1)],
    "HardSwish": lambda xs, a: [F.hardswish(xs[0])],
    "Add": lambda xs, a: [xs[0] + xs[1]],
    "Sub": lambda xs, a: [xs[0] - xs[1]],
    "Mul": lambda xs, a: [xs[0] * xs[1]],
    "Div": lambda xs, a: [xs[0] / xs[1]],
    "MatMul": lambda xs, a: [xs[0] @ xs[1]],
    "GlobalAveragePool": lambda xs, a: [xs[0].mean(dim=tuple(range(2, xs[0].dim())), keepdim=True)],
    "GlobalMaxPool": lambda xs, a: [xs[0].amax(dim=tuple(range(2, xs[0].dim())), keepdim=True)],
    "Flatten": lambda xs, a: [xs[0].reshape(int(np.prod(xs[0].shape[:a.get("axis", 1)])), -1)],
    "Concat": lambda xs, a: [torch.cat(xs, dim=a["axis"])],
    "Identity": lambda xs, a: [xs[0]],
    "Transpose": lambda xs, a: [xs[0].permute(*a["perm"]) if "perm" in a else xs[0].permute(
        *reversed(range(xs[0].dim())))],
    "Softmax": lambda xs, a: [torch.softmax(xs[0], dim=a.get("axis", -1))],
    "Constant": lambda xs, a: [a["value"]],
}


class TorchExecutor:
    """Executes a sub-model node by node with PyTorch on ``device`` (``cuda`` for GPU devices)."""

    backend = TORCH_CUDA

    def __init__(self, path: Path, spec: SegmentSpec, device: str = "cuda"):
        check_submodel(path, spec)
        self.device, self.name = torch.device(device), spec.device
        self.on_gpu = self.device.type == "cuda"
        model = onnx.load(str(path))
        unsupported = sorted({n.op_type for n in model.graph.node
                              if n.op_type not in OPS or n.domain not in ("", "ai.onnx")})
        if unsupported:
            raise RuntimeFailure(f"device {spec.device}: the PyTorch backend cannot run ops {unsupported} of "
                                 f"{path.name}; run this device on the CPU (onnxruntime) instead")
        self.consts = {i.name: self._tensor(numpy_helper.to_array(i)) for i in model.graph.initializer}
        self.nodes = [(n.op_type, list(n.input), list(n.output), self._attrs(n)) for n in model.graph.node]
        self.outputs = spec.output_names
        self.keep: set[str] = set()  # outputs returned as device tensors (they leave over NCCL)

    def _tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a, copy=True)).to(self.device)

    def _attrs(self, node: onnx.NodeProto) -> dict[str, Any]:
        out = {}
        for attr in node.attribute:
            v = helper.get_attribute_value(attr)
            if isinstance(v, onnx.TensorProto):
                v = self._tensor(numpy_helper.to_array(v))
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [int(x) if isinstance(x, int) else x for x in v]
            out[attr.name] = v
        return out

    @torch.inference_mode()
    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env: dict[str, Any] = dict(self.consts)
        env.update({k: (v if isinstance(v, torch.Tensor) else torch.from_numpy(v)).to(self.device, non_blocking=True)
                    for k, v in feeds.items()})
        env[""] = None
        try:
            for op, ins, outs, attrs in self.nodes:
                for name, value in zip(outs, OPS[op]([env[x] for x in ins], attrs)):
                    env[name] = value
            return {name: env[name] if name in self.keep else env[name].cpu().numpy() for name in self.outputs}
        except Exception as exc:  # noqa: BLE001
            raise RuntimeFailure(f"device {self.name}: the sub-model failed on {self.device}: {exc}") from None


class TorchCudaExecutor(TorchExecutor):
    """A GPU device's executor: the interpreter on CUDA (tensors cross to other devices via host memory)."""

    def __init__(self, path: Path, spec: SegmentSpec):
        if not torch.cuda.is_available():
            raise RuntimeFailure(f"device {spec.device} is a GPU but this host has no CUDA device visible to PyTorch; "
                                 "run with --cpu-only to rehearse it on the CPU")
        super().__init__(path, spec, "cuda")
