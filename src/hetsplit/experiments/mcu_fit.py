"""Fit the Siracusa parameters no document gives (``mcu_paper.FITTED_PARAMS``) to their four figures.

Each fitted parameter runs over a grid of two significant digits; coordinate descent (one parameter
at a time over its whole grid, the others held, until a sweep changes nothing) minimizes the sum over
``mcu_paper.FIT_FIGURES`` of ln(ours / paper)^2. Every other parameter is the preset's (documented, or
an assumption stated there). Ours come from the same estimator ``hetsplit reproduce mcu`` uses
(``experiments.mcu.run_workload``). ``bench/mcu_fit.py`` runs it and prints what it used and found.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from hetsplit.experiments.mcu import WORKLOAD, Params, run_workload, siracusa
from hetsplit.experiments.mcu_paper import FIGURE, FIT_FIGURES, FITTED_PARAMS, Figure, figure_value

GRIDS: dict[str, np.ndarray] = {
    "gemm_efficiency": np.round(np.arange(0.10, 1.0001, 0.01), 2),
    "gemv_macs_per_cycle": np.round(np.arange(0.5, 16.01, 0.1), 1),
    "l3_bandwidth": np.round(np.arange(0.10, 4.0001, 0.01), 2) * 1e9,
    "l3_stream_efficiency": np.round(np.arange(0.05, 1.0001, 0.01), 2),
}
MAX_SWEEPS = 10


@dataclass
class FitResult:
    """The fitted values (SI), ours for each fit figure with them, and how many evaluations it took."""

    params: dict[str, float]
    figures: list[tuple[Figure, float]]
    evaluations: int
    sweeps: int
    start: dict[str, float] = field(default_factory=dict)

    @property
    def worst_ratio(self) -> float:
        """The largest of ours / paper and paper / ours over the fit figures."""
        return max(max(o / f.paper, f.paper / o) for f, o in self.figures)


def preset_params() -> dict[str, float]:
    """The fitted parameters as the built-in siracusa preset holds them (SI units)."""
    chip = siracusa(1).devices[0]
    return {name: float(chip.params[name]) for name in FITTED_PARAMS}


def fit_figures(params: Params | None = None) -> list[tuple[Figure, float]]:
    """Ours for every fit figure with ``params`` over the preset."""
    figs = [FIGURE[k] for k in FIT_FIGURES]
    out = []
    for workload in dict.fromkeys(f.workload for f in figs):
        mine = [f for f in figs if f.workload == workload]
        counts = tuple(sorted({1, *(f.chips for f in mine)}))
        points = {p.chips: p for p in run_workload(WORKLOAD[workload], counts, params)}
        out += [(f, figure_value(f, points[f.chips])) for f in mine]
    return out


def objective(figures: list[tuple[Figure, float]]) -> float:
    """Sum of ln(ours / paper)^2."""
    return sum(math.log(o / f.paper) ** 2 for f, o in figures)


def fit(start: Params | None = None, grids: dict[str, np.ndarray] = GRIDS) -> FitResult:
    """Coordinate descent over ``grids`` from ``start`` (default: each grid's middle value)."""
    params = {k: float(start[k]) if start else float(g[len(g) // 2]) for k, g in grids.items()}
    first = dict(params)
    evaluations = 0
    for sweep in range(1, MAX_SWEEPS + 1):
        changed = False
        for name, grid in grids.items():
            scores = []
            for v in grid:
                scores.append(objective(fit_figures({**params, name: float(v)})))
                evaluations += 1
            value = float(grid[int(np.argmin(scores))])
            changed |= value != params[name]
            params[name] = value
        if not changed:
            break
    return FitResult(params, fit_figures(params), evaluations, sweep, first)


def is_local_optimum(params: Params, grids: dict[str, np.ndarray] = GRIDS) -> list[str]:
    """The fitted parameters one grid step from which the objective is lower (empty: none is)."""
    here = objective(fit_figures(params))
    worse = []
    for name, grid in grids.items():
        i = int(np.argmin(abs(grid - params[name])))
        for j in (i - 1, i + 1):
            if 0 <= j < len(grid) and objective(fit_figures({**params, name: float(grid[j])})) < here - 1e-12:
                worse.append(f"{name} {params[name]:g} -> {grid[j]:g}")
    return worse
