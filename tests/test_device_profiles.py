"""A cluster YAML naming a measured profile per device type (``profile: FILE``): the plan uses those
costs; a profile of another model or shape, or a file that is no profile, is refused (exit 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from byo_models import attention, detector
from hetsplit.cli.main import main
from hetsplit.costs.profile import load_profile, save_profile
from hetsplit.costs.profiler import profile_model
from hetsplit.workflow import load_problem

pytestmark = pytest.mark.timeout(180)

SHAPE = {"images": (1, 3, 32, 32)}
YAML = """\
format: hetsplit.cluster/1
name: laptop-and-board
devices:
  - {{name: laptop, kind: cpu, memory: 16GiB, profile: {laptop}}}
  - {{name: board, kind: cpu, memory: 2GiB, profile: {board}}}
links:
  default: {{name: wifi, bandwidth: 20MB/s, latency: 2ms}}
"""


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    d = tmp_path_factory.mktemp("devprof")
    det = detector(d / "det.onnx")
    prof = profile_model(str(det), "local-cpu", repeats=2, warmup=1, threads=1, input_shapes=SHAPE)
    save_profile(prof, d / "laptop.json")
    board = load_profile(d / "laptop.json")          # the board: the same layers, 5x slower
    board.costs.time_s *= 5
    board.meta = prof.meta
    save_profile(board, d / "board.json")
    return d, det


def write_cluster(d, laptop="laptop.json", board="board.json"):
    path = d / f"cluster-{laptop}-{board}.yaml".replace("/", "_")
    path.write_text(YAML.format(laptop=laptop, board=board))
    return path


def test_plan_uses_each_device_types_measured_costs(measured, capsys):
    d, det = measured
    problem = load_problem(str(det), str(write_cluster(d)), input_shapes=SHAPE)
    laptop = load_profile(d / "laptop.json").costs.time_s[:, 0]
    by_type = {t: problem.costs.time_s[:, problem.costs.type_index(t)] for t in problem.costs.types}
    laptop_type, board_type = problem.cluster.devices[0].type, problem.cluster.devices[1].type
    assert laptop_type != board_type
    assert np.allclose(by_type[laptop_type], laptop) and np.allclose(by_type[board_type], 5 * laptop)
    assert problem.costs.sources[board_type].startswith(f"measured: {d / 'board.json'}")
    assert main(["clusters", str(write_cluster(d))]) == 0
    shown = capsys.readouterr().out
    assert "profile laptop.json" in shown and "profile board.json" in shown
    assert main(["plan", str(det), "--cluster", str(write_cluster(d)), "--input-shape", "1,3,32,32", "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    single = {p["stages"][0]["device"]: p["metrics"]["throughput"] for p in plans if p["algorithm"] == "single"}
    assert single["laptop"] == pytest.approx(5 * single["board"], rel=1e-6)


def test_profile_of_another_shape_or_model_is_refused_naming_the_layer(measured, capsys):
    d, det = measured
    assert main(["plan", str(det), "--cluster", str(write_cluster(d)), "--input-shape", "1,3,64,64"]) == 2
    err = capsys.readouterr().err
    assert "not a profile of 'det' at these shapes: layer 0" in err and "outputs" in err
    assert "taken at --input-shape images:1,3,32,32" in err and "loaded at images:1,3,64,64" in err
    att = attention(d / "att.onnx")
    prof = profile_model(str(att), "local-cpu", repeats=1, warmup=0, threads=1, input_shapes={"tokens": (1, 8, 32)})
    save_profile(prof, d / "att.json")
    assert main(["plan", str(det), "--cluster", str(write_cluster(d, board="att.json")),
                 "--input-shape", "1,3,32,32"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'att.json'}: " in err and "layer 0 is" in err and "in the profile" in err


def test_a_file_that_is_no_profile_or_missing_exits_2_naming_it(measured, capsys):
    d, det = measured
    (d / "notes.json").write_text(json.dumps({"hello": 1}))
    assert main(["plan", str(det), "--cluster", str(write_cluster(d, board="notes.json")),
                 "--input-shape", "1,3,32,32"]) == 2
    assert f"{d / 'notes.json'}: 'format' is None; expected 'hetsplit.profile/1'" in capsys.readouterr().err
    assert main(["plan", str(det), "--cluster", str(write_cluster(d, board="gone.json")),
                 "--input-shape", "1,3,32,32"]) == 2
    err = capsys.readouterr().err
    assert "devices[1].profile" in err and "gone.json: no such profile file" in err


def test_a_profile_with_malformed_input_shapes_is_refused(measured, capsys):
    d, det = measured
    doc = json.loads((d / "laptop.json").read_text())
    doc["input_shapes"] = {"images": [1, 3, "32", 32]}
    (d / "bad-shapes.json").write_text(json.dumps(doc))
    assert main(["inspect", str(d / "bad-shapes.json")]) == 2
    assert f"{d / 'bad-shapes.json'}: 'input_shapes' must map each model input" in capsys.readouterr().err


def test_local_gpu_without_cuda_is_a_clear_error(measured, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is visible here")
    d, det = measured
    assert main(["profile", str(det), "--device", "local-gpu", "--input-shape", "1,3,32,32"]) == 2
    assert "no CUDA GPU is visible here" in capsys.readouterr().err


def test_a_torch_module_is_profiled_through_pytorch(tmp_path):
    """The local-gpu path of a user's module (exported, layers matched to its submodules by the exporter's
    node names) runs on the CPU here; asking for local-gpu without CUDA is a clear error."""
    import torch

    from byo_models import Detector
    from hetsplit.costs.profiler.run import TORCH_CPU, profile_module_on
    from hetsplit.errors import ProfileError
    from hetsplit.graph import load_onnx
    from hetsplit.workflow import export_torch, profile_module

    torch.manual_seed(0)
    module, x = Detector(), torch.randn(1, 3, 32, 32)
    graph = load_onnx(export_torch(module, x, tmp_path / "det.onnx"))
    prof = profile_module_on(graph, module, tuple(x.shape), TORCH_CPU, warmup=1, repeats=3)
    convs = [i for i, layer in enumerate(graph.layers) if layer.op == "conv"]
    assert len(convs) == 4 and all(prof.costs.time_s[i, 0] > 0 for i in convs)
    if not torch.cuda.is_available():
        with pytest.raises(ProfileError, match="no CUDA GPU is visible here"):
            profile_module(module, x, tmp_path / "det2.onnx", "local-gpu")
