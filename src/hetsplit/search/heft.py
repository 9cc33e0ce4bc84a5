"""HEFT: Heterogeneous Earliest Finish Time (Topcuoglu, Hariri, Wu, IEEE TPDS 2002).

1. Upward rank: ``rank(i) = mean_w(i) + max over successors j of (mean_c(i, j) + rank(j))``, where
   mean_w is the layer's mean time over the devices that can run it and mean_c the mean over device
   pairs of moving the tensors from i to j (latency + bytes / bandwidth).
2. Layers in decreasing rank (a topological order) each go to the device giving the earliest finish
   time, with insertion: a layer may fill an idle gap between layers already on the device.
A layer whose time on a device is not finite is never put there. HEFT schedules one input for the
makespan; the plan carries that schedule's run order per device (``Plan.order``: layers by their
start time), and its metrics come from the estimator with that order. ``params["makespan_s"]`` is
HEFT's own estimate, which assumes (as the algorithm does) that links carry any number of transfers
at once and that the model input is on every device; the estimator queues messages on their link
and moves the input from the cluster's source, so its latency can be a little higher.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.plan.types import Plan
from hetsplit.search.base import register_partitioner
from hetsplit.search.node_mapping import NodeMapping, OneMappingPartitioner


def _edge_bytes(nm: NodeMapping) -> dict[tuple[int, int], float]:
    """Bytes from layer to layer (all tensors between the pair), model input edges left out."""
    out: dict[tuple[int, int], float] = {}
    for src, dst, nbytes in nm.problem.graph.edges:
        if src >= 0:
            out[(int(src), int(dst))] = out.get((int(src), int(dst)), 0.0) + float(nbytes)
    return out


def _comm_time(nm: NodeMapping, nbytes: float, u: int, v: int) -> float:
    cl = nm.problem.cluster
    return 0.0 if u == v or nbytes <= 0 else float(cl.latency_s[u, v] + nbytes / cl.bandwidth[u, v])


def upward_ranks(nm: NodeMapping, edge_bytes: dict[tuple[int, int], float]) -> np.ndarray:
    """HEFT's rank_u of every layer."""
    cl = nm.problem.cluster
    d = nm.num_devices
    mean_w = np.array([nm.time[i, nm.feasible[i]].mean() for i in range(nm.num_layers)])
    off = ~np.eye(d, dtype=bool)
    mean_lat = float(cl.latency_s[off].mean()) if d > 1 else 0.0
    mean_per_byte = float((1.0 / cl.bandwidth[off]).mean()) if d > 1 else 0.0
    rank = np.zeros(nm.num_layers)
    for i in range(nm.num_layers - 1, -1, -1):
        tail = [(mean_lat + edge_bytes[(i, j)] * mean_per_byte if edge_bytes[(i, j)] > 0 else 0.0) + rank[j]
                for j in nm.successors[i]]
        rank[i] = mean_w[i] + max(tail, default=0.0)
    return rank


class _Timeline:
    """Busy intervals of one device, sorted by start."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    def earliest_start(self, ready: float, duration: float) -> float:
        """The first start >= ready where ``duration`` fits between busy intervals (insertion policy)."""
        start = ready
        for s, e in zip(self.starts, self.ends):
            if e <= start:
                continue
            if s - start >= duration:
                return start
            start = max(start, e)
        return start

    def book(self, start: float, end: float) -> None:
        k = bisect.bisect(self.starts, start)
        self.starts.insert(k, start)
        self.ends.insert(k, end)


def heft_schedule(nm: NodeMapping) -> tuple[np.ndarray, np.ndarray, float]:
    """HEFT's device and start time per layer, and its one-input makespan estimate."""
    edge_bytes = _edge_bytes(nm)
    rank = upward_ranks(nm, edge_bytes)
    order = sorted(range(nm.num_layers), key=lambda i: (-rank[i], i))
    device = np.full(nm.num_layers, -1, dtype=np.int64)
    finish = np.zeros(nm.num_layers)
    begin = np.zeros(nm.num_layers)
    lines = [_Timeline() for _ in range(nm.num_devices)]
    preds = nm.problem.graph.predecessors
    for i in order:
        best = (np.inf, -1, 0.0)
        for d in np.flatnonzero(nm.feasible[i]):
            ready = max((finish[p] + _comm_time(nm, edge_bytes[(p, i)], int(device[p]), int(d))
                         for p in preds[i] if p >= 0), default=0.0)
            start = lines[d].earliest_start(ready, float(nm.time[i, d]))
            end = start + float(nm.time[i, d])
            if end < best[0]:
                best = (end, int(d), start)
        end, d, start = best
        device[i], finish[i], begin[i] = d, end, start
        lines[d].book(start, end)
    return device, begin, float(finish.max())


@register_partitioner("heft")
@dataclass
class Heft(OneMappingPartitioner):
    """HEFT (Topcuoglu et al. 2002): the field's standard list scheduler, as a node-to-unit mapper."""

    name: str = "heft"

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        devices, _, makespan = heft_schedule(nm)
        return devices, {"makespan_s": makespan}

    def solve(self, problem: SplitProblem) -> list[Plan]:
        nm = NodeMapping(problem)
        devices, start, makespan = heft_schedule(nm)
        return [nm.plan(devices, self.name, {"makespan_s": makespan}, start_order=np.lexsort((np.arange(len(start)),
                                                                                             start)))]
