"""Bad input and faults (issue 13): each becomes a clear error (what and where, exit 2), a warning, or a
message that says what is really wrong; nothing is accepted silently and nothing ends in a traceback."""

from __future__ import annotations

import json
import logging

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from cli_checks import TWO_CPUS, fails
from factories import chain_graph, cluster, problem
from hetsplit.cli.main import main
from hetsplit.cluster import load_cluster
from hetsplit.errors import ClusterError, InfeasibleError, ModelError, PlanError, UsageError
from hetsplit.graph.onnx_prepare import prepare_model
from hetsplit.plan.io import load_plan, save_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import RunOptions
from hetsplit.runtime.toy import toy_model
from hetsplit.search import make_partitioner
from hetsplit.workflow import load_plan_cluster

CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"
TWO_GPUS = """name: two-gpus
devices:
  - {name: g, preset: rtx3070ti, count: 2}
links:
  default: pcie5
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A toy model, cluster YAMLs of two CPUs and of two GPUs, and a modelled profile of resnet8 on that GPU."""
    d = tmp_path_factory.mktemp("bad")
    toy_model(d / "toy.onnx")
    (d / "two.yaml").write_text(TWO_CPUS)
    (d / "gpus.yaml").write_text(TWO_GPUS)   # the profile's device type
    assert main(["profile", "resnet8", "--device", "rtx3070ti", "--out", str(d / "prof.json")]) == 0
    return d


# ---- tracebacks today ------------------------------------------------------------------------------

@pytest.mark.parametrize("alpha", ["2", "nan", "-0.1"])
def test_alpha_outside_0_1_or_nan_exits_2(alpha, capsys):
    assert "--alpha" in fails(["plan", "resnet8", "-c", CLUSTER, "--alpha", "0.5", alpha], capsys)


def test_out_naming_an_existing_file_or_an_unwritable_path_exits_2(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert "is an existing file" in fails(["plan", "resnet8", "-c", CLUSTER, "--out", str(tmp_path / "afile")],
                                          capsys)
    assert "is an existing file" in fails(["plan", "resnet8", "-c", CLUSTER, "--out",
                                           str(tmp_path / "afile" / "sub")], capsys)
    assert "cannot create" in fails(["plan", "resnet8", "-c", CLUSTER, "--out", "/proc/no/such"], capsys)
    assert "is a folder" in fails(["profile", "resnet8", "--device", "rtx3070ti", "--out", str(tmp_path)], capsys)


def _profile_variant(files, tmp_path, **changes) -> str:
    """The resnet8 profile with its rtx3070ti columns changed: key -> {index: value} or a whole list."""
    doc = json.loads((files / "prof.json").read_text())
    col = doc["device_types"]["rtx3070ti"]
    for key, change in changes.items():
        if isinstance(change, dict):
            for i, v in change.items():
                col[key][i] = v
        else:
            col[key] = change
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_a_profile_time_given_as_a_string_is_named(files, tmp_path, capsys):
    prof = _profile_variant(files, tmp_path, time_s={3: "fast"})
    err = fails(["plan", prof, "-c", str(files / "gpus.yaml")], capsys)
    assert "time_s[3] (layer 'layer.0.0/Add') is 'fast'" in err and "number >= 0 in seconds" in err


@pytest.mark.parametrize("doc, message", [
    ([1, 2], "must be a JSON object"),
    ("plan", "must be a JSON object"),
    ({"format": "hetsplit.planset/1", "plans": {"a": 1}}, "'plans' of a hetsplit.planset/1 file must be a list"),
    ({"format": "hetsplit.plan/2", "model": "toy", "stages": [{"device": "c0", "layers": ["a"]}], "metrics": 5},
     "'metrics' must be an object"),
])
def test_a_plan_json_that_is_not_an_object_exits_2(doc, message, files, tmp_path, capsys):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanError, match=message):
        load_plan(path)
    assert message in fails(["split", str(path), str(files / "toy.onnx"), "--out", str(tmp_path / "s")], capsys)


