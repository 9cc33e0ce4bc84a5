"""map-opt's objectives (throughput, latency, energy) and map-pareto against brute force on tiny
random instances; bad input named."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from _fork_dag import fork_problem
from _instances import random_problem
from hetsplit.errors import HetsplitError, PlanError
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.pareto import MAPPING_FRONT, pareto_mask, plan_objectives
from hetsplit.plan.types import Plan
from hetsplit.search import make_partitioner
from hetsplit.search.list_schedulers import LIST_SCHEDULERS
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.workflow import load_problem


def tiny(seed: int, ports: str = "links"):
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=int(rng.integers(2, 5)), n_dev=int(rng.integers(2, 4)), mem_slack=50.0)
    return replace(pr, cluster=replace(pr.cluster, ports=ports))


def linear_extensions(preds: list[list[int]]) -> list[list[int]]:
    """Every topological order of the layers."""
    out: list[list[int]] = []

    def grow(done: list[int]) -> None:
        if len(done) == len(preds):
            out.append(list(done))
            return
        for i in range(len(preds)):
            if i not in done and all(p in done for p in preds[i]):
                grow(done + [i])

    grow([])
    return out


def mappings(nm: NodeMapping):
    every = itertools.product(*[np.flatnonzero(nm.feasible[i]) for i in range(nm.num_layers)])
    return [np.array(m, dtype=np.int64) for m in every]


def brute_force_latency(nm: NodeMapping) -> float:
    """The least estimator latency over every mapping and every run order of its devices."""
    g, names = nm.problem.graph, nm.problem.cluster.names
    orders = linear_extensions([[int(p) for p in ps if p >= 0] for ps in g.predecessors])
    best = np.inf
    for dev in mappings(nm):
        for order in orders:
            plan = Plan(g.name, nm.problem.cluster.name, "bf", assign={g.names[i]: names[d] for i, d in enumerate(dev)},
                        order={names[d]: [g.names[i] for i in order if dev[i] == d] for d in set(dev.tolist())})
            m = evaluate(nm.problem, plan)
            if m.fits:
                best = min(best, m.latency_s)
    return best


def skip_unmappable(pr) -> NodeMapping:
    try:
        return NodeMapping(pr)
    except PlanError:
        pytest.skip("a layer no device can run (the error is tested elsewhere)")


@pytest.mark.parametrize("ports", ["links", "shared"])
@pytest.mark.parametrize("seed", range(12))
def test_latency_against_brute_force(seed: int, ports: str) -> None:
    """The bound holds for every mapping and run order; when the model proves its optimum, the plan's
    estimator latency is the brute-force optimum up to the model's rounding."""
    pr = tiny(seed, ports)
    nm = skip_unmappable(pr)
    best = brute_force_latency(nm)
    plan, = make_partitioner("map-opt", objective="latency", time_budget_s=20.0).solve(pr)
    par = plan.params
    assert par["lower_bound_s"] <= best * (1 + 1e-9)
    assert plan.metrics.latency_s >= best * (1 - 1e-9) and plan.metrics.fits
    if par["optimal"]:
        assert plan.metrics.latency_s <= best + par["rounding_s"] + 1e-12
    lists = [nm.plan(s.device, "x", start_order=s.start_order()).metrics.latency_s
             for s in (f(nm) for f in LIST_SCHEDULERS.values())]
    assert plan.metrics.latency_s <= min(lists) * (1 + 1e-12)      # never worse than a list scheduler


def test_latency_proves_most_tiny_instances() -> None:
    proven = 0
    for seed in range(12):
        pr = tiny(seed)
        try:
            NodeMapping(pr)
        except PlanError:
            proven += 1
            continue
        plan, = make_partitioner("map-opt", objective="latency", time_budget_s=20.0).solve(pr)
        proven += plan.params["optimal"]
    assert proven >= 10


