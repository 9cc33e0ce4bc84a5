"""What the list schedulers (HEFT, CPOP, PEFT, MinMin, MaxMin, ETF) share: a partial schedule of one
input, the ranks they order layers by, and one partitioner shape that writes the schedule's run order
into the plan.

Textbook assumptions, as in Topcuoglu et al. (2002) and the other papers: moving the tensors from
layer i to layer j across devices u != v takes the link's message time for bytes(i, j) (``cluster.links``; all
tensors between the pair as one transfer, however many links carry at once), nothing on one device;
the model input is on every device at time 0. A layer is never put where its time is not finite.
The estimator then queues messages on their links and moves the input from the cluster's source, so
the plan's latency (from the estimator, following the schedule's run order) can be a little higher
than the scheduler's own ``makespan_s``.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import numpy as np

from hetsplit.cluster.links import message_time
from hetsplit.costs.problem import SplitProblem
from hetsplit.plan.types import Plan
from hetsplit.search.node_mapping import NodeMapping, OneMappingPartitioner


@dataclass
class ListSchedule:
    """A list scheduler's result: device, start and finish time of every layer."""

    device: np.ndarray
    start: np.ndarray
    finish: np.ndarray

    @property
    def makespan(self) -> float:
        return float(self.finish.max()) if len(self.finish) else 0.0

    def start_order(self) -> np.ndarray:
        """Layers by start time (ties: lower index): each device's run order follows it."""
        return np.lexsort((np.arange(len(self.start)), self.start))


class Timeline:
    """Busy intervals of one device, sorted by start."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.ends: list[float] = []

    @property
    def free_at(self) -> float:
        """When the device has finished everything booked on it."""
        return self.ends[-1] if self.ends else 0.0

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


class PartialSchedule:
    """Layers placed so far: each device's timeline, each placed layer's device and times."""

    def __init__(self, nm: NodeMapping, insertion: bool = True):
        self.nm, self.insertion = nm, insertion
        self.edge_bytes = layer_edge_bytes(nm)
        self.preds = [[int(p) for p in ps if p >= 0] for ps in nm.problem.graph.predecessors]
        n = nm.num_layers
        self.device = np.full(n, -1, dtype=np.int64)
        self.begin = np.zeros(n)
        self.finish = np.zeros(n)
        self.lines = [Timeline() for _ in range(nm.num_devices)]

    def placed(self, i: int) -> bool:
        return bool(self.device[i] >= 0)

    def ready(self, i: int) -> bool:
        """Are all of layer i's predecessors placed?"""
        return all(self.device[p] >= 0 for p in self.preds[i])

    def data_ready(self, i: int, d: int) -> float:
        """When every tensor layer i reads can be on device d."""
        return max((self.finish[p] + comm_time(self.nm, self.edge_bytes[(p, i)], int(self.device[p]), d)
                    for p in self.preds[i]), default=0.0)

    def earliest(self, i: int, d: int) -> tuple[float, float]:
        """Earliest (start, finish) of layer i on device d (after its last booked layer without insertion)."""
        ready = self.data_ready(i, d)
        duration = float(self.nm.time[i, d]) + self.cut_charge(i, d)
        start = self.lines[d].earliest_start(ready, duration) if self.insertion else max(ready, self.lines[d].free_at)
        return start, start + duration

    def cut_charge(self, i: int, d: int) -> float:
        """What placing layer i on d likely adds for its segment (``costs.segment``; a heuristic, as the
        segments are known only once every layer is placed): where it reads from another device or the
        layer before it is not on d, a segment starts (d's call and the bytes it reads from elsewhere) and
        i is cut off from layer i-1 (its unfused extra)."""
        costs = self.nm.problem.costs
        if not costs.charges_cuts:
            return 0.0
        t = int(self.nm.problem.device_type[d])
        remote = [p for p in self.preds[i] if self.device[p] != d]
        if not remote and i > 0 and self.device[i - 1] == d:
            return 0.0
        inbound = sum(self.edge_bytes[(p, i)] for p in remote)
        assert costs.unfused_s is not None
        return float(costs.segment_call_s[t] + costs.segment_byte_s[t] * inbound
                     + (costs.unfused_s[i, t] if i > 0 else 0.0))

    def best_device(self, i: int, extra: np.ndarray | None = None) -> tuple[int, float, float]:
        """The device where layer i finishes first (plus ``extra[d]``, PEFT's look-ahead); ties: the first."""
        best = (np.inf, -1, 0.0, 0.0)
        for d in np.flatnonzero(self.nm.feasible[i]):
            start, end = self.earliest(i, int(d))
            key = end + (0.0 if extra is None else float(extra[d]))
            if key < best[0]:
                best = (key, int(d), start, end)
        return best[1], best[2], best[3]

    def place(self, i: int, d: int, start: float, end: float) -> None:
        self.nm.deadline.check("its schedule")
        self.device[i], self.begin[i], self.finish[i] = d, start, end
        self.lines[d].book(start, end)

    def result(self) -> ListSchedule:
        return ListSchedule(self.device.copy(), self.begin.copy(), self.finish.copy())