# ---- accepted silently today -----------------------------------------------------------------------

def _toy_plan(files, tmp_path, devices: list[str], algorithm: str = "hand") -> str:
    from hetsplit.graph import load_onnx

    names = load_onnx(files / "toy.onnx").names
    cuts = np.linspace(0, len(names), len(devices) + 1).astype(int)
    plan = Plan("toy", "two-cpus", algorithm, [Stage(d, names[a:b]) for d, a, b in zip(devices, cuts, cuts[1:])])
    return str(save_plan(plan, tmp_path / "plan.json"))


def test_split_and_run_refuse_a_device_the_cluster_lacks(files, tmp_path, capsys):
    plan = _toy_plan(files, tmp_path, ["c0", "gpu9"])
    for cmd in (["split", plan, str(files / "toy.onnx"), "--out", str(tmp_path / "s")],
                ["run", plan, str(files / "toy.onnx"), "-n", "2"]):
        err = fails(cmd + ["--cluster", str(files / "two.yaml")], capsys)
        assert "device 'gpu9' is not in cluster 'two-cpus'" in err


def test_split_and_run_refuse_two_stages_on_one_device(files, tmp_path, capsys):
    plan = _toy_plan(files, tmp_path, ["c0", "c1", "c0"])
    for cmd in (["split", plan, str(files / "toy.onnx"), "--out", str(tmp_path / "s")],
                ["run", plan, str(files / "toy.onnx"), "-n", "2"]):
        err = fails(cmd + ["--cluster", str(files / "two.yaml")], capsys)
        assert "stages 0 and 2 both run on device 'c0'" in err and "one worker per device" in err


@pytest.mark.parametrize("n", ["0", "-3"])
def test_run_with_no_inputs_exits_2_before_running(n, files, tmp_path, capsys):
    plan = _toy_plan(files, tmp_path, ["c0", "c1"])
    assert "--inputs" in fails(["run", plan, str(files / "toy.onnx"), "-n", n], capsys)
    with pytest.raises(UsageError, match="at least 1 input"):
        RunOptions(inputs=int(n))


def test_a_profile_whose_times_are_all_zero_is_refused(files, tmp_path, capsys):
    doc = json.loads((files / "prof.json").read_text())
    zeros = [0.0] * len(doc["layers"])
    err = fails(["plan", _profile_variant(files, tmp_path, time_s=zeros), "-c", str(files / "gpus.yaml")], capsys)
    assert "every layer takes 0 s" in err and "infinitely fast" in err


