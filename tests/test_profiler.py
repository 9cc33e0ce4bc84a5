"""The profiler: trace parsing, node->layer attribution, a real tiny onnxruntime run, modelled profiles."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from hetsplit.cli.main import main
from hetsplit.costs.meters import RaplMeter
from hetsplit.costs.profile import load_profile, profile_from_dict, profile_to_dict
from hetsplit.costs.profiler import (
    layer_times,
    modelled_profile,
    profile_cpu,
    resolve_device,
)
from hetsplit.costs.profiler.attribution import NodeAttributor
from hetsplit.costs.profiler.ort_timing import NodeRuns, parse_trace
from hetsplit.costs.profiler.torch_cuda import module_path
from hetsplit.errors import HetsplitError, ProfileError
from hetsplit.graph.types import INPUT, Graph, Layer, Tensor


def three_layer_graph() -> Graph:
    layers = [Layer("conv", "conv", 10, 4, 8, nodes=("/c/Conv", "/c/Relu")),
              Layer("add", "eltwise", 0, 0, 8, nodes=("/Add",)),
              Layer("fc", "gemm", 10, 4, 4, nodes=("/fc/Gemm",))]
    tensors = [Tensor("x", INPUT, 8, (0,)), Tensor("/c/Relu_output_0", 0, 8, (1,)),
               Tensor("/Add_output_0", 1, 8, (2,)), Tensor("y", 2, 4, (), is_output=True)]
    return Graph("three", layers, tensors)


def test_parse_trace_splits_runs_and_skips_warmup():
    def node(name, ts, dur):
        return {"cat": "Node", "name": f"{name}_kernel_time", "ts": ts, "dur": dur}

    events = [{"cat": "Session", "name": "model_run", "ts": 0, "dur": 100},
              node("a", 10, 50),
              {"cat": "Session", "name": "model_run", "ts": 200, "dur": 100},
              node("a", 210, 30), node("b", 250, 20), {"cat": "Node", "name": "a_fence_before", "ts": 205, "dur": 0},
              {"cat": "Session", "name": "model_run", "ts": 400, "dur": 80}, node("b", 410, 40)]
    runs, spans = parse_trace(events, skip_runs=1)
    assert [[name for name, _ in run] for run in runs] == [["a", "b"], ["b"]]
    assert [[sec for _, sec in run] for run in runs] == [pytest.approx([30e-6, 20e-6]), pytest.approx([40e-6])]
    assert spans == pytest.approx([100e-6, 80e-6])
    with pytest.raises(ProfileError, match="model_run"):
        parse_trace([node("a", 0, 1)])


def test_attribution_by_name_rewrites_and_prefix():
    attr = NodeAttributor(three_layer_graph())
    assert attr.layer_of("/c/Conv") == 0
    assert attr.layer_of("/c/Relu_output_0_nchwc") == 0      # NCHWc node named after its output tensor
    assert attr.layer_of("/Add_output_0") == 1                # a boundary tensor names its producer
    assert attr.layer_of("/fc/Gemm_token_3") == 2             # a fused node keeps its first node's name
    assert attr.layer_of("fused /fc/Gemm") == 2               # Gemm + Relu fused by onnxruntime
    assert attr.layer_of("ReorderOutput") is None


def test_layer_times_charge_unknown_nodes_to_the_node_before():
    g = three_layer_graph()
    runs = NodeRuns(runs=[[("ReorderInput", 1.0), ("/c/Conv", 2.0), ("/c/Relu", 3.0), ("ReorderOutput", 4.0),
                           ("/fc/Gemm", 5.0)]], run_s=[16.0])
    times, meta = layer_times(g, runs)
    assert times.tolist() == [[1.0 + 2.0 + 3.0 + 4.0, 0.0, 5.0]]
    assert meta["nodes_attributed_by_order"] == ["ReorderInput", "ReorderOutput"]


def tiny_onnx(path) -> None:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w")
    fc = numpy_helper.from_array(rng.standard_normal((8 * 8 * 8, 10)).astype(np.float32), "fc_w")
    shape = numpy_helper.from_array(np.array([1, -1], dtype=np.int64), "shape")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="/conv/Conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="/conv/Relu"),
             helper.make_node("Reshape", ["r", "shape"], ["f"], name="/Reshape"),
             helper.make_node("MatMul", ["f", "fc_w"], ["y"], name="/fc/MatMul")]
    graph = helper.make_graph(nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], [w, fc, shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def test_profile_cpu_measures_a_tiny_model(tmp_path):
    from hetsplit.graph.onnx_import import load_onnx

    path = tmp_path / "tiny.onnx"
    tiny_onnx(path)
    graph = load_onnx(path)
    prof = profile_cpu(graph, path, threads=1, warmup=1, repeats=3, meter=RaplMeter(tmp_path / "no-rapl"), power_w=5.0,
                       statistic="min")
    t = prof.costs.time_s[:, 0]
    assert t.shape == (graph.num_layers,) and np.all(t >= 0) and t.sum() > 0
    assert prof.costs.energy_j[:, 0] == pytest.approx(5.0 * t)
    assert prof.meta["energy"]["status"] == "estimated" and "unavailable" in prof.meta["energy"]["meter"]
    whole = prof.meta["whole_model"]
    assert whole["n"] == 3 and whole["p10_s"] <= whole["median_s"] <= whole["p90_s"]
    assert whole["time_s"] == whole["min_s"] <= whole["median_s"]
    assert prof.meta["gap"] == pytest.approx(prof.meta["layer_sum_s"] / whole["min_s"] - 1)
    stats = prof.meta["layer_stats"]
    assert t == pytest.approx(stats["min_s"]) and np.all(np.array(stats["min_s"]) <= np.array(stats["p90_s"]))
    assert np.all(prof.costs.mem_bytes[:, 0] >= graph.param_bytes)
    doc = json.loads(json.dumps(profile_to_dict(prof)))           # the file format round-trips
    again = profile_from_dict(doc)
    assert again.costs.time_s[:, 0] == pytest.approx(t)
    assert doc["format"] == "hetsplit.profile/1" and doc["device"] == "local-cpu"


def test_modelled_profile_writes_inf_as_null_and_reads_it_back(tmp_path):
    g = three_layer_graph()
    layers = [Layer("fc1", "gemm", 64 * 64, 64 * 64 * 4, 64 * 4, 64 * 4, attrs={"m": 1, "k": 64, "n": 64}),
              Layer("qk", "matmul", 4096, 0, 64 * 4, 64 * 4, attrs={"m": 1, "k": 64, "n": 64})]
    g = Graph("two", layers, [Tensor("x", INPUT, 256, (0,)), Tensor("a", 0, 256, (1,)),
                              Tensor("b", 1, 256, (), is_output=True)])
    prof = modelled_profile(g, resolve_device("neurosim-rram"))
    doc = profile_to_dict(prof)
    assert doc["device_types"]["neurosim-rram"]["time_s"][1] is None
    assert prof.meta["whole_model"]["layers_it_cannot_run"] == 1
    (tmp_path / "p.json").write_text(json.dumps(doc))
    assert math.isinf(load_profile(tmp_path / "p.json").costs.time_s[1, 0])


def test_cli_profile_of_a_modelled_device(tmp_path, capsys):
    out = tmp_path / "vgg8.cim.json"
    assert main(["profile", "vgg8", "--device", "neurosim-rram", "--out", str(out)]) == 0
    prof = load_profile(out)
    assert prof.costs.types == ["neurosim-rram"]
    assert prof.costs.time_s.sum() == pytest.approx(1.36e-3, rel=0.25)
    assert "sum over layers" in capsys.readouterr().out
    assert main(["profile", "vgg8", "--device", "nosuchpreset"]) == 2
    assert main(["profile", "vgg8", "--device", "siracusa", "--param", "l2_bytes"]) == 2


def test_resolve_device_errors():
    with pytest.raises(HetsplitError, match="medium"):
        resolve_device("pcie5")
    assert resolve_device("local-cpu", threads=1).params["threads"] == 1


def test_module_path_from_exported_node_names():
    assert module_path("/layer/layer.0/layer.0.0/conv1/conv1.0/Conv") == "layer.0.0.conv1.0"
    assert module_path("/fc/Gemm") == "fc"
    assert module_path("/Flatten") == ""


def test_cpu_share_of_each_run():
    runs = NodeRuns(runs=[[("a", 1.0)], [("a", 2.0)]], run_s=[1.0, 4.0], cpu_s=[1.2, 1.0])
    assert runs.cpu_share().tolist() == [1.0, 0.25]            # clipped at 1; a run preempted 3/4 of the time
    assert NodeRuns(runs=[[("a", 1.0)]], run_s=[1.0]).cpu_share().tolist() == [1.0]


def test_cpu_clock_needs_one_thread(tmp_path):
    path = tmp_path / "tiny.onnx"
    tiny_onnx(path)
    from hetsplit.graph.onnx_import import load_onnx

    with pytest.raises(ProfileError, match="--threads 1"):
        profile_cpu(load_onnx(path), path, threads=2, repeats=1, clock="cpu")


def test_torch_path_attributes_modules_to_layers_on_cpu():
    from hetsplit.costs.profiler.torch_cuda import profile_torch
    from hetsplit.graph import zoo
    from hetsplit.graph.zoo.registry import MODELS

    graph = zoo.load("resnet8")
    module, shape = MODELS["resnet8"].build()
    prof = profile_torch(graph, module, shape, device="cpu", device_type="cpu-torch", warmup=1, repeats=2)
    t = prof.costs.time_s[:, 0]
    convs = [i for i, layer in enumerate(graph.layers) if layer.op == "conv"]
    assert np.all(t[convs] > 0)                                   # every conv layer found its module
    assert prof.meta["layers_without_module"] == []
    assert prof.meta["whole_model"]["time_s"] > 0 and prof.costs.types == ["cpu-torch"]


def test_cli_profiles_an_onnx_file_whose_nodes_have_no_names(tmp_path):
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((8, 8, 3, 3)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "u", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 16, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "unnamed.onnx")
    out = tmp_path / "p.json"
    assert main(["profile", str(tmp_path / "unnamed.onnx"), "--threads", "1", "--repeats", "2", "--warmup", "1",
                 "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    # canonical names are found in onnxruntime's; only its own layout nodes go by execution order
    assert all(n.startswith("Reorder") for n in doc["nodes_attributed_by_order"])
    assert all(t > 0 for t in doc["device_types"]["local-cpu"]["time_s"])


def _alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1][:1]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="co-load needs 2 usable cores")
def test_co_load_helpers_run_pinned_and_are_reaped_even_on_interrupt(tmp_path):
    from hetsplit.costs.profiler.coload import CoLoad

    path = tmp_path / "tiny.onnx"
    tiny_onnx(path)
    before = os.sched_getaffinity(0)
    with pytest.raises(KeyboardInterrupt), CoLoad(path, 1) as load:
        (pid,) = load.pids
        assert _alive(pid) and os.sched_getaffinity(pid) == set(load.helper_cpus[0])
        assert os.sched_getaffinity(0) == set(load.own_cpus) and not set(load.own_cpus) & set(load.helper_cpus[0])
        raise KeyboardInterrupt
    assert not _alive(pid) and load.procs[0].returncode is not None
    assert os.sched_getaffinity(0) == before


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="co-load needs 2 usable cores")
def test_profile_with_co_load_records_it_and_leaves_nothing_behind(tmp_path, monkeypatch):
    from hetsplit.costs.profiler import coload
    from hetsplit.graph.onnx_import import load_onnx

    path = tmp_path / "tiny.onnx"
    tiny_onnx(path)
    seen: list[coload.CoLoad] = []
    enter = coload.CoLoad.__enter__
    monkeypatch.setattr(coload.CoLoad, "__enter__", lambda self: seen.append(self) or enter(self))
    prof = profile_cpu(load_onnx(path), path, threads=1, warmup=1, repeats=2, co_load=1)
    assert prof.meta["co_load"] == 1 and len(prof.meta["co_load_cpus"]) == 1
    assert "1 other core(s)" in prof.meta["source"]
    (load,) = seen
    assert len(load.pids) == 1 and not any(_alive(p) for p in load.pids)
    assert profile_from_dict(json.loads(json.dumps(profile_to_dict(prof)))).meta["co_load"] == 1


def test_co_load_refuses_more_helpers_than_cores_and_a_helper_that_cannot_start(tmp_path):
    from hetsplit.costs.profiler.coload import CoLoad, cpu_sets

    assert cpu_sets(1, 2, [0, 1, 2, 3]) == [[0, 1], [2, 3]]
    with pytest.raises(ProfileError, match="needs 3 cores.*lower --co-load to at most 1$"):
        cpu_sets(2, 1, [0, 1])
    with pytest.raises(ProfileError, match="needs 4 cores.*lower --threads to at most 2$"):   # no helper fits
        cpu_sets(0, 4, [0, 1])
    if len(os.sched_getaffinity(0)) >= 2:
        bad = tmp_path / "bad.onnx"
        bad.write_text("not a model")
        before = os.sched_getaffinity(0)
        with pytest.raises(ProfileError, match="exited with code"):
            CoLoad(bad, 1).__enter__()
        assert os.sched_getaffinity(0) == before


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="co-load needs 2 usable cores")
def test_co_load_helper_ends_when_its_parent_is_killed(tmp_path):
    import subprocess
    import sys
    import time

    path = tmp_path / "tiny.onnx"
    tiny_onnx(path)
    code = ("import sys, time\nfrom hetsplit.costs.profiler.coload import CoLoad\n"
            f"with CoLoad({str(path)!r}, 1) as c:\n    print(c.pids[0], flush=True)\n    time.sleep(60)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    pid = int(parent.stdout.readline())
    assert _alive(pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
