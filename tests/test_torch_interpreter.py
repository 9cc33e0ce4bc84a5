"""The ONNX-in-PyTorch interpreter (what a GPU device computes with, and what the GPU profiler times)
computes what onnxruntime computes, op by op and on whole zoo Transformers; it refuses ops it lacks."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetsplit.costs.profiler.ort_timing import example_inputs
from hetsplit.graph.torch_interpreter import TorchInterpreter, unsupported_ops


def one_op_model(op: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], outputs: list[str],
                 opset: int = 18, **attrs) -> onnx.ModelProto:
    node = helper.make_node(op, list(inputs) + list(consts), outputs, **attrs)
    graph = helper.make_graph(
        [node], op,
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape) for k, v in inputs.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def agree(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    outs = [o.name for o in model.graph.output]
    ref = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(outs, feeds)
    env = TorchInterpreter(model).run(feeds)
    for name, r in zip(outs, ref):
        got = env[name].numpy()
        assert got.shape == r.shape, name
        np.testing.assert_allclose(got, r, rtol=1e-5, atol=1e-5)


rng = np.random.default_rng(0)
X = rng.standard_normal((2, 5, 6)).astype(np.float32)


@pytest.mark.parametrize("op, consts, outputs, attrs", [
    ("Gather", {"i": np.array([[0, -1], [2, 1]], np.int64)}, ["y"], {"axis": 1}),
    ("Gather", {"i": np.array([4, 0, 0], np.int64)}, ["y"], {"axis": -1}),
    ("Slice", {"s": np.array([1, -4], np.int64), "e": np.array([100, -1], np.int64),
               "a": np.array([1, 2], np.int64), "t": np.array([2, 1], np.int64)}, ["y"], {}),
    ("Slice", {"s": np.array([0], np.int64), "e": np.array([1], np.int64)}, ["y"], {}),
    ("Split", {"n": np.array([2, 4], np.int64)}, ["y", "z"], {"axis": 2}),
    ("Split", {}, ["y", "z", "w"], {"axis": 1, "num_outputs": 3}),
    ("ReduceMean", {"a": np.array([-1], np.int64)}, ["y"], {"keepdims": 1}),
    ("ReduceMean", {"a": np.array([0, 2], np.int64)}, ["y"], {"keepdims": 0}),
    ("Pow", {"p": np.array(2.0, np.float32)}, ["y"], {}),
    ("Neg", {}, ["y"], {}),
])
def test_each_transformer_op_matches_onnxruntime(op, consts, outputs, attrs):
    x = np.abs(X) if op == "Pow" else X
    agree(one_op_model(op, {"x": x}, consts, outputs, **attrs), {"x": x})


def test_sqrt_matches_onnxruntime():
    x = np.abs(X) + 0.1
    agree(one_op_model("Sqrt", {"x": x}, {}, ["y"]), {"x": x})


@pytest.mark.slow
@pytest.mark.parametrize("name", ["mobilebert", "tinyllama-42m"])
def test_whole_zoo_transformer_matches_onnxruntime(name):
    from hetsplit.runtime import resolve_model

    _, path = resolve_model(name)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    feeds = example_inputs(session)
    outs = [o.name for o in session.get_outputs()]
    env = TorchInterpreter(onnx.load(str(path))).run(feeds)
    for name_, ref in zip(outs, session.run(outs, feeds)):
        np.testing.assert_allclose(env[name_].numpy(), ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))


def test_an_op_it_lacks_is_named_up_front():
    model = one_op_model("Resize", {"x": X[None]}, {"r": np.array([], np.float32),
                                                      "s": np.array([1, 1, 2, 2], np.float32)}, ["y"])
    assert unsupported_ops(model) == ["Resize"]
    with pytest.raises(ValueError, match=r"ops \['Resize'\] are not supported"):
        TorchInterpreter(model)
