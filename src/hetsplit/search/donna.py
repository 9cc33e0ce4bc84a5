"""DONNA's Algorithm 1 (AlShams et al.): alpha-weighted throughput/energy DP over device subsets.

State ``(i, s, u)``: the first i layers are placed on the devices of subset s, and the next stage
runs on device u (not in s). Each state keeps the normalized slowest stage ``h_t`` and the
normalized energy so far ``h_e``; the DP keeps, per state, the path with the lowest
``alpha * h_t + (1 - alpha) * h_e`` (eq. 1), exactly as the paper's pseudo code does: it is a
heuristic (a weighted sum of a max and a sum is not decomposable), which is why hetsplit also has
exact solvers. Each device runs at most one stage; not every device has to take part. The first
and the last stage may be restricted to given devices (``PipelineConstraints``).

Where hetsplit's semantics differ from the paper's pseudo code (and why):
- a cut moves every tensor live across it (``cut_bytes``), not only the last layer's output;
- a stage that does not fit its device's memory is skipped (DONNA ignores memory);
- with a cluster ``source`` the input transfer to the first stage is part of the first state, and
  with a ``sink`` the output transfer is part of the final cost;
- normalization (the paper: "relative to its maximal value derived from the collective computation
  and communication operations of all device types"): time terms are divided by the largest
  whole-model compute time over device types plus the largest single cut transfer time; energy
  terms by the largest whole-model compute energy plus the largest single cut transfer energy.
Complexity: O(L^2 * 2^D * D^2): per start layer, the stage costs in numpy and the steps in a compiled kernel.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from numba import njit

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.estimate.evaluate import make_plan
from hetsplit.estimate.memory import table_objective
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, TimeBudgetSpent, register_partitioner

DEFAULT_ALPHAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
MAX_DEVICES = 10  # 2^D subsets x D^2 pairs per layer: beyond this DONNA is too slow to be useful


def normalizers(problem: SplitProblem) -> tuple[float, float]:
    """(time, energy) scales that put compute and communication terms on a common footing."""
    costs = problem.costs
    finite_t = np.where(np.isfinite(costs.time_s), costs.time_s, 0.0).sum(axis=0)
    finite_e = np.where(np.isfinite(costs.energy_j), costs.energy_j, 0.0).sum(axis=0)
    lk = problem.cluster.links
    off = ~np.eye(problem.num_devices, dtype=bool)
    max_cut = float(problem.cut_bytes.max()) if problem.num_layers else 0.0
    if off.any() and max_cut > 0:
        us, vs = np.nonzero(off)
        comm_t = float(lk.time(us, vs, max_cut).max())
        comm_e = float(lk.energy(us, vs, max_cut).max())
    else:
        comm_t = comm_e = 0.0
    tn = float(finite_t.max()) + comm_t
    en = float(finite_e.max()) + comm_e
    return (tn if tn > 0 else 1.0), (en if en > 0 else 1.0)


@dataclass
class DonnaResult:
    """One alpha's outcome: stage bounds and devices, and the DP's own normalized costs."""

    alpha: float
    bounds: list[int]
    devices: list[int]
    cost: float
    h_t: float
    h_e: float


def _member_table(n_dev: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every subset s' (row), the states (s, u) with s | {u} = s', in the paper's loop order.

    Returns (s, u, valid) arrays of shape (2^D, D), padded where s' has fewer than D members.
    """
    n_sub = 1 << n_dev
    grp_s = np.zeros((n_sub, n_dev), dtype=np.int64)
    grp_u = np.zeros((n_sub, n_dev), dtype=np.int64)
    valid = np.zeros((n_sub, n_dev), dtype=bool)
    for s_next in range(n_sub):
        members = sorted((s_next & ~(1 << u), u) for u in range(n_dev) if (s_next >> u) & 1)
        for k, (s, u) in enumerate(members):
            grp_s[s_next, k], grp_u[s_next, k], valid[s_next, k] = s, u, True
    return grp_s, grp_u, valid


