"""Calibrating the thesis's MAC / frequency model (seed 003, section 4.3) the way the thesis does.

- time (eq. 4.7): every measured layer that takes time and has work gives a coefficient
  ops / (frequency x measured time); a kind's coefficient is their mean (the thesis) or median
  (``MacFitOptions.aggregate``). Winograd and im2col convolutions are separate kinds; ``conv`` (all
  convolutions) and ``default`` (every layer) are the fallbacks for kinds a new model brings.
  Measured times are ``Measured.target_s`` (profiled kernel times scaled to the whole-model time), the
  same targets hetsplit's own calibration fits.
- energy (eq. 4.10): per training model, its whole-model energy / its predicted time; averaged the same
  way. Only profiles whose energy was measured by a meter count unless ``energy_from_estimates``;
  with none the coefficient is None and ``energy_note`` says why.
- memory (eq. 4.9): coefficient and bias by least squares over (expected, measured) byte pairs the
  caller gives (``fit_memory``); none given: coefficient 1, bias 0, and ``memory_note`` says so.

The frequency can be any constant (2 GHz where a profile states none): the coefficients absorb it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

import numpy as np

from hetsplit.costs.calibration import Measured
from hetsplit.costs.models.mac_frequency import CONV_FALLBACK, DEFAULT, IM2COL, WINOGRAD, graph_kinds_ops, layer_times
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph

DEFAULT_FREQUENCY_HZ = 2.0e9


@dataclass(frozen=True)
class MacFitOptions:
    """How the thesis model is calibrated."""

    aggregate: Literal["mean", "median"] = "mean"   # the thesis averages per-layer coefficients
    energy_from_estimates: bool = False             # also use profiles' assumed power figures as energy


@dataclass
class MacFrequencyFit:
    """A calibrated thesis model for one platform."""

    frequency_hz: float
    layer_coefficients: dict[str, float]          # kind -> ops per cycle
    layers: dict[str, int]                        # calibrated layers per kind
    energy_coefficient_w: float | None
    energy_note: str
    memory_coefficient: float = 1.0
    memory_bias_bytes: float = 0.0
    memory_note: str = ""
    trained_on: list[str] = field(default_factory=list)

    def predict(self, graph: Graph) -> np.ndarray:
        return predict_times(self, graph)


def predict_times(fit: MacFrequencyFit, graph: Graph) -> np.ndarray:
    """Seconds per layer of ``graph`` under the fitted model (the device model's own formula)."""
    return layer_times(graph, fit.frequency_hz, fit.layer_coefficients, "mac-frequency fit")


def _aggregate(values: Sequence[float], how: str) -> float:
    if how == "mean":
        return float(np.mean(values))
    if how == "median":
        return float(np.median(values))
    raise ProfileError(f"MacFitOptions.aggregate must be 'mean' or 'median', got {how!r}")


def _measured_energy_j(m: Measured, options: MacFitOptions) -> float | None:
    """A model's whole-model energy: metered (``measured_from_profile`` names it 'measured energy ...')."""
    if not m.power_w or not (options.energy_from_estimates or m.power_source.startswith("measured energy")):
        return None
    return m.power_w * m.whole_s


def fit_memory(expected_bytes: Sequence[float], measured_bytes: Sequence[float]) -> tuple[float, float]:
    """(coefficient, bias_bytes) of eq. 4.9 by least squares: measured ~= expected x coefficient + bias."""
    x, y = np.asarray(expected_bytes, dtype=np.float64), np.asarray(measured_bytes, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise ProfileError(f"memory fit: expected and measured bytes must be two lists of equal length, "
                           f"got {x.shape} and {y.shape}")
    if len(np.unique(x)) < 2:
        raise ProfileError("memory fit: needs (expected, measured) pairs with at least two different expected "
                           "sizes (the thesis runs a conv, an FC and a ReLU layer apart); add pairs")
    (coef, bias), *_ = np.linalg.lstsq(np.stack([x, np.ones_like(x)], axis=1), y, rcond=None)
    return float(coef), float(bias)


def fit_mac_frequency(models: list[Measured], frequency_hz: float = DEFAULT_FREQUENCY_HZ,
                      options: MacFitOptions | None = None,
                      memory_pairs: Sequence[tuple[float, float]] = ()) -> MacFrequencyFit:
    """Per-kind coefficients from the training models' measured layers, energy and memory (module docstring)."""
    opts = options or MacFitOptions()
    if not models:
        raise ProfileError("the mac-frequency fit needs at least one measured profile")
    if not frequency_hz > 0:
        raise ProfileError(f"the mac-frequency fit needs a frequency > 0 Hz, got {frequency_hz}")
    per_kind: dict[str, list[float]] = {}
    for m in models:
        kinds, ops = graph_kinds_ops(m.graph)
        t = m.target_s
        for kind, o, ti in zip(kinds, ops, t):
            if o > 0 and ti > 0:
                per_kind.setdefault(kind, []).append(o / (frequency_hz * ti))
    if not per_kind:
        raise ProfileError(f"the mac-frequency fit found no layer with work and measured time in "
                           f"{[m.name for m in models]}; calibrate measured profiles")
    coefficients = {k: _aggregate(v, opts.aggregate) for k, v in sorted(per_kind.items())}
    convs = per_kind.get(WINOGRAD, []) + per_kind.get(IM2COL, [])
    if convs:
        coefficients[CONV_FALLBACK] = _aggregate(convs, opts.aggregate)
    coefficients[DEFAULT] = _aggregate([c for v in per_kind.values() for c in v], opts.aggregate)
    fitted = MacFrequencyFit(frequency_hz, coefficients, {k: len(v) for k, v in sorted(per_kind.items())}, None, "",
                             trained_on=[m.path or m.name for m in models])
    energy = [(e, float(predict_times(fitted, m.graph).sum())) for m in models
              if (e := _measured_energy_j(m, opts)) is not None]
    ratios = [e / t for e, t in energy if t > 0]        # eq. 4.10 solved per model: energy / predicted time
    if ratios:
        fitted.energy_coefficient_w = _aggregate(ratios, opts.aggregate)
        fitted.energy_note = f"from {len(ratios)} profile(s) with {'energy' if opts.energy_from_estimates else 'metered energy'}"
    else:
        fitted.energy_note = ("no training profile has metered energy (estimated power figures are ignored; "
                              "MacFitOptions.energy_from_estimates uses them): energy coefficient not calibrated")
    if memory_pairs:
        fitted.memory_coefficient, fitted.memory_bias_bytes = fit_memory([p[0] for p in memory_pairs],
                                                                         [p[1] for p in memory_pairs])
        fitted.memory_note = f"least squares over {len(memory_pairs)} (expected, measured) pairs"
    else:
        fitted.memory_note = "no (expected, measured) memory pairs given: coefficient 1, bias 0 (not calibrated)"
    return fitted


def to_device_params(fit: MacFrequencyFit, energy_coefficient_w: float | None = None) -> dict[str, Any]:
    """The ``params`` of a ``model: mac-frequency`` device; ``energy_coefficient_w`` replaces the fit's."""
    energy = fit.energy_coefficient_w if energy_coefficient_w is None else energy_coefficient_w
    if energy is None:
        raise ProfileError(f"to_device_params: the fit has no energy coefficient ({fit.energy_note}); "
                           "pass energy_coefficient_w (W) or calibrate with profiles measured with an energy meter")
    return {"frequency_hz": fit.frequency_hz, "layer_coefficients": dict(fit.layer_coefficients),
            "energy_coefficient_w": float(energy), "memory_coefficient": fit.memory_coefficient,
            "memory_bias_bytes": fit.memory_bias_bytes}