def test_a_bare_number_for_an_energy_is_taken_as_si_with_a_warning(tmp_path, caplog):
    path = tmp_path / "bare.yaml"
    path.write_text(TWO_CPUS.replace("energy: 0J/B", "energy: 2e-10"))
    with caplog.at_level(logging.WARNING, logger="hetsplit"):
        cl = load_cluster(path)
    assert cl.energy_per_byte[0, 1] == pytest.approx(2e-10)
    assert "links.default.energy: bare number '2e-10' taken as 200 pJ/B (SI); write its unit" in caplog.text
    path.write_text(TWO_CPUS.replace("energy: 0J/B", "energy: 200pJ/B"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hetsplit"):
        assert load_cluster(path).energy_per_byte[0, 1] == pytest.approx(2e-10)
    assert "bare number" not in caplog.text


# ---- misleading messages ---------------------------------------------------------------------------

def test_an_empty_onnx_file_says_it_is_empty(tmp_path, capsys):
    path = tmp_path / "empty.onnx"
    path.write_bytes(b"")
    err = fails(["inspect", str(path)], capsys)
    assert "no ONNX graph in it (an empty file" in err and "opset" not in err


def test_unnamed_onnx_nodes_are_named_by_op_type_and_index(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    nodes = [helper.make_node("Relu", ["x"], ["h"]), helper.make_node("Foo", ["h"], ["y"], domain="custom")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("custom", 1)])
    onnx.save(model, tmp_path / "unnamed.onnx")
    with pytest.raises(ModelError, match="node 'Foo_1': operator custom::Foo"):
        prepare_model(tmp_path / "unnamed.onnx")


@pytest.mark.parametrize("algo", ["donna", "exact"])
def test_memory_errors_use_binary_units(algo):
    g = chain_graph([8, 3_000_000, 8], input_bytes=4)
    t = np.ones((3, 1))
    p = problem(g, cluster(["a", "a"], memory=[2 * 2**20, 2**20]), t, t, np.array([10.0, 5e6, 10.0]))
    with pytest.raises(InfeasibleError) as exc:
        make_partitioner(algo).solve(p)
    assert "layer 'l1' fits on no device that runs it: it needs 7.63 MiB" in str(exc.value)  # 5e6 + 3e6 + 8 B
    assert "has 2 MiB" in str(exc.value) and "e+" not in str(exc.value)


def test_a_null_profile_time_says_no_device_can_run_the_layer(files, tmp_path, capsys):
    err = fails(["plan", _profile_variant(files, tmp_path, time_s={3: None}), "-c", str(files / "gpus.yaml"),
                 "--algo", "exact"], capsys)
    assert "layer 'layer.0.0/Add' has no time on any device type" in err and "null in a profile" in err
    assert "fits nowhere" not in err


# ---- a plan made from a cluster YAML ---------------------------------------------------------------

def test_a_plan_from_a_cluster_yaml_records_it_for_split_run_and_simulate(files, tmp_path, monkeypatch, capsys):
    out = tmp_path / "plans"
    assert main(["plan", str(files / "toy.onnx"), "-c", str(files / "two.yaml"), "--algo", "exact",
                 "--out", str(out)]) == 0
    plan = load_plan(out / "plans.json")
    assert plan.cluster == "two-cpus" and plan.cluster_file == str((files / "two.yaml").resolve())
    monkeypatch.chdir(tmp_path)   # another folder: the plan finds its YAML by the recorded path
    assert load_plan_cluster(plan).name == "two-cpus"
    capsys.readouterr()
    assert main(["split", str(out / "plans.json"), str(files / "toy.onnx"), "--out", "s"]) == 0
    assert main(["simulate", str(out / "plans.json"), "--model", str(files / "toy.onnx"), "--json"]) == 0
    assert "was not found" not in capsys.readouterr().err
    plan.cluster_file = str(tmp_path / "moved.yaml")
    with pytest.raises(ClusterError, match="cluster file .*moved.yaml is gone"):
        load_plan_cluster(plan, required=True)


# ---- plan --algo a b c -----------------------------------------------------------------------------

def test_one_refusing_algorithm_keeps_the_others_and_is_reported(capsys):
    assert main(["plan", "resnet8", "-c", CLUSTER, "--algo", "exact", "tensor-parallel", "--json"]) == 0
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert {p["algorithm"] for p in doc["plans"]} == {"exact", "single"}
    assert [r["algorithm"] for r in doc["refused"]] == ["tensor-parallel"]
    assert "multi-head attention" in doc["refused"][0]["reason"]
    assert "note: tensor-parallel refused" in captured.err
    assert "multi-head attention" in fails(["plan", "resnet8", "-c", CLUSTER, "--algo", "tensor-parallel"], capsys)


def test_every_requested_algorithm_refusing_is_an_error_naming_each(files, tmp_path, capsys):
    prof = _profile_variant(files, tmp_path, time_s={3: None})
    err = fails(["plan", prof, "-c", str(files / "gpus.yaml"), "--algo", "donna", "exact"], capsys)
    assert "every algorithm refused: donna, exact: layer 'layer.0.0/Add'" in err
