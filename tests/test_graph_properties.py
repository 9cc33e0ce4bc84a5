"""Property tests: on random conv / activation / residual DAGs the import keeps every node and MAC."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper

from graph_helpers import init, model
from hetsplit.graph import load_onnx

OPS = st.sampled_from(["conv", "relu", "add", "bn", "sigmoid_mul"])


@st.composite
def random_cnn(draw):
    """A random DAG on one spatial size: convs change channels, adds join same-shaped tensors."""
    h = w = draw(st.integers(2, 5))
    tensors = [("x", draw(st.sampled_from([1, 2, 3])))]   # (name, channels)
    nodes, inits, expected_macs = [], [], 0
    for i in range(draw(st.integers(1, 12))):
        op = draw(OPS)
        src, c = tensors[draw(st.integers(0, len(tensors) - 1))] if op == "add" else tensors[-1]
        out = f"t{i}"
        if op == "conv":
            c_out = draw(st.sampled_from([1, 2, 4]))
            nodes.append(helper.make_node("Conv", [src, f"w{i}"], [out], name=f"conv{i}", pads=[1, 1, 1, 1]))
            inits.append(init(f"w{i}", (c_out, c, 3, 3), seed=i))
            expected_macs += h * w * c_out * c * 9
            c = c_out
        elif op == "relu":
            nodes.append(helper.make_node("Relu", [src], [out], name=f"relu{i}"))
        elif op == "bn":
            names = [f"{k}{i}" for k in "sbmv"]
            inits += [init(n, (c,), seed=i) for n in names]
            nodes.append(helper.make_node("BatchNormalization", [src, *names], [out], name=f"bn{i}"))
        elif op == "sigmoid_mul":
            nodes += [helper.make_node("Sigmoid", [src], [f"s{i}"], name=f"sig{i}"),
                      helper.make_node("Mul", [src, f"s{i}"], [out], name=f"mul{i}")]
        else:
            last, c_last = tensors[-1]
            if c_last != c:
                continue
            nodes.append(helper.make_node("Add", [last, src], [out], name=f"add{i}"))
        tensors.append((out, c))
    if not nodes:
        nodes.append(helper.make_node("Relu", ["x"], ["t_end"], name="relu_end"))
        tensors.append(("t_end", tensors[0][1]))
    m = model(nodes, [("x", [1, tensors[0][1], h, w])], [tensors[-1][0]], inits)
    return m, expected_macs, len([n for n in nodes if n.op_type == "Conv"])


@settings(max_examples=60, deadline=None)
@given(random_cnn())
def test_import_keeps_every_node_and_mac(case):
    m, expected_macs, convs = case
    g = load_onnx(m)
    names = [n for layer in g.layers for n in layer.nodes]
    assert sorted(names) == sorted(n.name for n in m.graph.node)          # a partition of the nodes
    assert g.total_macs == expected_macs
    assert sum(layer.op == "conv" for layer in g.layers) == convs          # each conv anchors one layer
    assert all(layer.macs == 0 for layer in g.layers if layer.op != "conv")
    assert g.cut_bytes[0] == g.input_bytes and g.cut_bytes[-1] == g.output_bytes
    assert (g.cut_bytes >= 0).all()
    for i, preds in enumerate(g.predecessors):                             # the DAG runs forward
        assert all(p < i for p in preds)
