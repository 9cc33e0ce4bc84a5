"""The closed-form evaluator of mappings, over many device assignments of one TaskGraph (compiled).

Semantics (docs/architecture.md, "The estimator"), for a stream of inputs:
- per-device compute = the sum of its tasks' times; a link's busy time = its bytes / bandwidth +
  its latency per message, where a message is one payload sent once from one device to another
  (with ``ports="shared"``: a device port's busy time = every message in or out of the device); a
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

import numpy as np
from numba import get_num_threads, njit, prange

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.batch import BatchMetrics
from hetsplit.estimate.memory import MemoryEffects
from hetsplit.estimate.schedule import ExtraJobs, Resources, Structure, one_input, scratch
from hetsplit.estimate.task_costs import TaskCosts, task_costs
from hetsplit.plan.tasks import TaskGraph


PARALLEL_MIN = 512   # fewer plans than this per thread: one thread (starting threads costs more)
PARALLEL_MIN_JOBS = 150_000   # ... or fewer tasks and edges than this over its plans


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
        self.tg, self._columns = (tg, None) if self.memory is None else self.memory.split(tg)
        reuse = costs is not None and self.tg is tg
        self.costs = costs if reuse else task_costs(problem, self.tg)
        self.structure = Structure.of(self.tg)
        types = problem.device_type  # per (task, device) costs, flattened as t * D + d
        self._tables = tuple(np.ascontiguousarray(a[:, types].ravel(), dtype=np.float64)
                             for a in (self.costs.time_s, self.costs.energy_j, self.costs.mem_bytes))
        self._links = _link_tables(problem)

    def check_devices(self, devices: np.ndarray | None) -> np.ndarray:
        """Assignments of the given task graph's tasks, validated (N x T)."""
        tasks = self.given.num_tasks
        dev = self.given.device[None, :] if devices is None else np.atleast_2d(np.asarray(devices, dtype=np.int64))
        if dev.shape[1] != tasks:
            raise PlanError(f"an assignment has {dev.shape[1]} entries; the task graph has {tasks} tasks")
        if dev.size and (dev.min() < 0 or dev.max() >= self.problem.num_devices):
            raise PlanError(f"device indices must be in 0..{self.problem.num_devices - 1}")
        return np.ascontiguousarray(dev, dtype=np.int64)

    def evaluate(self, devices: np.ndarray | None = None, overrides: TaskOverrides | None = None,
                 extras: list[ExtraJobs] | None = None, latency: bool = True) -> BatchMetrics:
        """Metrics of every assignment (rows of ``devices``; default: the plan's own), with the task
        costs and edge bytes of ``overrides`` and the extra jobs of ``extras`` (one per plan) where given
        (the memory model's own, plan by plan, on a problem that has one).

        ``latency=False`` leaves out one input's schedule (most of the time per plan): every figure but
        ``latency_s`` (NaN) and ``edp`` (NaN), for searches whose objectives are throughput, energy and
        memory."""
        dev = self.check_devices(devices)
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
            ov = tuple(np.zeros((1, 0)) for _ in range(4))
        xj = pack_extras(extras, n, self.problem.num_devices)
        out = kernel_outputs(n, self.problem.num_devices)
        args = (dev, self._tables, ov, overrides is not None, self.kernel_structure(), self.kernel_net(), xj, latency,
                out)
        chunks = parallel_chunks(n, dev.shape[1] + len(self.tg.edge_src))
        if chunks > 1:
            _evaluate(*args, chunks)
        else:  # no thread pool for a few plans: starting it costs more than they take
            _evaluate_range(0, n, *args)
        return self.metrics(out, extras)

    def kernel_structure(self) -> tuple:
        """The task graph's arrays as ``plan_figures`` reads them (``st``)."""
        st, tg = self.structure, self.tg
        return (st.edge_src, st.edge_dst, tg.edge_bytes, tg.edge_payload, st.out_ptr, st.out_idx, st.source_edges,
                st.chain_ptr, st.chain_idx, st.indeg, len(tg.payloads))

    def kernel_net(self) -> tuple:
        """The cluster as ``plan_figures`` reads it (``net``): link tables, source, sink, shared ports."""
        cl = self.problem.cluster
        return (*self._links, -1 if cl.source_index is None else cl.source_index,
                -1 if cl.sink_index is None else cl.sink_index, cl.ports == "shared")

    def metrics(self, out: tuple[np.ndarray, ...], extras: list[ExtraJobs] | None = None) -> BatchMetrics:
        """The BatchMetrics of the kernel's outputs (``kernel_outputs``) and the plans' extra jobs."""
        compute, energy_dev, mem_dev, participates, latency, comm_e, comm_t, task_e, max_busy, max_link = out
        n, n_dev = compute.shape
        channel = np.zeros((n, n_dev))
        for p, x in enumerate(extras or ()):
            np.add.at(channel[p], x.device, x.duration_s)
        bottleneck = np.maximum(np.maximum(compute.max(axis=1), max_busy), channel.max(axis=1))
        with np.errstate(divide="ignore"):
            throughput = np.where(bottleneck > 0, 1.0 / bottleneck, np.inf)
        total_e = task_e + comm_e
        fits = (mem_dev <= self.problem.memory_bytes[None, :]).all(axis=1)
        return BatchMetrics(throughput, bottleneck, latency, total_e, comm_e, comm_t, energy_dev, compute, mem_dev,
                            participates, fits, total_e * latency, max_busy, max_link, channel)

    def _memory_jobs(self, dev: np.ndarray) -> tuple[TaskOverrides, list[ExtraJobs]]:
        """The memory model's task costs and weight loads of every assignment (rows of ``dev``)."""
        n, t = dev.shape
        cols = np.arange(t)
        ov = TaskOverrides(np.empty((t, n)), np.empty((t, n)), np.empty((t, n)),
                           np.repeat(self.tg.edge_bytes[:, None], n, axis=1))
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


