"""The ``here`` fidelity: plans costed for the processes that would run them on this machine, through
the one ``estimate`` call, row for row the ``LocalPrediction`` that ``run --here`` and ``plan`` print."""

from __future__ import annotations

import numpy as np
import pytest

from hetsplit.costs import build_cost_table
from hetsplit.costs.profile import Profile
from hetsplit.errors import HetsplitError
from hetsplit.estimate import HereOptions, RuntimeCosts, estimate, estimate_plan, make_fidelity, predict_here
from hetsplit.estimate.processes import planned_profile
from hetsplit.cluster.local import local_cluster
from hetsplit.search import make_partitioner
from hetsplit.workflow import PlanRequest, find_plans, load_problem

COSTS = RuntimeCosts(worker_end_s=2e-4, driver_end_s=8e-5, worker_byte_s=1e-10, driver_byte_s=5e-10,
                     message_latency_s=1.5e-4, source="given for the test", end_wait_s=1.2e-4)


@pytest.fixture(scope="module")
def local():
    problem = load_problem("resnet8", "local")
    return problem, find_plans(problem, PlanRequest(algorithms=("donna", "exact")))


def test_rows_are_the_predictions_of_the_plans_processes(local):
    problem, plans = local
    here = make_fidelity("here", HereOptions(COSTS, cores=2))
    batch = estimate(problem, plans, "here", HereOptions(COSTS, cores=2))
    closed = estimate(problem, plans, "closed")
    assert len(batch) == len(plans)
    for n, (plan, pred) in enumerate(zip(plans, here.predictions(problem, plans))):
        again = predict_here(plan, problem.graph, planned_profile(problem), 2, COSTS)
        assert pred.to_dict() == again.to_dict()
        assert batch.throughput[n] == pytest.approx(pred.predicted_throughput, rel=1e-12)
        assert batch.bottleneck_s[n] == pytest.approx(1 / pred.predicted_throughput, rel=1e-12)
        assert batch.latency_s[n] == pytest.approx(pred.predicted_latency_s, rel=1e-12)
        for d, name in enumerate(problem.cluster.names):            # per device: on the problem's columns
            assert batch.compute_s_per_device[n, d] == pytest.approx(pred.compute_s.get(name, 0.0), rel=1e-12)
            assert bool(batch.participates[n, d]) == (name in plan.devices)
    # the same costs and no energy per byte on loopback: energy and memory are the closed form's
    assert np.allclose(batch.energy_j, closed.energy_j) and np.allclose(batch.memory_per_device_bytes,
                                                                        closed.memory_per_device_bytes)
    assert np.allclose(batch.edp, batch.energy_j * batch.latency_s)


def test_sharing_fewer_cores_never_predicts_more(local):
    problem, plans = local
    one = estimate(problem, plans, "here", HereOptions(COSTS, cores=1))
    many = estimate(problem, plans, "here", HereOptions(COSTS, cores=8))
    assert (one.throughput <= many.throughput * (1 + 1e-12)).all()
    assert (one.throughput < many.throughput).any()


def test_a_plan_made_for_another_cluster_runs_here_with_a_profile():
    """An LBLP mapping of the IMC cluster, its units as worker processes; columns are imce-4's devices."""
    problem = load_problem("resnet8", "imce-4")
    plan = make_partitioner("lblp").solve(problem)[0]
    profile = Profile(problem.graph, build_cost_table(problem.graph, local_cluster(["local-cpu0"])),
                      {"source": "local-cpu roofline", "threads": 1})
    m = estimate_plan(problem, plan, "here", HereOptions(COSTS, cores=4, profile=profile))
    pred = predict_here(plan, problem.graph, profile, 4, COSTS)
    assert m.throughput == pytest.approx(pred.predicted_throughput, rel=1e-12)
    assert m.latency_s == pytest.approx(pred.predicted_latency_s, rel=1e-12)
    assert set(m.compute_s_per_device) == set(plan.devices) <= set(problem.cluster.names)
    assert m.compute_s_per_device == pytest.approx(pred.compute_s)


def test_what_the_here_fidelity_refuses(local):
    problem, plans = local
    with pytest.raises(HetsplitError, match="runtime's costs"):
        estimate(problem, plans[:1], "here")
    other = load_problem("resnet8", "imce-4")
    with pytest.raises(HetsplitError, match="local-cpu profile"):
        estimate(other, make_partitioner("lblp").solve(other)[:1], "here", HereOptions(COSTS))
    with pytest.raises(HetsplitError, match="cores"):
        HereOptions(COSTS, cores=0)
