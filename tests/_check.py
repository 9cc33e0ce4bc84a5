"""Shared assertions for solver-vs-oracle tests."""

from __future__ import annotations

import numpy as np
import pytest

from hetsplit.errors import InfeasibleError
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.types import Plan
from hetsplit.search import PipelineConstraints, make_partitioner
from hetsplit.search.oracle import brute_force

RTOL = 1e-9


def assert_evaluator_metrics(problem, plans: list[Plan]) -> None:
    """Every plan carries exactly the metrics the evaluator computes for it, and fits memory."""
    for p in plans:
        assert p.metrics == evaluate(problem, p)
        assert p.metrics.fits
        devs = p.devices
        assert len(devs) == len(set(devs)), "a device runs at most one stage"


def seeds(n: int, start: int = 0) -> list[int]:
    return list(range(start, start + n))


def close(a: float, b: float) -> bool:
    return bool(np.isclose(a, b, rtol=RTOL, atol=0.0))


def oracle_or_none(p, c: PipelineConstraints = PipelineConstraints()):
    """The brute-force oracle of an instance, or None when no plan is feasible."""
    try:
        return brute_force(p, c)
    except InfeasibleError:
        return None


def assert_solvers_match_oracle(p, c: PipelineConstraints = PipelineConstraints()) -> None:
    """``exact`` (with and without its tie-break) and ``pareto`` equal the brute-force oracle under ``c``."""
    o = oracle_or_none(p, c)
    if o is None:
        for algo in ("exact", "pareto"):
            with pytest.raises(InfeasibleError):
                make_partitioner(algo, constraints=c).solve(p)
        return
    (plan,) = make_partitioner("exact", constraints=c).solve(p)
    assert_evaluator_metrics(p, [plan])
    best = o.min_bottleneck()
    assert close(plan.metrics.bottleneck_s, best)
    m = o.metrics
    assert close(plan.metrics.energy_j, m.energy_j[m.bottleneck_s <= best * (1 + 1e-9)].min())
    (bare,) = make_partitioner("exact", constraints=c, tie_break_budget_bytes=0).solve(p)  # the search's own plan
    assert_evaluator_metrics(p, [bare])
    assert close(bare.metrics.bottleneck_s, best)
    front = make_partitioner("pareto", constraints=c).solve(p)
    assert_evaluator_metrics(p, front)
    got = np.array(sorted((f.metrics.bottleneck_s, f.metrics.energy_j) for f in front))
    want = o.front()
    assert got.shape == want.shape
    assert np.allclose(got, want, rtol=1e-9, atol=0)
