"""An ONNX model run node by node with PyTorch (``torch.nn.functional``) on any torch device.

What a GPU device computes with when onnxruntime has no CUDA provider (``runtime.gpu``), and what the
GPU profiler times layer by layer (``costs.profiler.torch_onnx``), so a GPU's measured costs are the
costs of the code that runs its segments. It covers the ops of the zoo's CNNs and Transformers (conv,
pooling, batch norm, element-wise, gemm, matmul, softmax, gather, slice ...) and refuses any other op
up front, naming them. Tested on the CPU against onnxruntime.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import helper, numpy_helper

Op = Callable[[list[Any], dict[str, Any]], list[torch.Tensor]]


def _pads2d(x: torch.Tensor, pads: list[int], value: float = 0.0) -> tuple[torch.Tensor, list[int]]:
    """Symmetric pads go to the op; asymmetric ones are applied with F.pad first."""
    if not pads:
        return x, [0, 0]
    top, left, bottom, right = pads
    if top == bottom and left == right:
        return x, [top, left]
    return F.pad(x, [left, right, top, bottom], value=value), [0, 0]


def _conv(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, w = xs[0], xs[1]
    b = xs[2] if len(xs) > 2 else None
    x, pad = _pads2d(x, a.get("pads", []))
    return [F.conv2d(x, w, b, a.get("strides", [1, 1]), pad, a.get("dilations", [1, 1]), a.get("group", 1))]


def _maxpool(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, pad = _pads2d(xs[0], a.get("pads", []), float("-inf"))
    return [F.max_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pad,
                         a.get("dilations", [1, 1]), bool(a.get("ceil_mode", 0)))]


def _avgpool(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, pad = _pads2d(xs[0], a.get("pads", []))
    return [F.avg_pool2d(x, a["kernel_shape"], a.get("strides", a["kernel_shape"]), pad, bool(a.get("ceil_mode", 0)),
                         bool(a.get("count_include_pad", 0)))]


def _gemm(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, w = xs[0], xs[1]
    x = x.t() if a.get("transA", 0) else x
    w = w.t() if a.get("transB", 0) else w
    y = a.get("alpha", 1.0) * (x @ w)
    if len(xs) > 2 and xs[2] is not None:
        y = y + a.get("beta", 1.0) * xs[2]
    return [y]


def _bn(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, scale, bias, mean, var = xs
    return [F.batch_norm(x, mean, var, scale, bias, False, 0.0, a.get("epsilon", 1e-5))]


def _clip(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    lo = xs[1] if len(xs) > 1 and xs[1] is not None else a.get("min")
    hi = xs[2] if len(xs) > 2 and xs[2] is not None else a.get("max")
    return [torch.clamp(xs[0], None if lo is None else float(lo), None if hi is None else float(hi))]


def _reshape(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    shape = [int(v) for v in xs[1].tolist()]
    if not a.get("allowzero", 0):
        shape = [xs[0].shape[i] if v == 0 else v for i, v in enumerate(shape)]
    return [xs[0].reshape(shape)]


def _gather(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, idx = xs[0], xs[1].long()
    axis = a.get("axis", 0) % x.dim()
    idx = torch.where(idx < 0, idx + x.shape[axis], idx)
    flat = x.index_select(axis, idx.reshape(-1))
    return [flat.reshape(*x.shape[:axis], *idx.shape, *x.shape[axis + 1:])]


def _slice(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x = xs[0]
    starts, ends = xs[1].tolist(), xs[2].tolist()
    axes = xs[3].tolist() if len(xs) > 3 and xs[3] is not None else list(range(len(starts)))
    steps = xs[4].tolist() if len(xs) > 4 and xs[4] is not None else [1] * len(starts)
    index: list[Any] = [slice(None)] * x.dim()
    for start, end, axis, step in zip(starts, ends, axes, steps):
        if step <= 0:
            raise ValueError(f"Slice with step {step} is not supported")
        n = x.shape[axis]
        start = max(0, min(n, start + n if start < 0 else start))
        end = max(0, min(n, end + n if end < 0 else end))
        index[axis % x.dim()] = slice(start, end, step)
    return [x[tuple(index)]]


def _reduce_mean(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    axes = a.get("axes")
    if axes is None and len(xs) > 1 and xs[1] is not None:
        axes = xs[1].tolist()
    dims = tuple(axes) if axes else tuple(range(xs[0].dim()))
    return [xs[0].mean(dim=dims, keepdim=bool(a.get("keepdims", 1)))]


def _split(xs: list[Any], a: dict[str, Any]) -> list[torch.Tensor]:
    x, axis = xs[0], a.get("axis", 0)
    sizes = xs[1].tolist() if len(xs) > 1 and xs[1] is not None else a.get("split")
    if sizes is None:
        parts = a.get("num_outputs")
        if parts is None:
            raise ValueError("Split without sizes or num_outputs is not supported")
        return list(torch.tensor_split(x, parts, dim=axis))
    return list(torch.split(x, [int(s) for s in sizes], dim=axis))


OPS: dict[str, Op] = {
    "Conv": _conv, "MaxPool": _maxpool, "AveragePool": _avgpool, "Gemm": _gemm, "BatchNormalization": _bn,
    "Clip": _clip, "Reshape": _reshape, "Gather": _gather, "Slice": _slice, "ReduceMean": _reduce_mean,
    "Split": _split,
    "Relu": lambda xs, a: [F.relu(xs[0])],
    "Sigmoid": lambda xs, a: [torch.sigmoid(xs[0])],
    "Tanh": lambda xs, a: [torch.tanh(xs[0])],
    "HardSigmoid": lambda xs, a: [torch.clamp(a.get("alpha", 0.2) * xs[0] + a.get("beta", 0.5), 0, 1)],
    "HardSwish": lambda xs, a: [F.hardswish(xs[0])],
    "Add": lambda xs, a: [xs[0] + xs[1]],
    "Sub": lambda xs, a: [xs[0] - xs[1]],
    "Mul": lambda xs, a: [xs[0] * xs[1]],
    "Div": lambda xs, a: [xs[0] / xs[1]],
    "Pow": lambda xs, a: [torch.pow(xs[0], xs[1])],
    "Neg": lambda xs, a: [-xs[0]],
    "Sqrt": lambda xs, a: [torch.sqrt(xs[0])],
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


@dataclass(frozen=True)
class Node:
    """One ONNX node, ready to run: its op, input and output names, decoded attributes."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any]


