"""ONNX import on hand-built models: MACs, bytes, attributes, symbolic batch, errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper, numpy_helper

from graph_helpers import init, model
from hetsplit.errors import ModelError
from hetsplit.graph import INPUT, load_onnx, prepare_model


def conv_bn_relu_model(batch: int | str = 1):
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("BatchNormalization", ["c", "s", "o", "m", "v"], ["n"], name="bn"),
             helper.make_node("Relu", ["n"], ["y"], name="relu")]
    inits = [init("w", (16, 8, 3, 3)), init("b", (16,)), init("s", (16,)), init("o", (16,)), init("m", (16,)),
             init("v", (16,))]
    return model(nodes, [("x", [batch, 8, 10, 10])], ["y"], inits)


def test_conv_bn_relu_is_one_layer_with_hand_computed_costs():
    g = load_onnx(conv_bn_relu_model(), name="cbr")
    assert len(g) == 1
    layer = g.layers[0]
    assert layer.op == "conv" and layer.onnx_ops == ("Conv", "BatchNormalization", "Relu")
    assert layer.nodes == ("conv", "bn", "relu")
    # output 1x16x5x5; each output element costs c_in * kh * kw = 8*9 MACs
    assert layer.macs == 16 * 5 * 5 * 8 * 9
    assert layer.param_bytes == 4 * (16 * 8 * 9 + 16 + 4 * 16)
    assert layer.out_bytes == 4 * 16 * 5 * 5
    assert layer.in_bytes == 4 * 8 * 10 * 10
    a = layer.attrs
    assert (a["c_in"], a["c_out"], a["kernel"], a["stride"], a["groups"]) == (8, 16, (3, 3), (2, 2), 1)
    assert (a["in_hw"], a["out_hw"], a["activation"], a["elem_bytes"]) == ((10, 10), (5, 5), "relu", 4)
    assert layer.splittable
    assert g.meta["num_params"] == 16 * 8 * 9 + 16 + 4 * 16
    assert g.input_bytes == 3200 and g.output_bytes == 1600


@pytest.mark.parametrize("batch", ["N", 0, -1])
def test_symbolic_batch_becomes_one(batch):
    g = load_onnx(conv_bn_relu_model(batch))
    x = next(t for t in g.tensors if t.producer == INPUT)
    assert x.shape == (1, 8, 10, 10) and x.nbytes == 3200
    assert g.layers[0].macs == 16 * 5 * 5 * 8 * 9


def test_symbolic_non_batch_dim_is_an_error_naming_the_input():
    m = model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", [1, "C", 4])], ["y"], [])
    with pytest.raises(ModelError, match=r"input 'x' has symbolic axes 1 \(C\).*--input-shape"):
        load_onnx(m)


def skip_model():
    """x -> conv1+relu (a) -> conv2 (b) -> add(a, b) + relu -> flatten -> gemm."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a"], name="relu1"),
             helper.make_node("Conv", ["a", "w2"], ["b"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["a", "b"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["r"], name="relu2"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], name="fc", transB=1)]
    inits = [init("w1", (4, 4, 3, 3)), init("w2", (4, 4, 3, 3)), init("wf", (10, 64)), init("bf", (10,))]
    return model(nodes, [("x", [1, 4, 4, 4])], ["y"], inits)


def test_skip_connection_crosses_layers_and_counts_on_each_cut():
    g = load_onnx(skip_model())
    assert [layer.op for layer in g.layers] == ["conv", "conv", "eltwise", "gemm"]
    assert g.layers[2].onnx_ops == ("Add", "Relu", "Flatten")  # the view joins the residual layer
    a = next(t for t in g.tensors if t.name == "a")
    assert (a.producer, a.consumers, a.nbytes) == (0, (1, 2), 256)
    # cuts: before conv1 = input (256); before conv2 = a; before add = a + b; before fc = f; after = y
    assert g.cut_bytes.tolist() == [256, 256, 512, 256, 40]
    assert g.layers[2].in_bytes == 512 and g.layers[3].attrs == {"m": 1, "k": 64, "n": 10, "activation": None,
                                                                "elem_bytes": 4}
    assert g.layers[3].macs == 640


def test_batched_attention_matmul_and_weight_matmul():
    nodes = [helper.make_node("MatMul", ["x", "wq"], ["q"], name="proj"),
             helper.make_node("Reshape", ["q", "shape"], ["qh"], name="split_heads"),
             helper.make_node("Transpose", ["qh"], ["qt"], name="to_heads", perm=[0, 2, 1, 3]),
             helper.make_node("Transpose", ["qt"], ["kt"], name="k_t", perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["qt", "kt"], ["s"], name="scores"),
             helper.make_node("Softmax", ["s"], ["p"], name="softmax", axis=-1)]
    inits = [init("wq", (32, 32)), numpy_helper.from_array(np.array([1, 8, 4, 8], dtype=np.int64), "shape")]
    g = load_onnx(model(nodes, [("x", [1, 8, 32])], ["p"], inits))
    proj, scores, soft = g.layers
    assert proj.op == "gemm" and proj.attrs["m"] == 8 and proj.attrs["k"] == 32 and proj.attrs["n"] == 32
    assert proj.macs == 8 * 32 * 32 and proj.onnx_ops == ("MatMul", "Reshape", "Transpose", "Transpose")
    assert scores.op == "matmul" and scores.macs == 4 * 8 * 8 * 8
    assert {k: scores.attrs[k] for k in ("m", "k", "n", "batch", "heads")} == {"m": 8, "k": 8, "n": 8, "batch": 4,
                                                                               "heads": 4}
    assert soft.op == "softmax" and soft.attrs["elements"] == 4 * 8 * 8


