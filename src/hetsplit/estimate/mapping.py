"""The closed-form evaluator of mappings, vectorized over many device assignments of one TaskGraph.

Semantics (DESIGN.md, "General mappings"), for a stream of inputs:
- per-device compute = the sum of its tasks' times; a link's busy time = its bytes / bandwidth +
  its latency per message, where a message is one payload sent once from one device to another;
  throughput = 1 / the largest of these (compute and transfers overlap);
- latency = one input's critical path through the task DAG with transfers (a message takes
  latency + bytes / bandwidth and does not queue), each device running its tasks in topological
  order, the model inputs leaving the source and the outputs reaching the sink;
- memory per device = its tasks' memory + the bytes it receives + the bytes it sends (model inputs
  it is fed and outputs it delivers included, as in the pipeline semantics; the cluster's source
  and sink are charged nothing for them);
- energy = compute energy + bytes x energy per byte, charged to the sender.

A pipeline's TaskGraph (stage tasks, one payload per cut) evaluates to exactly the pipeline
evaluator's metrics when no device pair carries two cuts (a test checks it).

``devices`` is an N x T array of device indices (task t of plan n on ``devices[n, t]``); the loop
over tasks for the latency is the only Python loop, and it runs over all N plans at once.
``TaskOverrides`` give per-plan task costs and edge bytes for encodings whose plans share one
task structure but not the sizes of its shards (a zero-byte edge sends no message).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.batch import BatchMetrics, concat_metrics
from hetsplit.estimate.task_costs import TaskCosts, task_costs
from hetsplit.plan.tasks import SINK, SOURCE, TaskGraph

CHUNK_CELLS = 1 << 16  # rows per chunk x D x D stays below this (cache-sized chunks are fastest)


@dataclass
class _Structure:
    """Assignment-independent index arrays of a TaskGraph, computed once per evaluator."""

    in_edges: list[np.ndarray]    # per task: the edges into it
    dup_pairs: list[tuple[np.ndarray, np.ndarray]]  # (edge, earlier edge of the same payload), by offset
    sink_edges: np.ndarray
    from_source: np.ndarray
    to_sink: np.ndarray


def _structure(tg: TaskGraph) -> _Structure:
    dst = tg.edge_dst
    in_edges = [np.flatnonzero(dst == t) for t in range(tg.num_tasks)]
    order = np.argsort(tg.edge_payload, kind="stable")
    pay = tg.edge_payload[order]
    pairs = []
    for off in range(1, len(order)):
        same = pay[off:] == pay[:-off]
        if not same.any():
            break
        pairs.append((order[off:][same], order[:-off][same]))
    return _Structure(in_edges, pairs, np.flatnonzero(dst == SINK), tg.edge_src == SOURCE, dst == SINK)


@dataclass
class TaskOverrides:
    """Per-plan costs replacing the task graph's own, task-major like the evaluator's own arrays:
    T x N task time, energy and memory and E x N edge bytes (column n belongs to plan n)."""

    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    edge_bytes: np.ndarray

    def columns(self, lo: int, hi: int) -> "TaskOverrides":
        return TaskOverrides(*(np.ascontiguousarray(a[:, lo:hi]) for a in
                               (self.time_s, self.energy_j, self.mem_bytes, self.edge_bytes)))


class MappingEvaluator:
    """Evaluates device assignments of one TaskGraph (costs and index arrays prepared once)."""

    def __init__(self, problem: SplitProblem, tg: TaskGraph, costs: TaskCosts | None = None):
        self.problem, self.tg = problem, tg
        self.costs = costs if costs is not None else task_costs(problem, tg)
        self.s = _structure(tg)
        types = problem.device_type  # per (task, device) costs, flattened as t * D + d
        self._time = self.costs.time_s[:, types].ravel()
        self._energy = self.costs.energy_j[:, types].ravel()
        self._mem = self.costs.mem_bytes[:, types].ravel()
        self._task_offset = np.arange(tg.num_tasks) * problem.num_devices
        self._src = np.where(tg.edge_src >= 0, tg.edge_src, tg.num_tasks)  # SOURCE reads column T (time 0)
        self._link_costs = self._links()

    def check_devices(self, devices: np.ndarray | None) -> np.ndarray:
        dev = self.tg.device[None, :] if devices is None else np.atleast_2d(np.asarray(devices, dtype=np.int64))
        if dev.shape[1] != self.tg.num_tasks:
            raise PlanError(f"an assignment has {dev.shape[1]} entries; the task graph has {self.tg.num_tasks} tasks")
        if dev.size and (dev.min() < 0 or dev.max() >= self.problem.num_devices):
            raise PlanError(f"device indices must be in 0..{self.problem.num_devices - 1}")
        return dev

    def evaluate(self, devices: np.ndarray | None = None, overrides: TaskOverrides | None = None) -> BatchMetrics:
        """Metrics of every assignment (rows of ``devices``; default: the plan's own), with the task
        costs and edge bytes of ``overrides`` where given."""
        dev = self.check_devices(devices)
        if overrides is not None:
            self._check_overrides(overrides, len(dev))
        d = self.problem.num_devices
        step = max(1, CHUNK_CELLS // max(1, d * d))
        parts = [self._chunk(dev[i:i + step], None if overrides is None else overrides.columns(i, i + step))
                 for i in range(0, len(dev), step)]
        return concat_metrics(parts)

    def _check_overrides(self, ov: TaskOverrides, n: int) -> None:
        t, e = self.tg.num_tasks, len(self.tg.edge_src)
        for name, arr, cols in (("time_s", ov.time_s, t), ("energy_j", ov.energy_j, t), ("mem_bytes", ov.mem_bytes, t),
                                ("edge_bytes", ov.edge_bytes, e)):
            if arr.shape != (cols, n):
                raise PlanError(f"overrides.{name} is {arr.shape}; it must be {(cols, n)} "
                                f"({'tasks' if cols == t else 'edges'} x plans)")

    # ---- one chunk of plans ----------------------------------------------------------------------
    def _links(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Latency, seconds per byte and joules per byte of every (u, v) pair, flattened (u * D + v);
        zero on the diagonal (a device does not send to itself)."""
        cl = self.problem.cluster
        off = ~np.eye(self.problem.num_devices, dtype=bool)
        with np.errstate(divide="ignore"):
            per_byte = np.where(off, 1.0 / cl.bandwidth, 0.0)
        return (np.where(off, cl.latency_s, 0.0).ravel(), per_byte.ravel(),
                np.where(off, cl.energy_per_byte, 0.0).ravel())

    def _chunk(self, dev: np.ndarray, ov: TaskOverrides | None = None) -> BatchMetrics:
        """Metrics of a chunk of plans, computed task-major (T x N, E x N: contiguous rows per task/edge)."""
        pr, tg, s = self.problem, self.tg, self.s
        n, n_dev = dev.shape[0], pr.num_devices
        d = np.ascontiguousarray(dev.T)                       # T x N
        col = np.arange(n)[None, :]
        if ov is None:
            cell = d + self._task_offset[:, None]
            time, energy, mem = np.take(self._time, cell), np.take(self._energy, cell), np.take(self._mem, cell)
            nbytes = tg.edge_bytes[:, None]
        else:
            time, energy, mem, nbytes = ov.time_s, ov.energy_j, ov.mem_bytes, ov.edge_bytes
        per_dev = (d * n + col).ravel()                       # device-major bins: d * N + plan
        bins = n * n_dev
        compute = np.bincount(per_dev, weights=time.ravel(), minlength=bins)
        energy_dev = np.bincount(per_dev, weights=energy.ravel(), minlength=bins)
        mem_dev = np.bincount(per_dev, weights=mem.ravel(), minlength=bins)
        participates = np.bincount(per_dev, minlength=bins) > 0

        u, v = tg.endpoints(d)                                # E x N
        pair = u * n_dev + v
        lat, per_byte, joule = self._link_costs
        moves = (u != v) & (nbytes > 0)
        first = np.ones(u.shape, dtype=bool)  # first edge of its payload to its destination device
        for e, earlier in s.dup_pairs:
            first[e] &= v[e] != v[earlier]
        sent = moves & first
        xfer = np.take(lat, pair)
        xfer += nbytes * np.take(per_byte, pair)
        xfer[~moves] = 0.0
        link = (col * (n_dev * n_dev) + pair)[sent]
        busy = np.bincount(link, weights=xfer[sent], minlength=n * n_dev * n_dev).reshape(n, n_dev * n_dev)
        e_bytes = nbytes * np.take(joule, pair)
        e_bytes[~sent] = 0.0
        sender = (u * n + col).ravel()
        energy_dev += np.bincount(sender, weights=e_bytes.ravel(), minlength=bins)
        held_in = (sent & ~s.to_sink[:, None]) | (s.from_source[:, None] & first)  # source and sink hold nothing of ours
        held_out = (sent & ~s.from_source[:, None]) | s.to_sink[:, None]
        mem_dev += np.bincount((v * n + col).ravel(), weights=(held_in * nbytes).ravel(), minlength=bins)
        mem_dev += np.bincount(sender, weights=(held_out * nbytes).ravel(), minlength=bins)
        compute, energy_dev, mem_dev, participates = (a.reshape(n_dev, n).T for a in
                                                      (compute, energy_dev, mem_dev, participates))

        arg = np.argmax(busy, axis=1)
        max_busy = busy[np.arange(n), arg]
        bottleneck = np.maximum(compute.max(axis=1), max_busy)
        with np.errstate(divide="ignore"):
            throughput = np.where(bottleneck > 0, 1.0 / bottleneck, np.inf)
        latency = self._latency(d, time, xfer)
        comm_e = e_bytes.sum(axis=0)
        total_e = energy.sum(axis=0) + comm_e
        max_link = np.where(max_busy[:, None] > 0, np.stack([arg // n_dev, arg % n_dev], axis=1), -1)
        fits = (mem_dev <= pr.memory_bytes[None, :]).all(axis=1)
        return BatchMetrics(throughput, bottleneck, latency, total_e, comm_e, np.where(sent, xfer, 0.0).sum(axis=0),
                            energy_dev, compute, mem_dev, participates, fits, total_e * latency, max_busy, max_link)

    def _latency(self, d: np.ndarray, time: np.ndarray, xfer: np.ndarray) -> np.ndarray:
        """Critical path of one input: tasks in topological order, each device one task at a time."""
        tg, s = self.tg, self.s
        n, n_dev = d.shape[1], self.problem.num_devices
        finish = np.zeros((tg.num_tasks + 1, n))  # last row: 0 for the SOURCE producer
        free = np.zeros(n * n_dev)
        slot = d * n + np.arange(n)[None, :]     # where each task's device clock lives
        src = self._src
        for t in range(tg.num_tasks):
            ins = s.in_edges[t]
            if len(ins) == 1:
                ready = finish[src[ins[0]]] + xfer[ins[0]]
            elif len(ins):
                ready = (finish[src[ins]] + xfer[ins]).max(axis=0)
            else:
                ready = 0.0
            k = slot[t]
            end = np.maximum(ready, free[k])
            end += time[t]
            finish[t] = end
            free[k] = end
        done = finish[:-1].max(axis=0)
        if len(s.sink_edges):
            done = np.maximum(done, (finish[src[s.sink_edges]] + xfer[s.sink_edges]).max(axis=0))
        return done


def evaluate_mappings(problem: SplitProblem, tg: TaskGraph, devices: np.ndarray | None = None,
                      costs: TaskCosts | None = None) -> BatchMetrics:
    """Metrics of N device assignments of ``tg`` (default: its own assignment)."""
    return MappingEvaluator(problem, tg, costs).evaluate(devices)
