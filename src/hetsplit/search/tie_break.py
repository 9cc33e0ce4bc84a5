"""Least energy, then least latency, among plans within a bottleneck bound, over sparse states.

When the dense tables of ``value_dp.value_dp`` would not fit in memory, this DP keeps values only
for states (class c, cut k, multiset S) that are both reachable from the input and completable to the
output within the bound (the forward and backward families of ``reach``). Every plan within the
bound passes through such states only, so the result is the same as the dense DP's.

Rows are sorted multiset arrays; a transition is a concatenation followed by a group minimum
(``np.minimum.at`` on energy, then on latency among the ties), so there is no per-state Python work.
"""

from __future__ import annotations

import numpy as np

from hetsplit.search.classes import ClassModel
from hetsplit.search.reach import Reach
from hetsplit.search.value_dp import ValueResult


def _group_min(S: np.ndarray, p: np.ndarray, q: np.ndarray, tag: np.ndarray, M: int
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per distinct S (values < M): the entry with least p, then least q; returned sorted by S."""
    best_p = np.full(M, np.inf)
    np.minimum.at(best_p, S, p)
    tie = p <= best_p[S]
    best_q = np.full(M, np.inf)
    np.minimum.at(best_q, S[tie], q[tie])
    win = np.flatnonzero(tie & (q <= best_q[S]))
    chosen = np.full(M, -1, dtype=np.int64)
    chosen[S[win]] = win
    Su = np.flatnonzero(chosen >= 0)
    pick = chosen[Su]
    return Su, p[pick], q[pick], tag[pick]


def sparse_tie_break(cm: ClassModel, r: Reach, G: np.ndarray, bound: float) -> ValueResult | None:
    """(energy, latency)-lexicographic best plan with every stage and transfer <= bound."""
    L, C, fam = cm.num_layers, cm.num_classes, r.fam
    AG = r.A & G
    idx = [[np.flatnonzero(fam.to_bool(AG[c, k])) for k in range(L + 1)] for c in range(C)]
    P = [[np.full(idx[c][k].size, np.inf) for k in range(L + 1)] for c in range(C)]
    Q = [[np.full(idx[c][k].size, np.inf) for k in range(L + 1)] for c in range(C)]
    pred = [[np.full(idx[c][k].size, -1, dtype=np.int64) for k in range(L + 1)] for c in range(C)]
    ends: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = {}
    size_ok = cm.num_stages <= cm.max_stages
    for c in range(C):
        S0 = int(cm.strides[c])
        pos = np.searchsorted(idx[c][0], S0)
        if cm.within(cm.src_time[c], bound) and pos < idx[c][0].size and idx[c][0][pos] == S0:
            P[c][0][pos], Q[c][0][pos] = cm.src_energy[c], cm.src_time[c]
    best = (np.inf, np.inf, -1, -1)
    for j in range(1, L + 1):
        for c in range(C):
            parts = [(k, m) for k in np.flatnonzero(r.comp_ok[:j, j, c]).tolist()
                     for m in [np.isfinite(P[c][k])] if m.any()]
            if not parts:
                continue
            S = np.concatenate([idx[c][k][m] for k, m in parts])
            p = np.concatenate([P[c][k][m] + cm.energy[k, j, c] for k, m in parts])
            q = np.concatenate([Q[c][k][m] + cm.time[k, j, c] for k, m in parts])
            tag = np.concatenate([np.full(int(m.sum()), k) for k, m in parts])
            ends[(j, c)] = _group_min(S, p, q, tag, cm.num_multisets)
        if j == L:
            for c in range(C):
                if (j, c) not in ends or not cm.within(cm.snk_time[c], bound):
                    continue
                S, p, q, _ = ends[(j, c)]
                ok = size_ok[S]
                if not ok.any():
                    continue
                pf, qf = p[ok] + cm.snk_energy[c], q[ok] + cm.snk_time[c]
                i = np.lexsort((qf, pf))[0]
                if (pf[i], qf[i]) < best[:2]:
                    best = (float(pf[i]), float(qf[i]), c, int(S[ok][i]))
            break
        for v in range(C):
            row = idx[v][j]
            if row.size == 0:
                continue
            cand = []
            for u in np.flatnonzero(r.tr_ok[j, :, v]).tolist():
                if (j, u) not in ends:
                    continue
                S, p, q, _ = ends[(j, u)]
                free = (S // cm.strides[v]) % (cm.counts[v] + 1) < cm.counts[v]
                S2 = S[free] + cm.strides[v]
                pos = np.minimum(np.searchsorted(row, S2), row.size - 1)
                keep = row[pos] == S2
                if keep.any():
                    cand.append((pos[keep], p[free][keep] + cm.tr_energy[j, u, v],
                                 q[free][keep] + cm.tr_time[j, u, v], np.full(int(keep.sum()), u)))
            if cand:
                all_s, all_p, all_q, all_tag = (np.concatenate(x) for x in zip(*cand))
                won, won_p, won_q, won_tag = _group_min(all_s, all_p, all_q, all_tag, row.size)
                P[v][j][won], Q[v][j][won], pred[v][j][won] = won_p, won_q, won_tag
    if best[2] < 0:
        return None
    _, _, c, state = best
    bounds, classes, j = [L], [c], L
    while True:
        Se, _, _, ks = ends[(j, c)]
        k = int(ks[np.searchsorted(Se, state)])
        if k == 0:
            break
        u = int(pred[c][k][np.searchsorted(idx[c][k], state)])
        state -= int(cm.strides[c])
        bounds.append(k)
        classes.append(u)
        j, c = k, u
    bounds.append(0)
    return ValueResult(best[0], best[1], bounds[::-1], classes[::-1])