def donna_dp(problem: SplitProblem, alpha: float, constraints: PipelineConstraints = PipelineConstraints(),
             deadline: Deadline | None = None) -> DonnaResult:
    """Run Algorithm 1 for one alpha; raises InfeasibleError when no assignment exists, and
    TimeBudgetSpent when ``deadline`` runs out (it is read once per layer row).

    The paper's loops over (i, s, u, j, v) are kept in order for i; for each i the stage costs are
    computed in numpy and the steps taken in ``_donna_row`` (compiled). Ties resolve as the sequential
    pseudo code does (strict "<", first state in (s, u) order wins), which tests check against a literal
    transcription of the pseudo code and against the earlier all-numpy version.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    n_layers, n_dev = problem.num_layers, problem.num_devices
    if n_dev > MAX_DEVICES:
        raise InfeasibleError(f"DONNA enumerates device subsets (2^D); {n_dev} devices is more than {MAX_DEVICES}: "
                              "use --algo exact or pareto")
    tn, en = normalizers(problem)
    n_sub = 1 << n_dev
    # the states (s, u, i): cost, normalized slowest stage and energy; laid out so that the kernel's
    # inner loop over cuts is contiguous
    hc = np.full((n_sub, n_dev, n_layers + 1), np.inf)
    ht, he = np.full_like(hc, np.inf), np.full_like(hc, np.inf)
    p_i, p_u = np.full(hc.shape, -1, dtype=np.int64), np.full(hc.shape, -1, dtype=np.int64)
    src, snk = problem.cluster.source_index, problem.cluster.sink_index
    for u in constraints.first_stage_indices(problem):
        t0 = problem.cut_time(0, src, u) / tn if src is not None else 0.0
        e0 = problem.cut_energy(0, src, u) / en if src is not None else 0.0
        ht[0, u, 0], he[0, u, 0] = t0, e0
        hc[0, u, 0] = alpha * t0 + (1 - alpha) * e0

    devices = np.arange(n_dev)
    ks = np.arange(n_layers + 1)
    # transfers of every cut between every pair (u == v is never a transfer in DONNA)
    t_comm = problem.cut_time(ks[:, None, None], devices[None, :, None], devices[None, None, :]) / tn
    e_comm = problem.cut_energy(ks[:, None, None], devices[None, :, None], devices[None, None, :]) / en
    t_comm[:, devices, devices] = np.inf
    if snk is not None:
        t_sink = problem.cut_time(n_layers, devices, snk) / tn
        e_sink = problem.cut_energy(n_layers, devices, snk) / en
    else:
        t_sink, e_sink = np.zeros(n_dev), np.zeros(n_dev)
    may_end = np.zeros(n_dev, dtype=bool)
    may_end[constraints.last_stage_indices(problem)] = True
    t_sink = np.where(may_end, t_sink, np.inf)                       # no last stage elsewhere
    grp_s, grp_u, valid = _member_table(n_dev)
    max_stages = constraints.max_stages or n_dev
    popcount = np.array([bin(x).count("1") for x in range(n_sub)])
    may_extend = popcount < max_stages                                  # s' may be followed by a stage
    v_free = ~((np.arange(n_sub)[:, None] >> devices[None, :]) & 1).astype(bool)  # v not in s'
    valid &= popcount[np.arange(n_sub)][:, None] <= max_stages

    t_uvj = np.ascontiguousarray(t_comm.transpose(1, 2, 0))
    e_uvj = np.ascontiguousarray(e_comm.transpose(1, 2, 0))
    best = np.array([np.inf, -1, -1, -1, np.inf, np.inf])             # cost, i, s, u, t, e
    for i in range(n_layers):
        if deadline is not None:
            deadline.check(f"alpha {alpha:g}", "give a larger --time-budget (each alpha is one whole DP), or "
                           "fewer layers (--group), or a heuristic algorithm (lblp, heft)")
        if not np.isfinite(hc[:, :, i]).any():
            continue
        j = ks[i + 1:]
        tcomp = problem.stage_time(i, j[None, :], devices[:, None]) / tn   # (D, J)
        ecomp = problem.stage_energy(i, j[None, :], devices[:, None]) / en
        if constraints.enforce_memory:
            tcomp = np.where(problem.fits(i, j[None, :], devices[:, None]), tcomp, np.inf)
        _donna_row(i, float(alpha), np.ascontiguousarray(tcomp, dtype=np.float64),
                   np.ascontiguousarray(ecomp, dtype=np.float64), t_uvj, e_uvj, t_sink, e_sink,
                   grp_s, grp_u, valid, may_extend, v_free, hc, ht, he, p_i, p_u, best)
    cost, i, s, u, t_best, e_best = best
    i, s, u = int(i), int(s), int(u)
    if not np.isfinite(cost):
        raise InfeasibleError(_why_infeasible(problem))
    # trace back (Algorithm 1, lines 36-43)
    bounds, devs = [n_layers], [u]
    while i > 0:
        bounds.append(i)
        pi, pu = p_i[s, u, i], p_u[s, u, i]
        s = s & ~(1 << pu)
        i, u = int(pi), int(pu)
        devs.append(u)
    bounds.append(0)
    return DonnaResult(alpha, bounds[::-1], devs[::-1], float(cost), float(t_best), float(e_best))


@njit(cache=True)
def _donna_row(i, alpha, tcomp, ecomp, t_uvj, e_uvj, t_sink, e_sink, grp_s, grp_u, valid, may_extend, v_free,
               hc, ht, he, p_i, p_u, best):  # pragma: no cover - compiled
    """Every step out of start layer ``i``: the last stage (i..L-1 on u, then the sink) against ``best``, and
    each stage i..j-1 on u followed by device v, kept where it lowers the state (j, s|{u}, v). Ties resolve
    as the paper's sequential loops do: the first state in (s, u) order wins (strict "<"); a NaN cost (an
    unknown energy at alpha 1) blocks its target as numpy's argmin did."""
    n_sub, n_dev = grp_s.shape
    n_j = tcomp.shape[1]
    c_min, key_min, t_min, e_min, nan_seen = np.inf, -1, np.inf, np.inf, False
    for g in range(n_sub):
        for k in range(n_dev):
            if not valid[g, k]:
                continue
            s, u = grp_s[g, k], grp_u[g, k]
            if not np.isfinite(hc[s, u, i]):
                continue
            a = tcomp[u, n_j - 1]
            b = t_sink[u]
            t = a if a >= b else b
            t = t if t >= ht[s, u, i] else ht[s, u, i]
            e = ecomp[u, n_j - 1] + e_sink[u] + he[s, u, i]
            c = alpha * t + (1 - alpha) * e if np.isfinite(t) else np.inf
            if np.isnan(c):
                nan_seen = True
            elif c < c_min or (c == c_min and s * n_dev + u < key_min):
                c_min, key_min, t_min, e_min = c, s * n_dev + u, t, e
    if not nan_seen and c_min < best[0]:
        best[0], best[1], best[2], best[3], best[4], best[5] = c_min, i, key_min // n_dev, key_min % n_dev, t_min, e_min
    if n_j == 1:
        return
    c_best = np.empty(n_j - 1)
    t_b = np.empty(n_j - 1)
    e_b = np.empty(n_j - 1)
    u_b = np.empty(n_j - 1, dtype=np.int64)
    blocked = np.empty(n_j - 1, dtype=np.bool_)
    for g in range(n_sub):
        if not may_extend[g]:
            continue
        for v in range(n_dev):
            if not v_free[g, v]:
                continue
            c_best[:] = np.inf
            blocked[:] = False
            for k in range(n_dev):
                if not valid[g, k]:
                    continue
                s, u = grp_s[g, k], grp_u[g, k]
                if not np.isfinite(hc[s, u, i]):
                    continue
                h_t0, h_e0 = ht[s, u, i], he[s, u, i]
                for x in range(n_j - 1):
                    j = i + 1 + x
                    a = tcomp[u, x]
                    b = t_uvj[u, v, j]
                    t = a if a >= b else b
                    t = t if t >= h_t0 else h_t0
                    if not np.isfinite(t):
                        continue
                    e = ecomp[u, x] + e_uvj[u, v, j] + h_e0
                    c = alpha * t + (1 - alpha) * e
                    if np.isnan(c):
                        blocked[x] = True
                    elif c < c_best[x]:
                        c_best[x], t_b[x], e_b[x], u_b[x] = c, t, e, u
            for x in range(n_j - 1):
                j = i + 1 + x
                if not blocked[x] and c_best[x] < hc[g, v, j]:
                    hc[g, v, j], ht[g, v, j], he[g, v, j] = c_best[x], t_b[x], e_b[x]
                    p_i[g, v, j], p_u[g, v, j] = i, u_b[x]


