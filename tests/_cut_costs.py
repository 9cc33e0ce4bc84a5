"""Random nonzero cut costs (``costs.segment``) and message-end costs (``cluster.links``) on a problem, for
tests of the segment rule and of the link rule."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hetsplit.costs.segment import SegmentCost


def with_cut_costs(pr, rng: np.random.Generator, scale: float = 1.0):
    """``pr`` with random nonzero segment costs (call, executor and host bytes) on every type and unfused
    extras on every layer, of the order of a layer's time x ``scale``."""
    table = pr.costs
    finite = table.time_s[np.isfinite(table.time_s)]
    mean = (float(finite.mean()) if finite.size else 1e-3) * scale
    per_byte = mean / max(float(pr.cut_bytes.mean()), 1.0)
    segment = {t: SegmentCost(float(rng.uniform(0.1, 1.0)) * mean, float(rng.uniform(0.0, 0.5)) * per_byte,
                              float(rng.uniform(0.0, 0.5)) * per_byte, "random") for t in table.types}
    unfused = rng.uniform(0.0, 0.5, size=table.time_s.shape) * mean
    return replace(pr, costs=replace(table, segment=segment, unfused_s=unfused))


def without_cut_costs(pr):
    return replace(pr, costs=replace(pr.costs, segment={}, unfused_s=None))


def with_message_costs(pr, rng: np.random.Generator, scale: float = 1.0):
    """``pr`` with random nonzero CPU per message end on every link (fixed and per byte, ``cluster.links``;
    each link its own figures, so devices pay different ones), of the order of a layer's time x ``scale``."""
    table, d = pr.costs, pr.num_devices
    finite = table.time_s[np.isfinite(table.time_s)]
    mean = (float(finite.mean()) if finite.size else 1e-3) * scale
    per_byte = mean / max(float(pr.cut_bytes.mean()), 1.0)
    cpu = rng.uniform(0.1, 1.0, size=(d, d)) * mean
    cpu_byte = rng.uniform(0.0, 0.5, size=(d, d)) * per_byte
    np.fill_diagonal(cpu, 0.0)
    np.fill_diagonal(cpu_byte, 0.0)
    return replace(pr, cluster=replace(pr.cluster, message_cpu_s=cpu, message_cpu_byte_s=cpu_byte))
