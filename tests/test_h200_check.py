"""bench/h200_check.py's corrections of the H200 host's data: the GPU profiles' whole-run rescaling, the
segment costs and the message end fitted on one run, as stored in bench/data/h200-16c."""

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
    fitted = h200.prepare(DATA, tmp_path, h200.RUNS[0]).segments
    assert set(fitted) == {"local-cpu", "local-gpu"}
    for model in h200.MODELS:
        for kind, t in (("cpu", "local-cpu"), ("gpu", "local-gpu")):
            stored = json.loads((DATA / f"{kind}.{model}.json").read_text())["device_types"][t]["segment"]
            assert stored["call_s"] == pytest.approx(fitted[t].call_s, rel=1e-9)
            assert stored["call_s"] > 0 and h200.RUNS[0].report in stored["source"]


def test_the_stored_clusters_charge_the_message_end_fitted_on_the_map_opt_run(tmp_path):
    from hetsplit.cluster.loader import load_cluster

    h200 = check_module()
    fitted = h200.prepare(DATA, tmp_path, h200.RUNS[0])
    # the run's figures by hand: per input, 1 / throughput - compute - idle on each worker, over the
    # ends of the messages between the workers (21 messages, two ends each)
    run = json.loads((DATA / h200.RUNS[0].report).read_text())["measured"]
    rest = sum(1 / run["throughput"] - d["compute_s"] - d["idle_s"] for d in run["devices"])
    assert sum(h["from"] != "driver" and h["to"] != "driver" for h in run["hops"]) == 21
    assert fitted.message_end_s == pytest.approx(rest / 42, rel=1e-9)
    assert 50e-6 < fitted.message_end_s < 150e-6
    for model in h200.MODELS:
        cluster = load_cluster(DATA / f"cluster.{model}.yaml")
        assert cluster.links.end_s == pytest.approx([round(fitted.message_end_s * 1e6, 1) * 1e-6] * 2)
        assert "message end" in cluster.description and "bench/h200_check.py" in cluster.description


def test_the_message_end_refuses_a_run_with_no_messages_between_workers(tmp_path):
    h200 = check_module()
    alone = h200.read_run(DATA / "run.resnet50.gpu0.json")
    with pytest.raises(SystemExit, match="no message ends between workers"):
        h200.fit_message_end(alone, h200.RUNS[0])


def test_the_second_h200_host_is_costed_within_25_percent_with_one_run_fitted_and_its_splits_rank_below(tmp_path,
                                                                                                    capsys):
    """bench/data/h200-16c-2 (profiles measured by this version's profiler on a lent H200 host): fitted on its
    ResNet-50 split alone, the other three runs are held out and each within 25% of what it measured."""
    h200 = check_module()
    data = DATA.parent / "h200-16c-2"
    runs = h200.runs_of(data)
    assert [(r.model, r.alone) for r in runs] == [("resnet50", False), ("resnet50", True), ("mobilebert", False),
                                                  ("mobilebert", True)]
    h200.prepare(data, tmp_path, runs[0])
    figures = h200.check_runs(tmp_path, h200.problems(tmp_path), runs, runs[0])
    assert "4 of 4 runs within +-25%" in capsys.readouterr().out
    for run in runs:
        predicted, measured = figures[run.name]
        assert abs(predicted / measured - 1) <= 0.25, run.name
    for split, alone in ((runs[0], runs[1]), (runs[2], runs[3])):
        assert figures[alone.name][0] > figures[split.name][0] and figures[alone.name][1] > figures[split.name][1]
