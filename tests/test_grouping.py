"""Layer grouping: what fuses, what stays apart, and that the layer DAG keeps every dependency."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from graph_helpers import init, model
from hetsplit.graph import INPUT, load_onnx, zoo


def test_decomposed_layernorm_is_one_norm_layer_after_a_gemm():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
             helper.make_node("ReduceMean", ["h"], ["mu"], name="mean", axes=[-1]),
             helper.make_node("Sub", ["h", "mu"], ["d"], name="sub"),
             helper.make_node("Mul", ["d", "d"], ["d2"], name="sq"),
             helper.make_node("ReduceMean", ["d2"], ["var"], name="var", axes=[-1]),
             helper.make_node("Add", ["var", "eps"], ["ve"], name="add_eps"),
             helper.make_node("Sqrt", ["ve"], ["sd"], name="sqrt"),
             helper.make_node("Div", ["d", "sd"], ["n"], name="div"),
             helper.make_node("Mul", ["n", "gamma"], ["y"], name="scale")]
    inits = [init("w", (16, 16)), numpy_helper.from_array(np.array(1e-5, np.float32), "eps"), init("gamma", (16,))]
    g = load_onnx(model(nodes, [("x", [1, 4, 16])], ["y"], inits, opset=13))
    assert [layer.op for layer in g.layers] == ["gemm", "norm"]
    assert g.layers[1].nodes == ("mean", "sub", "sq", "var", "add_eps", "sqrt", "div", "scale")
    h = next(t for t in g.tensors if t.name == "h")
    assert h.consumers == (1,) and h.nbytes == 4 * 64


def test_residual_add_stays_a_layer_and_absorbs_its_relu():
    g = zoo.load("resnet8")
    adds = [layer for layer in g.layers if layer.op == "eltwise"]
    assert [layer.onnx_ops for layer in adds] == [("Add", "Relu")] * 3
    assert all(layer.in_bytes == 2 * layer.out_bytes for layer in adds)  # main path + skip


def test_view_only_layer_merges_into_its_consumer():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="nhwc_to_nchw", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["y"], name="conv")]
    g = load_onnx(model(nodes, [("x", [1, 8, 8, 3])], ["y"], [init("w", (4, 3, 1, 1))]))
    assert len(g) == 1 and g.layers[0].nodes == ("nhwc_to_nchw", "conv") and g.layers[0].op == "conv"


def test_a_view_read_by_two_layers_stays_when_it_has_no_producer_layer():
    nodes = [helper.make_node("Transpose", ["x"], ["t"], name="perm", perm=[0, 3, 1, 2]),
             helper.make_node("Conv", ["t", "w"], ["a"], name="c1"),
             helper.make_node("Conv", ["t", "w2"], ["b"], name="c2"),
             helper.make_node("Add", ["a", "b"], ["y"], name="add")]
    g = load_onnx(model(nodes, [("x", [1, 4, 4, 3])], ["y"], [init("w", (2, 3, 1, 1)), init("w2", (2, 3, 1, 1))]))
    assert [layer.op for layer in g.layers] == ["reshape", "conv", "conv", "eltwise"]


def _assert_dag_complete(g):
    """Every layer except the first reads something; every tensor flows forward; outputs exist."""
    for i, preds in enumerate(g.predecessors):
        assert preds, f"layer {g.names[i]} reads nothing"
        assert all(p < i for p in preds)
    assert any(t.is_output for t in g.tensors)
    assert g.cut_bytes[0] == g.input_bytes and g.cut_bytes[-1] == g.output_bytes


def test_zoo_graphs_are_complete_dags_with_unique_nodes():
    for name in ("resnet18", "densenet121", "yolov8n", "tinyllama-42m", "mobilenetv2"):
        g = zoo.load(name)
        _assert_dag_complete(g)
        nodes = [n for layer in g.layers for n in layer.nodes]
        assert len(nodes) == len(set(nodes)) == g.meta["onnx_nodes"], name
        assert all(t.producer == INPUT or t.consumers or t.is_output for t in g.tensors)


def test_llama_block_layers():
    g = zoo.load("tinyllama-42m")
    block = [(layer.name, layer.op) for layer in g.layers if layer.name.startswith("layers.0/")]
    assert [op for _, op in block] == ["gemm", "gemm", "gemm", "matmul", "softmax", "matmul", "gemm", "norm", "gemm",
                                       "gemm", "eltwise", "gemm", "norm"]
    w1 = g.layers[g.index("layers.0/w1/MatMul")]
    assert w1.attrs["activation"] == "silu" and (w1.attrs["m"], w1.attrs["k"], w1.attrs["n"]) == (128, 512, 2048)


def test_densenet_concat_absorbs_the_next_bn_relu_and_sends_both_tensors():
    g = zoo.load("densenet121")
    first = next(i for i, layer in enumerate(g.layers) if "Concat" in layer.onnx_ops)
    assert g.layers[first].onnx_ops == ("Concat", "BatchNormalization", "Relu") and g.layers[first].op == "norm"
    out = sorted((t.consumers, t.name) for t in g.tensors if t.producer == first)
    # the activation goes to the next dense layer's 1x1 conv, the raw concat on to the next concat
    assert [c for c, _ in out] == [(first + 1,), (first + 3,)]
    assert out[1][1].endswith("Concat_output_0")
