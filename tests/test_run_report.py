"""The typed run report and comparison: their JSON (hetsplit.run.report/1, hetsplit.run.comparison/1) reads back
as the same objects, older files (no format key, fewer fields) still read, bad ones are refused naming what is
wrong; the run's request is checked when built and cannot change afterwards."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from hetsplit.errors import HetsplitError, RuntimeFailure, UsageError
from hetsplit.plan.types import Metrics
from hetsplit.runtime import RunOptions
from hetsplit.runtime.report import (FORMAT, CpuGroup, DeviceRun, DeviceShaping, EmulatedRun, HopRun, LinkRun,
                                     LinkShaping, RunReport, ShapedLink, Verification)
from hetsplit.workflow.comparison import Comparison, Row, Simulated
from hetsplit.workflow.run import CompareOptions, RunRequest, plan_rows, read_run_doc, run_comparison

STORED = Path(__file__).resolve().parents[1] / "bench" / "data" / "h200-16c" / "run.resnet50.map-opt.json"


def report() -> RunReport:
    devices = [DeviceRun("a", 2e-3, 2.1e-3, rank=1, segments=3, cpu_per_input_s=2.5e-3, energy_j=0.1),
               DeviceRun("b", 1e-3, 1e-3, rank=2, kind="gpu", executor="torch-cuda")]
    hops = [HopRun("driver", "a", 600, 1e-4, payload="x", wire_all_s=[1e-4, 1e-4]),
            HopRun("a", "b", 4096, 3e-4, payload="t", collective="gather", tensors=["t"], wire_all_s=[3e-4, 3e-4])]
    return RunReport("m", devices, hops, 2, 400.0, 3e-3, 4e-3, [3e-3, 4e-3], Verification(4, 1e-6, 1e-5, "y"), 450.0,
                     plan_kind="mapping", stage_bound_by="stage a", links=[LinkRun("a", "b", 4096, 1, 3e-4)],
                     stream_throughput=380.0, driver_cpu_per_input_s=5e-4,
                     emulated=EmulatedRun(2.0, 800.0, 1.5e-3, 2e-3, {"a": 1e-3, "b": 5e-4}),
                     emulation=LinkShaping(3, "tc netem", [ShapedLink(1, 2, 5e7)]),
                     device_emulation=DeviceShaping(2.0, {"a": 0.5, "b": 1.0}, "test", "v2", 10000,
                                                    {"1": CpuGroup(0.5, 5000, 10000)}))


def metrics() -> Metrics:
    return Metrics(500.0, 2e-3, "stage a", 2.5e-3, 0.2, {"a": 0.1, "b": 0.1}, {"a": 1.8e-3, "b": 1.2e-3},
                   {"a": 1e6, "b": 1e6}, True, 5e-4)


def test_a_run_report_reads_back_from_its_json():
    r = report()
    doc = json.loads(json.dumps(r.to_dict()))
    assert doc["format"] == FORMAT == "hetsplit.run.report/1"
    assert doc["hops"][1]["from"] == "a" and doc["links"][0]["to"] == "b" and doc["devices"][1]["kind"] == "gpu"
    assert doc["emulation"]["shaped"] == [{"from_rank": 1, "to_rank": 2, "bandwidth": 5e7}]
    assert doc["device_emulation"]["groups"] == {"1": {"share": 0.5, "quota_us": 5000, "period_us": 10000}}
    assert RunReport.from_dict(doc) == r
    bare = dataclasses.replace(r, verify=None, emulated=None, links=[], emulation=None, device_emulation=None)
    assert bare.to_dict()["verify"] == {} and RunReport.from_dict(bare.to_dict()) == bare
    assert "emulation" not in bare.to_dict() and "device_emulation" not in bare.to_dict()


def test_an_older_run_report_without_a_format_still_reads():
    """What `run --out` wrote before the format had a name: no format key, the extras at the top level, a
    device with only some fields, keys this version does not know (ignored)."""
    doc = {"model": "m", "inputs": 3, "throughput": 10.0, "latency_s": 0.1, "latency_loaded_s": 0.2,
           "latencies_s": [0.1, 0.1, 0.2], "verify": {"outputs_checked": 3, "max_abs_err": 0.0, "ok": True},
           "stage_bound_throughput": 12.0, "pipeline_efficiency": 0.83, "over_stage_bound": 0.83,
           "efficiency_note": None, "devices": [{"device": "a", "compute_s": 0.05, "compute_mean_s": 0.05}],
           "hops": [{"from": "a", "to": "b", "nbytes": 8, "wire_s": 0.001}], "plan_kind": "pipeline",
           "links": [], "stage_bound_by": "stage a", "some_later_key": 1}
    r = RunReport.from_dict(doc)
    assert r.plan_kind == "pipeline" and r.devices[0].threads == 1 and r.hops[0].src == "a"
    assert r.verify is not None and r.verify.outputs_checked == 3 and r.stream_throughput is None


@pytest.mark.parametrize("doc, says", [({"format": "hetsplit.run.report/9"}, "hetsplit.run.report/9"),
                                       ({"model": "m", "inputs": 2}, "lacks devices, hops, throughput"),
                                       ([1, 2], "expected a JSON object")])
def test_a_document_that_is_no_run_report_is_refused_naming_why(doc, says):
    with pytest.raises(RuntimeFailure, match=says):
        RunReport.from_dict(doc, "run.json")


def test_a_device_without_its_compute_is_refused_naming_it():
    doc = report().to_dict()
    del doc["devices"][1]["compute_s"]
    with pytest.raises(RuntimeFailure, match=r"devices\[1\].*compute_s"):
        RunReport.from_dict(doc)


def test_a_comparison_reads_back_from_its_json():
    r = report()
    c = Comparison(r, plan_rows(r, metrics()), ["a note"], "closed", metrics(), Simulated(420.0, 3e-3, 16))
    back = Comparison.from_dict(json.loads(json.dumps(c.to_dict())))
    assert back == c
    assert c.row("throughput (1/s)") == Row("throughput (1/s)", 500.0, 400.0)
    assert c.row("throughput (1/s)").ratio == pytest.approx(0.8)
    assert c.row("compute a beyond the prediction, per segment (3 per input) (s)").measured == \
        pytest.approx((2e-3 - 1.8e-3) / 3)


def test_rows_have_no_ratio_without_both_figures():
    assert Row("x", 0.0, 1.0).ratio is None and Row("x", 2.0, None).ratio is None
    assert Row("x", math.inf, 1.0).ratio is None and Row("x", 2.0, 1.0).ratio == 0.5


def test_the_stored_h200_run_reads_as_the_typed_comparison():
    doc = json.loads(STORED.read_text())
    run = read_run_doc(STORED)
    assert isinstance(run, Comparison) and run.fidelity == "plan" and run.report is not None
    assert [r.to_dict() for r in run.rows] == doc["rows"]
    assert [d.device for d in run.report.devices] == [d["device"] for d in doc["measured"]["devices"]]
    assert run.predicted is not None and run.predicted.throughput == doc["predicted"]["throughput"]


def test_a_bare_report_is_set_beside_the_plans_metrics(tmp_path):
    from hetsplit.plan.types import Plan

    path = tmp_path / "run.json"
    path.write_text(json.dumps(report().to_dict()))
    run = read_run_doc(path)
    assert isinstance(run, RunReport)
    plan = Plan("m", "c", "hand", assign={"l0": "a"}, metrics=metrics())
    compared = run_comparison(run, plan, cluster=None)
    assert compared.fidelity == "plan" and compared.row("throughput (1/s)").ratio == pytest.approx(0.8)
    assert run_comparison(compared, plan, cluster=None) is compared


def test_comparison_rows_that_are_not_numbers_are_refused(tmp_path):
    with pytest.raises(HetsplitError, match=r"rows\[0\]"):
        Comparison.from_dict({"rows": [{"metric": "x", "predicted": "fast", "measured": 1.0}]})
    with pytest.raises(HetsplitError, match="'rows'"):
        Comparison.from_dict({"rows": "none"})


def test_a_run_request_is_checked_when_built_and_fixed_afterwards():
    assert RunRequest(inputs=1).first_alone == 1 and RunRequest(inputs=16).latency_inputs == 2
    with pytest.raises(UsageError, match="--latency-inputs 5"):
        RunRequest(inputs=4, latency_inputs=5)
    with pytest.raises(UsageError, match="--timeout inf"):
        RunRequest(timeout_s=math.inf)
    with pytest.raises(UsageError, match="--ssh"):
        RunRequest(ssh=True)
    with pytest.raises(UsageError, match="--emulate-links"):
        RunRequest(hosts="a=10.0.0.2", emulate_links=True)
    with pytest.raises(UsageError, match="profile"):
        CompareOptions("closed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunRequest().inputs = 3          # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunOptions().threads = {"a": 2}  # type: ignore[misc]


def test_a_stream_shorter_than_twice_what_the_plan_keeps_in_flight_is_said_not_steady():
    r = dataclasses.replace(report(), inputs=40, in_flight=124)
    note = r.depth_note()
    assert note is not None and "124 inputs in flight" in note and "at least 248" in note
    assert RunReport.from_dict(json.loads(json.dumps(r.to_dict()))) == r       # in_flight reads back
    assert dataclasses.replace(r, inputs=248).depth_note() is None
    assert report().depth_note() is None and "in_flight" not in report().to_dict()   # one input in flight: said once