def unsupported_ops(model: onnx.ModelProto) -> list[str]:
    """The op types of ``model`` this interpreter cannot run (sorted, each once)."""
    return sorted({n.op_type for n in model.graph.node if n.op_type not in OPS or n.domain not in ("", "ai.onnx")})


class TorchInterpreter:
    """Runs ``model`` on torch ``device``: ``run(feeds)`` for every value, ``step`` for one node.

    Raises ``ValueError`` naming the ops it cannot run; callers turn that into their own error."""

    def __init__(self, model: onnx.ModelProto, device: str | torch.device = "cpu"):
        missing = unsupported_ops(model)
        if missing:
            raise ValueError(f"ops {missing} are not supported by the PyTorch interpreter")
        self.device = torch.device(device)
        self.consts = {i.name: self.tensor(numpy_helper.to_array(i)) for i in model.graph.initializer}
        self.nodes = [Node(n.name, n.op_type, list(n.input), list(n.output), self._attrs(n)) for n in model.graph.node]
        self.outputs = [o.name for o in model.graph.output]

    def tensor(self, a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.array(a, copy=True)).to(self.device)

    def _attrs(self, node: onnx.NodeProto) -> dict[str, Any]:
        out = {}
        for attr in node.attribute:
            v = helper.get_attribute_value(attr)
            if isinstance(v, onnx.TensorProto):
                v = self.tensor(numpy_helper.to_array(v))
            elif isinstance(v, bytes):
                v = v.decode()
            elif isinstance(v, list):
                v = [int(x) if isinstance(x, int) else x for x in v]
            out[attr.name] = v
        return out

    def environment(self, feeds: dict[str, Any]) -> dict[str, Any]:
        """The values before the first node: the weights and ``feeds`` (numpy or torch) on the device."""
        env: dict[str, Any] = dict(self.consts)
        env.update({k: (v if isinstance(v, torch.Tensor) else torch.from_numpy(v)).to(self.device, non_blocking=True)
                    for k, v in feeds.items()})
        env[""] = None
        return env

    @staticmethod
    def step(env: dict[str, Any], node: Node) -> None:
        """Run ``node`` on the values in ``env``, adding its outputs."""
        for name, value in zip(node.outputs, OPS[node.op]([env[x] for x in node.inputs], node.attrs)):
            env[name] = value

    def run(self, feeds: dict[str, Any], nodes: range | None = None) -> dict[str, Any]:
        """Every value of the model after one pass over ``feeds`` (only ``nodes``, by index, when given)."""
        env = self.environment(feeds)
        for node in self.nodes if nodes is None else (self.nodes[k] for k in nodes):
            self.step(env, node)
        return env

    def call(self, feeds: dict[str, Any], outputs: list[str], keep: set[str] | frozenset[str] = frozenset(),
             nodes: range | None = None) -> dict[str, Any]:
        """One executor call as the runtime's torch backend makes it (``runtime.gpu``): ``feeds`` in, the
        nodes run, ``outputs`` back as host arrays (those in ``keep`` as device tensors); on a GPU they leave
        through page-locked memory and one sync ends the copies."""
        with torch.inference_mode():
            env = self.run(feeds, nodes)
            if self.device.type != "cuda":
                return {name: env[name] if name in keep else env[name].numpy() for name in outputs}
            host = {name: torch.empty(env[name].shape, dtype=env[name].dtype, pin_memory=True).copy_(
                env[name], non_blocking=True) for name in outputs if name not in keep}
            torch.cuda.current_stream(self.device).synchronize()
            return {name: env[name] if name in keep else host[name].numpy() for name in outputs}

    def boundary(self, nodes: range) -> tuple[list[str], list[str]]:
        """The values a run of ``nodes`` (a range of node indices) reads from outside it (model inputs or
        earlier nodes' outputs; not weights) and the ones it makes that later nodes or the model output
        read: a segment's inputs and outputs."""
        made_inside = {o for k in nodes for o in self.nodes[k].outputs}
        reads = [x for k in nodes for x in self.nodes[k].inputs
                 if x and x not in made_inside and x not in self.consts]
        later = {x for k in range(nodes.stop, len(self.nodes)) for x in self.nodes[k].inputs} | set(self.outputs)
        made = [o for k in nodes for o in self.nodes[k].outputs if o in later]
        return list(dict.fromkeys(reads)), list(dict.fromkeys(made))
