"""The closed-form evaluator of mappings, over many device assignments of one TaskGraph (compiled).

Semantics (docs/architecture.md, "The estimator"), for a stream of inputs:
- per-device compute = the sum of its tasks' times and of its message ends' CPU; a link's busy time =
  its messages' times (``cluster.links``), where a message is one payload sent once from one device to
  another (with ``ports="shared"``: a device port's busy time = every message in or out of it); a
  device's memory channel's busy time = its extra jobs (weight loads); throughput = 1 / the largest
  of these (compute, transfers and loads overlap);
- latency = one input alone through the task DAG with transfers (``schedule.one_input``): each
  device and link runs one job at a time and never idles while one of its jobs is ready, lowest
  task or message index first (or the plan's run order), the model inputs leaving the source and
  the outputs reaching the sink: the simulator's latency for one input;
- memory per device = its tasks' memory + the bytes it receives + the bytes it sends (model inputs
  it is fed and outputs it delivers included, as in the pipeline semantics; the cluster's source
  and sink are charged nothing for them);
- energy = compute energy + bytes x energy per byte, charged to the sender.

A pipeline's TaskGraph (stage tasks, one payload per cut) evaluates to exactly the pipeline
evaluator's metrics (a test checks it).

``devices`` is an N x T array of device indices (task t of plan n on ``devices[n, t]``). One
compiled pass per plan computes every figure: a schedule's order depends on each plan's durations,
so it cannot be vectorized across plans. ``TaskOverrides`` give per-plan task costs and edge bytes
for encodings whose plans share one task structure but not the sizes of their shards (a zero-byte
edge sends no message); ``ExtraJobs`` add per-plan jobs (an MCU's weight loads). On a cluster whose
devices keep weights off chip, the memory model (``memory.py``) gives both, assignment by assignment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from hetsplit.cluster.links import end_time_jit, message_energy_jit, message_time_jit, wire_ids_jit
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.batch import BatchMetrics
from hetsplit.estimate.memory import MemoryEffects
from hetsplit.estimate.schedule import ExtraJobs, Resources, Structure, one_input, scratch
from hetsplit.estimate.segments import WHOLE_KINDS, previous_layer_task, unfused_table
from hetsplit.estimate.threads import parallel_chunks, run_in_ranges
from hetsplit.estimate.task_costs import TaskCosts, task_costs
from hetsplit.plan.tasks import TaskGraph


NO_RESOURCE = np.uint64(2 ** 63)   # the busiest resource before any is busy


@dataclass
class TaskOverrides:
    """Per-plan costs replacing the task graph's own, task-major: T x N task time, energy and memory
    and E x N edge bytes (column n belongs to plan n)."""

    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    edge_bytes: np.ndarray


class MappingEvaluator:
    """Evaluates device assignments of one TaskGraph (costs and index arrays prepared once)."""

    def __init__(self, problem: SplitProblem, tg: TaskGraph, costs: TaskCosts | None = None):
        """``costs``: of ``tg``'s tasks (default: ``task_costs``). On a problem whose devices keep weights
        off chip (``memory.MemoryEffects``) every assignment is costed by the memory model, on ``tg``
        with its stages split by segment (those pieces costed from the table)."""
        self.problem, self.given = problem, tg
        self.memory = MemoryEffects.of(problem)
        self.tg, self._columns = tg, None
        if self.memory is not None:
            self.tg, self._columns = self.memory.split(tg)
        self.costs = costs if costs is not None and self.tg is tg else task_costs(problem, self.tg)
        self.structure = Structure.of(self.tg)
        types = problem.device_type  # per (task, device): time, energy, memory at 3 * (t * D + d) + 0, 1, 2
        self._tables = np.ascontiguousarray(np.stack([a[:, types] for a in (
            self.costs.time_s, self.costs.energy_j, self.costs.mem_bytes)], axis=-1).ravel(), dtype=np.float64)
        self._links = problem.cluster.links.flat()

    def check_devices(self, devices: np.ndarray | None, bounds: bool = True) -> np.ndarray:
        """Assignments of the given task graph's tasks, validated (N x T); ``bounds=False`` leaves the
        device indices to the kernel (it checks them as it reads them)."""
        tasks = self.given.num_tasks
        dev = self.given.device[None, :] if devices is None else np.atleast_2d(np.asarray(devices, dtype=np.int64))
        if dev.shape[1] != tasks:
            raise PlanError(f"an assignment has {dev.shape[1]} entries; the task graph has {tasks} tasks")
        if bounds and dev.size and (dev.min() < 0 or dev.max() >= self.problem.num_devices):
            raise self.out_of_range()
        return np.ascontiguousarray(dev, dtype=np.int64)

    def out_of_range(self) -> PlanError:
        return PlanError(f"device indices must be in 0..{self.problem.num_devices - 1}")

    def evaluate(self, devices: np.ndarray | None = None, overrides: TaskOverrides | None = None,
                 extras: list[ExtraJobs] | None = None, latency: bool = True) -> BatchMetrics:
        """Metrics of every assignment (rows of ``devices``; default: the plan's own), with the task
        costs and edge bytes of ``overrides`` and the extra jobs of ``extras`` (one per plan) where given
        (the memory model's own, plan by plan, on a problem that has one).

        ``latency=False`` leaves out one input's schedule (most of the time per plan): every figure but
        ``latency_s`` (NaN) and ``edp`` (NaN), for searches whose objectives are throughput, energy and
        memory."""
        dev = self.check_devices(devices, bounds=self.memory is not None)
        if self.memory is not None:
            if overrides is not None or extras is not None:
                raise PlanError(f"the devices of cluster {self.problem.cluster.name!r} keep weights off chip: the "
                                "memory model gives their task costs and weight loads; per-plan overrides or extra "
                                "jobs cannot be added to it")
            if self._columns is not None:
                dev = np.ascontiguousarray(dev[:, self._columns])
            overrides, extras = self._memory_jobs(dev)
        n = len(dev)
        if overrides is not None:
            self._check_overrides(overrides, n)
            ov = tuple(np.ascontiguousarray(a.T, dtype=np.float64) for a in
                       (overrides.time_s, overrides.energy_j, overrides.mem_bytes, overrides.edge_bytes))
        else:
            ov = tuple(np.zeros((0, 0)) for _ in range(4))     # no rows: the kernel reads the tables
        xj = pack_extras(extras, n, self.problem.num_devices)
        out = kernel_outputs(n, self.problem.num_devices)
        args = (dev, self._tables, ov, self.kernel_structure(), self.kernel_net(), xj, latency, out)
        run_in_ranges(_evaluate_range, n, parallel_chunks(n, dev.shape[1] + len(self.tg.edge_src)), *args)
        if not out[-1].all():
            raise self.out_of_range()
        return self.metrics(out, extras)

    def kernel_structure(self) -> tuple[Any, ...]:
        """The task graph's arrays as ``plan_figures`` reads them (``st``), the segment rule's last (flat: a
        tuple in a tuple cannot reach the parallel kernel)."""
        st, tg = self.structure, self.tg
        return (st.edge_src, st.edge_dst, tg.edge_bytes, st.out_ptr, st.out_idx, st.source_edges, st.chain_ptr,
                st.chain_idx, st.indeg, *message_groups(tg), *segment_structure(self.problem, tg))

    def kernel_net(self) -> tuple[Any, ...]:
        """The cluster as ``plan_figures`` reads it (``net``): link tables, memory per device, source, sink,
        shared ports, then each device's CPU per message end (fixed, per byte; ``cluster.links``)."""
        cl = self.problem.cluster
        lk = cl.links
        return (*self._links, self.problem.memory_bytes.astype(np.float64),
                -1 if cl.source_index is None else cl.source_index,
                -1 if cl.sink_index is None else cl.sink_index, lk.shared, lk.end_s.copy(), lk.end_byte_s.copy(),
                lk.charges_ends)

    def metrics(self, out: tuple[np.ndarray, ...], extras: list[ExtraJobs] | None = None) -> BatchMetrics:
        """The BatchMetrics of the kernel's outputs (``kernel_outputs``) and the plans' extra jobs."""
        (compute, energy_dev, mem_dev, participates, latency, comm_e, comm_t, task_e, max_busy, max_link, bottleneck,
         fits, _) = out
        n, n_dev = compute.shape
        channel = np.zeros((n, n_dev))
        if extras:
            for p, x in enumerate(extras):
                np.add.at(channel[p], x.device, x.duration_s)
            bottleneck = np.maximum(bottleneck, channel.max(axis=1))
        with np.errstate(divide="ignore"):
            throughput = np.where(bottleneck > 0, 1.0 / bottleneck, np.inf)
        total_e = task_e + comm_e
        return BatchMetrics(throughput, bottleneck, latency, total_e, comm_e, comm_t, energy_dev, compute, mem_dev,
                            participates, fits, total_e * latency, max_busy, max_link, channel)

    def _memory_jobs(self, dev: np.ndarray) -> tuple[TaskOverrides, list[ExtraJobs]]:
        """The memory model's task costs and weight loads of every assignment (rows of ``dev``)."""
        n, t = dev.shape
        cols = np.arange(t)
        ov = TaskOverrides(np.empty((t, n)), np.empty((t, n)), np.empty((t, n)),
                           np.repeat(self.tg.edge_bytes[:, None], n, axis=1))
        assert self.memory is not None       # only for a problem with memory effects
        extras = []
        for p, row in enumerate(dev):
            pm = self.memory.plan(self.tg, row, self.costs)
            types = self.problem.device_type[row]
            ov.time_s[:, p], ov.energy_j[:, p] = pm.costs.time_s[cols, types], pm.costs.energy_j[cols, types]
            ov.mem_bytes[:, p] = pm.costs.mem_bytes[cols, types]
            extras.append(pm.extras)
        return ov, extras

    def _check_overrides(self, ov: TaskOverrides, n: int) -> None:
        t, e = self.tg.num_tasks, len(self.tg.edge_src)
        for name, arr, cols in (("time_s", ov.time_s, t), ("energy_j", ov.energy_j, t), ("mem_bytes", ov.mem_bytes, t),
                                ("edge_bytes", ov.edge_bytes, e)):
            if arr.shape != (cols, n):
                raise PlanError(f"overrides.{name} is {arr.shape}; it must be {(cols, n)} "
                                f"({'tasks' if cols == t else 'edges'} x plans)")


def evaluate_mappings(problem: SplitProblem, tg: TaskGraph, devices: np.ndarray | None = None,
                      costs: TaskCosts | None = None, extras: list[ExtraJobs] | None = None) -> BatchMetrics:
    """Metrics of N device assignments of ``tg`` (default: its own assignment)."""
    return MappingEvaluator(problem, tg, costs).evaluate(devices, extras=extras)


def message_groups(tg: TaskGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """How ``plan_figures`` walks the edges: the plain ones (between two tasks, the only reader of their
    payload: a message exactly when the ends differ), then the others grouped by payload (CSR: ptr,
    edges in edge order; a payload moves once per destination device, carried by its first edge
    there): first the groups between tasks (their count is returned last), then those of model inputs
    and outputs (their own rules)."""
    payload, src, dst = tg.edge_payload, tg.edge_src, tg.edge_dst
    readers = np.bincount(payload, minlength=len(tg.payloads))
    plain = (src >= 0) & (dst >= 0) & (readers[payload] == 1)
    io = np.zeros(len(tg.payloads), dtype=bool)
    np.logical_or.at(io, payload, (src < 0) | (dst < 0))
    rest = np.flatnonzero(~plain)
    order = rest[np.lexsort((rest, payload[rest], io[payload[rest]]))]
    ptr = np.flatnonzero(np.r_[True, payload[order][1:] != payload[order][:-1]]) if len(order) else np.zeros(0, int)
    ptr = np.r_[ptr, len(order)].astype(np.int64)
    internal = int((~io[payload[order[ptr[:-1]]]]).sum()) if len(order) else 0
    return np.flatnonzero(plain).astype(np.int64), ptr, order.astype(np.int64), internal


def segment_structure(problem: SplitProblem, tg: TaskGraph) -> tuple[Any, ...]:
    """What ``plan_figures`` reads to charge the segment rule (``estimate.segments``) on any assignment:
    whether anything is charged; the edges into each task (CSR: ptr, edges); the edges grouped by what
    crosses a boundary once, (payload, producer) (CSR: ptr, edges); per task, the task of its previous
    layer (``previous_layer_task``, shards too) and its unfused extra per type (T x types, flat); per type
    the call and per-byte seconds; per device its type; the number of types; per task, its layer if a
    shard (else -1)."""
    c = problem.costs
    on = c.charges_cuts
    src, dst = tg.edge_src.astype(np.int64), tg.edge_dst.astype(np.int64)
    keep = dst >= 0
    order = np.flatnonzero(keep)[np.argsort(dst[keep], kind="stable")]
    in_ptr = np.zeros(tg.num_tasks + 1, dtype=np.int64)
    np.cumsum(np.bincount(dst[keep], minlength=tg.num_tasks), out=in_ptr[1:])
    key = np.lexsort((np.arange(len(src)), src, tg.edge_payload))
    starts = np.flatnonzero(np.r_[True, (tg.edge_payload[key][1:] != tg.edge_payload[key][:-1])
                                  | (src[key][1:] != src[key][:-1])]) if len(key) else np.zeros(0, dtype=np.int64)
    b_ptr = np.r_[starts, len(key)].astype(np.int64)
    kinds = (*WHOLE_KINDS, "shard")
    prev = previous_layer_task(tg, kinds) if on else np.full(tg.num_tasks, -1, dtype=np.int64)
    unfused = unfused_table(problem, tg, kinds) if on else np.zeros((tg.num_tasks, len(c.types)))
    shard_of = np.array([t.layers[0] if t.kind == "shard" else -1 for t in tg.tasks], dtype=np.int64)
    return (on, in_ptr, order.astype(np.int64), b_ptr, key.astype(np.int64), prev,
            np.ascontiguousarray(unfused.ravel()), c.segment_call_s.copy(), c.segment_byte_s.copy(),
            problem.device_type.astype(np.int64), len(c.types), shard_of)


def kernel_outputs(n: int, n_dev: int) -> tuple[np.ndarray, ...]:
    """compute, energy, memory, participates (N x D); latency, comm energy, comm time, task energy,
    busiest link time (N); busiest link (N x 2, -1: none); bottleneck without memory channels, fits
    memory, device indices valid (N)."""
    return (np.zeros((n, n_dev)), np.zeros((n, n_dev)), np.zeros((n, n_dev)), np.zeros((n, n_dev), dtype=np.bool_),
            np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.full((n, 2), -1, dtype=np.int64),
            np.zeros(n), np.zeros(n, dtype=np.bool_), np.ones(n, dtype=np.bool_))


def pack_extras(extras: list[ExtraJobs] | None, n: int, n_dev: int) -> tuple[np.ndarray, ...]:
    """The plans' extra jobs as one CSR over plans: ptr (N+1), then duration, resource (the device's
    memory channel), after, before."""
    ptr = np.zeros(n + 1, dtype=np.int64)
    if not extras:
        z = np.zeros(0, dtype=np.int64)
        return ptr, np.zeros(0), z, z, z
    if len(extras) != n:
        raise PlanError(f"{len(extras)} sets of extra jobs for {n} plans")
    ptr[1:] = np.cumsum([len(x) for x in extras])
    dur, dev, after, before = (np.concatenate([np.asarray(getattr(x, f)) for x in extras]).astype(dtype)
                               for f, dtype in (("duration_s", np.float64), ("device", np.int64), ("after", np.int64),
                                                ("before", np.int64)))
    return ptr, dur, Resources(n_dev).channels + dev, after, before


@njit(cache=True, nogil=True)
def _evaluate_range(lo, hi, dev, tables, ov, st, net, xj, with_latency, out):
    """Plans ``lo..hi-1``: task costs from the (task, device) tables, or row p of the overrides (when they
    have a row per plan; none without overrides)."""
    x_ptr = xj[0]
    x_max = np.int64(0)
    for p in range(lo, hi):
        x_max = max(x_max, x_ptr[p + 1] - x_ptr[p])
    n_dev = out[0].shape[1]
    buf = plan_buffers(n_dev * n_dev + 3 * n_dev, dev.shape[1], len(st[0]), n_dev, x_max)
    plan_figures(lo, dev[lo:hi], ov[0][lo:hi], ov[1][lo:hi], ov[2][lo:hi], ov[3][lo:hi], tables, st, net, xj,
                 with_latency, out, buf)


@njit(cache=True)
def plan_buffers(n_res, t_count, e_count, n_dev, x_max):
    """Work arrays of ``plan_figures`` for one thread (allocated once per range of plans)."""
    return (scratch(n_res, t_count, e_count, x_max), np.empty(t_count), np.empty(e_count, dtype=np.int64),
            np.empty(e_count), np.empty(e_count, dtype=np.int64), np.full(e_count, -1, dtype=np.int64),
            np.zeros(n_dev * n_dev + n_dev), np.zeros(3 * n_dev), np.zeros(n_dev, dtype=np.bool_),
            np.zeros(n_dev, dtype=np.bool_), np.empty(n_dev, dtype=np.int64), np.zeros(max(e_count, 1), dtype=np.int64),
            np.empty(t_count, dtype=np.int64),
            (np.empty(t_count, dtype=np.int64), np.empty(n_dev, dtype=np.int64), np.zeros(t_count),
             np.zeros(t_count), np.empty(t_count, dtype=np.int64)))


@njit(cache=True)
def plan_segments(row, has_ov, ov_time, ov_bytes, e_src, e_dst, e_bytes, out_ptr, out_idx, sg, sbuf):
    """The segment rule (``estimate.segments``) on one assignment ``row``: each task's extra seconds into
    ``sbuf[2]``. Segments as ``TaskGraph.segments`` cuts them, task by task in topological order: a task
    starts a new segment on its device when the device has none yet or when it reads a tensor made on
    another device by a task at or after the current segment's first task. With per-plan costs
    (``has_ov``) a task of no time that sends no bytes is absent (an empty shard, as one input's schedule
    holds no device for it): it is in no segment, and an edge of no bytes makes no cut; a layer's only shard left is the layer whole (the plan
    has a whole-layer task there) and pays its unfused extra. Shards never pay it otherwise."""
    on, in_ptr, in_edges, b_ptr, b_edges, prev, unfused, call_s, byte_s, dev_type, n_types, shard_of = sg
    seg_id, first, extra, bnd, stamp = sbuf
    n_tasks = len(row)
    for d in range(len(first)):
        first[d] = -1
    for t in range(n_tasks):
        extra[t] = 0.0
        bnd[t] = 0.0
        stamp[t] = -1
        d = row[t]
        if has_ov and ov_time[t] == 0.0:
            carries = False
            for k in range(out_ptr[t], out_ptr[t + 1]):
                carries |= ov_bytes[out_idx[k]] > 0
            if not carries:
                seg_id[t] = -1
                continue
        new = first[d] < 0
        if not new:
            for k in range(in_ptr[t], in_ptr[t + 1]):
                e = in_edges[k]
                s = e_src[e]
                if s >= first[d] and row[s] != d and seg_id[s] >= 0 and (not has_ov or ov_bytes[e] > 0):
                    new = True
                    break
        if new:
            first[d] = t
            extra[t] = call_s[dev_type[d]]
        seg_id[t] = first[d]
    for g in range(len(b_ptr) - 1):         # what crosses a boundary: each (payload, producer) once a segment
        p = e_src[b_edges[b_ptr[g]]]
        out_nb = -1.0
        for j in range(b_ptr[g], b_ptr[g + 1]):
            e = b_edges[j]
            q = e_dst[e]
            nb = ov_bytes[e] if has_ov else e_bytes[e]
            if nb <= 0 or (p >= 0 and seg_id[p] < 0) or (q >= 0 and seg_id[q] < 0):
                continue
            if p >= 0 and q >= 0 and seg_id[p] == seg_id[q]:
                continue
            if q >= 0 and stamp[seg_id[q]] != g:
                stamp[seg_id[q]] = g
                bnd[seg_id[q]] += nb
            if p >= 0:
                out_nb = nb
        if out_nb >= 0:
            bnd[seg_id[p]] += out_nb
    for t in range(n_tasks):                 # stamp[l]: shards of layer l present (stamp is free again)
        stamp[t] = 0
    for t in range(n_tasks):
        if shard_of[t] >= 0 and seg_id[t] >= 0:
            stamp[shard_of[t]] += 1
    for t in range(n_tasks):
        if seg_id[t] < 0:
            continue
        ty = dev_type[row[t]]
        if seg_id[t] == t:
            extra[t] += byte_s[ty] * bnd[t]
        q = prev[t]
        whole = shard_of[t] < 0 or (has_ov and stamp[shard_of[t]] == 1)
        if whole and q >= 0 and seg_id[q] != seg_id[t]:
            extra[t] += unfused[t * n_types + ty]


@njit(cache=True, inline="always")
def _send(busy, u, v, x, top, top_res, shared_ports, ud):
    """Charge a message of ``x`` seconds from device u to v (unsigned) to the wires it holds
    (``cluster.links.wire_ids``: its link, or both devices' ports); the busiest resource so far (``_charge``)."""
    w0, w1 = wire_ids_jit(shared_ports, u, v, ud, np.uint64(0))
    top, top_res = _charge(busy, w0, x, top, top_res)
    if shared_ports:
        return _charge(busy, w1, x, top, top_res)
    return top, top_res


@njit(cache=True, inline="always")
def _record(e, x, u, v, n_dev, shared_ports, xfer, r0, r1):
    """What one input's schedule reads of edge e's message (``x`` seconds, u -> v): its time and resources."""
    xfer[e] = x
    w0, w1 = wire_ids_jit(shared_ports, u, v, n_dev, n_dev)
    r0[e] = w0
    if shared_ports:
        r1[e] = w1


@njit(cache=True, inline="always")
def _ends(acc, dur, with_latency, u, v, sender, reader, nb, end_s, end_b):
    """Charge a message's two ends (``cluster.links``) to the compute of devices u and v (unsigned), and to
    the durations of the task that sends it and the task that first reads it."""
    cs = end_time_jit(end_s[u], end_b[u], nb)
    cr = end_time_jit(end_s[v], end_b[v], nb)
    acc[np.uint64(3) * u] += cs
    acc[np.uint64(3) * v] += cr
    if with_latency:
        dur[sender] += cs
        dur[reader] += cr


@njit(cache=True, inline="always")
def _charge(busy, r, x, top, top_res):
    """Add ``x`` seconds to resource ``r`` (unsigned); the busiest so far (lowest index among equals; only
    one with a positive time counts)."""
    b = busy[r] + x
    busy[r] = b
    better = (b > top) | ((b == top) & (r < top_res))    # selects, not branches: which wins is unpredictable
    return (b if better else top), (r if better else top_res)


@njit(cache=True)
def plan_figures(p0, rows, ov_time, ov_energy, ov_mem, ov_bytes, tables, st, net, xj, with_latency, out, buf):
    """Every figure of plans ``p0 ..`` (devices: a row of ``rows`` each) into their rows of ``out``
    (``kernel_outputs``): task costs from ``tables`` (3 * (t * D + d) + time, energy, memory), or the
    plan's row of ``ov_*`` (per-task costs and per-edge bytes) when they have rows (a row per plan; no rows:
    the tables' costs and the structure's bytes); ``st``: the structure's
    arrays and message groups (``message_groups``); ``net``: link tables, memory per device and the
    cluster's source, sink and ports; ``xj``: the extra jobs (CSR over plans); ``buf``: ``plan_buffers``.
    A device index out of range marks its plan invalid. (The tuples are unpacked once for all plans:
    unpacking them costs more than a plan's figures.)"""
    (e_src, e_dst, e_bytes, out_ptr, out_idx, src_edges, chain_ptr, chain_idx, indeg0, plain, g_ptr, g_edges,
     g_tasks, s_on, s_in_ptr, s_in_edges, s_b_ptr, s_b_edges, s_prev, s_unfused, s_call, s_byte, s_type, s_types,
     s_shard) = st
    sg = (s_on, s_in_ptr, s_in_edges, s_b_ptr, s_b_edges, s_prev, s_unfused, s_call, s_byte, s_type, s_types, s_shard)
    lat, per_byte, joule, capacity, source, sink, shared_ports, end_s, end_b, ends = net
    x_ptr, x_dur, x_res, x_after, x_before = xj
    (compute, energy_dev, mem_dev, participates, latency, comm_e, comm_t, task_e, max_busy, max_link, bottleneck,
     fits, valid) = out
    work, dur, carrier, xfer, r0, r1, busy, acc, seen, moved, moved_edge, group_v, held, sbuf = buf  # group_v: in range
    charge = sg[0]
    has_ov = ov_time.shape[0] > 0    # a flag of the arrays, not an argument: a literal one compiles twice
    seg_extra = sbuf[2]
    n_dev = len(capacity)
    ports = n_dev * n_dev                # ``busy``: links u * D + v, then ports; schedule resources are D more
    # the hot loops index with unsigned integers: numba adds no wrap-around of negative indices to them
    u1, u2, u3, ud, none = np.uint64(1), np.uint64(2), np.uint64(3), np.uint64(n_dev), NO_RESOURCE
    p_src, p_dst, p_edge = e_src[plain].astype(np.uint64), e_dst[plain].astype(np.uint64), plain.astype(np.uint64)
    p_bytes = e_bytes[plain]
    for i in range(rows.shape[0]):
        p = p0 + i
        for k in range(len(acc)):
            acc[k] = 0.0
        for k in range(len(busy)):
            busy[k] = 0.0
        in_range = True
        for t in range(rows.shape[1]):
            in_range &= (rows[i, t] >= 0) & (rows[i, t] < n_dev)
        if not in_range:
            valid[p] = False
            continue
        row = rows[i]
        e_task = 0.0
        if charge:
            plan_segments(row, has_ov, ov_time[i] if has_ov else e_bytes, ov_bytes[i] if has_ov else e_bytes, e_src,
                          e_dst, e_bytes, out_ptr, out_idx, sg, sbuf)
        for ti in range(rows.shape[1]):
            tu = np.uint64(ti)
            du = np.uint64(row[tu])
            if has_ov:
                tt, te, tm = ov_time[i, tu], ov_energy[i, tu], ov_mem[i, tu]
            else:
                kt = u3 * (tu * ud + du)
                tt, te, tm = tables[kt], tables[kt + u1], tables[kt + u2]
            if charge:
                tt += seg_extra[tu]
            if with_latency:
                dur[tu] = tt
            acc[u3 * du] += tt
            acc[u3 * du + u1] += te
            acc[u3 * du + u2] += tm
            participates[p, du] = True
            e_task += te
        c_e, c_t, n_msg, top, top_res = 0.0, 0.0, np.int64(0), 0.0, none
        for k in range(len(p_edge)):         # one message exactly when the ends differ and it carries bytes
            ju = np.uint64(k)
            nb = ov_bytes[i, p_edge[ju]] if has_ov else p_bytes[ju]
            uu, vu = np.uint64(row[p_src[ju]]), np.uint64(row[p_dst[ju]])
            pu = uu * ud + vu
            if nb > 0 and uu != vu:
                x = message_time_jit(lat[pu], per_byte[pu], nb)
                eb = message_energy_jit(joule[pu], nb)
                if ends:
                    _ends(acc, dur, with_latency, uu, vu, p_src[ju], p_dst[ju], nb, end_s, end_b)
                acc[u3 * uu + u1] += eb
                acc[u3 * uu + u2] += nb
                acc[u3 * vu + u2] += nb
                c_e += eb
                c_t += x
                top, top_res = _send(busy, uu, vu, x, top, top_res, shared_ports, ud)
        for g in range(g_tasks):             # a payload read by several tasks: a message per other device
            lo, hi = g_ptr[g], g_ptr[g + 1]
            for j in range(lo, hi):
                e = g_edges[j]
                uu, vu = np.uint64(row[np.uint64(e_src[e])]), np.uint64(row[np.uint64(e_dst[e])])
                nb = ov_bytes[i, e] if has_ov else e_bytes[e]
                carrier[e] = -1
                if nb > 0 and uu != vu:
                    if moved[vu]:
                        carrier[e] = moved_edge[vu]
                        continue
                    moved[vu] = True
                    moved_edge[vu] = e
                    carrier[e] = e
                    pu = uu * ud + vu
                    x = message_time_jit(lat[pu], per_byte[pu], nb)
                    eb = message_energy_jit(joule[pu], nb)
                    if ends:
                        _ends(acc, dur, with_latency, uu, vu, np.uint64(e_src[e]), np.uint64(e_dst[e]), nb, end_s,
                              end_b)
                    if with_latency:
                        _record(e, x, np.int64(uu), np.int64(vu), n_dev, shared_ports, xfer, r0, r1)
                    top, top_res = _send(busy, uu, vu, x, top, top_res, shared_ports, ud)
                    n_msg += 1
                    acc[u3 * uu + u1] += eb
                    acc[u3 * uu + u2] += nb
                    acc[u3 * vu + u2] += nb
                    c_e += eb
                    c_t += x
            for j in range(lo, hi):
                moved[np.uint64(row[np.uint64(e_dst[g_edges[j]])])] = False
        for g in range(g_tasks, len(g_ptr) - 1):   # model inputs and outputs
            for j in range(g_ptr[g], g_ptr[g + 1]):
                e = g_edges[j]
                s, q = e_src[e], e_dst[e]
                nb = ov_bytes[i, e] if has_ov else e_bytes[e]
                if nb <= 0 and s >= 0 and q >= 0:   # nothing moves, nothing is held (a shard left empty)
                    carrier[e] = -1
                    continue
                u = rows[i, s] if s >= 0 else rows[i, 0]
                v = rows[i, q] if q >= 0 else rows[i, 0]
                if s < 0:
                    u = v if source < 0 else source
                if q < 0:
                    v = u if sink < 0 else sink
                group_v[j] = v
                first = not seen[v]
                seen[v] = True
                moves = (u != v) & (nb > 0)
                sent = moves & (not moved[v])   # the first edge to bring the payload to v carries it
                moved_edge[v] = e if sent else moved_edge[v]
                moved[v] |= moves
                carrier[e] = moved_edge[v] if moves else -1
                if sent:
                    pair = u * n_dev + v
                    x = message_time_jit(lat[pair], per_byte[pair], nb)
                    eb = message_energy_jit(joule[pair], nb)
                    if ends:      # the source and the sink run no task: their ends are charged nothing
                        if s >= 0:
                            c = end_time_jit(end_s[u], end_b[u], nb)
                            acc[3 * u] += c
                            if with_latency:
                                dur[s] += c
                        if q >= 0:
                            c = end_time_jit(end_s[v], end_b[v], nb)
                            acc[3 * v] += c
                            if with_latency:
                                dur[q] += c
                    _record(e, x, u, v, n_dev, shared_ports, xfer, r0, r1)
                    top, top_res = _send(busy, np.uint64(u), np.uint64(v), x, top, top_res, shared_ports, ud)
                    n_msg += 1
                    acc[3 * u + 1] += eb
                    c_e += eb
                    c_t += x
                if (sent and q >= 0) or (s < 0 and first):
                    acc[3 * v + 2] += nb
                if (sent and s >= 0) or q < 0:
                    acc[3 * u + 2] += nb
            for j in range(g_ptr[g], g_ptr[g + 1]):
                seen[group_v[j]] = False
                moved[group_v[j]] = False
        slowest, ok = top, True
        for d in range(n_dev):
            compute[p, d], energy_dev[p, d], mem_dev[p, d] = acc[3 * d], acc[3 * d + 1], acc[3 * d + 2]
            slowest = max(slowest, acc[3 * d])
            ok = ok and acc[3 * d + 2] <= capacity[d]
        bottleneck[p], fits[p] = slowest, ok
        task_e[p], comm_e[p], comm_t[p], max_busy[p] = e_task, c_e, c_t, top
        if top > 0:
            r = np.int64(top_res)
            if r < ports:
                max_link[p, 0], max_link[p, 1] = r // n_dev, r % n_dev
            else:
                max_link[p, 0], max_link[p, 1] = r - ports, r - ports
        if not with_latency:
            latency[p] = np.nan
            continue
        # the plain edges' messages for the schedule, apart: a search without latency needs none of them
        for e in plain:
            u, v = rows[i, e_src[e]], rows[i, e_dst[e]]
            nb = ov_bytes[i, e] if has_ov else e_bytes[e]
            carrier[e] = e if u != v and nb > 0 else -1
            if carrier[e] >= 0:
                _record(e, message_time_jit(lat[u * n_dev + v], per_byte[u * n_dev + v], nb), u, v, n_dev, shared_ports,
                        xfer, r0, r1)
                n_msg += 1
        for t in range(rows.shape[1]):       # a task of no duration that sends nothing holds no device
            held[t] = rows[i, t]
            if dur[t] == 0.0:
                sends = False
                for k in range(out_ptr[t], out_ptr[t + 1]):
                    sends |= (ov_bytes[i, out_idx[k]] if has_ov else e_bytes[out_idx[k]]) > 0
                if not sends:
                    held[t] = -1
        x0, x1 = x_ptr[p], x_ptr[p + 1]
        latency[p] = one_input(held, dur, carrier, xfer, r0, r1, n_msg, e_dst, out_ptr, out_idx, src_edges, chain_ptr,
                               chain_idx, indeg0, x_dur[x0:x1], x_res[x0:x1], x_after[x0:x1], x_before[x0:x1], work)
