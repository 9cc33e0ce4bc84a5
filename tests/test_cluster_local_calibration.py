"""The local cluster's calibration: cache key, reuse, --recalibrate, the source note (measurement faked)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from hetsplit.cli.main import main
from hetsplit.costs import calibration_store
from hetsplit.costs import local_calibration as lc
from hetsplit.costs.calibration import Measured
from hetsplit.costs.models.calibrated import predict
from hetsplit.estimate import RuntimeCosts
from hetsplit.runtime import calibration as rc
from hetsplit.graph import zoo
from hetsplit.workflow import costs_notes, load_problem

SLOWER = 2.0      # the fake machine runs every probe at twice the reference fit's time (co-loaded)
ALONE = 0.8       # and a probe alone at 0.8 x that


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path) -> list[str]:
    """Calibration on, cached under tmp_path, probes 'measured' instantly at SLOWER x the reference
    (co-loaded; the list records these) and ALONE x that alone; the runtime's costs not measured."""
    monkeypatch.delenv(lc.ENV)
    monkeypatch.setenv("HETSPLIT_CACHE", str(tmp_path))
    monkeypatch.setattr(lc, "DEFAULT_OPTIONS", lc.CalibrationOptions(probes=("resnet8",), repeats=1, warmup=0,
                                                                                 rounds=1, co_load=1))
    done: list[str] = []

    def fake(model: str, options: lc.CalibrationOptions, co_load: int) -> Measured:
        if co_load:
            done.append(model)
        g = zoo.load(model)
        ref = lc.reference_params()
        t = predict(g, ref["coefficients"], ref["terms"])
        return Measured(model, g, t, SLOWER * (1.0 if co_load else ALONE) * float(t.sum()))

    monkeypatch.setattr(lc, "measure_probe", fake)
    monkeypatch.setattr(rc, "runtime_costs", lambda recalibrate=False: RuntimeCosts.fallback("not measured here"))
    return done


def _cached(key: dict | None = None):
    return calibration_store.cache_path(key or lc.machine_key(), lc.FOLDER)


def test_key_names_cpu_cores_and_onnxruntime(monkeypatch, tmp_path):
    monkeypatch.setenv("HETSPLIT_CACHE", str(tmp_path))
    key = lc.machine_key()
    assert set(key) == {"cpu", "cores", "onnxruntime", "version"}
    path = _cached(key)
    assert path.parent == tmp_path / "local-calibration"
    for field, other in (("cpu", "another CPU"), ("cores", key["cores"] + 1), ("onnxruntime", "0.0")):
        assert _cached({**key, field: other}) != path
    assert _cached(dict(key)) == path


def test_calibrates_once_then_reuses_the_cache(calls, monkeypatch):
    first = lc.local_costs()
    assert calls == ["resnet8"]
    cal = first.calibration
    assert cal is not None and cal.scale == pytest.approx(SLOWER) and cal.unloaded_factor == pytest.approx(ALONE)
    assert "alone x0.80" in first.source
    doc = json.loads(_cached().read_text())
    assert doc["key"] == lc.machine_key() and doc["value"]["scale"] == pytest.approx(SLOWER)
    assert lc.local_costs().calibration is cal and calls == ["resnet8"]      # memo
    calibration_store.clear_memo()
    again = lc.local_costs()                             # from the file
    assert calls == ["resnet8"] and again.calibration.created == cal.created
    monkeypatch.setattr(lc, "cpu_model", lambda: "another CPU")   # another machine: measured anew
    lc.local_costs()
    assert calls == ["resnet8", "resnet8"]


def test_calibrated_costs_scale_the_reference(calls):
    problem = load_problem("resnet8", "local")
    ref = lc.reference_params()
    expected = predict(problem.graph, ref["coefficients"], ref["terms"]) * SLOWER
    assert np.allclose(problem.costs.time_s[:, 0], expected)
    (note,) = costs_notes(problem)
    assert note.startswith("local-cpu costs: calibrated on this machine") and "--recalibrate" in note


