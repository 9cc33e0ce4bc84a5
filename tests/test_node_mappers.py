"""Node-to-unit mappers (seed 001 and HEFT) on hand-worked DAGs; map-opt against brute force."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from _fork_dag import TWO_IMC_ONE_DPU, fork_problem, names
from _instances import random_problem
from hetsplit.errors import HetsplitError, PlanError
from hetsplit.plan.check import check_plan
from hetsplit.estimate.simulate import SimOptions, simulate_plan
from hetsplit.search import make_partitioner
from hetsplit.search.balance_mappers import random_assignment, round_robin_assignment, weights_balance_assignment
from hetsplit.search.heft import heft_schedule
from hetsplit.search.lblp import lblp_assignment
from hetsplit.search.mapping_milp import solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.workflow import load_problem


def test_lblp_by_hand_keeps_parallel_branches_apart() -> None:
    # LP = c0 c1 add c4 pool (4+3+1+8+2 = 18 > 17 via c2). IMC LP layers longest first: c4 -> i0 (8),
    # c0 -> i1 (4), c1 -> i1 (7). c2 is off the LP: i1 is least loaded but holds c1, parallel to
    # c2, so c2 goes to i0. add and pool go to the only DPU.
    nm = NodeMapping(fork_problem(TWO_IMC_ONE_DPU))
    assert nm.longest_path(nm.type_time) == [0, 1, 3, 4, 5]
    assert nm.parallel(1, 2) and not nm.parallel(0, 2) and not nm.parallel(2, 4)
    assert names(nm, lblp_assignment(nm)) == {"c0": "i1", "c1": "i1", "c2": "i0", "add": "p0", "c4": "i0",
                                              "pool": "p0"}


def test_weights_balance_by_hand() -> None:
    # IMC layers by weight: c1 (300) -> i0, c2 (200) -> i1, c0 (100) -> i1 (200 < 300),
    # c4 (50): 300 = 300, the first unit i0. DPU layers by time to the only DPU.
    nm = NodeMapping(fork_problem(TWO_IMC_ONE_DPU))
    assert names(nm, weights_balance_assignment(nm)) == {"c0": "i1", "c1": "i0", "c2": "i1", "add": "p0",
                                                         "c4": "i0", "pool": "p0"}


def test_weights_balance_balances_time_on_units_without_arrays() -> None:
    # Two DPUs only: every layer balanced by time, longest first: c4 12 -> p0 (12), c0 10 -> p1 (10),
    # c1 9 -> p1 (19), c2 8 -> p0 (20), pool 2 -> p1 (21), add 1 -> p0 (21).
    nm = NodeMapping(fork_problem([("p0", "dpu"), ("p1", "dpu")]))
    assert names(nm, weights_balance_assignment(nm)) == {"c4": "p0", "c0": "p1", "c1": "p1", "c2": "p0",
                                                         "pool": "p1", "add": "p0"}


def test_round_robin_and_random_stay_on_the_processing_type() -> None:
    nm = NodeMapping(fork_problem(TWO_IMC_ONE_DPU))
    assert names(nm, round_robin_assignment(nm)) == {"c0": "i0", "c1": "i1", "c2": "i0", "add": "p0",
                                                     "c4": "i1", "pool": "p0"}
    for seed in range(20):
        dev = random_assignment(nm, np.random.default_rng(seed))
        assert set(dev[[0, 1, 2, 4]]) == {0, 1}           # conv on IMC units, both of them used
        assert set(dev[[3, 5]]) == {2}
    same = [random_assignment(nm, np.random.default_rng(7)) for _ in range(2)]
    assert (same[0] == same[1]).all()


def test_heft_by_hand() -> None:
    # Two identical units, free links. Upward ranks: c0 18, c1 14, c2 13, add 11, c4 10, pool 2.
    # c0 -> u0 [0, 4]; c1 -> u0 [4, 7] (tie, first); c2 -> u1 [4, 6]; add -> u0 [7, 8] (tie);
    # c4 -> u0 [8, 16]; pool -> u0 [16, 18].
    time = np.array([[4.0, 3.0, 2.0, 1.0, 8.0, 2.0]]).T
    nm = NodeMapping(fork_problem([("u0", "dpu"), ("u1", "dpu")], time=time))
    devices, start, makespan = heft_schedule(nm)
    assert names(nm, devices) == {"c0": "u0", "c1": "u0", "c2": "u1", "add": "u0", "c4": "u0", "pool": "u0"}
    assert makespan == pytest.approx(18.0)
    assert dict(zip(nm.problem.graph.names, start)) == {"c0": 0, "c1": 4, "c2": 4, "add": 7, "c4": 8, "pool": 16}
    plan, = make_partitioner("heft").solve(nm.problem)     # the plan carries HEFT's order, and its makespan
    assert plan.order == {"u0": ["c0", "c1", "add", "c4", "pool"], "u1": ["c2"]}
    assert plan.metrics.latency_s == pytest.approx(18.0)


def test_heft_keeps_work_local_when_links_are_slow() -> None:
    time = np.array([[4.0, 3.0, 2.0, 1.0, 8.0, 2.0]]).T
    nm = NodeMapping(fork_problem([("u0", "dpu"), ("u1", "dpu")], time=time, latency_s=100.0))
    devices, _, makespan = heft_schedule(nm)
    assert len(set(devices)) == 1 and makespan == pytest.approx(20.0)


def test_heft_plans_report_the_makespan_of_heft_s_own_schedule() -> None:
    """On the zoo: the estimator, following HEFT's order, gives HEFT's makespan up to what textbook
    HEFT leaves out (messages queueing on a link, the input leaving the cluster's source)."""
    for model, cluster in (("resnet18", "imce-12"), ("yolov8n", "jetson-xavier-nx-4")):
        problem = load_problem(model, cluster)
        plan, = make_partitioner("heft").solve(problem)
        assert plan.order and plan.metrics.latency_s >= plan.params["makespan_s"] * (1 - 1e-9)
        assert plan.metrics.latency_s == pytest.approx(plan.params["makespan_s"], rel=0.02)


def test_a_layer_no_device_can_run_is_named() -> None:
    with pytest.raises(PlanError, match="'add'"):
        NodeMapping(fork_problem([("i0", "imc")]))


def test_mappers_decode_to_valid_plans_on_the_paper_models() -> None:
    for model in ("resnet8", "resnet18"):
        problem = load_problem(model, "imce-12")
        for algo in ("lblp", "wb", "rr", "rd", "heft"):
            plan, = make_partitioner(algo).solve(problem)
            check_plan(problem.graph, problem.cluster, plan)
            assert plan.metrics.throughput > 0 and plan.metrics.fits
            kinds = {problem.cluster.device(d).kind for d in plan.assign.values()}
            assert kinds == {"imc", "dpu"}


def brute_force_best(nm: NodeMapping) -> float:
    """The least bottleneck over every feasible mapping that fits (inf if none)."""
    every = np.array(list(itertools.product(range(nm.num_devices), repeat=nm.num_layers)))
    every = every[nm.feasible[np.arange(nm.num_layers)[None, :], every].all(axis=1)]
    batch = nm.evaluator.evaluate(every)
    return float(batch.bottleneck_s[batch.fits].min()) if batch.fits.any() else np.inf


@pytest.mark.parametrize("ports", ["links", "shared"])
@pytest.mark.parametrize("seed", range(60))
def test_milp_matches_brute_force(seed: int, ports: str) -> None:
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=int(rng.integers(2, 7)), n_dev=int(rng.integers(1, 4)))
    pr = replace(pr, cluster=replace(pr.cluster, ports=ports))
    try:
        nm = NodeMapping(pr)
    except PlanError:
        pytest.skip("a layer no device can run (the error is tested elsewhere)")
    best = brute_force_best(nm)
    for every_term in (False, True):
        res = solve_bottleneck(nm, 20.0, model_every_term=every_term)
        if np.isinf(best):
            assert res.devices is None and (res.infeasible or not every_term)
            continue
        assert res.optimal
        got = nm.evaluate(res.devices)
        assert got.fits[0] and got.bottleneck_s[0] == pytest.approx(best, rel=1e-6)
        assert res.lower_bound_s <= best * (1 + 1e-6)


