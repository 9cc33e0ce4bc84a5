"""Models as people ship them: opsets 11 to the newest onnx knows (a newer one named as unsupported),
weights in an external data file beside the graph, fp16 models (bytes per dtype); split and run verified."""

from __future__ import annotations

import json

import onnx
import pytest
import torch
from onnx import version_converter

from byo_models import CLUSTER_YAML, Detector, detector
from hetsplit.cli.main import main

pytestmark = pytest.mark.timeout(240)
NEWEST = onnx.defs.onnx_opset_version()
SHAPE = ["--input-shape", "images:1,3,32,32"]


@pytest.fixture(scope="module")
def d(tmp_path_factory):
    d = tmp_path_factory.mktemp("shipped")
    (d / "cluster.yaml").write_text(CLUSTER_YAML)
    detector(d / "det.onnx")
    return d


def inspect_json(path, capsys) -> dict:
    """inspect --json, without the fields that name the file."""
    capsys.readouterr()
    assert main(["inspect", str(path), "--json", *SHAPE]) == 0
    doc = json.loads(capsys.readouterr().out)
    for key in ("model", "source"):
        doc["summary"].pop(key, None)
    return doc


def plan_split_run(model, d, tmp_path) -> dict:
    """Plan on the two-CPU cluster, run the first plan over both CPUs (outputs verified); the run's JSON."""
    assert main(["plan", str(model), "--cluster", str(d / "cluster.yaml"), *SHAPE, "--out", str(tmp_path)]) == 0
    plans = json.loads((tmp_path / "plans.json").read_text())["plans"]
    k = next(i for i, p in enumerate(plans) if len(p["stages"]) == 2)
    assert main(["run", str(tmp_path / "plans.json"), str(model), "--index", str(k), "-n", "2", "--timeout", "60",
                 "--out", str(tmp_path / "run.json")]) == 0
    return json.loads((tmp_path / "run.json").read_text())


@pytest.mark.parametrize("opset", [11, 13, 17, NEWEST])
def test_opsets_from_11_to_the_newest_give_the_same_layers(d, capsys, opset):
    path = d / f"det{opset}.onnx"
    if opset == NEWEST:   # the exporter stops short of onnx's newest: convert up
        onnx.save(version_converter.convert_version(onnx.load(str(d / "det.onnx")), NEWEST), str(path))
    else:
        detector(path, opset=opset)
    doc = inspect_json(path, capsys)
    assert doc["summary"] == inspect_json(d / "det.onnx", capsys)["summary"]


def test_a_newer_opset_than_onnx_knows_is_named_unsupported(d, capsys):
    m = onnx.load(str(d / "det.onnx"))
    next(o for o in m.opset_import if o.domain in ("", "ai.onnx")).version = NEWEST + 1
    onnx.save(m, str(d / "future.onnx"))
    assert main(["inspect", str(d / "future.onnx"), *SHAPE]) == 2
    err = capsys.readouterr().err
    assert f"opset {NEWEST + 1} is newer than the {NEWEST} this onnx knows" in err


def test_external_data_beside_the_graph_plans_profiles_and_runs(d, tmp_path, capsys):
    ext = tmp_path / "shipped"
    ext.mkdir()
    onnx.save(onnx.load(str(d / "det.onnx")), str(ext / "det.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="det.onnx.data", size_threshold=0)
    assert (ext / "det.onnx.data").stat().st_size > 7000 and (ext / "det.onnx").stat().st_size < 7000
    assert inspect_json(ext / "det.onnx", capsys)["summary"] == inspect_json(d / "det.onnx", capsys)["summary"]
    assert main(["profile", str(ext / "det.onnx"), *SHAPE, "--repeats", "1", "--warmup", "0", "--threads", "1",
                 "--out", str(tmp_path / "p.json")]) == 0
    run = plan_split_run(ext / "det.onnx", d, tmp_path / "o")
    assert run["verify"]["ok"]


def test_fp16_model_counts_two_bytes_per_element_and_runs(d, tmp_path, capsys):
    torch.manual_seed(0)
    torch.onnx.export(Detector().half().eval(), (torch.randn(1, 3, 32, 48).half(),), str(d / "det16.onnx"),
                      input_names=["images"], output_names=["out"], opset_version=17, dynamo=False,
                      dynamic_axes={"images": {0: "batch", 2: "height", 3: "width"}})
    half, full = inspect_json(d / "det16.onnx", capsys), inspect_json(d / "det.onnx", capsys)
    assert half["summary"]["macs"] == full["summary"]["macs"]
    for key in ("input_bytes", "output_bytes"):
        assert 2 * half["summary"][key] == full["summary"][key], key
    assert half["summary"]["params"] == full["summary"]["params"]       # the Resize's scales stay float32:
    assert 0 < 2 * half["summary"]["param_bytes"] - full["summary"]["param_bytes"] <= 64  # 16 B in both
    assert [2 * l["out_bytes"] for l in half["layers"]] == [l["out_bytes"] for l in full["layers"]]
    assert {l["attrs"]["elem_bytes"] for l in half["layers"]} == {2}
    # costs per dtype: a memory-bound device moves half the bytes, a link carries half the cut
    from hetsplit.workflow import load_problem

    (d / "slow-memory.yaml").write_text(CLUSTER_YAML.replace("mem_bandwidth: 1GB/s", "mem_bandwidth: 1MB/s"))
    shape = {"images": (1, 3, 32, 32)}
    p16, p32 = (load_problem(str(d / m), str(d / "slow-memory.yaml"), input_shapes=shape)
                for m in ("det16.onnx", "det.onnx"))
    assert 2 * p16.cut_bytes[1:-1] == pytest.approx(p32.cut_bytes[1:-1])
    assert 0.45 < p16.costs.time_s.sum() / p32.costs.time_s.sum() < 0.55
    run = plan_split_run(d / "det16.onnx", d, tmp_path)
    assert run["verify"]["ok"]
