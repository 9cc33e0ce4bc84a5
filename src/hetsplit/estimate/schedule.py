"""One input's schedule through a TaskGraph, for many device assignments at once (compiled).

The latency every fidelity reports (docs/architecture.md, "Latency"): one input alone in the
system, each resource running one job at a time and never idling while a job of its own is ready:

- *jobs*: every task (on its device), every message (``TaskGraph.messages``: a payload once per
  destination device, on its link), and the plan's extra jobs (``ExtraJobs``: e.g. an MCU loading
  a block's weights from L3, on the device's memory channel);
- a task is ready when each payload it reads is there (its message delivered, or its producer on
  the same device done) and, with a run order (``TaskGraph.chain``), when the task before it in its
  device's order is done; a message when its producer is done (a model input: at once); an extra
  job when the task it follows is done;
- when a resource is free, it starts the ready job with the lowest index (tasks in topological
  order; messages in message order); a message over a cluster with ``ports="shared"`` holds the
  ports of both its devices and starts, in message order, as soon as both are free;
- all jobs finishing at one instant are applied before any resource picks its next job;
- a task of no duration none of whose out-edges carries a byte stands for nothing (an empty shard
  slot of a hybrid template, which the plan itself leaves out): it holds no device and is done the
  instant it is ready. (Plans have no such task, so the simulator, which runs plans, has no such rule.)

The discrete-event simulator (``simulate.py``) applies the same rules to a stream of inputs; with
one input the two give the same latency (a property test checks it on random plans).

The per-plan loop is compiled with numba: the schedule's order depends on each plan's durations, so
it cannot be vectorized across plans, and in Python it runs ~100x slower (bench/evaluator_speed.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import njit

from hetsplit.plan.tasks import SOURCE, TaskGraph



@dataclass(frozen=True)
class ExtraJobs:
    """Jobs beyond tasks and messages, per plan: ``duration_s`` on ``device``'s memory channel,
    after task ``after`` is done (-1: at once), before task ``before`` may start (-1: nothing waits);
    ``part``: what their time counts as in a latency breakdown (e.g. "l3")."""

    duration_s: np.ndarray
    device: np.ndarray
    after: np.ndarray
    before: np.ndarray
    labels: tuple[str, ...] = ()
    part: str = "memory"

    @staticmethod
    def none() -> "ExtraJobs":
        z = np.zeros(0, dtype=np.int64)
        return ExtraJobs(np.zeros(0), z, z, z)

    def __len__(self) -> int:
        return len(self.duration_s)


@dataclass(frozen=True)
class Resources:
    """Resource numbering: devices ``0..D-1``; links ``D + u*D + v``; ports ``D + D*D + d``;
    memory channels ``D + D*D + D + d``."""

    num_devices: int

    @property
    def links(self) -> int:
        return self.num_devices

    @property
    def ports(self) -> int:
        return self.num_devices + self.num_devices ** 2

    @property
    def channels(self) -> int:
        return self.ports + self.num_devices

    @property
    def count(self) -> int:
        return self.channels + self.num_devices


@dataclass
class Structure:
    """Assignment-independent index arrays of a TaskGraph (CSR lists), built once."""

    edge_src: np.ndarray
    edge_dst: np.ndarray
    out_ptr: np.ndarray      # T+1: edges leaving task t are out_idx[out_ptr[t]:out_ptr[t+1]]
    out_idx: np.ndarray
    source_edges: np.ndarray
    chain_ptr: np.ndarray    # T+1: tasks that follow task t in its device's order
    chain_idx: np.ndarray
    indeg: np.ndarray        # T: edges into the task + its order predecessor

    @staticmethod
    def of(tg: TaskGraph) -> "Structure":
        t_count = tg.num_tasks
        src, dst = tg.edge_src.astype(np.int64), tg.edge_dst.astype(np.int64)
        out_ptr, out_idx = _csr(src, np.arange(len(src)), t_count)
        chain = tg.chain.reshape(-1, 2)
        chain_ptr, chain_idx = _csr(chain[:, 0], chain[:, 1], t_count)
        indeg = np.bincount(dst[dst >= 0], minlength=t_count) + np.bincount(chain[:, 1], minlength=t_count)
        return Structure(src, dst, out_ptr, out_idx, np.flatnonzero(src == SOURCE).astype(np.int64), chain_ptr,
                         chain_idx, indeg.astype(np.int64))


def _csr(keys: np.ndarray, values: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    keep = keys >= 0
    k, v = keys[keep], values[keep]
    order = np.argsort(k, kind="stable")
    ptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(k, minlength=n), out=ptr[1:])
    return ptr, v[order].astype(np.int64)


# ---- the compiled loop ----------------------------------------------------------------------------

Arr = np.ndarray
Scratch = tuple[Any, ...]      # scratch()'s work arrays and the heap capacity (an int), in one_input's order

@njit(cache=True, inline="always")
def _push(keys: np.ndarray, vals: np.ndarray, size: int, key: float, val: int) -> int:
    """Push (key, val) on a 4-ary min-heap by key held in keys[:size], vals[:size]. Ties come out in any
    order: every event of one instant is applied before any resource picks a job, and what each
    resource picks does not depend on the order the instant's events were applied in."""
    i = size
    while i > 0:
        p = (i - 1) >> 2
        if keys[p] <= key:
            break
        keys[i] = keys[p]
        vals[i] = vals[p]
        i = p
    keys[i] = key
    vals[i] = val
    return size + 1


