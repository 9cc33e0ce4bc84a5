"""Feasibility families: which device multisets can reach each (class, cut) within a bottleneck bound.

``reach`` propagates forward from the input, ``co_reach`` backward from the output; ``exact``
binary-searches the bound with ``reach`` and backtracks a plan from its families.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    tr_ok: np.ndarray     # (L+1, C, C)
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
    return Families(cm.counts, cm.strides, cm.num_stages, cm.max_stages)


def reach(cm: ClassModel, bound: float, fam: Families | None = None) -> Reach:
    """Forward reachability of (c, k, S) with every stage and transfer <= bound."""
    L, C = cm.num_layers, cm.num_classes
    fam = fam or families(cm)
    comp_ok, tr_ok = cm.within(cm.time, bound), cm.within(cm.tr_time, bound)
    goal_ok = cm.within(cm.snk_time, bound)
    A = fam.zeros(C, L + 1)
    nonempty = np.zeros((L + 1, C), dtype=bool)
    for c in range(C):
        if cm.within(cm.src_time[c], bound):
            fam.add(A[c, 0], int(cm.strides[c]))
            nonempty[0, c] = True
    end = fam.zeros(C)
    for j in range(1, L + 1):
        has_end = np.zeros(C, dtype=bool)
        for c in range(C):
            ks = np.flatnonzero(comp_ok[:j, j, c] & nonempty[:j, c])
            if ks.size:
                end[c] = _or_rows(A[c], ks)
                has_end[c] = True
        if j == L:
            for c in np.flatnonzero(has_end & goal_ok):
                if (end[c] & fam.size_ok).any():
                    return Reach(True, fam, A, nonempty, comp_ok, tr_ok, goal_ok, bound)
            break
        for v in range(C):
            us = np.flatnonzero(tr_ok[j, :, v] & has_end)
            if us.size:
                fam.shift_into(A[v, j], _or_rows(end, us), v)
                nonempty[j, v] = A[v, j].any()
    return Reach(False, fam, A, nonempty, comp_ok, tr_ok, goal_ok, bound)


def co_reach(cm: ClassModel, r: Reach) -> np.ndarray:
    """Backward families G[c, k]: multisets S such that a stage of class c starting at cut k, with
    the classes of S used so far, can be completed within the bound of ``r`` (same encoding)."""
    L, C, fam = cm.num_layers, cm.num_classes, r.fam
    G = fam.zeros(C, L + 1)
    H = fam.zeros(C, L + 1)       # H[c, j]: a stage of class c ending at j can be completed
    has_h = np.zeros((L + 1, C), dtype=bool)
    for c in np.flatnonzero(r.goal_ok):
        H[c, L] = fam.size_ok
        has_h[L, c] = True
    unshifted = fam.zeros(C)
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
        for v in np.flatnonzero(has_g):
            fam.unshift_into(unshifted[v], G[v, k], int(v))
        for u in range(C):
            vs = np.flatnonzero(r.tr_ok[k, u, :] & has_g)
            if vs.size:
                H[u, k] = _or_rows(unshifted, vs)
                has_h[k, u] = H[u, k].any()
    return G


def backtrack_reach(cm: ClassModel, r: Reach) -> tuple[list[int], list[int]]:
    """Some plan (bounds, class per stage) inside a feasible Reach."""
    L, fam = cm.num_layers, r.fam

    def starts(j: int, c: int) -> np.ndarray:
        return np.flatnonzero(r.comp_ok[:j, j, c] & r.nonempty[:j, c])

    def start_with(j: int, c: int, S: int) -> int | None:
        for k in starts(j, c):
            if fam.member(r.A[c, k], S):
                return int(k)
        return None

    c = S = -1
    for c in np.flatnonzero(r.goal_ok):
        ks = starts(L, int(c))
        if ks.size:
            S = fam.first(_or_rows(r.A[c], ks) & fam.size_ok)
            if S >= 0:
                break
    c = int(c)
    k = start_with(L, c, S)
    bounds, classes = [L], [c]
    while k > 0:
        bounds.append(k)
        prev_S = S - int(cm.strides[c])
        for u in np.flatnonzero(r.tr_ok[k, :, c]):
            kk = start_with(k, int(u), prev_S)
            if kk is not None:
                c, S, k = int(u), prev_S, kk
                break
        else:
            raise AssertionError("reachability families are inconsistent")
        classes.append(c)
    bounds.append(0)
    return bounds[::-1], classes[::-1]

