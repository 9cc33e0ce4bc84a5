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
Complexity: O(L^2 * 2^D * D^2), one array operation per start layer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.estimate.evaluate import make_plan
from hetsplit.estimate.memory import table_objective
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints, register_partitioner

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


def donna_dp(problem: SplitProblem, alpha: float, constraints: PipelineConstraints = PipelineConstraints()) -> DonnaResult:
    """Run Algorithm 1 for one alpha; raises InfeasibleError when no assignment exists.

    The paper's loops over (i, s, u, j, v) are kept in order for i; for each i every state (s, u)
    and every (j, v) is handled in one array operation. Ties resolve as the sequential pseudo code
    does (strict "<", first state in (s, u) order wins), which tests check against a literal
    transcription of the pseudo code.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    n_layers, n_dev = problem.num_layers, problem.num_devices
    if n_dev > MAX_DEVICES:
        raise InfeasibleError(f"DONNA enumerates device subsets (2^D); {n_dev} devices is more than {MAX_DEVICES}: "
                              "use --algo exact or pareto")
    tn, en = normalizers(problem)
    n_sub = 1 << n_dev
    h_c = np.full((n_layers + 1, n_sub, n_dev), np.inf)
    h_t = np.full_like(h_c, np.inf)
    h_e = np.full_like(h_c, np.inf)
    pred_i = np.full(h_c.shape, -1, dtype=np.int64)
    pred_u = np.full(h_c.shape, -1, dtype=np.int64)
    src, snk = problem.cluster.source_index, problem.cluster.sink_index
    for u in constraints.first_stage_indices(problem):
        t0 = problem.cut_time(0, src, u) / tn if src is not None else 0.0
        e0 = problem.cut_energy(0, src, u) / en if src is not None else 0.0
        h_t[0, 0, u], h_e[0, 0, u] = t0, e0
        h_c[0, 0, u] = alpha * t0 + (1 - alpha) * e0

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
    state_key = grp_s * n_dev + grp_u                                   # paper's (s, u) loop order
    valid &= popcount[np.arange(n_sub)][:, None] <= max_stages

    best = (np.inf, -1, -1, -1, np.inf, np.inf)  # cost, i, s, u, t, e
    with np.errstate(invalid="ignore"):  # alpha x inf is nan where a stage cannot run; masked
        for i in range(n_layers):
            hc_i = h_c[i][grp_s, grp_u]                                     # (S', K)
            live = valid & np.isfinite(hc_i)
            if not live.any():
                continue
            j = ks[i + 1:]
            tcomp = problem.stage_time(i, j[None, :], devices[:, None]) / tn   # (D, J)
            ecomp = problem.stage_energy(i, j[None, :], devices[:, None]) / en
            if constraints.enforce_memory:
                tcomp = np.where(problem.fits(i, j[None, :], devices[:, None]), tcomp, np.inf)
            ht, he = h_t[i][grp_s, grp_u], h_e[i][grp_s, grp_u]              # (S', K)

            # the last stage: layers i..L-1 on u (and the sink transfer)
            t_fin = np.maximum(np.maximum(tcomp[grp_u, -1], t_sink[grp_u]), ht)
            e_fin = ecomp[grp_u, -1] + e_sink[grp_u] + he
            c_fin = np.where(live & np.isfinite(t_fin), alpha * t_fin + (1 - alpha) * e_fin, np.inf)
            c_min = c_fin.min()
            if c_min < best[0]:
                at = np.flatnonzero(c_fin.ravel() == c_min)
                first = at[np.argmin(state_key.ravel()[at])]
                g, k = np.unravel_index(first, c_fin.shape)
                best = (float(c_min), i, int(grp_s[g, k]), int(grp_u[g, k]), float(t_fin[g, k]), float(e_fin[g, k]))
            if len(j) == 1:
                continue

            # stages i..j-1 on u, then cut j to a device v not used yet
            jj = j[:-1]
            tc = tcomp[grp_u][:, :, :-1, None]                               # (S', K, J, 1)
            ec = ecomp[grp_u][:, :, :-1, None]
            tm = t_comm[jj][:, grp_u, :].transpose(1, 2, 0, 3)               # (S', K, J, V)
            em = e_comm[jj][:, grp_u, :].transpose(1, 2, 0, 3)
            t_cost = np.maximum(np.maximum(tc, tm), ht[:, :, None, None])
            e_cost = ec + em + he[:, :, None, None]
            ok = (live & may_extend[:, None])[:, :, None, None] & v_free[:, None, None, :] & np.isfinite(t_cost)
            cost = np.where(ok, alpha * t_cost + (1 - alpha) * e_cost, np.inf)
            pick = np.argmin(cost, axis=1)                                   # first state in loop order wins ties
            c_new = np.take_along_axis(cost, pick[:, None], axis=1)[:, 0]    # (S', J, V)
            target = h_c[i + 1:n_layers].transpose(1, 0, 2)                  # (S', J, V), a view
            better = c_new < target
            if not better.any():
                continue
            g_idx, j_idx, v_idx = np.nonzero(better)
            k_idx = pick[g_idx, j_idx, v_idx]
            rows = jj[j_idx]
            h_c[rows, g_idx, v_idx] = c_new[g_idx, j_idx, v_idx]
            h_t[rows, g_idx, v_idx] = t_cost[g_idx, k_idx, j_idx, v_idx]
            h_e[rows, g_idx, v_idx] = e_cost[g_idx, k_idx, j_idx, v_idx]
            pred_i[rows, g_idx, v_idx] = i
            pred_u[rows, g_idx, v_idx] = grp_u[g_idx, k_idx]
    best_cost, i, s, u, t_best, e_best = best
    if not np.isfinite(best_cost):
        raise InfeasibleError(_why_infeasible(problem))
    # trace back (Algorithm 1, lines 36-43)
    bounds, devs = [n_layers], [u]
    while i > 0:
        bounds.append(i)
        pi, pu = pred_i[i, s, u], pred_u[i, s, u]
        s = s & ~(1 << pu)
        i, u = int(pi), int(pu)
        devs.append(u)
    bounds.append(0)
    return DonnaResult(alpha, bounds[::-1], devs[::-1], float(best_cost), float(t_best), float(e_best))


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

    def solve(self, problem: SplitProblem) -> list[Plan]:
        require_known_energy(problem, "DONNA with an alpha below 1 (0: least energy)", any(a < 1 for a in self.alphas))
        plans = []
        for alpha in self.alphas:
            r = donna_dp(problem, float(alpha), self.constraints)
            plans.append(make_plan(problem, r.bounds, r.devices, self.name,
                                   {"alpha": float(alpha), "dp_cost": r.cost, **table_objective(problem)}))
        return plans