def test_plan_recalibrate_and_source_note(calls, capsys):
    assert main(["plan", "resnet8", "--cluster", "local", "--algo", "exact"]) == 0
    assert main(["plan", "resnet8", "--cluster", "local", "--algo", "exact"]) == 0
    assert len(calls) == 1
    out = capsys.readouterr().out
    assert "note: local-cpu costs: calibrated on this machine" in out.replace("\n", " ")
    assert main(["plan", "resnet8", "--cluster", "local", "--algo", "exact", "--recalibrate"]) == 0
    assert len(calls) == 2


def test_fallback_says_so(capsys):
    assert main(["plan", "resnet8", "--cluster", "local", "--algo", "exact"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "note: local-cpu costs: FALLBACK: roofline figures" in out and lc.ENV in out


def test_failed_calibration_falls_back(calls, monkeypatch):
    from hetsplit.errors import ProfileError

    def broken(*_a):
        raise ProfileError("no onnxruntime profiler here")

    monkeypatch.setattr(lc, "measure_probe", broken)
    costs = lc.local_costs()
    assert costs.calibration is None and "no onnxruntime profiler here" in costs.source
    assert costs.source.startswith("FALLBACK")


def test_other_clusters_have_no_note(calls):
    assert costs_notes(load_problem("resnet8", "donna-4cpu-pcie5")) == []
    assert calls == []


def _rounds(monkeypatch, slowdowns: list[float]) -> list[str]:
    """Two-round calibrations whose n-th probe measurement runs slowdowns[n] x the reference fit."""
    monkeypatch.setattr(lc, "DEFAULT_OPTIONS", lc.CalibrationOptions(probes=("resnet8",), repeats=1, warmup=0,
                                                                     rounds=2, co_load=0))
    done: list[str] = []

    def fake(model: str, options: lc.CalibrationOptions, co_load: int) -> Measured:
        g = zoo.load(model)
        ref = lc.reference_params()
        t = predict(g, ref["coefficients"], ref["terms"])
        done.append(model)
        return Measured(model, g, t, slowdowns[len(done) - 1] * float(t.sum()))

    monkeypatch.setattr(lc, "measure_probe", fake)
    monkeypatch.setattr(rc, "runtime_costs", lambda recalibrate=False: RuntimeCosts.fallback("not measured here"))
    return done


def test_a_busy_machine_keeps_the_faster_round_and_is_not_cached(calls, monkeypatch):
    done = _rounds(monkeypatch, [3.2, SLOWER, 2.05, 2.0])
    costs = lc.local_costs()
    cal = costs.calibration
    assert len(done) == 2 and cal.scale == pytest.approx(SLOWER) and cal.spread == pytest.approx(0.6)
    assert cal.busy and "WARNING: the machine was busy while calibrating (rounds 60% apart" in costs.source
    assert not _cached().exists()
    calibration_store.clear_memo()
    steady = lc.local_costs()                            # measured again: steady rounds, cached
    assert len(done) == 4 and not steady.calibration.busy and "WARNING" not in steady.source
    assert steady.calibration.spread == pytest.approx(0.025)
    assert json.loads(_cached().read_text())["value"]["spread"] == pytest.approx(0.025)


def test_run_recalibrate_measures_again(calls, tmp_path, capsys):
    assert main(["plan", "resnet8", "--cluster", "local", "--algo", "exact", "--out", str(tmp_path / "p")]) == 0
    assert len(calls) == 1
    argv = ["run", str(tmp_path / "p" / "plans.json"), "resnet8", "--cluster", "local", "--inputs", "2",
            "--latency-inputs", "1"]
    assert main(argv) == 0
    assert len(calls) == 1                               # the cached calibration
    assert main(argv + ["--recalibrate"]) == 0
    assert len(calls) == 2


def test_a_plan_costed_here_takes_the_alone_factor_of_the_calibration_it_was_planned_with(calls):
    from hetsplit.estimate.processes import planned_profile

    profile = planned_profile(load_problem("resnet8", "local"))
    assert profile.meta["unloaded_factor"] == pytest.approx(ALONE) and "calibrated" in profile.meta["source"]
