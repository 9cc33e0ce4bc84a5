"""AutoDiCE interop (plan/autodice.py, `hetsplit autodice`): round trips, AutoDiCE's own style, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from graph_helpers import init, model
from onnx import helper

from hetsplit.cli.main import main
from hetsplit.costs import build_problem
from hetsplit.graph.onnx_import import load_onnx
from hetsplit.graph.onnx_prepare import prepare_model
from hetsplit.plan import load_plans, save_plans
from hetsplit.plan.autodice import (AutodiceError, anchor_node, autodice_documents, onnx_node_aliases, parse_keys,
                                    read_autodice, suggested_keys, write_autodice)
from hetsplit.plan.check import check_plan
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.types import Combine, Plan, Shard, Stage
from hetsplit.search import make_partitioner
from hetsplit.search.encodings import NaiveEncoding
from hetsplit.workflow import import_autodice, load_problem

CLUSTER = "jetson-xavier-nx-4"


@pytest.fixture(scope="module")
def problem():
    return load_problem("resnet18", CLUSTER)


@pytest.fixture(scope="module")
def pipeline(problem):
    plans = make_partitioner("exact").solve(problem)
    plan = max(plans, key=lambda p: len(p.stages))
    assert len(plan.stages) >= 2
    return plan


def _mapping_plan(problem, devices: list[str]) -> Plan:
    """Whole layers on devices in turn (not contiguous): a general mapping."""
    assign = {name: devices[i % len(devices)] for i, name in enumerate(problem.graph.names)}
    plan = Plan(problem.graph.name, problem.cluster.name, "hand", assign=assign)
    plan.metrics = evaluate(problem, plan)
    return plan


def _sharded_plan(problem) -> Plan:
    enc = NaiveEncoding(problem)
    plan = enc.plan(np.arange(enc.n_var) % 3)
    assert any(not isinstance(p, str) for p in plan.assign.values())
    return plan


def _write(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


# ---- round trips ------------------------------------------------------------------------------------

def test_pipeline_round_trip(problem, pipeline, tmp_path):
    paths = write_autodice(pipeline, problem.graph, tmp_path)
    assert [p.name for p in paths] == ["mapping.json"]
    doc = json.loads(paths[0].read_text())
    assert list(doc) == [s.device for s in pipeline.stages]
    assert sum(len(v) for v in doc.values()) == sum(len(layer.nodes) for layer in problem.graph.layers)
    back = import_autodice(paths[0], problem)
    assert back.is_pipeline
    assert [s.to_dict() for s in back.stages] == [s.to_dict() for s in pipeline.stages]
    assert back.metrics == pipeline.metrics
    check_plan(problem.graph, problem.cluster, back)


def test_pipeline_round_trip_with_key_map(problem, pipeline, tmp_path):
    keys = suggested_keys(problem.cluster)
    assert keys["nx0-gpu"] == "board0_gpu" and len(set(keys.values())) == len(keys)
    paths = write_autodice(pipeline, problem.graph, tmp_path, keys)
    doc = json.loads(paths[0].read_text())
    assert all("_" in k for k in doc)   # AutoDiCE cuts keys at '_' into host and resource
    back = import_autodice(paths[0], problem, device_keys=keys)
    assert back.placements() == pipeline.placements() and back.metrics == pipeline.metrics


def test_the_plan_package_reads_without_costing(problem, pipeline, tmp_path):
    paths = write_autodice(pipeline, problem.graph, tmp_path)
    back = read_autodice(paths[0], problem.graph, problem.cluster)
    assert back.metrics is None and back.placements() == pipeline.placements()


def test_non_contiguous_mapping_round_trip(problem, tmp_path):
    plan = _mapping_plan(problem, ["nx0-gpu", "nx1-gpu"])
    paths = write_autodice(plan, problem.graph, tmp_path)
    back = import_autodice(paths[0], problem)
    assert not back.is_pipeline
    assert back.placements() == plan.placements()
    assert back.metrics == plan.metrics


def test_pipeline_repeating_a_device_comes_back_as_a_mapping(problem, tmp_path):
    names = problem.graph.names
    plan = Plan(problem.graph.name, problem.cluster.name, "hand",
                [Stage("nx0-gpu", names[:5]), Stage("nx1-gpu", names[5:10]), Stage("nx0-gpu", names[10:])])
    plan.metrics = evaluate(problem, plan)
    back = import_autodice(write_autodice(plan, problem.graph, tmp_path)[0], problem)
    assert not back.is_pipeline and back.placements() == plan.placements()


def test_sharded_plan_round_trip(problem, tmp_path):
    plan = _sharded_plan(problem)
    paths = write_autodice(plan, problem.graph, tmp_path)
    assert [p.name for p in paths] == ["mapping.json", "horizontal.json"]
    hz = json.loads(paths[1].read_text())
    sharded = [n for n, p in plan.assign.items() if not isinstance(p, str)]
    assert len(hz) == len(sharded)
    name = sharded[0]
    layer = problem.graph.layers[problem.graph.index(name)]
    entry = hz[anchor_node(layer)]
    assert entry[0] == "lop" and entry[1] == [s.stop for s in plan.assign[name]]
    assert entry[2] == [s.device for s in plan.assign[name]]
    mapping = json.loads(paths[0].read_text())
    assert sum(anchor_node(layer) in v for v in mapping.values()) == len(plan.assign[name])
    back = import_autodice(paths[0], problem, paths[1])
    assert back.placements() == plan.placements()
    assert back.combine == plan.combine
    assert back.metrics == plan.metrics


def test_in_shards_with_a_sum_round_trip_as_lip(problem, tmp_path):
    g = problem.graph
    conv = next(layer for layer in g.layers if layer.op == "conv" and layer.attrs.get("c_in", 0) >= 32)
    c_in = conv.attrs["c_in"]
    assign = {name: "nx0-gpu" for name in g.names}
    assign[conv.name] = (Shard("nx0-gpu", "in", 0, c_in // 4), Shard("nx1-gpu", "in", c_in // 4, c_in))
    plan = Plan(g.name, problem.cluster.name, "hand", assign=assign, combine={conv.name: Combine("sum", "nx0-gpu")})
    plan.metrics = evaluate(problem, plan)
    paths = write_autodice(plan, g, tmp_path)
    entry = json.loads(paths[1].read_text())[anchor_node(conv)]
    assert entry[0] == "lip" and entry[1] == [c_in // 4, c_in - c_in // 4]   # lip points are part sizes
    back = import_autodice(paths[0], problem, paths[1])
    assert back.placements() == plan.placements() and back.combine == plan.combine
    assert back.metrics == plan.metrics


def test_horizontal_without_combine_entry_uses_autodice_rule(problem, tmp_path):
    """AutoDiCE's own three-entry form: the concat goes where the layer's other nodes (or its reader) run."""
    plan = _sharded_plan(problem)
    paths = write_autodice(plan, problem.graph, tmp_path)
    hz = {k: v[:3] for k, v in json.loads(paths[1].read_text()).items()}
    _write(paths[1], hz)
    back = import_autodice(paths[0], problem, paths[1])
    for name, comb in back.combine.items():
        layer = problem.graph.layers[problem.graph.index(name)]
        if len(layer.nodes) > 1:
            assert comb == plan.combine[name]
    check_plan(problem.graph, problem.cluster, back)


# ---- AutoDiCE's own style ----------------------------------------------------------------------------

def _tiny_onnx():
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["conv1_1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv1_1"], ["conv1_2"]),
             helper.make_node("MaxPool", ["conv1_2"], ["pool1_1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["pool1_1", "w2", "b2"], ["conv2_1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["conv2_1"], ["conv2_2"]),
             helper.make_node("Flatten", ["conv2_2"], ["flat"]),
             helper.make_node("Gemm", ["flat", "w3", "b3"], ["fc6_1"], transB=1),
             helper.make_node("Softmax", ["fc6_1"], ["prob_1"])]
    return model(nodes, [("x", [1, 3, 8, 8])], ["prob_1"],
                 [init("w1", (8, 3, 3, 3)), init("b1", (8,)), init("w2", (16, 8, 3, 3)), init("b2", (16,)),
                  init("w3", (10, 256)), init("b3", (10,))])


AUTODICE_KEYS = {"nx0-cpu": "nx0_arm012345", "nx0-gpu": "nx0_gpu"}


@pytest.fixture(scope="module")
def tiny():
    proto = _tiny_onnx()
    graph = load_onnx(proto, "tiny")
    cl = load_problem("resnet18", CLUSTER).cluster
    return graph, cl, onnx_node_aliases(prepare_model(proto))


def test_hand_written_autodice_mapping(tiny, tmp_path):
    graph, cl, aliases = tiny
    assert aliases["conv1_1"] == "Conv_0"   # unnamed nodes: AutoDiCE names them by their output
    m = _write(tmp_path / "mapping.json",
               '{"nx0_arm012345": ["conv1_1", "conv1_2", "pool1_1", "conv2_1", "conv2_2", "flat"], '
               '"nx0_gpu": ["fc6_1", "prob_1"]}\n')
    plan = import_autodice(m, build_problem(graph, cl), device_keys=AUTODICE_KEYS, aliases=aliases)
    assert plan.is_pipeline and [s.device for s in plan.stages] == ["nx0-cpu", "nx0-gpu"]
    assert plan.stages[1].layers == ["Gemm_6", "Softmax_7"]
    assert plan.metrics is not None and plan.metrics.throughput > 0


def test_hand_written_autodice_horizontal(tiny, tmp_path):
    graph, cl, aliases = tiny
    m = _write(tmp_path / "mapping.json",
               {"nx0_arm012345": ["conv1_1", "conv1_2", "pool1_1", "conv2_1", "conv2_2", "flat"],
                "nx0_gpu": ["conv2_1", "fc6_1", "prob_1"]})
    h = _write(tmp_path / "horizontal.json", {"conv2_1": ["lop", [4, 65535], ["nx0_arm012345", "nx0_gpu"]]})
    plan = import_autodice(m, build_problem(graph, cl), h, AUTODICE_KEYS, aliases)
    assert plan.assign["Conv_3"] == (Shard("nx0-cpu", "out", 0, 4), Shard("nx0-gpu", "out", 4, 16))
    assert plan.combine["Conv_3"] == Combine("concat", "nx0-cpu")   # where its Relu and Flatten run
    assert plan.metrics is not None
    # and back out: the same split, in hetsplit's node names
    mapping, hz = autodice_documents(plan, graph, AUTODICE_KEYS)
    assert hz["Conv_3"][:3] == ["lop", [4, 16], ["nx0_arm012345", "nx0_gpu"]]
    assert "Conv_3" in mapping["nx0_gpu"] and "Relu_4" in mapping["nx0_arm012345"]


def test_layer_names_stand_for_their_nodes(problem, tmp_path):
    """A hetsplit layer name (not also a node name) stands for all the ONNX nodes of the layer."""
    names = problem.graph.names
    assert names[0] not in problem.graph.layers[0].nodes
    m = _write(tmp_path / "mapping.json", {"nx0-cpu": names[:4], "nx0-gpu": names[4:]})
    plan = import_autodice(m, problem)
    assert plan.is_pipeline and plan.stages[0].layers == names[:4]


# ---- bad input -----------------------------------------------------------------------------------------

GOOD = {"nx0-cpu": ["Conv_0", "Relu_1", "MaxPool_2", "Conv_3", "Relu_4", "Flatten_5"], "nx0-gpu": ["Gemm_6", "Softmax_7"]}


def _bad(tiny, tmp_path, doc, *match, horizontal=None, keys=None):
    graph, cl, aliases = tiny
    m = _write(tmp_path / "mapping.json", doc)
    h = _write(tmp_path / "horizontal.json", horizontal) if horizontal is not None else None
    with pytest.raises(AutodiceError) as exc:
        read_autodice(m, graph, cl, h, keys, aliases)
    for text in match:
        assert text in str(exc.value), str(exc.value)
    return str(exc.value)


def test_unknown_layer_name(tiny, tmp_path):
    doc = {**GOOD, "nx0-gpu": ["Gemm_6", "Softmax_7", "conv9_9"]}
    _bad(tiny, tmp_path, doc, "mapping.json", "key 'nx0-gpu'[2]", "'conv9_9' is not an ONNX node")


def test_node_mapped_twice_across_devices(tiny, tmp_path):
    doc = {**GOOD, "nx0-gpu": ["Relu_4", "Gemm_6", "Softmax_7"]}
    _bad(tiny, tmp_path, doc, "'Relu_4' (layer 'Conv_3') is mapped twice", "'nx0-cpu', 'nx0-gpu'", "horizontal.json")


def test_node_mapped_twice_in_one_list(tiny, tmp_path):
    doc = {**GOOD, "nx0-gpu": ["Gemm_6", "Softmax_7", "Gemm_6"]}
    _bad(tiny, tmp_path, doc, "key 'nx0-gpu'", "'Gemm_6'", "mapped twice in this list")


def test_node_not_mapped(tiny, tmp_path):
    doc = {**GOOD, "nx0-gpu": ["Gemm_6"]}
    _bad(tiny, tmp_path, doc, "1 ONNX node(s) are mapped to no device", "'Softmax_7' (layer 'Softmax_7')")


def test_device_key_not_in_cluster(tiny, tmp_path):
    doc = {"nx0-cpu": GOOD["nx0-cpu"], "lenovo_cpu1": GOOD["nx0-gpu"]}
    _bad(tiny, tmp_path, doc, "device key 'lenovo_cpu1' is not a device of cluster 'jetson-xavier-nx-4'", "--keys")


def test_key_map_naming_unknown_device(tiny, tmp_path):
    _bad(tiny, tmp_path, GOOD, "'gpu9'", "does not have", keys={"gpu9": "x_gpu"})


def test_two_keys_for_one_device(tiny, tmp_path):
    doc = {"nx0-cpu": GOOD["nx0-cpu"][:3], "nx0_arm012345": GOOD["nx0-cpu"][3:], "nx0-gpu": GOOD["nx0-gpu"]}
    _bad(tiny, tmp_path, doc, "device 'nx0-cpu' already has key 'nx0-cpu'", keys=AUTODICE_KEYS)


def test_grouped_layer_split_over_devices(tiny, tmp_path):
    doc = {"nx0-cpu": ["Conv_0", "MaxPool_2", "Conv_3", "Relu_4", "Flatten_5"],
           "nx0-gpu": ["Relu_1", "Gemm_6", "Softmax_7"]}
    _bad(tiny, tmp_path, doc, "layer 'Conv_0' groups ONNX nodes", "'Conv_0' on 'nx0-cpu'", "'Relu_1' on 'nx0-gpu'")


@pytest.mark.parametrize("text, match", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "expected an object"),
    ("{}", "empty object"),
    ('{"nx0-cpu": "Conv_0"}', "key 'nx0-cpu': expected a list of ONNX node names, got str"),
    ('{"nx0-cpu": [1]}', "a node name must be a string"),
])
def test_malformed_mapping(tiny, tmp_path, text, match):
    _bad(tiny, tmp_path, text, match)


def test_missing_mapping_file(tiny, tmp_path):
    graph, cl, _ = tiny
    with pytest.raises(AutodiceError, match="no such mapping file"):
        read_autodice(tmp_path / "nope.json", graph, cl)


SPLIT = {"nx0-cpu": GOOD["nx0-cpu"], "nx0-gpu": ["Conv_3", *GOOD["nx0-gpu"]]}


@pytest.mark.parametrize("entry, match", [
    (["lop", [4, 16]], "expected [\"lop\" | \"lip\""),
    ("lop", "expected [\"lop\" | \"lip\""),
    (["height", [4, 4], ["nx0-cpu", "nx0-gpu"]], "'height' split slices feature maps"),
    (["zigzag", [4, 16], ["nx0-cpu", "nx0-gpu"]], "unknown partition type 'zigzag'"),
    (["lop", [4], ["nx0-cpu", "nx0-gpu"]], "1 split points for 2 devices"),
    (["lop", [8, 4], ["nx0-cpu", "nx0-gpu"]], "must increase"),
    (["lop", [0, 16], ["nx0-cpu", "nx0-gpu"]], "positive integers"),
    (["lop", [16, 20], ["nx0-cpu", "nx0-gpu"]], "leave a device nothing"),
    (["lop", [4, 10], ["nx0-cpu", "nx0-gpu"]], "cover 10 of the 16 output channels"),
    (["lip", [4, 2], ["nx0-cpu", "nx0-gpu"]], "cover 6 of the 8 input channels"),
    (["lop", [4, 16], ["nx0-cpu", "nx9-gpu"]], "device key 'nx9-gpu'"),
    (["lop", [4, 16], ["nx0-cpu", "nx0-gpu"], {"where": 1}], "fourth entry"),
])
def test_malformed_horizontal(tiny, tmp_path, entry, match):
    _bad(tiny, tmp_path, SPLIT, match, horizontal={"Conv_3": entry})


def test_horizontal_names_a_non_anchor_node(tiny, tmp_path):
    _bad(tiny, tmp_path, SPLIT, "'Relu_4' is part of layer 'Conv_3'", "'Conv_3'",
         horizontal={"Relu_4": ["lop", [4, 16], ["nx0-cpu", "nx0-gpu"]]})


def test_split_node_listed_on_other_devices_than_its_split(tiny, tmp_path):
    _bad(tiny, tmp_path, GOOD, "split over", "list it under exactly",
         horizontal={"Conv_3": ["lop", [4, 16], ["nx0-cpu", "nx0-gpu"]]})


def test_export_refuses_what_autodice_cannot_express(problem, tmp_path):
    g = problem.graph
    conv = next(layer for layer in g.layers if layer.op == "conv")
    c = conv.attrs["c_out"]
    shards = (Shard("nx0-gpu", "out", 0, c // 2), Shard("nx1-gpu", "out", c // 2, c))
    assign = {name: "nx0-gpu" for name in g.names}
    assign[conv.name] = shards
    chain = Plan(g.name, problem.cluster.name, "hand", assign=assign)
    with pytest.raises(AutodiceError, match="never meet"):
        write_autodice(chain, g, tmp_path)
    c_in = conv.attrs["c_in"]
    assign[conv.name] = (Shard("nx0-gpu", "in", 0, 1), Shard("nx1-gpu", "in", 1, c_in))
    tree = Plan(g.name, problem.cluster.name, "hand", assign=assign, combine={conv.name: Combine("sum", "nx0-gpu", 2)})
    with pytest.raises(AutodiceError, match="tree"):
        write_autodice(tree, g, tmp_path)
    with pytest.raises(AutodiceError, match="both given the key"):
        write_autodice(_mapping_plan(problem, ["nx0-gpu", "nx1-gpu"]), g, tmp_path, {"nx0-gpu": "k", "nx1-gpu": "k"})
    with pytest.raises(AutodiceError, match="not 'tiny'|for model"):
        other = Plan("tiny", problem.cluster.name, "hand", [Stage("nx0-gpu", g.names)])
        write_autodice(other, g, tmp_path)


def test_parse_keys():
    assert parse_keys("nx0-gpu=nx0_gpu, nx1-gpu=nx1_gpu") == {"nx0-gpu": "nx0_gpu", "nx1-gpu": "nx1_gpu"}
    for bad in ("nx0-gpu", "=x", "a=1,a=2"):
        with pytest.raises(AutodiceError):
            parse_keys(bad)


# ---- CLI -----------------------------------------------------------------------------------------------

def test_cli_export_import_round_trip(problem, pipeline, tmp_path, capsys):
    plans = tmp_path / "plans.json"
    save_plans([pipeline], plans)
    out = tmp_path / "ad"
    assert main(["autodice", "export", str(plans), "--model", "resnet18", "--index", "0",
                 "--keys", "nx0-gpu=nx0_gpu,nx1-gpu=nx1_gpu,nx2-gpu=nx2_gpu", "--out", str(out)]) == 0
    assert "nx0_gpu" in json.loads((out / "mapping.json").read_text())
    target = tmp_path / "back" / "plan.json"
    assert main(["autodice", "import", str(out / "mapping.json"), "--model", "resnet18", "--cluster", CLUSTER,
                 "--keys", "nx0-gpu=nx0_gpu,nx1-gpu=nx1_gpu,nx2-gpu=nx2_gpu", "--out", str(target)]) == 0
    (back,) = load_plans(target)
    assert back.is_pipeline and back.placements() == pipeline.placements()
    assert back.metrics.throughput == pytest.approx(pipeline.metrics.throughput)
    assert "wrote" in capsys.readouterr().out


def test_cli_sharded_with_auto_keys(problem, tmp_path):
    plans = tmp_path / "plans.json"
    plan = _sharded_plan(problem)
    save_plans([plan], plans)
    out = tmp_path / "ad"
    assert main(["autodice", "export", str(plans), "--model", "resnet18", "--keys", "auto", "--out", str(out)]) == 0
    assert (out / "horizontal.json").is_file()
    target = tmp_path / "plan.json"
    assert main(["autodice", "import", str(out / "mapping.json"), "--model", "resnet18", "--cluster", CLUSTER,
                 "--horizontal", str(out / "horizontal.json"), "--keys", "auto", "--out", str(target)]) == 0
    (back,) = load_plans(target)
    assert back.placements() == plan.placements() and back.combine == plan.combine


def test_cli_import_onnx_with_autodice_names(tmp_path):
    import onnx

    path = tmp_path / "tiny.onnx"
    onnx.save(_tiny_onnx(), path)
    m = _write(tmp_path / "mapping.json", {"nx0_arm012345": ["conv1_1", "conv1_2", "pool1_1", "conv2_1", "conv2_2",
                                                             "flat"], "nx0_gpu": ["fc6_1", "prob_1"]})
    target = tmp_path / "plan.json"
    assert main(["autodice", "import", str(m), "--model", str(path), "--cluster", CLUSTER,
                 "--keys", "nx0-cpu=nx0_arm012345,nx0-gpu=nx0_gpu", "--out", str(target)]) == 0
    (back,) = load_plans(target)
    assert back.is_pipeline and [s.device for s in back.stages] == ["nx0-cpu", "nx0-gpu"]


def test_cli_errors_exit_2(tmp_path, capsys):
    m = _write(tmp_path / "mapping.json", {"nope_gpu": ["x"]})
    assert main(["autodice", "import", str(m), "--model", "resnet18", "--cluster", CLUSTER,
                 "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert "hetsplit autodice: error:" in err and "'nope_gpu'" in err


def test_profile_graph_has_no_node_names(problem, pipeline, tmp_path):
    from dataclasses import replace

    from hetsplit.graph.types import Graph

    g = problem.graph
    bare = Graph(g.name, [replace(layer, nodes=()) for layer in g.layers], g.tensors)
    with pytest.raises(AutodiceError, match="no ONNX node names"):
        write_autodice(pipeline, bare, tmp_path)
    m = write_autodice(pipeline, g, tmp_path)[0]
    with pytest.raises(AutodiceError, match="no ONNX node names"):
        read_autodice(m, bare, problem.cluster)
