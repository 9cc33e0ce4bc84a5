"""The one DP core behind hetsplit's pipeline solvers (exact, pareto, pipeedge).

Search space (shared with DONNA and PipeEdge): a plan is a sequence of stages of consecutive
layers, each on a distinct device; not every device has to take part.

Devices are collapsed into *classes* of interchangeable devices: same cost type, same memory, the
same link (bandwidth, latency, energy) to and from every other device, the same role (source,
sink, allowed to run the first stage). A class of n devices contributes a digit 0..n to a
mixed-radix *multiset index* S in 0..M-1 (M = prod(n_c + 1)); for all-different devices this is
the usual subset bitmask, for a typed cluster with uniform links it is PipeEdge's multiset of
types. Every table below is indexed by classes, never by devices.

Two kernels run over states (cut position k, class c of the stage starting at k, multiset S of
classes used so far, c included):

- ``reach``: boolean families, "which S can have a stage of class c start at cut k with every
  stage and transfer <= T"; a feasibility test for a bottleneck bound T (bool arrays, OR-reduced
  as uint64 words), used by the parametric (binary) search of ``exact``.
- ``value_dp``: a lexicographic (primary, secondary) minimum over the same states, under the
  same bound T. Primary and secondary are each ``energy`` (sum), ``latency`` (sum) or
  ``bottleneck`` (max). (energy, bottleneck) and (energy, latency) are decomposable because the
  primary is an additive sum of non-negative terms; (bottleneck, *) is exact in its primary only.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, InfeasibleError
from hetsplit.plan.evaluate import make_plan
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints
from hetsplit.search.families import Families

RTOL = 1e-12  # primary values this close count as a tie (sums in a different order differ by ulps)


@dataclass
class ClassModel:
    """Class-indexed cost tables of a SplitProblem under PipelineConstraints."""

    problem: SplitProblem
    members: list[list[int]]      # device indices of each class
    time: np.ndarray              # (L+1, L+1, C) stage compute seconds, inf if invalid/not fitting
    energy: np.ndarray            # (L+1, L+1, C) stage compute joules
    tr_time: np.ndarray           # (L+1, C, C) transfer seconds at cut k, inf if not allowed
    tr_energy: np.ndarray         # (L+1, C, C)
    src_time: np.ndarray          # (C,) input transfer to a first stage of class c (inf: not allowed)
    src_energy: np.ndarray
    snk_time: np.ndarray          # (C,) output transfer from a last stage of class c
    snk_energy: np.ndarray
    max_stages: int

    @property
    def num_layers(self) -> int:
        return self.time.shape[0] - 1

    @property
    def num_classes(self) -> int:
        return len(self.members)

    @cached_property
    def counts(self) -> np.ndarray:
        return np.array([len(m) for m in self.members], dtype=np.int64)

    @cached_property
    def strides(self) -> np.ndarray:
        return np.concatenate([[1], np.cumprod(self.counts + 1)[:-1]]).astype(np.int64)

    @cached_property
    def num_multisets(self) -> int:
        return int(np.prod(self.counts + 1))

    @cached_property
    def num_stages(self) -> np.ndarray:
        """Digit sum of each multiset index (how many stages it stands for)."""
        m = np.arange(self.num_multisets)
        total = np.zeros(self.num_multisets, dtype=np.int64)
        for c in range(self.num_classes):
            total += (m // self.strides[c]) % (self.counts[c] + 1)
        return total

    @staticmethod
    def within(values, bound: float):
        """Finite and <= bound (inf marks what cannot happen, even under an infinite bound)."""
        return np.isfinite(values) & (values <= bound)

    def candidates(self) -> np.ndarray:
        """Sorted distinct finite values a plan's bottleneck can take."""
        vals = [self.time[np.isfinite(self.time)], self.tr_time[np.isfinite(self.tr_time)],
                self.src_time[np.isfinite(self.src_time)], self.snk_time[np.isfinite(self.snk_time)], [0.0]]
        return np.unique(np.concatenate([np.asarray(v, dtype=np.float64).ravel() for v in vals]))

    def lower_bound(self) -> float:
        """Largest single layer at its fastest class (every plan runs every layer somewhere)."""
        if self.num_layers == 0:
            return 0.0
        reps = [m[0] for m in self.members]
        per_layer = self.problem.costs.time_s[:, self.problem.device_type[reps]].min(axis=1)
        lb = float(per_layer.max())
        return lb if np.isfinite(lb) else 0.0