def _link_tables(problem: SplitProblem) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Latency, seconds per byte and joules per byte of every (u, v) pair, flattened (u * D + v);
    zero on the diagonal (a device does not send to itself)."""
    cl = problem.cluster
    off = ~np.eye(problem.num_devices, dtype=bool)
    with np.errstate(divide="ignore"):
        per_byte = np.where(off, 1.0 / cl.bandwidth, 0.0)
    return (np.where(off, cl.latency_s, 0.0).ravel(), per_byte.ravel(), np.where(off, cl.energy_per_byte, 0.0).ravel())


def parallel_chunks(n: int, jobs: int = 0) -> int:
    """Ranges of plans to evaluate in parallel: one per thread, each of at least PARALLEL_MIN plans or
    PARALLEL_MIN_JOBS tasks and edges (plans of large task graphs are worth a thread sooner)."""
    per_thread = min(PARALLEL_MIN, max(1, PARALLEL_MIN_JOBS // max(jobs, 1)))
    return max(1, min(get_num_threads(), n // per_thread))


def kernel_outputs(n: int, n_dev: int) -> tuple[np.ndarray, ...]:
    """compute, energy, memory, participates (N x D); latency, comm energy, comm time, task energy,
    busiest link time (N); busiest link (N x 2, -1: none)."""
    return (np.zeros((n, n_dev)), np.zeros((n, n_dev)), np.zeros((n, n_dev)), np.zeros((n, n_dev), dtype=np.bool_),
            np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n), np.full((n, 2), -1, dtype=np.int64))


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


@njit(cache=True)
def plan_buffers(n_res, t_count, e_count, n_payloads, n_dev, x_max):
    """Work arrays of ``plan_figures`` for one thread (allocated once per range of plans)."""
    res_channels = n_res - n_dev
    return (scratch(n_res, t_count, e_count, x_max), np.empty(t_count), np.empty(e_count, dtype=np.int64),
            np.empty(e_count), np.empty(e_count, dtype=np.int64), np.full(e_count, -1, dtype=np.int64),
            np.zeros(res_channels), np.zeros(res_channels, dtype=np.int64), np.empty(2 * e_count + 1, dtype=np.int64),
            np.zeros(n_payloads * n_dev, dtype=np.int64), np.zeros(n_payloads * n_dev, dtype=np.int64),
            np.empty(n_payloads * n_dev, dtype=np.int64))


@njit(cache=True, parallel=True)
def _evaluate(dev, tables, ov, has_ov, st, net, xj, with_latency, out, chunks):
    """Every plan's figures, the plans split into ``chunks`` ranges evaluated on parallel threads."""
    n = dev.shape[0]
    for c in prange(chunks):
        _evaluate_range(c * n // chunks, (c + 1) * n // chunks, dev, tables, ov, has_ov, st, net, xj, with_latency,
                        out)


@njit(cache=True)
def _evaluate_range(lo, hi, dev, tables, ov, has_ov, st, net, xj, with_latency, out):
    """Plans ``lo..hi-1``: task costs from the (task, device) tables, or row p of the overrides."""
    x_ptr = xj[0]
    x_max = 0
    for p in range(lo, hi):
        x_max = max(x_max, x_ptr[p + 1] - x_ptr[p])
    n_dev = out[0].shape[1]
    buf = plan_buffers(n_dev * n_dev + 3 * n_dev, dev.shape[1], len(st[0]), st[10], n_dev, x_max)
    for p in range(lo, hi):
        if has_ov:
            plan_figures(p, dev[p], True, ov[0][p], ov[1][p], ov[2][p], ov[3][p], tables, st, net, xj, with_latency,
                         out, buf)
        else:
            plan_figures(p, dev[p], False, ov[0][0], ov[1][0], ov[2][0], ov[3][0], tables, st, net, xj, with_latency,
                         out, buf)