@njit(cache=True, inline="always")
def _pop(keys: np.ndarray, vals: np.ndarray, size: int) -> int:
    """Remove the heap's top; return the new size (the top was keys[0], vals[0] before the call)."""
    size -= 1
    key, val = keys[size], vals[size]
    i = 0
    while True:
        a = 4 * i + 1
        if a >= size:
            break
        m = a
        for c in range(a + 1, min(a + 4, size)):
            if keys[c] < keys[m]:
                m = c
        if key <= keys[m]:
            break
        keys[i] = keys[m]
        vals[i] = vals[m]
        i = m
    keys[i] = key
    vals[i] = val
    return size


@njit(cache=True, inline="always")
def _ipush(heap: np.ndarray, r: int, stride: int, size: int, job: int) -> int:
    """Push ``job`` on resource r's int min-heap, whose position i is heap[i * stride + r] (the heaps
    interleaved: their tops, where nearly every access falls, share a few cache lines)."""
    i = size
    while i > 0:
        p = (i - 1) >> 1
        if heap[p * stride + r] <= job:
            break
        heap[i * stride + r] = heap[p * stride + r]
        i = p
    heap[i * stride + r] = job
    return size + 1


@njit(cache=True, inline="always")
def _ipop(heap: np.ndarray, r: int, stride: int, size: int) -> int:
    """Remove the top of resource r's int min-heap (see ``_ipush``); return the new size."""
    size -= 1
    job = heap[size * stride + r]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        if a + 1 < size and heap[(a + 1) * stride + r] < heap[a * stride + r]:
            a += 1
        if job <= heap[a * stride + r]:
            break
        heap[i * stride + r] = heap[a * stride + r]
        i = a
    heap[i * stride + r] = job
    return size


@njit(cache=True)
def scratch(n_res: int, t_count: int, e_count: int, x_max: int) -> Scratch:
    """Work arrays for ``one_input`` (allocated once per batch), in the order it unpacks them."""
    jobs, edges, tasks = t_count + e_count + x_max, max(e_count, 1), max(t_count, 1)
    i64 = np.int64
    return (np.empty(n_res * (jobs + 1), dtype=i64), n_res,               # heap (interleaved), cap
            np.zeros(n_res, dtype=i64), np.zeros(n_res, dtype=np.bool_),     # hsize, busy
            np.empty(jobs + 1), np.empty(jobs + 1, dtype=i64),               # ev_t, ev_j
            np.empty(tasks, dtype=i64), np.empty(4 * jobs + 4, dtype=i64),   # remaining, touched
            np.zeros(edges, dtype=np.bool_),                                 # wait2
            np.empty(edges, dtype=i64), np.empty(edges, dtype=i64),          # alias_head, alias_next
            np.empty(tasks, dtype=i64), np.empty(x_max + 1, dtype=i64),      # ext_head, ext_next
            np.empty(jobs + 2, dtype=i64),                                   # zero
            np.empty(edges, dtype=i64), np.empty(2 * edges + t_count + x_max + 1, dtype=i64),  # out_e, got_t
            np.empty(jobs + 1, dtype=i64), np.empty(jobs + 1, dtype=i64))    # rdy_r, rdy_j