class MultisetSpace:
    """The multiset axis of a value DP (all M multisets): shifts and stage-count limits."""

    def __init__(self, cm: ClassModel):
        self.cm = cm
        self.M = cm.num_multisets
        self.size_ok = cm.num_stages <= cm.max_stages

    def index(self, S: int) -> int | None:
        return S

    def multiset(self, i: int) -> int:
        return i

    @cached_property
    def flat_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, destination) flat indices into a (C, M) array for S -> S + e_c in row c."""
        cm, src, dst = self.cm, [], []
        S = np.arange(self.M)
        for c in range(cm.num_classes):
            free = np.flatnonzero((S // cm.strides[c]) % (cm.counts[c] + 1) < cm.counts[c])
            src.append(c * self.M + free)
            dst.append(c * self.M + free + cm.strides[c])
        return np.concatenate(src), np.concatenate(dst)

    def shift(self, x: np.ndarray, c: int, fill) -> np.ndarray:
        """y[S + e_c] = x[S] where class c still has a free device; fill elsewhere."""
        n, st = int(self.cm.counts[c]), int(self.cm.strides[c])
        xv = x.reshape(-1, n + 1, st)
        y = np.empty_like(xv)
        y[:, 0, :] = fill
        y[:, 1:, :] = xv[:, :-1, :]
        return y.reshape(x.shape)


def build_classes(problem: SplitProblem, constraints: PipelineConstraints = PipelineConstraints(),
                  cut_bytes: np.ndarray | None = None) -> ClassModel:
    """Group interchangeable devices and tabulate stage and transfer costs per class.

    ``cut_bytes`` replaces the problem's cut sizes in transfers and stage memory (PipeEdge's
    last-output-only accounting); default: all bytes live across each cut.
    """
    cl = problem.cluster
    n_dev, L = problem.num_devices, problem.num_layers
    cb = problem.cut_bytes if cut_bytes is None else np.asarray(cut_bytes, dtype=np.float64)
    first = set(constraints.first_stage_indices(problem))
    src, snk = cl.source_index, cl.sink_index
    bw, lat, epb = cl.bandwidth, cl.latency_s, cl.energy_per_byte

    def swappable(a: int, b: int) -> bool:
        """Swapping devices a and b changes no cost (an automorphism; so this is an equivalence)."""
        if a in (src, snk) or b in (src, snk):
            return False
        if (problem.device_type[a] != problem.device_type[b] or problem.memory_bytes[a] != problem.memory_bytes[b]
                or (a in first) != (b in first)):
            return False
        rest = np.array([x for x in range(n_dev) if x not in (a, b)], dtype=np.int64)
        for m in (bw, lat, epb):
            if m[a, b] != m[b, a] or not (np.array_equal(m[a, rest], m[b, rest])
                                          and np.array_equal(m[rest, a], m[rest, b])):
                return False
        return True

    members: list[list[int]] = []
    for d in range(n_dev):
        for group in members:
            if swappable(group[0], d):
                group.append(d)
                break
        else:
            members.append([d])
    reps = np.array([m[0] for m in members], dtype=np.int64)
    C = len(members)

    i = np.arange(L + 1)[:, None, None]
    j = np.arange(L + 1)[None, :, None]
    t = problem.device_type[reps][None, None, :]
    valid = j > i
    with np.errstate(invalid="ignore"):
        time = np.where(valid, problem.costs.range_time(i, j, t), np.inf)
        energy = np.where(valid, problem.costs.range_energy(i, j, t), np.inf)
    if constraints.enforce_memory:
        mem = problem.costs.range_mem(i, j, t) + cb[i] + cb[j]
        fits = mem <= problem.memory_bytes[reps][None, None, :]
        time = np.where(fits, time, np.inf)
    energy = np.where(np.isfinite(time), energy, np.inf)

    # transfers between a class u and a class v at every cut k (same class: two of its devices)
    def pair_devices(cu: int, cv: int) -> tuple[int, int] | None:
        if cu != cv:
            return members[cu][0], members[cv][0]
        return (members[cu][0], members[cu][1]) if len(members[cu]) > 1 else None

    tr_time = np.full((L + 1, C, C), np.inf)
    tr_energy = np.full((L + 1, C, C), np.inf)
    for cu in range(C):
        for cv in range(C):
            pd = pair_devices(cu, cv)
            if pd is None:
                continue
            a, b = pd
            tr_time[:, cu, cv] = np.where(cb <= 0, 0.0, lat[a, b] + cb / bw[a, b])
            tr_energy[:, cu, cv] = cb * epb[a, b]
    src_time = np.zeros(C)
    src_energy = np.zeros(C)
    snk_time = np.zeros(C)
    snk_energy = np.zeros(C)
    for c, r in enumerate(reps):
        if src is not None:
            src_time[c] = 0.0 if (r == src or cb[0] <= 0) else lat[src, r] + cb[0] / bw[src, r]
            src_energy[c] = cb[0] * epb[src, r]
        if snk is not None:
            snk_time[c] = 0.0 if (r == snk or cb[L] <= 0) else lat[r, snk] + cb[L] / bw[r, snk]
            snk_energy[c] = cb[L] * epb[r, snk]
        if r not in first:
            src_time[c] = np.inf
    max_stages = min(constraints.max_stages or n_dev, n_dev, L)
    return ClassModel(problem, members, time, energy, tr_time, tr_energy, src_time, src_energy,
                      snk_time, snk_energy, max_stages)


def relaxed_min_bottleneck(cm: ClassModel) -> tuple[float, list[int], list[int]]:
    """Min bottleneck when a class may be used any number of times (a lower bound), and its path.

    O(L^2 C + L C^2); if the returned path uses no class more often than it has devices (and has
    at most ``max_stages`` stages) it is optimal for the real problem too.
    """
    L, C = cm.num_layers, cm.num_classes
    r = np.full((L + 1, C), np.inf)
    r[0] = np.where(np.isfinite(cm.src_time), cm.src_time, np.inf)
    arg_k = np.zeros((L + 1, C), dtype=np.int64)
    arg_u = np.zeros((L + 1, C), dtype=np.int64)
    end = np.full((L + 1, C), np.inf)
    for j in range(1, L + 1):
        cand = np.maximum(r[:j], cm.time[:j, j, :])          # (j, C)
        arg_k[j] = np.argmin(cand, axis=0)
        end[j] = cand[arg_k[j], np.arange(C)]
        if j < L:
            via = np.maximum(end[j][:, None], cm.tr_time[j])   # (u, v)
            arg_u[j] = np.argmin(via, axis=0)
            r[j] = via[arg_u[j], np.arange(C)]
    final = np.maximum(end[L], cm.snk_time)
    c = int(np.argmin(final))
    best = float(final[c])
    if not np.isfinite(best):
        return best, [], []
    bounds, classes, j = [L], [c], L
    while True:
        k = int(arg_k[j, c])
        if k == 0:
            break
        u = int(arg_u[k, c])
        bounds.append(k)
        classes.append(u)
        j, c = k, u
    bounds.append(0)
    return best, bounds[::-1], classes[::-1]


def path_is_valid(cm: ClassModel, classes: list[int]) -> bool:
    """No class used more often than it has devices, and at most max_stages stages."""
    used = np.bincount(np.asarray(classes, dtype=np.int64), minlength=cm.num_classes)
    return bool((used <= cm.counts).all() and len(classes) <= cm.max_stages)


def check_layers_fit(cm: ClassModel) -> None:
    """Raise InfeasibleError naming the first layer that no stage on any device can hold or run."""
    p = cm.problem
    L = cm.num_layers
    if L == 0:
        return
    finite = np.isfinite(cm.time)                    # (k, j, c): stage k..j-1 runs and fits
    # layer l is covered by some stage k <= l < j
    ok_kj = finite.any(axis=2)
    covered = np.zeros(L, dtype=bool)
    for k in range(L):
        js = np.flatnonzero(ok_kj[k])
        if js.size:
            covered[k:js.max()] = True
    if covered.all():
        return
    l = int(np.flatnonzero(~covered)[0])
    name = p.graph.layers[l].name
    devs = np.arange(p.num_devices)
    runnable = np.isfinite(p.stage_time(l, l + 1, devs))
    if not runnable.any():
        raise InfeasibleError(f"layer {name!r} fits nowhere: no device type can run it "
                              f"(types: {p.cluster.types})")
    need = float(np.min(p.stage_mem(l, l + 1, devs[runnable])))
    raise InfeasibleError(f"layer {name!r} fits nowhere: needs {need:.6g} bytes, largest device has "
                          f"{float(p.memory_bytes.max()):.6g}")


def check_state_budget(cm: ClassModel, arrays: int, budget_bytes: float, algorithm: str) -> None:
    """Refuse (with the numbers) a value DP whose float tables would exceed ``budget_bytes``."""
    need = arrays * 8 * (cm.num_layers + 1) * cm.num_classes * cm.num_multisets
    if need > budget_bytes:
        raise HetsplitError(
            f"{algorithm}: {cm.num_classes} device classes ({cm.num_multisets} device multisets) x "
            f"{cm.num_layers + 1} cuts need {need / 2**30:.1f} GiB of DP tables (budget "
            f"{budget_bytes / 2**30:.1f} GiB); devices collapse into classes only when type, memory and links "
            "agree. Use --algo exact (bounded memory) or fewer distinct devices")


def infeasible_message(cm: ClassModel, bound: float | None = None) -> str:
    what = "" if bound is None else f" with a bottleneck <= {bound:.6g} s"
    return (f"no pipeline over the {cm.problem.num_devices} devices of {cm.problem.cluster.name!r} "
            f"(one stage per device, at most {cm.max_stages} stages{', first stage restricted' if np.isinf(cm.src_time).any() else ''})"
            f" fits memory{what}")


# ---- feasibility: boolean families ----------------------------------------------------------------

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


# ---- lexicographic value DP -----------------------------------------------------------------------

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
    classes: list[int]


def value_dp(cm: ClassModel, bound: float, primary: str, secondary: str | None,
             space: MultisetSpace | None = None) -> ValueResult | None:
    """Lexicographic minimum of (primary, secondary) over plans with every stage and transfer <= bound.

    ``space`` restricts the multiset axis (default: every multiset). Returns None when no plan
    satisfies the bound. With an additive primary and no secondary (the
    common case) the table keeps ``value - prefix[k]`` so that choosing a stage start is a plain
    minimum over a (usually contiguous) block of rows, with no per-row arithmetic.
    """
    space = space or MultisetSpace(cm)
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
    reps = [m[0] for m in cm.members]
    if fast:
        prefix = cm.problem.costs.energy_prefix if primary == "energy" else cm.problem.costs.time_prefix
        pre = prefix[:, cm.problem.device_type[reps]]      # (L+1, C)
    else:
        pre = np.zeros((L + 1, C))
    comp_ok, tr_ok = cm.within(cm.time, bound), cm.within(cm.tr_time, bound)
    size_ok = space.size_ok
    P = np.full((C, L + 1, M), np.inf)
    # without a secondary objective Q is a read-only zero view (no memory)
    Q = np.full((C, L + 1, M), np.inf) if secondary else np.broadcast_to(0.0, (C, L + 1, M))
    nonempty = np.zeros((L + 1, C), dtype=bool)
    for c in range(C):
        first = space.index(int(cm.strides[c]))
        if cm.within(cm.src_time[c], bound) and first is not None:
            P[c, 0, first] = srcp[c]
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
        """Labels of stages k..j-1 on class c for each start k in ks (rows: ks; columns: S)."""
        col = (slice(None), None) if isinstance(S, slice) else (slice(None),)
        if fast:
            return rows(P, c, ks, S) + pre[j, c], None
        return (op_p(rows(P, c, ks, S), sp[ks, j, c][col]), op_q(rows(Q, c, ks, S), sq[ks, j, c][col]))

    best = (np.inf, np.inf, -1, -1)
    endP = np.full((C, M), np.inf)
    endQ = np.zeros((C, M))
    vectorized = fast and C * L * M <= VECTOR_LIMIT
    if vectorized:
        best = _fast_sweep(cm, space, P, nonempty, pre, comp_ok, tr_ok, tp, snkp, bound)
    for j in range(1, 1 if vectorized else L + 1):
        has_end = np.zeros(C, dtype=bool)
        for c in range(C):
            ks = starts(j, c)
            if ks.size == 0:
                continue
            if fast:
                endP[c] = rows(P, c, ks, slice(None)).min(axis=0) + pre[j, c]
            else:
                pc, qc = end_labels(j, c, ks)
                endP[c], endQ[c], _ = _lexmin(pc, qc)
            has_end[c] = True
        if j == L:
            for c in np.flatnonzero(has_end & cm.within(cm.snk_time, bound)):
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
            us = np.flatnonzero(tr_ok[j, :, v] & has_end)
            if us.size == 0:
                continue
            pv = op_p(endP[us], tp[j, us, v][:, None])
            if fast:
                bp = pv.min(axis=0) if us.size > 1 else pv[0]
            else:
                bp, bq, _ = _lexmin(pv, op_q(endQ[us], tq[j, us, v][:, None]))
                if secondary:
                    Q[v, j] = space.shift(bq, v, np.inf)
            bp = np.where(size_ok, space.shift(bp, v, np.inf), np.inf)
            nonempty[j, v] = np.isfinite(bp).any()
            P[v, j] = bp - pre[j, v]
    if best[2] < 0:
        return None

    def end_pick(j: int, c: int, S: int) -> tuple[int, float, float]:
        """Best start k of the stage ending at j on class c for multiset S, and its label."""
        ks = starts(j, c)
        pc, qc = end_labels(j, c, ks, S)
        qc = np.zeros_like(pc) if qc is None else qc
        i = _pick(pc, qc)
        return int(ks[i]), float(pc[i]), float(qc[i])

    # trace back by recomputing each choice for the single multiset on the path
    _, _, c, S = best
    bounds, classes = [L], [c]
    k = end_pick(L, c, S)[0]
    while k > 0:
        prev_S = space.index(space.multiset(S) - int(cm.strides[c]))
        cands = []  # predecessor class u: the one whose end label plus the transfer is best
        for u in np.flatnonzero(tr_ok[k, :, c]):
            if starts(k, u).size == 0:
                continue
            kk, pe, qe = end_pick(k, int(u), prev_S)
            cands.append((op_p(pe, tp[k, u, c]), op_q(qe, tq[k, u, c]), int(u), kk))
        i = _pick(np.array([x[0] for x in cands]), np.array([x[1] for x in cands]))
        _, _, u, kk = cands[i]
        bounds.append(k)
        classes.append(u)
        c, S, k = u, prev_S, kk
    bounds.append(0)
    return ValueResult(best[0], best[1], bounds[::-1], classes[::-1])


VECTOR_LIMIT = 4_000_000  # C * L * M up to which the fast DP handles all classes of a cut at once


def _fast_sweep(cm: ClassModel, space: MultisetSpace, P: np.ndarray, nonempty: np.ndarray, pre: np.ndarray,
                comp_ok: np.ndarray, tr_ok: np.ndarray, tp: np.ndarray, snkp: np.ndarray,
                bound: float) -> tuple[float, float, int, int]:
    """The additive-primary DP with the transfers of a cut in one array operation (small C * M).

    Fills P (value - prefix) and nonempty exactly as the per-class loop does; returns the best goal.
    """
    L, C, M = cm.num_layers, cm.num_classes, space.M
    src_idx, dst_idx = space.flat_maps
    size_ok = space.size_ok
    best = (np.inf, np.inf, -1, -1)
    sink_ok = cm.within(cm.snk_time, bound)
    for j in range(1, L + 1):
        ok = comp_ok[:j, j, :] & nonempty[:j, :]                 # (k, C)
        if not ok.any():
            continue
        endP = np.full((C, M), np.inf)
        cnt = ok.sum(axis=0)
        first = ok.argmax(axis=0)
        last = j - 1 - ok[::-1].argmax(axis=0)
        for c, n, a, b in zip(range(C), cnt.tolist(), first.tolist(), last.tolist()):
            if n == 0:
                continue
            blk = P[c, a:b + 1] if n == b - a + 1 else P[c, np.flatnonzero(ok[:, c])]
            np.min(blk, axis=0, out=endP[c])
        endP += pre[j][:, None]
        if j == L:
            fin = np.where(sink_ok[:, None] & size_ok[None, :], endP + snkp[:, None], np.inf)
            flat = int(np.argmin(fin))
            if np.isfinite(fin.flat[flat]):
                best = (float(fin.flat[flat]), 0.0, flat // M, flat % M)
            break
        cand = np.where(tr_ok[j][:, :, None], endP[:, None, :] + tp[j][:, :, None], np.inf)  # (u, v, M)
        to_v = cand.min(axis=0)                                                           # (v, M)
        nxt = np.full(C * M, np.inf)
        nxt[dst_idx] = to_v.ravel()[src_idx]
        nxt = np.where(size_ok[None, :], nxt.reshape(C, M), np.inf)
        nonempty[j] = np.isfinite(nxt).any(axis=1)
        P[:, j, :] = nxt - pre[j][:, None]
    return best


def _pick(p: np.ndarray, q: np.ndarray) -> int:
    """Index of the lexicographic minimum of (p, q) (same tie rule as the DP)."""
    pmin = p.min()
    tie = p <= pmin + RTOL * abs(pmin)
    return int(np.argmin(np.where(tie, q, np.inf))) if np.isfinite(q[tie]).any() else int(np.argmax(tie))


def path_bottleneck(cm: ClassModel, bounds: list[int], classes: list[int]) -> float:
    """The bottleneck of a class path from the tables (equals the evaluator's, bit for bit)."""
    terms = [cm.src_time[classes[0]], cm.snk_time[classes[-1]]]
    for s, c in enumerate(classes):
        terms.append(cm.time[bounds[s], bounds[s + 1], c])
        if s:
            terms.append(cm.tr_time[bounds[s], classes[s - 1], c])
    return float(max(terms))


# ---- from class paths to plans -------------------------------------------------------------------

def class_path_devices(cm: ClassModel, classes: list[int]) -> list[int]:
    """Concrete devices for a path of classes (the k-th use of a class takes its k-th member)."""
    used: dict[int, int] = {}
    out = []
    for c in classes:
        n = used.get(c, 0)
        out.append(cm.members[c][n])
        used[c] = n + 1
    return out


def to_plan(cm: ClassModel, bounds: list[int], classes: list[int], algorithm: str, params: dict) -> Plan:
    """A Plan with the evaluator's metrics."""
    return make_plan(cm.problem, bounds, class_path_devices(cm, classes), algorithm, params)
