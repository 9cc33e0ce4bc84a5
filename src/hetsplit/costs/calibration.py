"""Fit a device's per-class time model to measured profiles, predict held-out models, report accuracy.

``fit`` solves a non-negative least-squares problem over the layers of the training profiles:

  t_layer ~= per_mac_s[c] x MACs + per_byte_s[c] x (in + out bytes) + per_param_byte_s[c] x parameter bytes
             + fixed_s[c]                                  (c = layer class)
             + sum_k term_s[k] x term_k                   (shared terms: streamed bytes, activation and softmax elements, softmax rows)

Rows are weighted by 1 / max(t, floor) so the fit minimises *relative* error (a 20 us layer matters
as much as a 20 ms one); optionally (``whole_weight`` > 0) each training model adds one row for its
whole-model sum. On this machine's CPU the per-layer rows alone predicted held-out models best. Layer targets are the profiled kernel
times scaled to sum to the measured whole-model time (onnxruntime's profiler adds its own overhead
per node; the scale puts the framework's work between kernels back into the layers). Layers that
onnxruntime fuses away (0 s) stay in the fit, at the floor weight, so their class learns ~0.

``evaluate`` compares predictions with a measured profile: whole-model error, per-layer MAPE over the
layers that take time, the share of those within +-10%, and the time-weighted layer error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import nnls

from hetsplit.costs.models.calibrated import CLASS_RULES, NCOEF, TERMS, layer_classes, layer_features, predict, term_features
from hetsplit.costs.profile import Profile, load_profile
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph

DEFAULT = "default"


@dataclass
class Measured:
    """One model's measured per-layer times on one device type, with its full graph."""

    name: str
    graph: Graph
    layer_s: np.ndarray          # profiled kernel time per layer
    whole_s: float               # measured whole-model time (profiler off)
    power_w: float | None = None
    power_source: str = ""
    path: str = ""

    @property
    def target_s(self) -> np.ndarray:
        """Layer times scaled to sum to the whole-model time."""
        total = float(self.layer_s.sum())
        return self.layer_s * (self.whole_s / total) if total > 0 else self.layer_s


def measured_from_profile(profile: Profile, device_type: str | None = None, path: str = "",
                          graph: Graph | None = None) -> Measured:
    """A Measured from a profile written by ``hetsplit profile --device local-...``.

    The profile file keeps no layer attributes, so the full graph is reloaded from the model the
    profile names (zoo name, its ONNX file, or that file's name next to the profile) unless ``graph``
    is given; layer names must agree.
    """
    where = path or profile.graph.name
    types = profile.costs.types
    dtype = device_type or types[0]
    if dtype not in types:
        raise ProfileError(f"{where}: no costs for device type {dtype!r}; the profile has {types}")
    if graph is None:
        from hetsplit.costs.profiler.run import load_for_profiling

        spec = str(profile.meta.get("onnx") or profile.graph.name)
        beside = Path(path).parent / Path(spec).name if path else None   # an ONNX file shipped next to the profile
        if spec.endswith(".onnx") and not Path(spec).is_file() and beside is not None and beside.is_file():
            spec = str(beside)
        model = profile.graph.name if not spec.endswith(".onnx") or not Path(spec).is_file() else spec
        try:
            graph = load_for_profiling(model)[0]
        except ProfileError:
            graph = load_for_profiling(spec)[0]
    if graph.names != profile.costs.layer_names:
        raise ProfileError(f"{where}: its layers differ from model {graph.name!r}'s (re-profile the model)")
    layer_s = profile.costs.time_s[:, profile.costs.type_index(dtype)]
    if not np.all(np.isfinite(layer_s)):
        raise ProfileError(f"{where}: device type {dtype!r} has layers it cannot run; calibrate measured profiles")
    whole_model = profile.meta.get("whole_model", {})
    whole = whole_model.get("time_s", whole_model.get("median_s"))
    if whole is None:
        raise ProfileError(f"{where}: no measured whole_model time; calibrate profiles measured by "
                           "`hetsplit profile MODEL --device local-cpu`, not modelled ones")
    energy = profile.meta.get("energy", {})
    power, psource = None, ""
    if energy.get("status") == "measured" and energy.get("per_inference_j"):
        power, psource = energy["per_inference_j"] / whole, f"measured energy ({energy.get('meter')})"
    elif energy.get("estimated_power_w"):
        power = float(energy["estimated_power_w"])
        psource = energy.get("estimated_power_source", "power figure given to the profiler (no meter)")
    return Measured(graph.name, graph, np.asarray(layer_s, dtype=np.float64), float(whole), power, psource, where)


def load_measured(paths: list[str], device_type: str | None = None) -> list[Measured]:
    return [measured_from_profile(load_profile(p), device_type, str(p)) for p in paths]


@dataclass
class Fit:
    coefficients: dict[str, list[float]]
    classes: dict[str, int]                  # layers per class in the training set
    power_w: float | None
    power_source: str
    trained_on: list[str] = field(default_factory=list)
    terms: dict[str, float] = field(default_factory=dict)   # shared term -> seconds per unit

    def predict(self, graph: Graph) -> np.ndarray:
        return predict(graph, self.coefficients, self.terms)


def _solve(rows: np.ndarray, target: np.ndarray, weight: np.ndarray) -> np.ndarray:
    scale = np.maximum(np.abs(rows).max(axis=0), 1e-30)     # column scaling keeps NNLS well conditioned
    sol, _ = nnls(rows / scale * weight[:, None], target * weight, maxiter=50 * rows.shape[1])
    return sol / scale


