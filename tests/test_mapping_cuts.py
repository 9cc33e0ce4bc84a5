"""Mapping solvers with nonzero cut costs (segment calls, boundary bytes, unfused layers) against brute
force over every whole-layer mapping: the exact ones find the estimator's optimum."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from _cut_costs import with_cut_costs, with_message_costs
from _instances import random_problem
from hetsplit.errors import PlanError
from hetsplit.search import make_partitioner
from hetsplit.search.mapping_milp import solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping


def every_mapping(nm: NodeMapping) -> np.ndarray:
    every = np.array(list(itertools.product(range(nm.num_devices), repeat=nm.num_layers)))
    return every[nm.feasible[np.arange(nm.num_layers)[None, :], every].all(axis=1)]


def instance(seed: int, scale: float, messages: bool = False, **kw) -> NodeMapping:
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=int(rng.integers(4, 8)), n_dev=int(rng.integers(2, 4)), **kw)
    try:
        pr = with_cut_costs(pr, rng, scale)
        return NodeMapping(with_message_costs(pr, rng, scale) if messages else pr)
    except PlanError:
        pytest.skip("a layer no device can run")


@pytest.mark.parametrize("seed, messages", [(s, False) for s in range(30)] + [(s, True) for s in range(30, 60)])
def test_the_throughput_milp_finds_the_least_charged_bottleneck(seed: int, messages: bool) -> None:
    """Cut costs of the order of a layer (seeds < 15, 30..44) or ten times that: the MILP's optimum is the
    least bottleneck the closed form gives any mapping, segments charged by the rule and, with
    ``messages``, every message's two ends (``cluster.links``), sources and sinks drawn from the seed."""
    nm = instance(seed, 1.0 if seed % 30 < 15 else 10.0, messages, inf_prob=0.0, mem_slack=100.0)
    batch = nm.evaluator.evaluate(every_mapping(nm), latency=False)
    best = float(batch.bottleneck_s[batch.fits].min())
    for every_term in (True, False):
        res = solve_bottleneck(nm, 60.0, model_every_term=every_term)
        assert res.lower_bound_s <= best * (1 + 1e-6)
        if res.devices is None:       # a quick bound met by no mapping: only when terms are left out
            assert not every_term
            continue
        assert res.optimal and res.exact
        got = nm.evaluate(res.devices)
        assert got.bottleneck_s[0] == pytest.approx(best, rel=1e-6)
        assert res.lower_bound_s >= best * (1 - 1e-5)


@pytest.mark.parametrize("bytes_cost", [True, False])
@pytest.mark.parametrize("seed", range(6))
def test_the_latency_search_bounds_and_finds_the_least_charged_latency(seed: int, bytes_cost: bool) -> None:
    """With cut costs the latency model's bound holds for every mapping and run order (brute force, the
    estimator's figure, segments charged), the plan is never better than the brute-force optimum, and a
    proven plan is that optimum up to the model's rounding."""
    from test_mapping_objectives import brute_force_latency

    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=4, n_dev=int(rng.integers(2, 4)), inf_prob=0.0, mem_slack=50.0)
    pr = with_cut_costs(pr, rng)
    if not bytes_cost:
        pr = replace(pr, costs=replace(pr.costs, segment={t: replace(c, byte_s=0.0, host_byte_s=0.0)
                                                          for t, c in pr.costs.segment.items()}))
    nm = NodeMapping(pr)
    best = brute_force_latency(nm)
    plan, = make_partitioner("map-opt", objective="latency", time_budget_s=20.0).solve(pr)
    par = plan.params
    assert 0 < par["lower_bound_s"] <= best * (1 + 1e-9)
    assert plan.metrics.latency_s >= best * (1 - 1e-9)
    if par["optimal"]:
        assert plan.metrics.latency_s <= best + par["rounding_s"] + 1e-12
    if not bytes_cost:
        assert par["optimal"], "calls and unfused extras only: the model is exact up to its rounding"


@pytest.mark.parametrize("encoding,splits,zeros", [("naive", 0, 0.0), ("advanced", 2, 0.5), ("spe", 0, 0.0)])
def test_the_hybrid_kernel_charges_what_the_closed_form_charges_its_plans(encoding, splits, zeros) -> None:
    """The hybrid encodings' compiled evaluation (per-plan task costs, empty slots) with cut costs: each
    plan's figures are the closed form's on the plan it decodes to."""
    from test_hybrid_encodings import assert_batch_matches_plans, random_population
    from hetsplit.search.encodings import make_encoding
    from hetsplit.workflow import load_problem

    rng = np.random.default_rng(4)
    problem = with_cut_costs(load_problem("resnet8", "jetson-xavier-nx-4"), rng)
    enc = make_encoding(problem, encoding, splits or 2)
    x = random_population(enc, rng, 16, zeros)
    x[0] = 0
    assert_batch_matches_plans(problem, enc, x)