def test_depthwise_conv_and_silu_and_relu6():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="dw", group=8, pads=[1, 1, 1, 1]),
             helper.make_node("Sigmoid", ["c"], ["sg"], name="sig"),
             helper.make_node("Mul", ["c", "sg"], ["a"], name="mul"),
             helper.make_node("Conv", ["a", "w2"], ["d"], name="pw"),
             helper.make_node("Clip", ["d", "lo", "hi"], ["y"], name="clip")]
    inits = [init("w", (8, 1, 3, 3)), init("w2", (4, 8, 1, 1)),
             numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    g = load_onnx(model(nodes, [("x", [1, 8, 6, 6])], ["y"], inits))
    dw, pw = g.layers
    assert dw.op == "dwconv" and dw.attrs["groups"] == 8 and dw.attrs["activation"] == "silu"
    assert dw.macs == 8 * 6 * 6 * 9
    assert pw.op == "conv" and pw.attrs["activation"] == "relu6" and pw.macs == 4 * 36 * 8


def test_shape_arithmetic_is_folded_and_joins_the_reshape():
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Shape", ["r"], ["sh"], name="shape"),
             helper.make_node("Gather", ["sh", "zero"], ["n"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["nu"], name="unsq"),
             helper.make_node("Concat", ["nu", "minus1"], ["target"], name="cat", axis=0),
             helper.make_node("Reshape", ["r", "target"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w"], ["y"], name="fc")]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"), numpy_helper.from_array(np.array([0], np.int64), "axes"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1"), init("w", (48, 5))]
    g = load_onnx(model(nodes, [("x", ["batch", 3, 4, 4])], ["y"], inits))
    assert [layer.op for layer in g.layers] == ["eltwise", "gemm"]
    assert g.layers[1].macs == 48 * 5
    assert [t.name for t in g.tensors if t.producer == 0] == ["f"]  # no shape tensor crosses the cut
    canonical = prepare_model(model(nodes, [("x", ["batch", 3, 4, 4])], ["y"], inits))
    assert next(n for n in canonical.graph.node if n.name == "shape").op_type == "Constant"


def test_unnamed_nodes_get_stable_unique_names():
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["b"], name="Relu_1"),
             helper.make_node("Sigmoid", ["b"], ["y"])]
    m = model(nodes, [("x", [1, 4])], ["y"], [])
    names = [n.name for n in prepare_model(m).graph.node]
    assert names == ["Relu_0", "Relu_1", "Sigmoid_2"]
    assert names == [n.name for n in prepare_model(prepare_model(m)).graph.node]
    assert load_onnx(m).layers[0].nodes == tuple(names)


def test_unsupported_op_error_names_the_node():
    m = model([helper.make_node("LSTM", ["x", "w", "r"], ["y"], name="rnn0", hidden_size=4)],
              [("x", [2, 1, 3])], ["y"], [init("w", (1, 16, 3)), init("r", (1, 16, 4))])
    with pytest.raises(ModelError, match=r"node 'rnn0'.*unsupported ONNX operator 'LSTM'"):
        load_onnx(m)
    custom = model([helper.make_node("Fancy", ["x"], ["y"], name="mine", domain="com.example")], [("x", [1, 3])],
                   ["y"], [])
    custom.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(ModelError, match=r"node 'mine'.*com.example::Fancy"):
        load_onnx(custom)


def test_malformed_models_are_errors_naming_the_node():
    dangling = model([helper.make_node("Relu", ["nowhere"], ["y"], name="r1")], [("x", [1, 3])], ["y"], [])
    with pytest.raises(ModelError, match=r"node 'r1'.*reads 'nowhere'"):
        load_onnx(dangling)
    bad_conv = model([helper.make_node("Conv", ["x", "w"], ["y"], name="c1")], [("x", [1, 3, 8, 8])], ["y"],
                     [init("w", (4, 5, 3, 3))])
    with pytest.raises(ModelError, match="shape inference failed|c1"):
        load_onnx(bad_conv)
    dynamic = model([helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_dyn")],
                    [("x", [1, 12]), ("s", [2])], ["y"], [])
    dynamic.graph.input[1].type.tensor_type.elem_type = 7  # int64 shape fed at run time
    with pytest.raises(ModelError, match="reshape_dyn"):
        load_onnx(dynamic)


def test_old_opset_is_rejected():
    with pytest.raises(ModelError, match="opset 10 is below 11"):
        load_onnx(model([helper.make_node("Relu", ["x"], ["y"], name="r")], [("x", [1, 3])], ["y"], [], opset=10))


def test_missing_file_and_garbage_file(tmp_path):
    with pytest.raises(ModelError, match="no such ONNX file"):
        load_onnx(tmp_path / "absent.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00not a model")
    with pytest.raises(ModelError, match="junk.onnx"):
        load_onnx(junk)


def test_pool_attrs_and_conv_transpose_macs():
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], name="pool", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("ConvTranspose", ["p", "w"], ["y"], name="up", strides=[2, 2])]
    g = load_onnx(model(nodes, [("x", [1, 4, 8, 8])], ["y"], [init("w", (4, 6, 2, 2))]))
    pool, up = g.layers
    assert pool.attrs["kernel"] == (2, 2) and pool.attrs["out_hw"] == (4, 4) and pool.attrs["channels"] == 4
    assert up.op == "conv" and up.attrs["c_out"] == 6 and up.attrs["out_hw"] == (8, 8)
    assert up.macs == 4 * 4 * 4 * 6 * 2 * 2   # every input element meets c_out * kh * kw weights


def test_softmax_records_its_axis_and_row_length():
    from hetsplit.graph import load_model

    (layer,) = [layer for layer in load_model("yolov8n").layers if layer.op == "softmax"]
    assert layer.attrs["axis"] == 1 and layer.attrs["row"] == 16  # DFL: a softmax over 16 bins
