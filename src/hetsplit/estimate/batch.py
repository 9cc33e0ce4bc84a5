"""BatchMetrics: the metrics of N plans as arrays, and the Metrics of one of them."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate.energy_known import unknown_energy_devices
from hetsplit.plan.types import Metrics


TAKING_TURNS = 0.01   # a period this much above the busiest resource's time: the devices wait on each other


@dataclass
class BatchMetrics:
    """Metrics of N plans as arrays (per-device arrays are N x D)."""

    throughput: np.ndarray
    bottleneck_s: np.ndarray
    latency_s: np.ndarray
    energy_j: np.ndarray
    comm_energy_j: np.ndarray
    comm_time_s: np.ndarray
    energy_per_device_j: np.ndarray
    compute_s_per_device: np.ndarray
    memory_per_device_bytes: np.ndarray
    participates: np.ndarray
    fits: np.ndarray
    edp: np.ndarray
    max_transfer_s: np.ndarray          # largest single transfer (for naming the bottleneck)
    max_transfer_link: np.ndarray       # N x 2 (u, v) of that link, (d, d) for device d's port, -1 if none
    memory_channel_s: np.ndarray        # N x D: seconds each device's memory channel is busy (weight loads)

    def __len__(self) -> int:
        return len(self.throughput)

    def take(self, rows: np.ndarray) -> "BatchMetrics":
        """The metrics of plans ``rows`` (in that order)."""
        idx = np.asarray(rows, dtype=np.int64)
        return BatchMetrics(*[getattr(self, f)[idx] for f in BatchMetrics.__dataclass_fields__])


def concat_metrics(parts: list[BatchMetrics]) -> BatchMetrics:
    """The metrics of several batches as one (in order)."""
    if len(parts) == 1:
        return parts[0]
    return BatchMetrics(*[np.concatenate([getattr(p, f) for p in parts]) for f in BatchMetrics.__dataclass_fields__])


def metrics_at(problem: SplitProblem, batch: BatchMetrics, i: int) -> Metrics:
    """The Metrics of plan i of an evaluated batch; energy, EDP and that device's energy NaN where a device
    of unknown energy takes part (``estimate.energy_known``), whether or not ``batch`` was masked."""
    names = problem.cluster.names
    part = batch.participates[i]
    comp = batch.compute_s_per_device[i]
    channel = batch.memory_channel_s[i]
    busiest = max(comp.max(), batch.max_transfer_s[i], channel.max())
    if batch.bottleneck_s[i] > busiest * (1 + TAKING_TURNS):
        what = "devices taking turns"   # no resource is saturated: they wait on each other's results
    elif channel.max() > max(comp.max(), batch.max_transfer_s[i]):
        what = f"memory {names[int(np.argmax(channel))]}"
    elif batch.max_transfer_s[i] > comp.max():
        u, v = batch.max_transfer_link[i]
        what = f"port {names[u]}" if u == v else f"link {names[u]}->{names[v]}"
    else:
        what = f"stage {names[int(np.argmax(comp))]}"
    unknown = part & unknown_energy_devices(problem)
    per_device = np.where(unknown, np.nan, batch.energy_per_device_j[i])
    energy, edp = (np.nan, np.nan) if unknown.any() else (float(batch.energy_j[i]), float(batch.edp[i]))
    charged = part | (per_device > 0)
    return Metrics(
        throughput=float(batch.throughput[i]), bottleneck_s=float(batch.bottleneck_s[i]), bottleneck=what,
        latency_s=float(batch.latency_s[i]), energy_j=energy,
        energy_per_device_j={names[k]: float(per_device[k]) for k in np.flatnonzero(charged)},
        compute_s_per_device={names[k]: float(comp[k]) for k in np.flatnonzero(part)},
        memory_per_device_bytes={names[k]: float(batch.memory_per_device_bytes[i, k]) for k in np.flatnonzero(part)},
        fits=bool(batch.fits[i]), edp=edp, comm_energy_j=float(batch.comm_energy_j[i]),
        comm_time_s=float(batch.comm_time_s[i]))
