"""The thesis's MAC / frequency model against hetsplit's calibrated model on held-out models.

Leave one out: each scored model is predicted by both models fitted on all the others (plus
``extra``: fit data that is never scored). Both are scored by ``calibration.evaluate``, so the numbers
mean the same: whole-model error against the measured time, per-layer MAPE over the layers that take
time, and the share of those within +-10%. The summary takes the median over held-out models.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from hetsplit.costs.calibration import Accuracy, Fit, Measured, evaluate, fit
from hetsplit.costs.mac_frequency_fit import DEFAULT_FREQUENCY_HZ, MacFitOptions, fit_mac_frequency
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph

THESIS, HETSPLIT = "thesis", "hetsplit"


class Predictor(Protocol):
    """A fitted time model: per-layer seconds of a graph (what ``calibration.evaluate`` reads)."""

    def predict(self, graph: Graph) -> np.ndarray: ...


@dataclass(frozen=True)
class ComparisonOptions:
    """How the two models are fitted."""

    frequency_hz: float = DEFAULT_FREQUENCY_HZ        # any constant: the thesis coefficients absorb it
    thesis: MacFitOptions = field(default_factory=MacFitOptions)


@dataclass(frozen=True)
class ModelAccuracyRow:
    """One held-out model predicted by both fits."""

    held_out: str
    thesis: Accuracy
    hetsplit: Accuracy


@dataclass(frozen=True)
class AccuracySummary:
    """One time model over every held-out model: medians, and the worst whole-model error."""

    model: str
    held_out: int
    median_abs_whole_error: float
    median_whole_error: float
    median_layer_mape: float
    median_within_10: float
    worst_abs_whole_error: float


def _score(predictor: Predictor, m: Measured) -> Accuracy:
    # evaluate only calls .predict(graph): one scoring for both models.
    return evaluate(predictor, m)  # type: ignore[arg-type]


def compare_on_held_out(measured: list[Measured], extra: Sequence[Measured] = (),
                        options: ComparisonOptions | None = None) -> list[ModelAccuracyRow]:
    """For each model of ``measured``: fit both models on the rest + ``extra``, score both on it."""
    opts = options or ComparisonOptions()
    if len(measured) + len(extra) < 2:
        raise ProfileError("compare_on_held_out needs at least two measured models (one to fit, one to hold out)")
    rows = []
    for k, m in enumerate(measured):
        train = measured[:k] + measured[k + 1:] + list(extra)
        thesis = fit_mac_frequency(train, opts.frequency_hz, opts.thesis)
        ours: Fit = fit(train)
        rows.append(ModelAccuracyRow(m.name, _score(thesis, m), _score(ours, m)))
    return rows


def summarize(rows: list[ModelAccuracyRow]) -> dict[str, AccuracySummary]:
    """Median (and worst) accuracy per time model, keyed ``thesis`` / ``hetsplit``."""
    if not rows:
        raise ProfileError("summarize: no rows (compare_on_held_out returned none)")
    out = {}
    for name in (THESIS, HETSPLIT):
        acc = [getattr(r, name) for r in rows]
        errors = [a.whole_error for a in acc]
        out[name] = AccuracySummary(name, len(acc), statistics.median(abs(e) for e in errors), statistics.median(errors),
                                    statistics.median(a.layer_mape for a in acc),
                                    statistics.median(a.within_10 for a in acc), max(abs(e) for e in errors))
    return out
