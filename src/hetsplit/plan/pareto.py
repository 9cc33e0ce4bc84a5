"""Pareto fronts of plans: which are not dominated in (bottleneck, energy) or another set of figures."""

from __future__ import annotations

from typing import Callable

import numpy as np

from hetsplit.plan.types import Metrics, Plan

# what a front may be over: a label and the figure (minimized) of a plan's metrics
FRONT_FIGURES: dict[str, tuple[str, Callable[[Metrics], float]]] = {
    "throughput": ("bottleneck time", lambda m: m.bottleneck_s),
    "latency": ("latency", lambda m: m.latency_s),
    "energy": ("energy per inference", lambda m: m.energy_j),
}
DEFAULT_FRONT = ("throughput", "energy")
MAPPING_FRONT = ("throughput", "latency", "energy")   # node mappings' fronts (map-pareto)


def pareto_mask(objectives: np.ndarray) -> np.ndarray:
    """Rows not dominated by any other row; every column is minimized. Duplicates all stay."""
    obj = np.asarray(objectives, dtype=np.float64)
    if obj.ndim != 2:
        raise ValueError("objectives must be N x K")
    le = (obj[:, None, :] <= obj[None, :, :]).all(axis=2)   # le[i, j]: i <= j everywhere
    lt = (obj[:, None, :] < obj[None, :, :]).any(axis=2)    # lt[i, j]: i < j somewhere
    dominated = (le & lt).any(axis=0)                        # some i dominates j
    return np.asarray(~dominated)


def front_label(front: tuple[str, ...] = DEFAULT_FRONT) -> str:
    """"(bottleneck time, energy per inference)": what a front is over, in words."""
    return "(" + ", ".join(FRONT_FIGURES[f][0] for f in front) + ")"


def plan_objectives(plans: list[Plan], front: tuple[str, ...] = DEFAULT_FRONT) -> np.ndarray:
    """The ``front`` figures of each plan (default: bottleneck seconds, energy joules); infeasible plans are inf."""
    rows = []
    for p in plans:
        m = p.metrics
        rows.append([np.inf] * len(front) if m is None or not m.fits else [FRONT_FIGURES[f][1](m) for f in front])
    return np.array(rows, dtype=np.float64).reshape(-1, len(front))


def mark_pareto(plans: list[Plan], front: tuple[str, ...] = DEFAULT_FRONT) -> list[Plan]:
    """Set ``plan.pareto`` on each plan (over the ``front`` figures) and return the list."""
    if not plans:
        return plans
    obj = plan_objectives(plans, front)
    mask = pareto_mask(obj) & np.isfinite(obj).all(axis=1)
    for p, on in zip(plans, mask):
        p.pareto = bool(on)
    return plans
