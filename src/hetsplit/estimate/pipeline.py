"""The closed-form pipeline evaluator, vectorized over many plans at once.

Pipeline semantics (DESIGN.md): each stage runs consecutive layers on one device; every cut between
two stages moves ``cut_bytes[k]`` (all tensors live across it) over the link between their devices;
compute and communication overlap, so the bottleneck is the largest per-device compute time or
per-link transfer time (a link carrying two cuts carries both; with ``ports="shared"`` a device's
port carries every cut in or out of it) and throughput is its inverse; latency is the sum of every stage and transfer; energy
is the sum of compute and transfer energy. With a cluster ``source`` the model input first moves
from the source to the first stage (``cut_bytes[0]``); with a ``sink`` the outputs move from the
last stage to the sink (``cut_bytes[L]``). A device that runs several stages adds up their compute.
Each stage is one segment (``SplitProblem.stage_time``): its layers plus one executor call, the bytes
crossing its boundary and its first layer's unfused extra on the device's type (``costs.segment``).
Transfer energy is charged to the sending device.

A batch of N plans with at most S stages is two integer arrays: ``bounds`` (N x S+1, stage s runs
layers ``bounds[n, s] .. bounds[n, s+1]-1``) and ``devices`` (N x S). Unused stages come last, with
device -1 and zero length (their bounds equal L).
"""

from __future__ import annotations

import numpy as np

from hetsplit.cluster.links import wire_ids
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.batch import BatchMetrics, concat_metrics
from hetsplit.estimate.mapping import evaluate_mappings
from hetsplit.estimate.memory import has_memory_model
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Plan, Stage


