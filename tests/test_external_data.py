"""Broken external data (issue 42): a model whose weights file is missing, truncated, not a regular file or
outside the model's folder is named as such by every command that reads the model, with exit 2, no
traceback and nothing left behind (a split's --out folder included)."""

from __future__ import annotations

import json
import os
import shutil

import onnx
import pytest

from byo_models import CLUSTER_YAML, detector
from hetsplit.cli.main import main

pytestmark = pytest.mark.timeout(240)
SHAPE = ["--input-shape", "images:1,3,32,32"]


@pytest.fixture(scope="module")
def shipped(tmp_path_factory):
    """det.onnx with its weights in det.onnx.data beside it, a cluster, and a plan made from them."""
    d = tmp_path_factory.mktemp("external")
    detector(d / "whole.onnx")
    (d / "model").mkdir()
    onnx.save(onnx.load(str(d / "whole.onnx")), str(d / "model" / "det.onnx"), save_as_external_data=True,
              all_tensors_to_one_file=True, location="det.onnx.data", size_threshold=0)
    (d / "cluster.yaml").write_text(CLUSTER_YAML)
    assert main(["plan", str(d / "model" / "det.onnx"), "--cluster", str(d / "cluster.yaml"), *SHAPE,
                 "--out", str(d / "plans")]) == 0
    return d


def _relocated(model_dir, location: str) -> None:
    """Point every external tensor of det.onnx at ``location``."""
    path = model_dir / "det.onnx"
    m = onnx.load(str(path), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = location
    path.write_bytes(m.SerializeToString())


def break_model(shipped, tmp_path, how: str):
    """A copy of the shipped model broken ``how``; the path of its .onnx file."""
    folder = tmp_path / "broken"
    shutil.copytree(shipped / "model", folder)
    data = folder / "det.onnx.data"
    if how == "missing":
        data.unlink()
    elif how == "truncated":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    elif how == "fifo":
        data.unlink()
        os.mkfifo(data)
    elif how == "link out":
        data.rename(tmp_path / "elsewhere.data")
        data.symlink_to(tmp_path / "elsewhere.data")
    elif how == "dot-dot":
        data.rename(tmp_path / "det.onnx.data")
        _relocated(folder, "../det.onnx.data")
    elif how == "absolute":
        data.rename(tmp_path / "det.onnx.data")
        _relocated(folder, str(tmp_path / "det.onnx.data"))
    return folder / "det.onnx"


SAID = {"missing": "is missing", "truncated": "runs past the end", "fifo": "not a regular file",
        "link out": "leads out of the model's folder", "dot-dot": "no absolute path, no '..'",
        "absolute": "no absolute path, no '..'"}


def refused(argv, capsys, said: str) -> None:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "the external data of tensor" in err and said in err and "Traceback" not in err, err


@pytest.mark.parametrize("how", sorted(SAID))
def test_inspect_and_plan_notice_broken_external_data(shipped, tmp_path, capsys, how):
    model = break_model(shipped, tmp_path, how)
    refused(["inspect", str(model), *SHAPE], capsys, SAID[how])
    refused(["plan", str(model), "--cluster", str(shipped / "cluster.yaml"), *SHAPE, "--out", str(tmp_path / "p")],
            capsys, SAID[how])
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("how", ["truncated", "missing", "link out"])
def test_split_run_and_profile_refuse_broken_external_data_and_leave_nothing(shipped, tmp_path, capsys, how):
    model = break_model(shipped, tmp_path, how)
    plans = str(shipped / "plans" / "plans.json")
    refused(["split", plans, str(model), "--out", str(tmp_path / "split")], capsys, SAID[how])
    refused(["run", plans, str(model), "-n", "1", "--out", str(tmp_path / "run.json")], capsys, SAID[how])
    refused(["profile", str(model), *SHAPE, "--repeats", "1", "--warmup", "0", "--out", str(tmp_path / "p.json")],
            capsys, SAID[how])
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["broken"] + (["elsewhere.data"] if how == "link out"
                                                                               else []))


def test_external_data_inside_the_folder_is_taken(shipped, capsys):
    capsys.readouterr()
    assert main(["inspect", str(shipped / "model" / "det.onnx"), *SHAPE, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["summary"]["params"] > 0