@pytest.mark.parametrize("units,latency", [(TWO_IMC_ONE_DPU, 0.0), (TWO_IMC_ONE_DPU, 3.0),
                                           ([("i0", "imc"), ("p0", "dpu"), ("p1", "dpu")], 0.5)])
def test_map_opt_matches_brute_force_on_a_branching_dag(units, latency) -> None:
    problem = fork_problem(units, latency_s=latency)
    plan, = make_partitioner("map-opt", time_budget_s=5.0).solve(problem)
    nm = NodeMapping(problem)
    assert plan.metrics.bottleneck_s == pytest.approx(brute_force_best(nm), rel=1e-6)
    assert plan.params["optimal"] and plan.params["gap"] == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("cluster", ["imce-4", "imce-6", "imce-14"])
def test_map_opt_reaches_at_least_lblp_rate(cluster: str) -> None:
    problem = load_problem("resnet8", cluster)
    lblp, = make_partitioner("lblp").solve(problem)
    opt, = make_partitioner("map-opt", time_budget_s=3.0, seed=1, verify_inputs=100).solve(problem)
    assert opt.params["lower_bound_s"] <= opt.metrics.bottleneck_s * (1 + 1e-6)
    simulated = {p.algorithm: simulate_plan(problem, p, SimOptions(inputs=100, keep_timeline=False)).throughput
                 for p in (lblp, opt)}
    assert simulated["map-opt"] == pytest.approx(opt.params["simulated_throughput"], rel=1e-12)
    assert simulated["map-opt"] >= simulated["lblp"] * (1 - 1e-12)
    if opt.params["chosen"] == "search":
        assert opt.params["optimal"]      # ResNet-8 (14 layers) is proven within the budget
        assert opt.metrics.throughput >= lblp.metrics.throughput * (1 - 1e-9)


