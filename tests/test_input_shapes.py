"""--input-shape: models with symbolic height/width or sequence length through inspect, plan, split and
run (outputs verified against the unsplit model), the shape recorded in plans and profiles, and bad
shapes refused naming the input and what the model expects."""

from __future__ import annotations

import json

import pytest

from byo_models import CLUSTER_YAML, attention, detector
from hetsplit.cli.main import main
from hetsplit.errors import UsageError
from hetsplit.graph.input_shapes import parse_input_shapes, resolve_input_shapes
from hetsplit.workflow import export_torch

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("byo")
    (d / "cluster.yaml").write_text(CLUSTER_YAML)
    return {"det": detector(d / "det.onnx"), "att": attention(d / "att.onnx"), "cluster": d / "cluster.yaml",
            "dir": d}


def test_parse_named_bare_and_malformed():
    assert parse_input_shapes(["images:1,3,64,96", "mask:1,64"]) == {"images": (1, 3, 64, 96), "mask": (1, 64)}
    assert parse_input_shapes(["1,3,64,96"]) == {"": (1, 3, 64, 96)}
    assert parse_input_shapes(["a:b:1x2"]) == {"a:b": (1, 2)}       # names may hold ':'; 1x2 reads as 1,2
    for bad, why in ((["x:1,a"], "integers"), ([":1,2"], "name before ':' is empty"), (["x:1", "x:2"], "twice"),
                     (["1,2", "x:1"], "single-input")):
        with pytest.raises(UsageError, match=why):
            parse_input_shapes(bad)


def test_bare_shape_needs_a_single_input_model():
    inputs = {"image": [1, 3, "h", "w"], "mask": [1, "h", "w"]}
    with pytest.raises(UsageError, match=r"a bare --input-shape is for a model with one input; this one has 2: "
                                         r"'image' \[1, 3, h, w\]; 'mask' \[1, h, w\]"):
        resolve_input_shapes(inputs, {"": (1, 3, 8, 8)}, "m.onnx")
    assert resolve_input_shapes(inputs, {"mask": (1, 8, 8)}, "m.onnx") == {"mask": (1, 8, 8)}


def test_export_torch_refuses_what_it_cannot_export(tmp_path):
    from hetsplit.errors import ModelError

    with pytest.raises(ModelError, match="expected a torch.nn.Module"):
        export_torch(lambda x: x, None, tmp_path / "f.onnx")
    import torch

    with pytest.raises(ModelError, match="example_inputs must be a tensor"):
        export_torch(torch.nn.ReLU(), [1, 2], tmp_path / "f.onnx")


@pytest.mark.parametrize("args, needle", [
    ([], "input 'images' has symbolic axes 2 (height), 3 (width). Give their sizes with --input-shape"),
    (["--input-shape", "1,3,64"], "input 'images' has 4 axes [batch, 3, height, width], the shape gives 3"),
    (["--input-shape", "images:1,3,0,64"], "axis 2 of input 'images' is 0; every dim must be a positive integer"),
    (["--input-shape", "1,3,-4,64"], "axis 2 of input 'images' is -4"),
    (["--input-shape", "img:1,3,64,64"], "names 'img', which is not an input of the model; its inputs: 'images' "
                                         "[batch, 3, height, width]"),
    (["--input-shape", "1,4,64,64"], "axis 1 of input 'images' is fixed to 3 in the model, the shape gives 4"),
])
def test_bad_shapes_exit_2_naming_the_input(models, capsys, args, needle):
    assert main(["inspect", str(models["det"]), *args]) == 2
    assert needle in capsys.readouterr().err


def two_stage_index(plans_json) -> int:
    plans = json.loads(plans_json.read_text())["plans"]
    return next(i for i, p in enumerate(plans) if len({s["device"] for s in p.get("stages", [])}) == 2)


@pytest.mark.parametrize("key, shape, other", [("det", "images:1,3,64,96", "images:1,3,32,32"),
                                               ("att", "tokens:1,24,32", "1,12,32")])
def test_symbolic_model_plans_splits_and_runs_with_only_the_shape_added(models, tmp_path, capsys, key, shape, other):
    model, cluster = str(models[key]), str(models["cluster"])
    name, dims = shape.split(":")
    assert main(["inspect", model, "--json", "--input-shape", shape]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["summary"]["layers"] >= 4
    assert main(["plan", model, "--cluster", cluster, "--input-shape", shape, "--out", str(tmp_path)]) == 0
    plans = json.loads((tmp_path / "plans.json").read_text())["plans"]
    assert all(p["input_shapes"] == {name: [int(d) for d in dims.split(",")]} for p in plans)
    k = str(two_stage_index(tmp_path / "plans.json"))
    capsys.readouterr()
    # split and run need no shape: the plan records it; another shape is refused naming both
    assert main(["split", str(tmp_path / "plans.json"), model, "--index", k, "--out", str(tmp_path / "s"),
                 "--input-shape", other]) == 2
    err = capsys.readouterr().err
    assert f"the plan was made for --input-shape {shape}" in err and "was given" in err
    assert main(["simulate", str(tmp_path / "plans.json"), "--model", model, "--index", k, "-n", "20",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["throughput"] > 0
    assert main(["split", str(tmp_path / "plans.json"), model, "--index", k, "--out", str(tmp_path / "s")]) == 0
    manifest = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert len(manifest["workers"]) == 3
    assert main(["run", str(tmp_path / "plans.json"), model, "--index", k, "-n", "3", "--timeout", "60",
                 "--input-shape", shape, "--out", str(tmp_path / "run.json")]) == 0
    run = json.loads((tmp_path / "run.json").read_text())
    assert run["verify"]["ok"] and run["verify"]["outputs_checked"] == 3


def test_explore_takes_the_shape_and_its_plans_record_it(models, tmp_path):
    assert main(["explore", str(models["det"]), "--cluster", str(models["cluster"]), "--input-shape",
                 "1,3,48,48", "--pop", "8", "--gens", "2", "--out", str(tmp_path)]) == 0
    plans = json.loads((tmp_path / "plans.json").read_text())["plans"]
    assert plans and all(p["input_shapes"] == {"images": [1, 3, 48, 48]} for p in plans)


def test_profile_records_the_shape_and_refuses_another(models, tmp_path, capsys):
    model, prof = str(models["att"]), tmp_path / "att.json"
    assert main(["profile", model, "--input-shape", "tokens:1,16,32", "--repeats", "2", "--warmup", "1",
                 "--threads", "1", "--out", str(prof)]) == 0
    assert json.loads(prof.read_text())["input_shapes"] == {"tokens": [1, 16, 32]}
    capsys.readouterr()
    assert main(["inspect", str(prof), "--input-shape", "1,8,32"]) == 2
    err = capsys.readouterr().err
    assert f"the profile {prof} was made for --input-shape tokens:1,16,32" in err and "tokens:1,8,32" in err
    assert main(["inspect", str(prof), "--input-shape", "1,16,32"]) == 0


def test_an_input_without_any_shape_takes_the_one_given():
    from onnx import TensorProto, helper

    from hetsplit.errors import ModelError
    from hetsplit.graph import load_onnx

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelError, match="model input 'x' has no shape; give it with --input-shape x:D0,D1"):
        load_onnx(model)
    g = load_onnx(model, input_shapes={"": (2, 5)})
    assert g.meta["input_shapes"] == {"x": [2, 5]} and g.input_bytes == 40
