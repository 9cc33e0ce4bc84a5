"""Mapping solvers with nonzero cut costs (segment calls, boundary bytes, unfused layers) against brute
force over every whole-layer mapping: the exact ones find the estimator's optimum."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from _cut_costs import with_cut_costs
from _instances import random_problem
from hetsplit.errors import PlanError
from hetsplit.search.mapping_milp import solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping


def every_mapping(nm: NodeMapping) -> np.ndarray:
    every = np.array(list(itertools.product(range(nm.num_devices), repeat=nm.num_layers)))
    return every[nm.feasible[np.arange(nm.num_layers)[None, :], every].all(axis=1)]


def instance(seed: int, scale: float, **kw) -> NodeMapping:
    rng = np.random.default_rng(seed)
    pr = random_problem(seed, n_layers=int(rng.integers(4, 8)), n_dev=int(rng.integers(2, 4)), **kw)
    try:
        return NodeMapping(with_cut_costs(pr, rng, scale))
    except PlanError:
        pytest.skip("a layer no device can run")


@pytest.mark.parametrize("seed", range(30))
def test_the_throughput_milp_finds_the_least_charged_bottleneck(seed: int) -> None:
    """Cut costs of the order of a layer (seeds < 15) or ten times that: the MILP's optimum is the least
    bottleneck the closed form gives any mapping, segments charged by the rule."""
    nm = instance(seed, 1.0 if seed < 15 else 10.0, inf_prob=0.0, mem_slack=100.0)
    batch = nm.evaluator.evaluate(every_mapping(nm), latency=False)
    best = float(batch.bottleneck_s[batch.fits].min())
    res = solve_bottleneck(nm, 60.0, model_every_term=True)
    assert res.optimal and res.exact
    got = nm.evaluate(res.devices)
    assert got.bottleneck_s[0] == pytest.approx(best, rel=1e-6)
    assert res.lower_bound_s <= best * (1 + 1e-6) and res.lower_bound_s >= best * (1 - 1e-5)