def check_batch(problem: SplitProblem, bounds: np.ndarray, devices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Validate shapes and values of a plan batch; return them as int64 arrays."""
    b = np.atleast_2d(np.asarray(bounds, dtype=np.int64))
    d = np.atleast_2d(np.asarray(devices, dtype=np.int64))
    n_layers, n_dev = problem.num_layers, problem.num_devices
    if b.shape[0] != d.shape[0] or b.shape[1] != d.shape[1] + 1:
        raise PlanError(f"bounds {b.shape} and devices {d.shape} do not describe the same plans (need N x S+1, N x S)")
    if (b[:, 0] != 0).any() or (b[:, -1] != n_layers).any():
        raise PlanError(f"stage bounds must start at 0 and end at {n_layers} (the number of layers)")
    if (np.diff(b, axis=1) < 0).any():
        raise PlanError("stage bounds must not decrease")
    if ((d < -1) | (d >= n_dev)).any():
        raise PlanError(f"device indices must be in 0..{n_dev - 1} (or -1 for an unused stage)")
    used = d >= 0
    length = np.diff(b, axis=1)
    if (used & (length == 0)).any() or (~used & (length > 0)).any():
        raise PlanError("a stage has a device but no layers, or layers but no device")
    if (used[:, 1:] & ~used[:, :-1]).any():
        raise PlanError("unused stages (device -1) must come after all used stages")
    return b, d


def _busiest(tt: np.ndarray, lu: np.ndarray, lv: np.ndarray, n_dev: int, shared: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per plan, the busiest wire and its time: the sum of the transfers it carries (N x K transfers
    ``tt`` from ``lu`` to ``lv``). A wire is a directed link, or with ``shared`` ports a device's
    port, which carries every transfer in or out of it. Returns (time, N x 2 (u, v); (d, d) for a
    port; -1 when nothing moves); ties go to the lowest wire index (links u * D + v, then ports)."""
    n = len(tt)
    w0, w1 = wire_ids(shared, lu.astype(np.int64), lv.astype(np.int64), n_dev, 0)   # ``cluster.links``
    if shared:
        wire = np.concatenate([w0, w1], axis=1)
        time = np.concatenate([tt, tt], axis=1)
    else:
        wire, time = w0, tt
    wire = np.where(time > 0, wire, -1)
    width = n_dev * n_dev + n_dev
    flat = (np.arange(n)[:, None] * width + wire)[wire >= 0]
    ids, inverse = np.unique(flat, return_inverse=True)
    per_wire = np.bincount(inverse, weights=time[wire >= 0])
    busy = np.zeros(wire.shape)
    busy[wire >= 0] = per_wire[inverse]
    busy_key = np.where(wire >= 0, busy, -1.0)
    top = busy_key.max(axis=1)
    pick = np.where((busy_key == top[:, None]) & (wire >= 0), wire, width).min(axis=1)
    max_tr = np.maximum(top, 0.0)
    link = np.full((n, 2), -1, dtype=np.int64)
    has = max_tr > 0
    port = pick >= n_dev * n_dev
    link[has & ~port] = np.stack([pick // n_dev, pick % n_dev], axis=1)[has & ~port]
    d = pick - n_dev * n_dev
    link[has & port] = np.stack([d, d], axis=1)[has & port]
    return max_tr, link


def evaluate_pipelines(problem: SplitProblem, bounds: np.ndarray, devices: np.ndarray) -> BatchMetrics:
    """Metrics of every plan in a batch, with array operations only (no loop over plans); on a
    cluster whose devices keep weights off chip, plan by plan through the TaskGraph, where the memory
    model places each chip's weights (``memory.py``)."""
    b, d = check_batch(problem, bounds, devices)
    if has_memory_model(problem):
        return _through_tasks(problem, b, d)
    n, s_max = d.shape
    n_dev = problem.num_devices
    rows = np.arange(n)
    active = d >= 0
    dev = np.where(active, d, 0)
    starts, ends = b[:, :-1], b[:, 1:]
    types = problem.device_type[dev]
    comp_t = np.where(active, problem.stage_time(starts, ends, dev), 0.0)
    comp_e = np.where(active, problem.costs.range_energy(starts, ends, types), 0.0)
    mem = np.where(active, problem.costs.range_mem(starts, ends, types)
                   + problem.cut_bytes[starts] + problem.cut_bytes[ends], 0.0)

    compute_dev = np.zeros((n, n_dev))
    energy_dev = np.zeros((n, n_dev))
    mem_dev = np.zeros((n, n_dev))
    participates = np.zeros((n, n_dev), dtype=bool)
    for s in range(s_max):
        a = active[:, s]
        compute_dev[rows, dev[:, s]] += comp_t[:, s]
        energy_dev[rows, dev[:, s]] += comp_e[:, s]
        mem_dev[rows, dev[:, s]] += mem[:, s]
        participates[rows[a], dev[a, s]] = True

    # transfers: between consecutive used stages, plus source -> first and last -> sink
    transfers_t: list[np.ndarray] = []
    transfers_e: list[np.ndarray] = []
    links: list[tuple[np.ndarray, np.ndarray]] = []
    for s in range(s_max - 1):
        has = active[:, s + 1]
        u, v, k = dev[:, s], dev[:, s + 1], ends[:, s]
        t = np.where(has, problem.cut_time(k, u, v), 0.0)
        e = np.where(has, problem.cut_energy(k, u, v), 0.0)
        energy_dev[rows, u] += e
        transfers_t.append(t)
        transfers_e.append(e)
        links.append((u, v))
    src, snk = problem.cluster.source_index, problem.cluster.sink_index
    if src is not None:
        first = dev[:, 0]
        t = problem.cut_time(np.zeros(n, dtype=np.int64), np.full(n, src), first)
        e = problem.cut_energy(np.zeros(n, dtype=np.int64), np.full(n, src), first)
        energy_dev[:, src] += e
        transfers_t.append(t)
        transfers_e.append(e)
        links.append((np.full(n, src), first))
    if snk is not None:
        last = dev[rows, active.sum(axis=1) - 1]
        k_end = np.full(n, problem.num_layers)
        t = problem.cut_time(k_end, last, np.full(n, snk))
        e = problem.cut_energy(k_end, last, np.full(n, snk))
        energy_dev[rows, last] += e
        transfers_t.append(t)
        transfers_e.append(e)
        links.append((last, np.full(n, snk)))

    if transfers_t:
        tt = np.stack(transfers_t, axis=1)
        te = np.stack(transfers_e, axis=1)
        lu = np.stack([lk[0] for lk in links], axis=1)
        lv = np.stack([lk[1] for lk in links], axis=1)
        max_tr, link = _busiest(tt, lu, lv, n_dev, problem.cluster.links.shared)
        comm_t, comm_e = tt.sum(axis=1), te.sum(axis=1)
    else:
        max_tr = np.zeros(n)
        link = np.full((n, 2), -1)
        comm_t = comm_e = np.zeros(n)

    bottleneck = np.maximum(compute_dev.max(axis=1), max_tr)
    latency = comp_t.sum(axis=1) + comm_t
    energy = comp_e.sum(axis=1) + comm_e
    with np.errstate(divide="ignore"):
        throughput = np.where(bottleneck > 0, 1.0 / bottleneck, np.inf)
    fits = np.asarray((mem_dev <= problem.memory_bytes[None, :]).all(axis=1))
    return BatchMetrics(throughput, bottleneck, latency, energy, comm_e, comm_t, energy_dev, compute_dev,
                        mem_dev, participates, fits, energy * latency, max_tr, link, np.zeros_like(compute_dev))


def _through_tasks(problem: SplitProblem, bounds: np.ndarray, devices: np.ndarray) -> BatchMetrics:
    """Each pipeline of a (checked) batch through its TaskGraph and the mapping closed form."""
    graph, cluster = problem.graph, problem.cluster
    names, layers = cluster.names, graph.names
    parts = []
    for b, d in zip(bounds, devices):
        stages = [Stage(names[int(d[s])], layers[b[s]:b[s + 1]]) for s in range(len(d)) if d[s] >= 0]
        parts.append(evaluate_mappings(problem, check_plan(graph, cluster, Plan(graph.name, cluster.name, "", stages))))
    return concat_metrics(parts)
