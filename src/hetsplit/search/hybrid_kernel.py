"""Compiled evaluation of hybrid mappings on a slot template: decode and evaluate, chunk by chunk.

``SlotTemplate.arrays`` builds every plan's devices, task costs and edge bytes as N x T numpy arrays
and hands them to the batch evaluator; this kernel computes the same numbers for CHUNK plans at a time
into per-thread buffers and evaluates them (``estimate.mapping.plan_figures``), so nothing of size
N x T is allocated and the plans are split over the threads. The figures are exactly those of the
numpy path (a test compares them), each plan's segments charged by ``plan_figures`` as the closed form
charges the plan it decodes to (an empty slot is in no segment; a layer left with one shard pays what
the whole layer pays). Numba caches this kernel with ``plan_figures`` compiled in: a change there
needs this file touched (or its cache cleared) to take effect.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from hetsplit.estimate.mapping import plan_buffers, plan_figures

CHUNK = 64   # plans decoded together, then evaluated in one call (its set-up costs more than a plan)


@njit(cache=True, nogil=True)
def evaluate_hybrid_range(lo, hi, layer_device, slot_device, slot_used, tpl, tables, st, net, xj, with_latency, out):
    """Plans ``lo..hi-1`` of a ``HybridAssignment`` (N x L, N x S x P, N x S x P) on the template
    ``tpl`` (``SlotTemplate.kernel_tables``): slot merging, devices, costs and edge bytes as
    ``SlotTemplate.arrays`` computes them, then ``plan_figures``."""
    (types, split, split_pos, concat_at, whole_layers, layer_task, slot_task, concat_task, slot_edge, combo_index,
     shard_time, shard_energy, shard_mem, shard_lo, shard_hi, byte_per_channel, whole_time, whole_energy,
     whole_mem, concat_time, concat_energy, concat_mem, edge_bytes, n_tasks) = tpl
    n_dev = out[0].shape[1]
    n_split, n_slots = slot_task.shape
    buf = plan_buffers(n_dev * n_dev + 3 * n_dev, n_tasks, len(edge_bytes), n_dev, np.int64(0))   # no literal
    rows = np.empty((CHUNK, n_tasks), dtype=np.int64)
    cost_t, cost_e, cost_m = np.empty((CHUNK, n_tasks)), np.empty((CHUNK, n_tasks)), np.empty((CHUNK, n_tasks))
    nbytes = np.empty((CHUNK, len(edge_bytes)))
    for k in range(CHUNK):
        nbytes[k] = edge_bytes
    held = np.zeros(n_dev, dtype=np.int64)
    seen = np.zeros(n_dev, dtype=np.bool_)
    for c0 in range(lo, hi, CHUNK):
        count = min(CHUNK, hi - c0)
        for k in range(count):
            p = c0 + k
            ld, sd, su = layer_device[p], slot_device[p], slot_used[p]
            row, ct, ce, cm, nb = rows[k], cost_t[k], cost_e[k], cost_m[k], nbytes[k]
            for w in whole_layers:
                d = ld[w]
                ty = types[d]
                t = layer_task[w]
                row[t] = d
                ct[t], ce[t], cm[t] = whole_time[w, ty], whole_energy[w, ty], whole_mem[w, ty]
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
                        ct[t], ce[t], cm[t] = (shard_time[s, combo, ty], shard_energy[s, combo, ty],
                                               shard_mem[s, combo, ty])
                        nb[e] = (shard_hi[s, combo] - shard_lo[s, combo]) * byte_per_channel[s]
                        offset += held[d]
                    else:
                        ct[t], ce[t], cm[t] = 0.0, 0.0, 0.0
                        nb[e] = 0.0
                for j in range(n_slots):
                    held[sd[s, j]] = 0
                    seen[sd[s, j]] = False
                t = concat_task[s]
                if distinct > 1:
                    at = concat_at[s]
                    d = ld[at] if split_pos[at] < 0 else sd[split_pos[at], 0]
                    ty = types[d]
                    ct[t], ce[t], cm[t] = concat_time[s, ty], concat_energy[s, ty], concat_mem[s, ty]
                else:
                    d = lead
                    ct[t], ce[t], cm[t] = 0.0, 0.0, 0.0
                row[t] = d
        plan_figures(c0, rows[:count], cost_t[:count], cost_e[:count], cost_m[:count], nbytes[:count], tables, st, net,
                     xj, with_latency, out, buf)
