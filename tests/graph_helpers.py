"""Tiny ONNX models built by hand (onnx.helper) for the graph tests."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def init(name: str, shape: tuple[int, ...], seed: int = 0) -> onnx.TensorProto:
    rng = np.random.default_rng(seed)
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def model(nodes: list[onnx.NodeProto], inputs: list[tuple[str, list]], outputs: list[str],
          inits: list[onnx.TensorProto], opset: int = 17) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "hand", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs], inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