def fit(models: list[Measured], floor_s: float = 5e-6, whole_weight: float = 0.0) -> Fit:
    """Per-class coefficients and shared term coefficients from the training models.

    A pooled ``default`` class (for classes the fit never saw) is fitted with the shared terms held.
    """
    if not models:
        raise ProfileError("calibration needs at least one measured profile")
    classes = sorted({c for m in models for c in layer_classes(m.graph)})
    index = {c: k for k, c in enumerate(classes)}
    nc, nt = NCOEF * len(classes), len(TERMS)
    blocks, targets, weights, pooled = [], [], [], []
    for m in models:
        feats, terms = layer_features(m.graph), term_features(m.graph)
        cls = layer_classes(m.graph)
        rows = np.zeros((len(cls), nc + nt))
        for i, c in enumerate(cls):
            rows[i, NCOEF * index[c]: NCOEF * (index[c] + 1)] = feats[i]
        rows[:, nc:] = terms
        t = m.target_s
        blocks.append(rows)
        targets.append(t)
        weights.append(1.0 / np.maximum(t, floor_s))
        if whole_weight > 0:
            blocks.append(rows.sum(axis=0, keepdims=True))
            targets.append(np.array([t.sum()]))
            weights.append(np.array([whole_weight * np.sqrt(len(cls)) / max(t.sum(), floor_s)]))
        pooled.append((feats, terms, t))
    sol = _solve(np.vstack(blocks), np.concatenate(targets), np.concatenate(weights))
    coefficients = {c: [float(v) for v in sol[NCOEF * k: NCOEF * (k + 1)]] for c, k in index.items()}
    term_s = {k: float(v) for k, v in zip(TERMS, sol[nc:])}
    feats = np.vstack([f for f, _, _ in pooled])
    rest = np.concatenate([t - tf @ sol[nc:] for _, tf, t in pooled])
    t = np.concatenate([t for _, _, t in pooled])
    coefficients[DEFAULT] = [float(v) for v in _solve(feats, np.maximum(rest, 0.0), 1.0 / np.maximum(t, floor_s))]
    counts = {c: sum(layer_classes(m.graph).count(c) for m in models) for c in classes}
    powers = [(m.power_w, m.power_source) for m in models if m.power_w]
    power, psource = (float(np.median([p for p, _ in powers])), powers[0][1]) if powers else (None, "")
    return Fit(coefficients, counts, power, psource, [m.path or m.name for m in models], term_s)


@dataclass
class Accuracy:
    model: str
    whole_measured_s: float
    whole_predicted_s: float
    layer_mape: float            # over layers with measured time > 0
    within_10: float             # share of those layers within +-10%
    weighted_layer_error: float  # sum |pred - true| / sum true
    layers: int
    zero_layers: int             # layers onnxruntime fused away (0 s measured)

    @property
    def whole_error(self) -> float:
        return self.whole_predicted_s / self.whole_measured_s - 1.0

    def row(self) -> dict[str, Any]:
        return {"model": self.model, "whole_measured_s": self.whole_measured_s,
                "whole_predicted_s": self.whole_predicted_s, "whole_error": self.whole_error,
                "layer_mape": self.layer_mape, "within_10": self.within_10,
                "weighted_layer_error": self.weighted_layer_error, "layers": self.layers,
                "zero_layers": self.zero_layers}


def evaluate(fitted: Fit, m: Measured) -> Accuracy:
    pred = fitted.predict(m.graph)
    true = m.target_s
    timed = true > 0
    rel = np.abs(pred[timed] / true[timed] - 1.0)
    return Accuracy(m.name, m.whole_s, float(pred.sum()), float(rel.mean()) if rel.size else 0.0,
                    float((rel <= 0.10).mean()) if rel.size else 0.0,
                    float(np.abs(pred - true).sum() / max(true.sum(), 1e-30)), int(len(true)), int((~timed).sum()))


def preset_document(fitted: Fit, name: str, kind: str, memory_bytes: float, device_type: str) -> dict[str, Any]:
    """A ``hetsplit.preset/1`` document for the calibrated device (every figure with its source)."""
    trained = ", ".join(Path(p).name for p in fitted.trained_on)
    power = fitted.power_w
    return {
        "format": "hetsplit.preset/1", "name": name, "kind": kind, "model": "calibrated", "type": name,
        "description": f"{device_type} calibrated from measured profiles ({CLASS_RULES})",
        "memory": {"value": float(memory_bytes), "source": f"memory of {device_type} when profiled"},
        "params": {
            "coefficients": {"value": fitted.coefficients,
                             "source": f"hetsplit calibrate: NNLS fit of [per_mac_s, per_byte_s, per_param_byte_s, fixed_s] per layer "
                                       f"class ({CLASS_RULES}) to {trained}"},
            "terms": {"value": fitted.terms,
                      "source": f"hetsplit calibrate: NNLS fit of seconds per unit of the shared terms "
                                f"{list(TERMS)} (same fit)"},
            "power_active": {"value": float(power) if power else 0.0,
                             "source": fitted.power_source or "no energy measured or estimated: 0 W"},
        },
        "notes": "layer classes per hetsplit.costs.models.calibrated.layer_classes; layers in class counts: "
                 + ", ".join(f"{c} {n}" for c, n in sorted(fitted.classes.items())),
    }
