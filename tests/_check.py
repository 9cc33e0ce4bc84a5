"""Shared assertions for solver-vs-oracle tests."""

from __future__ import annotations

import numpy as np

from hetsplit.errors import InfeasibleError
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.types import Plan
from hetsplit.search import PipelineConstraints
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
