"""The zoo: golden MAC / parameter counts, the shapes-only vs full model contract, load_model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from hetsplit.errors import ModelError
from hetsplit.graph import load_model, load_onnx, zoo
from hetsplit.graph.zoo.export import SHIPPED_DIR, build_module, export_model, structure

# (GMACs, M parameters) published for the architecture (torchvision / Ultralytics / papers)
PUBLISHED = {
    "resnet50": (4.1, 25.6), "resnet101": (7.8, 44.5), "resnet152": (11.5, 60.2), "vgg16": (15.5, 138.0),
    "vgg19": (19.6, 143.7), "alexnet": (0.72, 61.0), "densenet121": (2.9, 8.0), "mobilenetv2": (0.30, 3.5),
    "yolov8n": (8.7 / 2, 3.2),  # Ultralytics: 8.7 GFLOPs (= 2 x MACs) at 640, 3.2 M parameters
    "resnet18": (None, 2.8),    # IMC paper: CIFAR ResNet-18, 2.8 M parameters
    "resnet8": (None, 0.078),   # IMC paper / MLPerf Tiny: 78 K parameters
}


def test_names_cover_the_issue():
    assert set(zoo.names()) >= {"resnet8", "resnet18", "resnet50", "resnet101", "resnet152", "vgg8", "vgg16", "vgg19",
                                "alexnet", "densenet121", "mobilenetv2", "yolov8n", "tinyllama-42m", "mobilebert"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_macs_and_parameters_within_3_percent(name):
    g = zoo.load(name)
    gmac, mparams = PUBLISHED[name]
    if gmac is not None:
        assert g.total_macs / 1e9 == pytest.approx(gmac, rel=0.03)
    assert g.meta["num_params"] / 1e6 == pytest.approx(mparams, rel=0.03)


def test_imc_paper_node_counts():
    r8, r18 = zoo.load("resnet8"), zoo.load("resnet18")
    assert len(r8) == 14 and sum(layer.op == "conv" for layer in r8.layers) == 9   # 9 convs + FC = 10 MVM nodes
    assert sum(layer.op == "eltwise" for layer in r8.layers) == 3
    assert r8.meta["num_params"] == 77706
    assert len(r18) == 30 and sum(layer.op == "conv" for layer in r18.layers) == 20
    yolo = zoo.load("yolov8n")
    convs = [layer for layer in yolo.layers if layer.op == "conv"]
    assert sum(layer.attrs["activation"] == "silu" for layer in convs) == 57     # the paper's 57 conv + SiLU


def test_vgg8_is_neurosims_exactly():
    g = zoo.load("vgg8")
    convs = [layer.attrs["c_out"] for layer in g.layers if layer.op == "conv"]
    assert convs == [128, 128, 256, 256, 512, 512]
    fcs = [(layer.attrs["k"], layer.attrs["n"]) for layer in g.layers if layer.op == "gemm"]
    assert fcs == [(8192, 1024), (1024, 10)]
    weights = 3 * 128 * 9 + 128 * 128 * 9 + 128 * 256 * 9 + 256 * 256 * 9 + 256 * 512 * 9 + 512 * 512 * 9
    assert g.meta["num_params"] == weights + 8192 * 1024 + 1024 * 10 + 10


def test_transformer_macs_by_hand():
    s, e, f, h, v = 128, 512, 2048, 8, 32000
    per_block = 4 * s * e * e + 3 * s * e * f + 2 * h * s * s * (e // h)
    llama = zoo.load("tinyllama-42m")
    assert llama.total_macs == 8 * per_block + s * e * v
    scores = [layer for layer in llama.layers if layer.op == "matmul"]
    assert len(scores) == 16 and all(layer.attrs["heads"] == 8 and layer.attrs["m"] == s for layer in scores)
    s, e, i, f, h = 268, 512, 128, 512, 4
    per_layer = 2 * s * e * i + 2 * s * i * i + s * e * i + 2 * h * s * s * (i // h) + s * i * i + 4 * 2 * s * i * f + s * i * e
    bert = zoo.load("mobilebert")
    assert bert.total_macs == 24 * per_layer + s * 3 * 128 * e
    assert {layer.attrs["heads"] for layer in bert.layers if layer.op == "matmul"} == {4}


def test_unknown_name_lists_the_zoo():
    with pytest.raises(ModelError, match="resnet152.*mobilebert|valid names"):
        load_model("resnet9000")
    with pytest.raises(ModelError, match="resnet8"):
        zoo.onnx_path("nope")


def test_full_model_matches_shapes_only_and_runs(tmp_path, monkeypatch):
    """resnet8 exported fresh: same structure as the shipped file, same Graph, onnxruntime runs it."""
    import onnxruntime as ort
    import torch

    monkeypatch.setenv("HETSPLIT_CACHE", str(tmp_path))
    path = zoo.onnx_path("resnet8")
    assert path.is_relative_to(tmp_path) and path.stat().st_size > 4 * 77706
    full = load_onnx(path, name="resnet8")
    fast = zoo.load("resnet8")
    assert full.names == fast.names
    assert [layer.nodes for layer in full.layers] == [layer.nodes for layer in fast.layers]
    assert [t.name for t in full.tensors] == [t.name for t in fast.tensors]
    assert np.array_equal(full.macs, fast.macs) and np.array_equal(full.cut_bytes, fast.cut_bytes)

    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    (y,) = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    module, _, _ = build_module("resnet8")
    with torch.no_grad():
        expected = module(torch.from_numpy(x)).numpy()
    assert y.shape == (1, 10) and np.allclose(y, expected, atol=1e-4)
    assert zoo.onnx_path("resnet8") == path  # cached
    stamp = path.with_suffix(".stamp")
    stamp.write_text("exported against an older package")
    path.write_bytes(b"stale")
    assert zoo.onnx_path("resnet8") == path and path.stat().st_size > 4 * 77706  # exported again
    assert stamp.read_text() != "exported against an older package"


def test_shipped_shapes_only_model_regenerates_identically():
    shipped = onnx.load(str(SHIPPED_DIR / "resnet18.onnx"))
    assert structure(shipped) == structure(export_model("resnet18"))


def test_every_zoo_model_has_a_small_shipped_file():
    for name in zoo.names():
        path = SHIPPED_DIR / f"{name}.onnx"
        assert path.is_file() and path.stat().st_size < 1_000_000, name


def test_load_model_accepts_a_path(tmp_path):
    g = load_model(str(SHIPPED_DIR / "vgg8.onnx"))
    assert g.name == "vgg8" and len(g) == len(zoo.load("vgg8"))


@pytest.mark.parametrize("name", ["yolov8n", "tinyllama-42m"])
def test_prepare_is_idempotent_on_zoo_models(name):
    """The runtime re-prepares the full model: names must not move."""
    from hetsplit.graph import prepare_model

    shipped = onnx.load(str(SHIPPED_DIR / f"{name}.onnx"))
    assert structure(prepare_model(shipped)) == structure(shipped)


def test_embedding_layer_reads_only_its_rows():
    layer = zoo.load("tinyllama-42m").layers[0]
    assert layer.onnx_ops[0] == "Gather"
    table, rows = 32000 * 512 * 4, 128 * 512 * 4
    assert layer.attrs["param_bytes_read"] == layer.param_bytes - table + rows
    assert layer.attrs["lookup_bytes"] == rows


def test_a_decode_step_looks_up_one_row():
    from hetsplit.graph.transformer import decode_step

    layer = decode_step(zoo.load("tinyllama-42m"), 128).layers[0]
    table, row = 32000 * 512 * 4, 512 * 4
    assert layer.attrs["lookup_bytes"] == row
    assert layer.attrs["param_bytes_read"] == layer.param_bytes - table + row
