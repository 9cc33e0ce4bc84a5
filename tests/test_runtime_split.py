"""hetsplit split: sub-models and manifests (no processes: the programs run in one process here)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from programs import run_inline

from hetsplit.errors import PlanError, RuntimeFailure
from hetsplit.plan.types import Plan, Stage
from hetsplit.runtime import RunOptions, load_manifest, run_manifest, split_model
from hetsplit.runtime.compile import live_tensors
from hetsplit.runtime.launch import processes_of
from hetsplit.runtime.toy import toy_model

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    path = tmp_path_factory.mktemp("toy") / "toy.onnx"
    return toy_model(path), path


def plan_of(graph, bounds, devices=None):
    devices = devices or [f"dev{i}" for i in range(len(bounds) - 1)]
    return Plan(graph.name, "test", "hand",
                [Stage(d, graph.names[a:b]) for d, a, b in zip(devices, bounds[:-1], bounds[1:])])


@pytest.mark.parametrize("bounds", [[0, 9], [0, 2, 9], [0, 1, 4, 7, 9], [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
def test_split_sub_models_compute_the_whole_model(toy, tmp_path, bounds):
    graph, path = toy
    m = split_model(plan_of(graph, bounds), graph, path, tmp_path)
    assert len(m.stages) == len(bounds) - 1
    for w in m.stages:   # a stage is one segment, one sub-model
        assert len(w.segments) == 1
        onnx.checker.check_model(str(m.submodel_path(w.rank, 0)))
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})[0]
    got = run_inline(m, {"input": x})
    out_name = m.outputs[0].name
    np.testing.assert_allclose(got[out_name], whole, rtol=1e-5, atol=1e-5)


def test_manifest_moves_exactly_what_the_cost_model_counts(toy, tmp_path):
    graph, path = toy
    bounds = [0, 4, 5, 6, 9]  # stages 1 and 2 hold b1_conv1 and b1_conv2 only
    m = split_model(plan_of(graph, bounds), graph, path, tmp_path)
    for s, w in enumerate(m.stages):   # one message per cut, of the cut's bytes
        (got,), (sent,) = m.received_by(w.rank), m.sent_by(w.rank)
        assert got.nbytes == graph.cut_bytes[bounds[s]] and got.payload == f"cut{bounds[s]}"
        assert sent.nbytes == graph.cut_bytes[bounds[s + 1]] == sent.plan_nbytes or s == len(m.stages) - 1
        assert sent.dst_rank == (0 if s == len(m.stages) - 1 else w.rank + 1)
    # the long skip (stem output, read by the last block) is relayed by the middle stages
    for w in m.stages[1:3]:
        assert "stem_relu.y" in m.relays(w.rank) and "stem_relu.y" not in [t.name for t in w.segments[0].inputs]


def test_manifest_round_trips_through_json(toy, tmp_path):
    graph, path = toy
    m = split_model(plan_of(graph, [0, 3, 9]), graph, path, tmp_path)
    again = load_manifest(tmp_path)
    assert again.to_dict() == m.to_dict()
    doc = again.to_dict()
    assert doc["format"] == "hetsplit.manifest/2"
    (seg,) = doc["workers"][1]["segments"]
    (out,) = [doc["messages"][k] for k in seg["send"]]
    assert out["dst"] == "dev1" and doc["messages"][seg["recv"][0]]["src"] == "driver"
    assert all({"name", "shape", "dtype", "nbytes", "source"} <= set(t) for t in out["tensors"])


@pytest.mark.timeout(120)
def test_a_v1_manifest_reads_as_its_program_and_runs(toy, tmp_path):
    """A pipeline split by an earlier hetsplit (hetsplit.manifest/1, stage<s>-<device>.onnx) still runs:
    its edges become messages, its stages one segment each, outputs verified."""
    graph, path = toy
    doc = json.loads((FIXTURES / "manifest_v1_toy.json").read_text())
    stages = [w for w in doc["workers"] if w["rank"] > 0]
    plan = Plan(graph.name, "local", "hand", [Stage(w["device"], w["layers"]) for w in stages])
    new = split_model(plan, graph, path, tmp_path / "new")
    old = tmp_path / "old"
    old.mkdir()
    for w in stages:   # the same sub-models, under the names the earlier split gave them
        shutil.copy(new.submodel_path(w["rank"], 0), old / w["submodel"])
    doc["source_model"] = str(path)
    (old / "manifest.json").write_text(json.dumps(doc))
    m = load_manifest(old)
    assert [(x.src, x.dst, x.nbytes) for x in m.messages] == [(x.src, x.dst, x.nbytes) for x in new.messages]
    assert [[s.inputs, s.outputs] for w in m.stages for s in w.segments] == \
        [[s.inputs, s.outputs] for w in new.stages for s in w.segments]
    assert m.relays(2) == new.relays(2) == ["stem_relu.y", "b0_add.y"]
    report = run_manifest(m, RunOptions(inputs=3, latency_inputs=1, timeout_s=20, run_dir=tmp_path / "run"))
    assert report.verify is not None and report.verify.ok and report.verify.outputs_checked == 3
    assert not processes_of(tmp_path / "run")


def test_live_tensors_sum_to_cut_bytes(toy):
    graph, _ = toy
    for k in range(graph.num_layers + 1):
        assert sum(t.nbytes for t in live_tensors(graph, k)) == graph.cut_bytes[k]


def test_shards_are_refused_clearly(toy, tmp_path):
    graph, path = toy
    plan = plan_of(graph, [0, 9])
    plan.stages[0].shard = {"kind": "output-channels", "part": 0, "of": 2}
    with pytest.raises(PlanError, match="not supported by the runtime yet"):
        split_model(plan, graph, path, tmp_path)


def test_out_of_order_layers_are_refused(toy, tmp_path):
    graph, path = toy
    n = graph.names
    plan = Plan(graph.name, "t", "hand", [Stage("a", [n[1], n[0]] + n[2:])])
    with pytest.raises(PlanError, match="out of order"):
        split_model(plan, graph, path, tmp_path)


def test_missing_manifest_is_a_clear_error(tmp_path):
    with pytest.raises(RuntimeFailure, match="hetsplit split"):
        load_manifest(tmp_path)


def test_a_worker_reports_its_own_peak_memory_not_its_launchers(tmp_path):
    """ru_maxrss of a fork+exec child carries the parent's peak; the worker reads VmHWM instead: a
    child's figure does not grow when its launcher's peak grows by 300 MB."""
    import subprocess
    import sys

    def child_peak() -> int:
        out = subprocess.run([sys.executable, "-c", "from hetsplit.runtime.process import peak_rss_bytes; "
                              "print(peak_rss_bytes())"], capture_output=True, text=True, check=True)
        return int(out.stdout)

    before = child_peak()
    ballast = bytearray(300 * 2**20)                 # the launcher's peak grows by 300 MB
    ballast[::4096] = b"x" * len(ballast[::4096])
    after = child_peak()
    del ballast
    assert after - before < 100 * 2**20


def test_a_constant_two_stages_read_is_made_by_each_not_sent(tmp_path):
    """YOLOv8n's C2f blocks share one Constant of split sizes: a stage that reads it makes its own copy
    (before: it was a 16-byte message, and the sub-model's probe on zeros split by [0, 0] and failed)."""
    from graph_helpers import init, model
    from onnx import helper, numpy_helper

    from hetsplit.graph.onnx_import import load_onnx

    sizes = helper.make_node("Constant", [], ["sizes"], name="sizes",
                             value=numpy_helper.from_array(np.array([2, 2], dtype=np.int64)))
    nodes = [sizes,
             helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["c1", "sizes"], ["a", "b"], name="split1", axis=1),
             helper.make_node("Mul", ["a", "b"], ["m"], name="mul"),
             helper.make_node("Conv", ["m", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
             helper.make_node("Split", ["c2", "sizes"], ["p", "q"], name="split2", axis=1),
             helper.make_node("Add", ["p", "q"], ["y"], name="add")]
    proto = model(nodes, [("x", [1, 4, 8, 8])], ["y"], [init("w1", (4, 4, 3, 3), 1), init("w2", (4, 2, 3, 3), 2)])
    path = tmp_path / "shared_const.onnx"
    onnx.save(proto, path)
    graph = load_onnx(path)
    assert "sizes" not in {t.name for t in graph.tensors}, "a constant is not a message between layers"
    last = next(i for i, lay in enumerate(graph.layers) if "conv2" in lay.nodes)
    m = split_model(plan_of(graph, [0, last, len(graph.layers)]), graph, path, tmp_path / "split")
    x = np.random.default_rng(3).standard_normal((1, 4, 8, 8)).astype(np.float32)
    whole = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(run_inline(m, {"x": x})["y"], whole, rtol=1e-5, atol=1e-5)