def test_map_opt_rejects_a_bad_budget() -> None:
    with pytest.raises(HetsplitError, match="time_budget_s"):
        make_partitioner("map-opt", time_budget_s=0.0)


@pytest.mark.parametrize("name,imc,dpu", [("imce-12", 8, 4), ("imce-1", 0, 1), ("imce-2", 1, 1),
                                          ("imce-14-10", 10, 4), ("imce-5-0", 0, 5), ("imce-40", 27, 13)])
def test_imce_clusters(name: str, imc: int, dpu: int) -> None:
    from hetsplit.cluster import load_cluster

    cl = load_cluster(name)
    kinds = [d.kind for d in cl.devices]
    assert (kinds.count("imc"), kinds.count("dpu")) == (imc, dpu)
    assert cl.name == name and set(cl.medium_names[0][1:]) <= {"imce-ipi"}


def test_imce_cluster_with_more_imc_units_than_units_is_refused() -> None:
    from hetsplit.cluster import load_cluster
    from hetsplit.errors import ClusterError

    with pytest.raises(ClusterError, match="0 <= k <= N"):
        load_cluster("imce-4-5")


def test_resnet18_on_imce12_is_proven_optimal_for_throughput() -> None:
    """Eight interchangeable IMC units: labelled by their first layer, the MILP closes (issue 24)."""
    nm = NodeMapping(load_problem("resnet18", "imce-12"))
    res = solve_bottleneck(nm, 120.0)
    assert res.optimal and res.exact
    assert nm.evaluate(res.devices).bottleneck_s[0] == pytest.approx(res.lower_bound_s, rel=1e-6)