def layer_edge_bytes(nm: NodeMapping) -> dict[tuple[int, int], float]:
    """Bytes from layer to layer (all tensors between the pair), model input edges left out."""
    out: dict[tuple[int, int], float] = {}
    for src, dst, nbytes in nm.problem.graph.edges:
        if src >= 0:
            out[(int(src), int(dst))] = out.get((int(src), int(dst)), 0.0) + float(nbytes)
    return out


def comm_time(nm: NodeMapping, nbytes: float, u: int, v: int) -> float:
    """Seconds to move ``nbytes`` from device u to v (0 on one device)."""
    return float(nm.problem.cluster.links.time(u, v, nbytes))


def mean_times(nm: NodeMapping) -> np.ndarray:
    """Per layer, its mean time over the devices that can run it."""
    return np.array([nm.time[i, nm.feasible[i]].mean() for i in range(nm.num_layers)])


def mean_comm(nm: NodeMapping, edge_bytes: dict[tuple[int, int], float]) -> dict[tuple[int, int], float]:
    """Per layer pair, the mean over device pairs u != v of moving its tensors (0 without bytes)."""
    lk = nm.problem.cluster.links
    off = ~np.eye(nm.num_devices, dtype=bool)
    lat = float(lk.latency_s[off].mean()) if nm.num_devices > 1 else 0.0
    per_byte = float(lk.per_byte_s[off].mean()) if nm.num_devices > 1 else 0.0
    return {k: float(message_time(lat, per_byte, b)) for k, b in edge_bytes.items()}


def upward_ranks(nm: NodeMapping, edge_bytes: dict[tuple[int, int], float]) -> np.ndarray:
    """HEFT's rank_u: ``mean_w(i) + max over successors j of (mean_c(i, j) + rank_u(j))``."""
    w, c = mean_times(nm), mean_comm(nm, edge_bytes)
    rank = np.zeros(nm.num_layers)
    for i in range(nm.num_layers - 1, -1, -1):
        rank[i] = w[i] + max((c[(i, j)] + rank[j] for j in nm.successors[i]), default=0.0)
    return rank


def downward_ranks(nm: NodeMapping, edge_bytes: dict[tuple[int, int], float]) -> np.ndarray:
    """CPOP's rank_d: ``max over predecessors j of (rank_d(j) + mean_w(j) + mean_c(j, i))``, 0 at entries."""
    w, c = mean_times(nm), mean_comm(nm, edge_bytes)
    rank = np.zeros(nm.num_layers)
    for i, preds in enumerate(nm.problem.graph.predecessors):
        rank[i] = max((rank[j] + w[j] + c[(int(j), i)] for j in preds if j >= 0), default=0.0)
    return rank


def static_levels(nm: NodeMapping) -> np.ndarray:
    """ETF's static level: the largest sum of mean layer times on a path from the layer to an exit."""
    w = mean_times(nm)
    level = np.zeros(nm.num_layers)
    for i in range(nm.num_layers - 1, -1, -1):
        level[i] = w[i] + max((level[j] for j in nm.successors[i]), default=0.0)
    return level


class ListSchedulerMapper(OneMappingPartitioner):
    """Base of the list schedulers: subclasses give ``schedule``; the plan carries its run order, so
    the estimator's latency is that of this schedule (up to the queueing it adds)."""

    def schedule(self, nm: NodeMapping) -> ListSchedule:
        raise NotImplementedError

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        s = self.schedule(nm)
        return s.device, {"makespan_s": s.makespan}

    def solve(self, problem: SplitProblem) -> list[Plan]:
        nm = self.mapping_context(problem)
        s = self.schedule(nm)
        nm.deadline.check("its schedule")
        return [nm.plan(s.device, self.name, {"makespan_s": s.makespan}, start_order=s.start_order())]
