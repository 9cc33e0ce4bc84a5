"""Feasibility families: which usage states can reach each (label, cut) within a bottleneck bound.

``reach`` propagates forward from the input, ``co_reach`` backward from the output; ``exact``
binary-searches the bound with ``reach`` and backtracks a plan from its families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.search.base import Deadline
from hetsplit.search.classes import ClassModel
from hetsplit.search.families import Families


@dataclass
class Reach:
    """Result of ``reach``: families A[c, k] (rows of ``fam``) and whether the goal was reached."""

    feasible: bool
    fam: Families
    A: np.ndarray         # (C, L+1, words) uint64 rows
    nonempty: np.ndarray  # (L+1, C)
    comp_ok: np.ndarray   # (L+1, L+1, C)
    tr_ok: np.ndarray     # (L+1, C, Mv)
    goal_ok: np.ndarray   # (C,) sink transfer within the bound
    bound: float = np.inf


def _or_rows(a64: np.ndarray, ks: np.ndarray) -> np.ndarray:
    """OR of rows ks of a 2-D uint64 array (a view, not a copy, when ks is contiguous)."""
    if ks.size == 1:
        return a64[ks[0]]
    if ks[-1] - ks[0] + 1 == ks.size:
        return np.bitwise_or.reduce(a64[ks[0]:ks[-1] + 1], axis=0)
    return np.bitwise_or.reduce(a64[ks], axis=0)


def families(cm: ClassModel) -> Families:
    return Families(cm.space)


def moves_into(cm: ClassModel) -> list[np.ndarray]:
    """The moves that place a stage of each label."""
    return [np.flatnonzero(cm.move_label == v) for v in range(cm.num_classes)]


def reach(cm: ClassModel, bound: float, fam: Families | None = None, deadline: Deadline | None = None) -> Reach:
    """Forward reachability of (c, k, S) with every stage and transfer <= bound (``deadline``: checked per layer)."""
    L, C = cm.num_layers, cm.num_classes
    fam = fam or families(cm)
    comp_ok, tr_ok = cm.within(cm.time, bound), cm.within(cm.tr_time, bound)
    goal_ok = cm.within(cm.snk_time, bound)
    A = fam.zeros(C, L + 1)
    nonempty = np.zeros((L + 1, C), dtype=bool)
    for c in range(C):
        if cm.within(cm.src_time[c], bound):
            fam.add(A[c, 0], cm.space.initial(c))
            nonempty[0, c] = True
    end = fam.zeros(C)
    into = moves_into(cm)
    tmp = fam.zeros()
    for j in range(1, L + 1):
        if deadline is not None:
            deadline.check("its DP")
        has_end = np.zeros(C, dtype=bool)
        for c in range(C):
            ks = np.flatnonzero(comp_ok[:j, j, c] & nonempty[:j, c])
            if ks.size:
                end[c] = _or_rows(A[c], ks)
                has_end[c] = True
        if j == L:
            for c in np.flatnonzero(has_end & goal_ok).tolist():
                if (end[c] & fam.size_ok).any():
                    return Reach(True, fam, A, nonempty, comp_ok, tr_ok, goal_ok, bound)
            break
        for v in range(C):
            wrote = False
            for m in into[v]:
                us = np.flatnonzero(tr_ok[j, :, m] & has_end)
                if not us.size:
                    continue
                if wrote:
                    tmp[:] = 0
                    fam.shift_into(tmp, _or_rows(end, us), int(m))
                    A[v, j] |= tmp
                else:
                    fam.shift_into(A[v, j], _or_rows(end, us), int(m))
                    wrote = True
            if wrote:
                nonempty[j, v] = A[v, j].any()
    return Reach(False, fam, A, nonempty, comp_ok, tr_ok, goal_ok, bound)


def co_reach(cm: ClassModel, r: Reach) -> np.ndarray:
    """Backward families G[c, k]: multisets S such that a stage of class c starting at cut k, with
    the classes of S used so far, can be completed within the bound of ``r`` (same encoding)."""
    L, C, fam = cm.num_layers, cm.num_classes, r.fam
    G = fam.zeros(C, L + 1)
    H = fam.zeros(C, L + 1)       # H[c, j]: a stage of class c ending at j can be completed
    has_h = np.zeros((L + 1, C), dtype=bool)
    for c in np.flatnonzero(r.goal_ok).tolist():
        H[c, L] = fam.size_ok
        has_h[L, c] = True
    unshifted = fam.zeros(cm.space.num_moves)
    for k in range(L - 1, -1, -1):
        has_g = np.zeros(C, dtype=bool)
        for c in range(C):
            js = np.flatnonzero(r.comp_ok[k, k + 1:, c] & has_h[k + 1:, c]) + k + 1
            if js.size:
                G[c, k] = _or_rows(H[c], js)
                has_g[c] = True
        if k == 0:
            break
        unshifted[:] = 0
        g_move = has_g[cm.move_label]
        for m in np.flatnonzero(g_move).tolist():
            fam.unshift_into(unshifted[m], G[cm.move_label[m], k], int(m))
        for u in range(C):
            ms = np.flatnonzero(r.tr_ok[k, u, :] & g_move)
            if ms.size:
                H[u, k] = _or_rows(unshifted, ms)
                has_h[k, u] = H[u, k].any()
    return G


def backtrack_reach(cm: ClassModel, r: Reach) -> tuple[list[int], list[int]]:
    """Some plan (bounds, move per stage; the first is its label) inside a feasible Reach."""
    L, fam = cm.num_layers, r.fam

    def starts(j: int, c: int) -> np.ndarray:
        return np.flatnonzero(r.comp_ok[:j, j, c] & r.nonempty[:j, c])

    def start_with(j: int, c: int, S: int) -> int | None:
        for k in starts(j, c):
            if fam.member(r.A[c, k], S):
                return int(k)
        return None

    c = S = -1
    for c in np.flatnonzero(r.goal_ok).tolist():
        ks = starts(L, int(c))
        if ks.size:
            S = fam.first(_or_rows(r.A[c], ks) & fam.size_ok)
            if S >= 0:
                break
    c = int(c)
    first = start_with(L, c, S)
    if first is None:
        raise RuntimeError("trace-back: no start for a reachable goal (the reach sets are inconsistent)")
    k = first
    bounds, moves = [L], []
    into = moves_into(cm)
    while k > 0:
        bounds.append(k)
        found = None
        for m in into[c]:
            prev_S = cm.space.prev(S, int(m))
            if prev_S < 0:
                continue
            for u in np.flatnonzero(r.tr_ok[k, :, m]).tolist():
                kk = start_with(k, int(u), prev_S)
                if kk is not None:
                    found = (int(m), int(u), prev_S, kk)
                    break
            if found:
                break
        if found is None:
            raise AssertionError("reachability families are inconsistent")
        moves.append(found[0])
        c, S, k = found[1], found[2], found[3]
    moves.append(c)
    bounds.append(0)
    return bounds[::-1], moves[::-1]

