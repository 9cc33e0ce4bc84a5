"""Compiled evaluation of hybrid mappings on a slot template: decode and evaluate, plan by plan.

``SlotTemplate.arrays`` builds every plan's devices, task costs and edge bytes as N x T numpy arrays
and hands them to the batch evaluator; this kernel computes the same numbers for one plan at a time
into per-thread buffers and evaluates it at once (``estimate.mapping.plan_figures``), so nothing of
size N x T is allocated and the plans are split over the threads. The figures are exactly those of
the numpy path (a test compares them).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from hetsplit.estimate.mapping import plan_buffers, plan_figures


@njit(cache=True, parallel=True)
def evaluate_hybrid(layer_device, slot_device, slot_used, tpl, tables, st, net, xj, with_latency, out, chunks):
    """Every plan's figures (``evaluate_hybrid_range``), the plans split into ``chunks`` ranges on
    parallel threads."""
    n = layer_device.shape[0]
    for c in prange(chunks):
        evaluate_hybrid_range(c * n // chunks, (c + 1) * n // chunks, layer_device, slot_device, slot_used, tpl,
                              tables, st, net, xj, with_latency, out)


@njit(cache=True)
def evaluate_hybrid_range(lo, hi, layer_device, slot_device, slot_used, tpl, tables, st, net, xj, with_latency, out):
    """Plans ``lo..hi-1`` of a ``HybridAssignment`` (N x L, N x S x P, N x S x P) on the template
    ``tpl`` (``SlotTemplate.kernel_tables``): slot merging, devices, costs and edge bytes as
    ``SlotTemplate.arrays`` computes them, then ``plan_figures``."""
    (types, split, split_pos, concat_at, whole_layers, layer_task, slot_task, concat_task, slot_edge, combo_index,
     shard_time, shard_energy, shard_mem, shard_lo, shard_hi, byte_per_channel, whole_time, whole_energy,
     whole_mem, concat_time, concat_energy, concat_mem, edge_bytes, n_tasks) = tpl
    n_dev = out[0].shape[1]
    n_split, n_slots = slot_task.shape
    buf = plan_buffers(n_dev * n_dev + 3 * n_dev, n_tasks, len(edge_bytes), st[10], n_dev, 0)
    row = np.empty(n_tasks, dtype=np.int64)
    cost_t, cost_e, cost_m = np.empty(n_tasks), np.empty(n_tasks), np.empty(n_tasks)
    nbytes = edge_bytes.copy()
    held = np.zeros(n_dev, dtype=np.int64)
    seen = np.zeros(n_dev, dtype=np.bool_)
    for p in range(lo, hi):
        ld, sd, su = layer_device[p], slot_device[p], slot_used[p]
        for w in whole_layers:
            d = ld[w]
            ty = types[d]
            t = layer_task[w]
            row[t] = d
            cost_t[t], cost_e[t], cost_m[t] = whole_time[w, ty], whole_energy[w, ty], whole_mem[w, ty]
        for s in range(n_split):
            lead = sd[s, 0]
            used = 0
            for j in range(n_slots):
                if su[s, j]:
                    held[sd[s, j]] += 1
                    used += 1
            offset, distinct = 0, 0
            for j in range(n_slots):
                d = sd[s, j] if su[s, j] else lead
                t = slot_task[s, j]
                row[t] = d
                e = slot_edge[s, j]
                if su[s, j] and not seen[d]:        # the slot carrying its device's merged shard
                    seen[d] = True
                    distinct += 1
                    combo = combo_index[used, min(offset, n_slots - 1), held[d]]
                    ty = types[d]
                    cost_t[t], cost_e[t], cost_m[t] = (shard_time[s, combo, ty], shard_energy[s, combo, ty],
                                                       shard_mem[s, combo, ty])
                    nbytes[e] = (shard_hi[s, combo] - shard_lo[s, combo]) * byte_per_channel[s]
                    offset += held[d]
                else:
                    cost_t[t], cost_e[t], cost_m[t] = 0.0, 0.0, 0.0
                    nbytes[e] = 0.0
            for j in range(n_slots):
                held[sd[s, j]] = 0
                seen[sd[s, j]] = False
            t = concat_task[s]
            if distinct > 1:
                at = concat_at[s]
                d = ld[at] if split_pos[at] < 0 else sd[split_pos[at], 0]
                ty = types[d]
                cost_t[t], cost_e[t], cost_m[t] = concat_time[s, ty], concat_energy[s, ty], concat_mem[s, ty]
            else:
                d = lead
                cost_t[t], cost_e[t], cost_m[t] = 0.0, 0.0, 0.0
            row[t] = d
        plan_figures(p, row, True, cost_t, cost_e, cost_m, nbytes, tables, st, net, xj, with_latency, out, buf)
