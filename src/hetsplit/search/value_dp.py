"""Lexicographic value DP over (label, cut, usage state) states under a bottleneck bound.

Primary and secondary objectives are each ``energy`` (sum), ``latency`` (sum) or ``bottleneck``
(max). (energy, bottleneck) and (energy, latency) are decomposable because the primary is an
additive sum of non-negative terms; (bottleneck, *) is exact in its primary only (PipeEdge).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.search.base import Deadline
from hetsplit.search.classes import ClassModel

RTOL = 1e-12  # primary values this close count as a tie (sums in a different order differ by ulps)


OBJECTIVES = ("energy", "latency", "bottleneck")


def _stage_terms(cm: ClassModel, obj: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(stage, transfer, source, sink) tables of one objective."""
    if obj == "energy":
        return cm.energy, cm.tr_energy, cm.src_energy, cm.snk_energy
    if obj in ("latency", "bottleneck"):
        return cm.time, cm.tr_time, cm.src_time, cm.snk_time
    raise ValueError(f"unknown objective {obj!r}; expected one of {OBJECTIVES}")


def _combine(obj: str):
    return np.maximum if obj == "bottleneck" else np.add


def _lexmin(p: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Row-wise lexicographic minimum over axis 0 with a relative tie tolerance on p."""
    if p.shape[0] == 1:
        return p[0], q[0], np.zeros(p.shape[1], dtype=np.int64)
    pmin = p.min(axis=0)
    tie = p <= pmin + RTOL * np.abs(pmin)
    q2 = np.where(tie, q, np.inf)
    arg = np.argmin(q2, axis=0)
    cols = np.arange(p.shape[1])
    best_q = q2[arg, cols]
    # where every tied q is inf (q unused), argmin picks the first tie: fine
    return p[arg, cols], best_q, arg


@dataclass
class ValueResult:
    primary: float
    secondary: float
    bounds: list[int]
    moves: list[int]      # move entering each stage; the first is its label (``search.states``)


def value_dp(cm: ClassModel, bound: float, primary: str, secondary: str | None,
             deadline: Deadline | None = None) -> ValueResult | None:
    """Lexicographic minimum of (primary, secondary) over plans with every stage and transfer <= bound.

    Returns None when no plan satisfies the bound. With an additive primary and no secondary (the
    common case) a stage's term splits into a part of its start and a part of its end (``_separable``)
    and the table keeps ``value - pre_in[k]`` so that choosing a stage start is a plain minimum over
    a (usually contiguous) block of rows, with no per-row arithmetic. With a ``deadline``, it is
    checked once per layer (``TimeBudgetSpent`` when spent).
    """
    space = cm.space
    L, C, M = cm.num_layers, cm.num_classes, space.M
    sp, tp, srcp, snkp = _stage_terms(cm, primary)
    op_p = _combine(primary)
    if secondary is None:
        sq, tq, srcq, snkq = np.zeros_like(cm.time), np.zeros_like(cm.tr_time), np.zeros(C), np.zeros(C)
        op_q = np.add
    else:
        sq, tq, srcq, snkq = _stage_terms(cm, secondary)
        op_q = _combine(secondary)
    fast = secondary is None and primary != "bottleneck"
    pre_in, pre_out = _separable(cm, primary) if fast else (np.zeros((L + 1, C)), np.zeros((L + 1, C)))
    comp_ok, tr_ok = cm.within(cm.time, bound), cm.within(cm.tr_time, bound)
    size_ok = space.size_ok
    P = np.full((C, L + 1, M), np.inf)
    # without a secondary objective Q is a read-only zero view (no memory)
    Q = np.full((C, L + 1, M), np.inf) if secondary else np.broadcast_to(0.0, (C, L + 1, M))
    nonempty = np.zeros((L + 1, C), dtype=bool)
    for c in range(C):
        first = space.initial(c)
        if first >= 0 and cm.within(cm.src_time[c], bound):
            P[c, 0, first] = srcp[c] - pre_in[0, c]
            if secondary:
                Q[c, 0, first] = srcq[c]
            nonempty[0, c] = True

    def starts(j: int, c: int) -> np.ndarray:
        return np.flatnonzero(comp_ok[:j, j, c] & nonempty[:j, c])

    def rows(arr: np.ndarray, c: int, ks: np.ndarray, S):
        if ks[-1] - ks[0] + 1 == ks.size:
            return arr[c, ks[0]:ks[-1] + 1, S]
        return arr[c, ks, S]

    def end_labels(j: int, c: int, ks: np.ndarray, S=slice(None)):
        """Labels of stages k..j-1 on label c for each start k in ks (rows: ks; columns: S)."""
        col = (slice(None), None) if isinstance(S, slice) else (slice(None),)
        if fast:
            return rows(P, c, ks, S) + pre_out[j, c], None
        return (op_p(rows(P, c, ks, S), sp[ks, j, c][col]), op_q(rows(Q, c, ks, S), sq[ks, j, c][col]))

    best = (np.inf, np.inf, -1, -1)
    endP = np.full((C, M), np.inf)
    endQ = np.zeros((C, M))
    into = [np.flatnonzero(cm.move_label == v) for v in range(C)]
    vectorized = fast and C * L * M <= VECTOR_LIMIT
    if vectorized:
        best = _fast_sweep(cm, P, nonempty, pre_in, pre_out, comp_ok, tr_ok, tp, snkp, bound, deadline)
    for j in range(1, 1 if vectorized else L + 1):
        if deadline is not None:
            deadline.check("its DP")
        has_end = np.zeros(C, dtype=bool)
        for c in range(C):
            ks = starts(j, c)
            if ks.size == 0:
                continue
            if fast:
                endP[c] = rows(P, c, ks, slice(None)).min(axis=0) + pre_out[j, c]
            else:
                pc, qc = end_labels(j, c, ks)
                endP[c], endQ[c], _ = _lexmin(pc, qc)
            has_end[c] = True
        if j == L:
            for c in np.flatnonzero(has_end & cm.within(cm.snk_time, bound)).tolist():
                pf = np.where(size_ok, op_p(endP[c], snkp[c]), np.inf)
                qf = op_q(endQ[c], snkq[c])
                s = int(np.argmin(pf))
                if not np.isfinite(pf[s]):
                    continue
                tie = pf <= pf[s] + RTOL * abs(pf[s])
                s = int(np.argmin(np.where(tie, qf, np.inf))) if secondary else s
                cand = (float(pf[s]), float(qf[s]))
                if cand[0] < best[0] - RTOL * abs(best[0]) or (
                        cand[0] <= best[0] + RTOL * abs(best[0]) and cand[1] < best[1]):
                    best = (cand[0], cand[1], c, s)
            break
        for v in range(C):
            got_p, got_q = [], []
            for m in into[v].tolist():
                us = np.flatnonzero(tr_ok[j, :, m] & has_end)
                if us.size == 0:
                    continue
                pv = op_p(endP[us], tp[j, us, m][:, None])
                if fast:
                    got_p.append(space.shift(pv.min(axis=0) if us.size > 1 else pv[0], int(m), np.inf))
                else:
                    bp, bq, _ = _lexmin(pv, op_q(endQ[us], tq[j, us, m][:, None]))
                    got_p.append(space.shift(bp, int(m), np.inf))
                    got_q.append(space.shift(bq, int(m), np.inf))
            if not got_p:
                continue
            if fast:
                bp = got_p[0] if len(got_p) == 1 else np.minimum.reduce(got_p)
            else:
                bp, bq, _ = _lexmin(np.array(got_p), np.array(got_q))
                if secondary:
                    Q[v, j] = bq
            bp = np.where(size_ok, bp, np.inf)
            nonempty[j, v] = np.isfinite(bp).any()
            P[v, j] = bp - pre_in[j, v]
    if best[2] < 0:
        return None

    def end_pick(j: int, c: int, S: int) -> tuple[int, float, float]:
        """Best start k of the stage ending at j on label c for state S, and its label."""
        ks = starts(j, c)
        pc, qc = end_labels(j, c, ks, S)
        qc = np.zeros_like(pc) if qc is None else qc
        i = _pick(pc, qc)
        return int(ks[i]), float(pc[i]), float(qc[i])

    # trace back by recomputing each choice for the single state on the path
    _, _, c, S = best
    bounds, moves = [L], []
    k = end_pick(L, c, S)[0]
    while k > 0:
        cands = []  # (predecessor label u, move m): the one whose end label plus the transfer is best
        for m in into[c].tolist():
            prev_S = space.prev(S, int(m))
            if prev_S < 0:
                continue
            for u in np.flatnonzero(tr_ok[k, :, m]).tolist():
                if starts(k, u).size == 0:
                    continue
                kk, pe, qe = end_pick(k, int(u), prev_S)
                cands.append((op_p(pe, tp[k, u, m]), op_q(qe, tq[k, u, m]), int(u), kk, int(m), prev_S))
        i = _pick(np.array([x[0] for x in cands]), np.array([x[1] for x in cands]))
        _, _, u, kk, m, prev_S = cands[i]
        bounds.append(k)
        moves.append(m)
        c, S, k = u, prev_S, kk
    moves.append(c)
    bounds.append(0)
    return ValueResult(best[0], best[1], bounds[::-1], moves[::-1])


def _separable(cm: ClassModel, primary: str) -> tuple[np.ndarray, np.ndarray]:
    """(pre_in, pre_out), each (L+1, C): the additive ``primary``'s stage k..j-1 on label c is
    ``pre_out[j, c] - pre_in[k, c]`` wherever it is finite (``cm.time`` / ``cm.energy``). Energy:
    prefix sums. Time (``SplitProblem.stage_time``, one segment per stage): ``pre_out`` = prefix +
    the call + the bytes leaving by cut j + sending cut j's message end; ``pre_in`` = prefix - the bytes
    entering by cut k - layer k's unfused extra (k > 0) - receiving cut k's message end."""
    p = cm.problem
    t = p.device_type[cm.label_device]
    if primary == "energy":
        pre = p.costs.energy_prefix[:, t]
        return pre, pre
    c = p.costs
    assert c.unfused_s is not None
    pre = c.time_prefix[:, t]                                        # (L+1, C)
    k, reps = np.arange(cm.num_layers + 1)[:, None], cm.label_device[None, :]
    recv, send = p.receive_end_time(k, reps), p.send_end_time(k, reps)   # message ends (``cluster.links``)
    if not c.charges_cuts:
        return pre - recv, pre + send
    L = cm.num_layers
    per_byte = c.segment_byte_s[t][None, :] * p.cut_bytes[:, None]   # (L+1, C)
    unfused = np.zeros((L + 1, len(t)))
    unfused[1:L] = c.unfused_s[1:L][:, t]
    return pre - per_byte - unfused - recv, pre + c.segment_call_s[t][None, :] + per_byte + send


VECTOR_LIMIT = 4_000_000  # C * L * M up to which the fast DP handles all labels of a cut at once
WINDOW_LIMIT = 16_000_000  # floats (128 MiB) of range-minimum tables the fast DP may add


def _fast_sweep(cm: ClassModel, P: np.ndarray, nonempty: np.ndarray, pre_in: np.ndarray, pre_out: np.ndarray,
                comp_ok: np.ndarray, tr_ok: np.ndarray, tp: np.ndarray, snkp: np.ndarray,
                bound: float, deadline: Deadline | None = None) -> tuple[float, float, int, int]:
    """The additive-primary DP with the transfers of a cut in one array operation (small C * M).

    Fills P (value - prefix) and nonempty exactly as the per-label loop does; returns the best goal.
    """
    space = cm.space
    L, C, M = cm.num_layers, cm.num_classes, space.M
    src_idx, dst_idx = space.flat_maps
    n0 = sum(s.size for s, _ in space.maps[:C])
    keep = space.size_ok[dst_idx % M]            # targets beyond max_stages stay inf
    s0, d0 = src_idx[:n0][keep[:n0]], dst_idx[:n0][keep[:n0]]   # moves 0..C-1: distinct targets
    s1, d1 = src_idx[n0:][keep[n0:]], dst_idx[n0:][keep[n0:]]   # the rest: at most one per label
    best = (np.inf, np.inf, -1, -1)
    sink_ok = cm.within(cm.snk_time, bound)
    # a transfer after a stage of label u ending at cut j, with the prefix of u added back
    tpx = np.where(tr_ok, tp + pre_out[:, :, None], np.inf)                 # (L+1, C, Mv)
    # range minima: W[t - 1, :, k] = min of P[:, k - 2^t + 1 .. k] (t >= 1; P itself is t = 0),
    # filled as the rows of P become final, so a range of starts costs two rows whatever its length
    longest = int((comp_ok.sum(axis=0)).max()) if L else 1
    levels = max(1, longest.bit_length())
    use_w = levels > 2 and (levels - 1) * C * (L + 1) * M <= WINDOW_LIMIT
    blocks = _stage_blocks(comp_ok, group=use_w)
    W = np.empty((levels - 1, C, L + 1, M)) if use_w else None

    def level(t: int) -> np.ndarray:
        assert W is not None or t == 0
        return P if t == 0 or W is None else W[t - 1]

    def fill(k: int) -> None:
        assert W is not None          # only with use_w
        for t in range(1, levels):
            h = 1 << (t - 1)
            lo = level(t - 1)
            if k >= h:
                np.minimum(lo[:, k], lo[:, k - h], out=W[t - 1, :, k])
            else:
                W[t - 1, :, k] = lo[:, k]

    if use_w:
        fill(0)
    for j in range(1, L + 1):
        if deadline is not None:
            deadline.check("its DP")
        endP = np.full((C, M), np.inf)
        for a, b, cs in blocks[j]:
            if b is None:
                endP[cs] = P[cs][:, a].min(axis=1)
            elif use_w:
                t = (b - a + 1).bit_length() - 1
                lo, tab = a + (1 << t) - 1, level(t)
                if isinstance(cs, int):
                    np.minimum(tab[cs, b], tab[cs, lo], out=endP[cs])
                else:
                    endP[cs] = np.minimum(tab[cs, b], tab[cs, lo])
            else:
                np.min(P[cs, a:b + 1], axis=0, out=endP[cs])
        if j == L:
            endP += pre_out[j][:, None]
            fin = np.where(sink_ok[:, None] & space.size_ok[None, :], endP + snkp[:, None], np.inf)
            flat = int(np.argmin(fin))
            if np.isfinite(fin.flat[flat]):
                best = (float(fin.flat[flat]), 0.0, int(flat // M), int(flat % M))
            break
        to_m = (endP[:, None, :] + tpx[j][:, :, None]).min(axis=0).ravel()     # (m, M) flattened
        flat_nxt = np.full(C * M, np.inf)
        flat_nxt[d0] = to_m[s0]
        if d1.size:
            flat_nxt[d1] = np.minimum(flat_nxt[d1], to_m[s1])
        nxt = flat_nxt.reshape(C, M)
        nonempty[j] = np.isfinite(nxt).any(axis=1)
        P[:, j, :] = nxt - pre_in[j][:, None]
        if use_w:
            fill(j)
    return best


def _stage_blocks(comp_ok: np.ndarray, group: bool) -> list[list[tuple]]:
    """Per cut j, the stage starts k (rows of P) to minimize over for each label.

    Entries (a, b, c) for one label with starts a..b; with ``group``, (a, b, labels) for several
    labels sharing that range; (ks, None, [c]) for starts that are not a range. Rows whose label
    was never reached are all inf, so taking them in is harmless.
    """
    L1, C = comp_ok.shape[1], comp_ok.shape[2]
    cnt = comp_ok.sum(axis=0)                                  # (j, C)
    first = comp_ok.argmax(axis=0)
    last = L1 - 1 - comp_ok[::-1].argmax(axis=0)
    out: list[list[tuple]] = []
    for j in range(L1):
        ranges: dict[tuple[int, int], list[int]] = {}
        entries: list[tuple] = []
        for c in range(C):
            n, a, b = int(cnt[j, c]), int(first[j, c]), int(last[j, c])
            if n == 0:
                continue
            if n == b - a + 1:
                ranges.setdefault((a, b), []).append(c)
            else:
                entries.append((np.flatnonzero(comp_ok[:, j, c]), None, [c]))
        entries += [(a, b, cs[0] if len(cs) == 1 else np.array(cs)) if group else (a, b, c)
                    for (a, b), cs in ranges.items() for c in (cs[:1] if group else cs)]
        out.append(entries)
    return out


def _pick(p: np.ndarray, q: np.ndarray) -> int:
    """Index of the lexicographic minimum of (p, q) (same tie rule as the DP)."""
    pmin = p.min()
    tie = p <= pmin + RTOL * abs(pmin)
    return int(np.argmin(np.where(tie, q, np.inf))) if np.isfinite(q[tie]).any() else int(np.argmax(tie))