@njit(cache=True)
def one_input(dev: Arr, dur: Arr, carrier: Arr, xfer: Arr, r0: Arr, r1: Arr, n_messages: int | np.int64, e_dst: Arr,
              out_ptr: Arr, out_idx: Arr, src_edges: Arr, chain_ptr: Arr, chain_idx: Arr, indeg0: Arr, x_dur: Arr, x_res: Arr,
              x_after: Arr, x_before: Arr, work: Scratch) -> float:
    """One input's latency under one assignment (module docstring), NaN when some job never runs.

    Per task: ``dev`` (-1: it holds none, see the module docstring), ``dur``; per edge: ``carrier``
    (the edge whose message brings its payload, -1: nothing moves), ``xfer`` (that message's seconds),
    ``r0``/``r1`` (its resources, -1: none); ``n_messages`` edges carry their own message; extra jobs
    ``x_*``; ``work``: ``scratch(...)``.

    What a completion releases goes through three work lists, settled in one place: edges whose
    producer is done, tasks one of whose inputs arrived, and jobs ready on a resource. (Helpers
    inlined with array arguments would cost a reference-count update per array per call.)"""
    (heap, cap, hsize, busy, ev_t, ev_j, remaining, touched, wait2, alias_head, alias_next, ext_head, ext_next, zero,
     out_e, got_t, rdy_r, rdy_j) = work
    t_count, e_count, n_x = len(dev), len(carrier), len(x_dur)
    jt, je = t_count, t_count + e_count      # job ids: tasks, then messages (by edge), then extra jobs
    for t in range(t_count):
        remaining[t] = indeg0[t]
        ext_head[t] = -1
    for e in range(e_count):
        alias_head[e] = -1
        wait2[e] = False
    for e in range(e_count - 1, -1, -1):
        c = carrier[e]
        if c >= 0:
            alias_next[e] = alias_head[c]
            alias_head[c] = e
    for x in range(n_x - 1, -1, -1):
        if x_after[x] >= 0:
            ext_next[x] = ext_head[x_after[x]]
            ext_head[x_after[x]] = x
        if x_before[x] >= 0:
            remaining[x_before[x]] += 1
    total = t_count + n_x + n_messages
    n_touch, ev, any2, n_zero, n_e, n_t, n_r = 0, 0, False, 0, 0, 0, 0
    for t in range(t_count):                   # the input arrives: what waits for nothing is reached once
        if remaining[t] == 0:
            remaining[t] = 1
            got_t[n_t] = t
            n_t += 1
    for k in range(len(src_edges)):
        out_e[n_e] = src_edges[k]
        n_e += 1
    for x in range(n_x):
        if x_after[x] < 0:
            rdy_r[n_r], rdy_j[n_r] = x_res[x], je + x
            n_r += 1
    now, done = 0.0, 0
    while True:
        for q in range(n_e):                   # settle: edges whose producer is done ...
            e = out_e[q]
            c = carrier[e]
            if c < 0:
                if e_dst[e] >= 0:
                    got_t[n_t] = e_dst[e]
                    n_t += 1
            elif c == e:
                if r1[e] < 0:
                    rdy_r[n_r], rdy_j[n_r] = r0[e], jt + e
                    n_r += 1
                else:
                    wait2[e] = True
                    any2 = True
        n_e = 0
        for q in range(n_t):                   # ... tasks one of whose inputs arrived ...
            t = got_t[q]
            remaining[t] -= 1
            if remaining[t] == 0:
                if dev[t] < 0:
                    zero[n_zero] = t
                    n_zero += 1
                else:
                    rdy_r[n_r], rdy_j[n_r] = dev[t], t
                    n_r += 1
        n_t = 0
        for q in range(n_r):                   # ... jobs ready on a resource
            r = rdy_r[q]
            hsize[r] = _ipush(heap, r, cap, hsize[r], rdy_j[q])
            touched[n_touch] = r
            n_touch += 1
        n_r = 0
        if n_zero > 0:                         # the next completion at this instant
            n_zero -= 1
            j = zero[n_zero]
        elif ev > 0 and ev_t[0] == now:
            j = ev_j[0]
            ev = _pop(ev_t, ev_j, ev)
        else:                                  # all of this instant's are applied
            for k in range(n_touch):           # every free resource starts its lowest ready job
                r = touched[k]
                if busy[r] or hsize[r] == 0:
                    continue
                j = heap[r]
                hsize[r] = _ipop(heap, r, cap, hsize[r])
                busy[r] = True
                d = dur[j] if j < jt else (xfer[j - jt] if j < je else x_dur[j - je])
                if d == 0.0:
                    zero[n_zero] = j
                    n_zero += 1
                else:
                    ev = _push(ev_t, ev_j, ev, now + d, j)
            n_touch = 0
            if any2:                           # messages holding two ports, in message order
                any2 = False
                for e in range(e_count):
                    if wait2[e]:
                        if busy[r0[e]] or busy[r1[e]]:
                            any2 = True
                            continue
                        wait2[e] = False
                        busy[r0[e]] = True
                        busy[r1[e]] = True
                        ev = _push(ev_t, ev_j, ev, now + xfer[e], jt + e)
            if n_zero == 0:
                if ev == 0:
                    break
                now = ev_t[0]                  # the next instant
            continue
        done += 1
        if j < jt:
            if dev[j] >= 0:
                busy[dev[j]] = False
                touched[n_touch] = dev[j]
                n_touch += 1
            for k in range(out_ptr[j], out_ptr[j + 1]):
                out_e[n_e] = out_idx[k]
                n_e += 1
            for k in range(chain_ptr[j], chain_ptr[j + 1]):
                got_t[n_t] = chain_idx[k]
                n_t += 1
            x = ext_head[j]
            while x >= 0:
                rdy_r[n_r], rdy_j[n_r] = x_res[x], je + x
                n_r += 1
                x = ext_next[x]
        elif j < je:
            e = j - jt
            busy[r0[e]] = False
            if r1[e] >= 0:
                busy[r1[e]] = False
                any2 = True
            else:
                touched[n_touch] = r0[e]
                n_touch += 1
            f = alias_head[e]
            while f >= 0:
                if e_dst[f] >= 0:
                    got_t[n_t] = e_dst[f]
                    n_t += 1
                f = alias_next[f]
        else:
            x = j - je
            busy[x_res[x]] = False
            touched[n_touch] = x_res[x]
            n_touch += 1
            if x_before[x] >= 0:
                got_t[n_t] = x_before[x]
                n_t += 1
    if done == total:                          # every heap is empty and every resource free again
        return now
    hsize[:] = 0
    busy[:] = False
    return np.nan
