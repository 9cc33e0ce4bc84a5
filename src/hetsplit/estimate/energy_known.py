"""Energy that is not known is not zero.

A device type whose energy nobody measured or estimated (``CostTable.energy_known`` False: its profile's
energy status is ``unavailable``) has zeros in its energy column. Summed, they would make a plan that
uses it look cheap. So the estimate reports such a plan's energy as unknown (NaN; JSON null; "unknown"
in tables), in one place at its entry (``estimate.fidelity.estimate`` and ``estimate.batch.metrics_at``),
and every energy objective refuses the problem (``require_known_energy``, called by each solver's entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import ProfileError

if TYPE_CHECKING:
    from hetsplit.estimate.batch import BatchMetrics


def unknown_energy_devices(problem: SplitProblem) -> np.ndarray:
    """D: True for each device whose type's energy is unknown."""
    known = problem.costs.energy_known
    assert known is not None
    return np.asarray(~known[problem.device_type])


def mask_unknown_energy(problem: SplitProblem, batch: "BatchMetrics") -> "BatchMetrics":
    """``batch`` (changed in place) with NaN energy, EDP and per-device energy (that device's) for every
    plan a device of unknown energy takes part in."""
    dev = unknown_energy_devices(problem)
    if not dev.any():
        return batch
    cells = batch.participates & dev
    rows = cells.any(axis=1)
    batch.energy_j[rows] = np.nan
    batch.edp[rows] = np.nan
    batch.energy_per_device_j[cells] = np.nan
    return batch


def require_known_energy(problem: SplitProblem, asked_by: str, when: bool = True) -> None:
    """Refuse an energy objective (``asked_by``: what asked, as the user wrote it; ``when``: whether it
    asks for energy at all) on a problem with a device whose energy is unknown, naming the device types,
    their devices and the fixes."""
    types = problem.costs.unknown_energy_types
    if not when or not types:
        return
    named = "; ".join(f"{t!r} ({', '.join(d.name for d in problem.cluster.devices if d.type == t)})" for t in types)
    raise ProfileError(
        f"{asked_by} optimizes energy, but the energy of device type(s) {named} is unknown: their profile's "
        "energy status is 'unavailable' (no meter read it and no power figure was given), and counting it as "
        "0 J would favour those devices. Profile them again where an energy meter reads, or with a power "
        "figure (hetsplit profile MODEL --device ... --power WATTS), leave those devices out of the cluster, "
        "or ask for throughput or latency instead")
