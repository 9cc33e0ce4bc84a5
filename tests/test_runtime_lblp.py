"""An LBLP mapping of ResNet-8 (imce-4: 3 IMC units and 1 DPU) runs for real on local workers, one
process per unit, every output verified against the unsplit model, and the simulator, costed for
those processes (the ``here`` fidelity, through ``experiments.mapping_run``), stands beside the measurement.

No timing is asserted (the machine is shared and noisy): only that the comparison is filled with
finite positive numbers and describes the run that happened.
"""

from __future__ import annotations

import json
import math

import pytest

from hetsplit.cluster.local import local_cluster
from hetsplit.experiments.mapping_run import MappingRunOptions, run_mapping
from hetsplit.workflow.here import HereComparison
from hetsplit.search import make_partitioner
from hetsplit.workflow import load_problem

pytest.importorskip("torch")      # the zoo exports ResNet-8's weights from torch on first use
pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

INPUTS = 30


@pytest.fixture(scope="module")
def plan():
    return make_partitioner("lblp").solve(load_problem("resnet8", "imce-4"))[0]


@pytest.fixture(scope="module")
def result(plan) -> HereComparison:
    return run_mapping("resnet8", plan, MappingRunOptions(inputs=INPUTS, latency_inputs=3, profile_repeats=10))


def _positive(x) -> bool:
    return x is not None and math.isfinite(x) and x > 0


def test_lblp_maps_every_layer_whole_onto_the_imce_units(plan):
    assert plan.algorithm == "lblp" and not plan.is_pipeline
    assert sorted(plan.devices) == ["dpu0", "imc0", "imc1", "imc2"]
    assert len(plan.assign) == 14 and all(isinstance(d, str) for d in plan.assign.values())


def test_local_cluster_keeps_the_units_names_as_local_cpu_workers(plan):
    cl = local_cluster(plan.devices)
    assert cl.names == plan.devices
    assert cl.types == ["local-cpu"]
    assert cl.latency_s[0, 1] > 0 and math.isfinite(cl.bandwidth[0, 1])


def test_every_output_matches_the_unsplit_model(result):
    assert result.outputs_checked == INPUTS
    assert result.inputs == INPUTS
    assert 0.0 <= result.max_abs_err < 1e-4


def test_simulated_and_measured_side_by_side(result):
    p = result.prediction
    for value in (result.simulated_throughput, result.measured_throughput, result.output_rate,
                  result.predicted_throughput, result.ratio, result.simulated_ratio, result.measured_latency_s,
                  p.core_bound_throughput, p.simulated_latency_s, p.total_work_s, p.message_cost_s,
                  result.measured_cpu_per_input_s, result.measured_cpu_bound_throughput):
        assert _positive(value), value
    assert result.predicted_throughput == min(p.simulated_throughput, p.unit_bound_throughput,
                                              p.core_bound_throughput)
    assert p.total_work_s == pytest.approx(p.compute_work_s + p.message_cost_s * p.messages)
    assert p.runtime_source.startswith("FALLBACK")      # the suite turns measuring this machine off
    assert p.cores >= 1 and p.profile_threads == 1
    assert p.profile_co_load == min(4, p.cores) - 1


def test_per_unit_compute_is_filled_for_every_unit(result, plan):
    assert [u.device for u in result.units] == result.prediction.units == plan.devices
    assert sum(u.layers for u in result.units) == 14
    for u in result.units:
        assert u.layers >= 1
        assert _positive(u.measured_s) and _positive(u.cpu_s)
        assert u.predicted_s >= 0 and math.isfinite(u.predicted_s)
    assert sum(u.predicted_s for u in result.units) > 0


def test_the_prediction_counts_the_messages_the_run_moved(result):
    assert result.prediction.messages > result.prediction.driver_messages >= 2
    assert not any("messages per input" in n for n in result.notes), result.notes


def test_the_result_is_a_json_document(result):
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["measured"]["verify"]["ok"] is True
    rows = {r["metric"]: r for r in doc["rows"]}
    assert rows["throughput, simulated (1/s)"]["measured"] == pytest.approx(result.measured_throughput)
    assert all(r["ratio"] is None or r["ratio"] > 0 for r in doc["rows"])


def test_run_command_compares_here_with_a_saved_profile(plan, tmp_path):
    from hetsplit.cli.main import main
    from hetsplit.costs.profile import save_profile
    from hetsplit.workflow.here import profile_here
    from hetsplit.plan.io import save_plan

    save_plan(plan, tmp_path / "plan.json")
    save_profile(profile_here("resnet8", len(plan.devices), repeats=5), tmp_path / "prof.json")
    out = tmp_path / "cmp.json"
    code = main(["run", str(tmp_path / "plan.json"), "resnet8", "-n", "12", "--compare", "--here",
                 "--profile", str(tmp_path / "prof.json"), "--run-dir", str(tmp_path / "run"), "--out", str(out)])
    assert code == 0
    doc = json.loads(out.read_text())
    assert doc["prediction"]["units"] == plan.devices and doc["prediction"]["profile_source"].startswith(str(tmp_path))
    assert doc["outputs_checked"] == 12 and doc["max_abs_err"] < 1e-4
    assert _positive(doc["measured_throughput"]) and _positive(doc["predicted_throughput"]) and _positive(doc["ratio"])


def test_predicted_latency_takes_the_profiles_alone_factor(plan, result):
    """Latency is one input alone: the simulated latency at the profile's alone-vs-co-loaded factor, plus
    the driver's messages (a profile without the factor counts it 1)."""
    from dataclasses import replace

    from hetsplit.estimate import predict_here
    from hetsplit.workflow.here import profile_here
    from hetsplit.runtime import resolve_model
    from hetsplit.runtime.calibration import runtime_costs

    assert result.prediction.unloaded_factor == 1.0
    graph = resolve_model("resnet8")[0]
    profile = profile_here("resnet8", 4, repeats=1, warmup=0, co_load=0)
    p = predict_here(plan, graph, profile, 4, runtime_costs())
    assert p.predicted_latency_s == pytest.approx(p.simulated_latency_s + p.driver_messages * p.message_latency_s)
    q = predict_here(plan, graph, replace(profile, meta={**profile.meta, "unloaded_factor": 0.5}), 4, runtime_costs())
    assert q.unloaded_factor == 0.5 and q.simulated_latency_s == pytest.approx(p.simulated_latency_s)
    assert q.predicted_latency_s == pytest.approx(0.5 * p.simulated_latency_s + p.driver_messages * p.message_latency_s)