def _why_infeasible(problem: SplitProblem) -> str:
    """Name a layer that no device can hold or run, if there is one."""
    for layer in range(problem.num_layers):
        why = problem.why_unplaceable(layer)
        if why:
            return why
    return "no pipeline of at most one stage per device fits the devices' memory"


@register_partitioner("donna")
@dataclass
class Donna:
    """DONNA: one plan per alpha (alpha = 1 maximizes throughput, 0 minimizes energy)."""

    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    name: str = "donna"
    time_budget_s: float | None = None    # stop within the alpha that passes it (None: run every alpha)

    def solve(self, problem: SplitProblem) -> list[Plan]:
        require_known_energy(problem, "DONNA with an alpha below 1 (0: least energy)", any(a < 1 for a in self.alphas))
        deadline = Deadline(self.name, self.time_budget_s)
        plans: list[Plan] = []
        for k, alpha in enumerate(self.alphas):
            try:
                r = donna_dp(problem, float(alpha), self.constraints, deadline)
            except TimeBudgetSpent:
                if not plans:           # the first alpha did not finish: nothing to give
                    raise
                left = self.alphas[k:]  # the search says it was cut, on the plans it returns
                deadline.mark_cut(plans, f"alphas {', '.join(f'{a:g}' for a in left)} not run")
                break
            plans.append(make_plan(problem, r.bounds, r.devices, self.name,
                                   {"alpha": float(alpha), "dp_cost": r.cost, **table_objective(problem)}))
        return plans
