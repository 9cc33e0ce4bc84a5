"""A small residual CNN as an ONNX file plus its Graph, for tests and benches.

The model is a DAG with skip connections, so plans over it exercise relays: a tensor produced in
one stage and read two stages later crosses (and is sent over) every cut in between.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.types import CONV, ELTWISE, GEMM, POOL, RESHAPE, Graph
from hetsplit.plan.types import Combine, Plan, Shard


def toy_model(path: str | Path, channels: int = 8, size: int = 16, blocks: int = 2, classes: int = 10,
              seed: int = 0) -> Graph:
    """Write the toy ONNX model to ``path`` and return its Graph (``load_onnx``: fused layers)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    kinds: list[str] = []

    def conv(name: str, x: str, c_in: int) -> str:
        w = numpy_helper.from_array((rng.standard_normal((channels, c_in, 3, 3)) * 0.2).astype(np.float32),
                                    f"{name}.w")
        inits.append(w)
        nodes.append(helper.make_node("Conv", [x, w.name], [f"{name}.y"], name=name, pads=[1, 1, 1, 1]))
        kinds.append(CONV)
        return f"{name}.y"

    def op(kind: str, op_type: str, name: str, xs: list[str], **attrs) -> str:
        nodes.append(helper.make_node(op_type, xs, [f"{name}.y"], name=name, **attrs))
        kinds.append(kind)
        return f"{name}.y"

    x = stem = op(ELTWISE, "Relu", "stem_relu", [conv("stem", "input", 3)])
    for b in range(blocks):
        skip = x
        y = op(ELTWISE, "Relu", f"b{b}_relu", [conv(f"b{b}_conv1", x, channels)])
        y = conv(f"b{b}_conv2", y, channels)
        x = op(ELTWISE, "Add", f"b{b}_add", [y, skip])
    x = op(ELTWISE, "Add", "long_add", [x, stem])  # a skip over every block: relayed by middle stages
    x = op(POOL, "GlobalAveragePool", "pool", [x])
    x = op(RESHAPE, "Flatten", "flatten", [x])
    w = numpy_helper.from_array(rng.standard_normal((classes, channels)).astype(np.float32), "fc.w")
    inits.append(w)
    x = op(GEMM, "Gemm", "fc", [x, w.name], transB=1)
    graph = helper.make_graph(
        nodes, "toy", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, classes])], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return load_onnx(path, name="toy")


def toy_sharded_mapping(graph: Graph, a: str, b: str, cluster: str = "") -> Plan:
    """The toy model with its first block's first convolution split by output channels between ``a`` and
    ``b`` (concat on ``b``), the stem on ``a`` and everything else on ``b``: every message flows from ``a``
    to ``b`` (the stem's output and ``a``'s shard per input), so a slow ``a -> b`` link bounds it."""
    channels = int(graph.layers[graph.index("b0_conv1")].attrs["c_out"])
    half = channels // 2
    assign: dict = {n: b for n in graph.names}
    assign["stem"] = a
    assign["b0_conv1"] = (Shard(a, "out", 0, half), Shard(b, "out", half, channels))
    return Plan(graph.name, cluster, "hand", assign=assign, combine={"b0_conv1": Combine("concat", b)})
