"""Pareto fronts of plans: which are not dominated in (bottleneck, energy, ...)."""

from __future__ import annotations

import numpy as np

from hetsplit.plan.types import Plan


def pareto_mask(objectives: np.ndarray) -> np.ndarray:
    """Rows not dominated by any other row; every column is minimized. Duplicates all stay."""
    obj = np.asarray(objectives, dtype=np.float64)
    if obj.ndim != 2:
        raise ValueError("objectives must be N x K")
    le = (obj[:, None, :] <= obj[None, :, :]).all(axis=2)   # le[i, j]: i <= j everywhere
    lt = (obj[:, None, :] < obj[None, :, :]).any(axis=2)    # lt[i, j]: i < j somewhere
    dominated = (le & lt).any(axis=0)                        # some i dominates j
    return ~dominated


def plan_objectives(plans: list[Plan]) -> np.ndarray:
    """(bottleneck seconds, energy joules) of each plan, for the default front; infeasible plans are inf."""
    rows = []
    for p in plans:
        m = p.metrics
        if m is None or not m.fits:
            rows.append((np.inf, np.inf))
        else:
            rows.append((m.bottleneck_s, m.energy_j))
    return np.array(rows, dtype=np.float64).reshape(-1, 2)


def mark_pareto(plans: list[Plan]) -> list[Plan]:
    """Set ``plan.pareto`` on each plan (over bottleneck and energy) and return the list."""
    if not plans:
        return plans
    obj = plan_objectives(plans)
    mask = pareto_mask(obj) & np.isfinite(obj).all(axis=1)
    for p, on in zip(plans, mask):
        p.pareto = bool(on)
    return plans
