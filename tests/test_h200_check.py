"""bench/h200_check.py's corrections of the H200 host's data: the GPU profiles' whole-run rescaling and the
segment costs fitted on one run, as stored in bench/data/h200-16c."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
DATA = BENCH / "data" / "h200-16c"


def check_module():
    spec = importlib.util.spec_from_file_location("h200_check", BENCH / "h200_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["h200_check"] = module            # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_an_old_gpu_profile_is_scaled_to_its_unmarked_whole_model_once():
    h200 = check_module()
    doc = {"source": "measured: x", "whole_model": {"median_s": 3.0},
           "device_types": {"local-gpu": {"time_s": [1.0, 2.0, 3.0], "source": "measured: x"}}}
    assert h200.rescale_marked(doc)
    assert doc["device_types"]["local-gpu"]["time_s"] == pytest.approx([0.5, 1.0, 1.5])
    assert doc["marks"]["layer_scale"] == pytest.approx(0.5) and doc["layer_sum_s"] == pytest.approx(3.0)
    assert "derived correction" in doc["device_types"]["local-gpu"]["source"]
    assert not h200.rescale_marked(doc)
    assert doc["device_types"]["local-gpu"]["time_s"] == pytest.approx([0.5, 1.0, 1.5])


@pytest.mark.parametrize("model", ["resnet50", "mobilebert"])
def test_the_stored_gpu_profiles_add_up_to_their_whole_model(model):
    doc = json.loads((DATA / f"gpu.{model}.json").read_text())
    total = sum(doc["device_types"]["local-gpu"]["time_s"])
    assert total == pytest.approx(doc["whole_model"]["median_s"], rel=0.10)
    assert "marks" in doc and "derived correction" in doc["device_types"]["local-gpu"]["source"]


def test_the_stored_segment_costs_are_the_fit_on_the_map_opt_run(tmp_path):
    h200 = check_module()
    fitted = h200.prepare(DATA, tmp_path)
    assert set(fitted) == {"local-cpu", "local-gpu"}
    for model in h200.MODELS:
        for kind, t in (("cpu", "local-cpu"), ("gpu", "local-gpu")):
            stored = json.loads((DATA / f"{kind}.{model}.json").read_text())["device_types"][t]["segment"]
            assert stored["call_s"] == pytest.approx(fitted[t].call_s, rel=1e-9)
            assert stored["call_s"] > 0 and h200.FIT.report in stored["source"]