@pytest.mark.parametrize("seed", range(20))
def test_energy_matches_brute_force(seed: int) -> None:
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=int(rng.integers(2, 6)), n_dev=int(rng.integers(1, 4)))
    nm = skip_unmappable(pr)
    every = np.array(mappings(nm))
    batch = nm.evaluator.evaluate(every)
    if not batch.fits.any():
        with pytest.raises(HetsplitError, match="fits memory"):
            make_partitioner("map-opt", objective="energy", time_budget_s=20.0).solve(pr)
        return
    plan, = make_partitioner("map-opt", objective="energy", time_budget_s=20.0).solve(pr)
    assert plan.metrics.energy_j == pytest.approx(batch.energy_j[batch.fits].min(), rel=1e-6)
    assert plan.params["optimal"] and plan.params["lower_bound_j"] <= plan.metrics.energy_j * (1 + 1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_pareto_set_is_the_front_of_what_it_found_and_holds_each_optimum(seed: int) -> None:
    pr = tiny(seed)
    nm = skip_unmappable(pr)
    plans = make_partitioner("map-pareto", time_budget_s=6.0, pop_size=20, generations=10).solve(pr)
    f = plan_objectives(plans, MAPPING_FRONT)
    assert all(p.pareto and p.metrics.fits for p in plans) and pareto_mask(f).all()
    every = np.array(mappings(nm))
    batch = nm.evaluator.evaluate(every)
    fits = batch.fits
    assert f[:, 0].min() == pytest.approx(batch.bottleneck_s[fits].min(), rel=1e-6)   # the optima are corners
    assert f[:, 2].min() == pytest.approx(batch.energy_j[fits].min(), rel=1e-6)
    assert f[:, 1].min() <= brute_force_latency(nm) + max(p.params.get("rounding_s", 0) for p in plans) + 1e-9 or \
        f[:, 1].min() <= batch.latency_s[fits].min() * (1 + 1e-9)


def test_pareto_plans_are_marked_over_three_figures_in_the_plan_set() -> None:
    from hetsplit.workflow import PlanRequest, search_plans

    found = search_plans(load_problem("resnet8", "imce-4"),
                         PlanRequest(algorithms=("map-pareto", "heft"), time_budget_s=4.0))
    assert found.front == MAPPING_FRONT
    f = plan_objectives(found.plans, MAPPING_FRONT)
    assert [p.pareto for p in found.plans] == list(pareto_mask(f) & np.isfinite(f).all(axis=1))


def test_no_mapping_fits_names_the_device_and_how_far_over() -> None:
    pr = fork_problem([("i0", "imc"), ("p0", "dpu")])
    small = replace(pr.cluster, devices=[replace(d, memory_bytes=5.0) for d in pr.cluster.devices])
    pr = replace(pr, cluster=small)
    for objective in ("throughput", "latency", "energy"):
        with pytest.raises(HetsplitError, match=r"layer 'c0' needs 10 B on 'i0'.*5 B over"):
            make_partitioner("map-opt", objective=objective).solve(pr)


@pytest.mark.parametrize("options,says", [({"objective": "speed"}, "unknown objective 'speed'"),
                                          ({"time_budget_s": 0.0}, "positive number"),
                                          ({"time_budget_s": -3.0}, "positive number")])
def test_bad_map_opt_options_are_named(options, says) -> None:
    with pytest.raises(HetsplitError, match=says):
        make_partitioner("map-opt", **options)


@pytest.mark.parametrize("argv,says", [(["--objective", "speed"], "invalid choice: 'speed'"),
                                       (["--time-budget", "0"], "--time-budget 0: give a positive"),
                                       (["--time-budget", "-2"], "--time-budget -2: give a positive")])
def test_bad_objective_or_budget_exit_2(argv, says, capsys) -> None:
    from hetsplit.cli.main import main

    with pytest.raises(SystemExit) if argv[0] == "--objective" else _no_raise() as caught:
        code = main(["plan", "resnet8", "--cluster", "imce-4", "--algo", "map-opt", *argv])
    code = caught.value.code if argv[0] == "--objective" else code
    assert code == 2 and says in capsys.readouterr().err


def test_a_missing_solver_names_its_package(monkeypatch) -> None:
    import builtins

    real = builtins.__import__

    def no_ortools(name, *args, **kwargs):
        if name.startswith("ortools"):
            raise ImportError("No module named 'ortools'")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ortools)
    with pytest.raises(HetsplitError, match="pip install ortools"):
        make_partitioner("map-opt", objective="latency", time_budget_s=2.0).solve(load_problem("resnet8", "imce-4"))


class _no_raise:
    value = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