@njit(cache=True)
def plan_figures(p, row, has_ov, ov_time, ov_energy, ov_mem, ov_bytes, tables, st, net, xj, with_latency, out, buf):
    """Every figure of plan ``p`` (devices ``row``) into row p of ``out`` (``kernel_outputs``): task costs from
    ``tables`` (flattened t * D + d), or ``ov_*`` (this plan's per-task costs and per-edge bytes) when
    ``has_ov``; ``st``: the structure's arrays, ``net``: link tables and the cluster's source, sink and
    ports; ``xj``: the extra jobs (CSR over plans); ``buf``: ``plan_buffers`` (stamps: p + 1)."""
    t_time, t_energy, t_mem = tables
    e_src, e_dst, e_bytes, e_payload, out_ptr, out_idx, src_edges, chain_ptr, chain_idx, indeg0, _ = st
    lat, per_byte, joule, source, sink, shared_ports = net
    x_ptr, x_dur, x_res, x_after, x_before = xj
    compute, energy_dev, mem_dev, participates, latency, comm_e, comm_t, task_e, max_busy, max_link = out
    work, dur, carrier, xfer, r0, r1, busy, busy_stamp, used, first_stamp, moved_stamp, moved_edge = buf
    t_count = len(row)
    e_count = len(e_src)
    n_dev = compute.shape[1]
    res_links = n_dev
    res_ports = n_dev + n_dev * n_dev
    stamp = p + 1
    e_task = 0.0
    for t in range(t_count):
        d = row[t]
        if has_ov:
            tt, te, tm = ov_time[t], ov_energy[t], ov_mem[t]
        else:
            k = t * n_dev + d
            tt, te, tm = t_time[k], t_energy[k], t_mem[k]
        dur[t] = tt
        compute[p, d] += tt
        energy_dev[p, d] += te
        mem_dev[p, d] += tm
        participates[p, d] = True
        e_task += te
    task_e[p] = e_task
    c_e, c_t, top, top_res, n_msg, n_used = 0.0, 0.0, 0.0, -1, 0, 0
    for e in range(e_count):
        s, q = e_src[e], e_dst[e]
        u = row[s] if s >= 0 else row[0]
        v = row[q] if q >= 0 else row[0]
        if s < 0:
            u = v if source < 0 else source
        if q < 0:
            v = u if sink < 0 else sink
        nb = ov_bytes[e] if has_ov else e_bytes[e]
        key = e_payload[e] * n_dev + v
        first = first_stamp[key] != stamp
        if first:
            first_stamp[key] = stamp
        sent = False
        if u != v and nb > 0:
            if moved_stamp[key] != stamp:
                moved_stamp[key] = stamp
                moved_edge[key] = e
                sent = True
            pair = u * n_dev + v
            x = lat[pair] + nb * per_byte[pair]
            if with_latency:                  # what one input's schedule reads
                carrier[e] = moved_edge[key]
                xfer[e] = x
                if shared_ports:
                    r0[e], r1[e] = res_ports + u, res_ports + v
                else:
                    r0[e] = res_links + pair
            if sent:
                n_msg += 1
                eb = nb * joule[pair]
                energy_dev[p, u] += eb
                c_e += eb
                c_t += x
                for k in range(2 if shared_ports else 1):
                    r = (res_ports + (u if k == 0 else v)) if shared_ports else res_links + pair
                    if busy_stamp[r] != stamp:
                        busy_stamp[r] = stamp
                        busy[r] = 0.0
                        used[n_used] = r
                        n_used += 1
                    busy[r] += x
        elif with_latency:
            carrier[e] = -1
            xfer[e] = 0.0
        if (sent and q >= 0) or (s < 0 and first):
            mem_dev[p, v] += nb
        if (sent and s >= 0) or q < 0:
            mem_dev[p, u] += nb
    for k in range(n_used):               # the busiest link or port (lowest index among equals)
        r = used[k]
        if busy[r] > top or (busy[r] == top and top > 0 and r < top_res):
            top, top_res = busy[r], r
    comm_e[p], comm_t[p], max_busy[p] = c_e, c_t, top
    if top_res >= 0:
        if top_res < res_ports:
            max_link[p, 0], max_link[p, 1] = (top_res - res_links) // n_dev, (top_res - res_links) % n_dev
        else:
            max_link[p, 0], max_link[p, 1] = top_res - res_ports, top_res - res_ports
    if not with_latency:
        latency[p] = np.nan
        return
    x0, x1 = x_ptr[p], x_ptr[p + 1]
    latency[p] = one_input(row, dur, carrier, xfer, r0, r1, n_msg, e_dst, out_ptr, out_idx, src_edges, chain_ptr,
                           chain_idx, indeg0, x_dur[x0:x1], x_res[x0:x1], x_after[x0:x1], x_before[x0:x1], work)
