"""DONNA's Algorithm 1 (AlShams et al.): alpha-weighted throughput/energy DP over device subsets.

State ``(i, s, u)``: the first i layers are placed on the devices of subset s, and the next stage
runs on device u (not in s). Each state keeps the normalized slowest stage ``h_t`` and the
normalized energy so far ``h_e``; the DP keeps, per state, the path with the lowest
``alpha * h_t + (1 - alpha) * h_e`` (eq. 1), exactly as the paper's pseudo code does: it is a
heuristic (a weighted sum of a max and a sum is not decomposable), which is why hetsplit also has
exact solvers. Each device runs at most one stage; not every device has to take part.

Where hetsplit's semantics differ from the paper's pseudo code (and why):
- a cut moves every tensor live across it (``cut_bytes``), not only the last layer's output;
- a stage that does not fit its device's memory is skipped (DONNA ignores memory);
- with a cluster ``source`` the input transfer to the first stage is part of the first state, and
  with a ``sink`` the output transfer is part of the final cost;
- normalization (the paper: "relative to its maximal value derived from the collective computation
  and communication operations of all device types"): time terms are divided by the largest
  whole-model compute time over device types plus the largest single cut transfer time; energy
  terms by the largest whole-model compute energy plus the largest single cut transfer energy.
Complexity: O(L^2 * 2^D * D^2), vectorized over the end layer and the next device.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.plan.evaluate import make_plan
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints, register_partitioner

DEFAULT_ALPHAS = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)


def normalizers(problem: SplitProblem) -> tuple[float, float]:
    """(time, energy) scales that put compute and communication terms on a common footing."""
    costs = problem.costs
    finite_t = np.where(np.isfinite(costs.time_s), costs.time_s, 0.0).sum(axis=0)
    finite_e = np.where(np.isfinite(costs.energy_j), costs.energy_j, 0.0).sum(axis=0)
    cl = problem.cluster
    off = ~np.eye(problem.num_devices, dtype=bool)
    max_cut = float(problem.cut_bytes.max()) if problem.num_layers else 0.0
    if off.any() and max_cut > 0:
        comm_t = float((cl.latency_s[off] + max_cut / cl.bandwidth[off]).max())
        comm_e = float((max_cut * cl.energy_per_byte[off]).max())
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


def donna_dp(problem: SplitProblem, alpha: float, constraints: PipelineConstraints = PipelineConstraints()) -> DonnaResult:
    """Run Algorithm 1 for one alpha; raises InfeasibleError when no assignment exists."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    n_layers, n_dev = problem.num_layers, problem.num_devices
    if n_dev > 16:
        raise InfeasibleError(f"DONNA enumerates device subsets (2^D); {n_dev} devices is too many, use --algo exact")
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
    max_stages = constraints.max_stages or n_dev
    popcount = np.array([bin(s).count("1") for s in range(n_sub)])
    devices = np.arange(n_dev)
    best = (np.inf, -1, -1, -1, np.inf, np.inf)  # cost, i, s, u, t, e
    for i in range(n_layers):
        j = np.arange(i + 1, n_layers + 1)
        reachable = np.argwhere(np.isfinite(h_c[i]))
        for s, u in reachable:
            if (s >> u) & 1 or popcount[s] >= max_stages:
                continue
            tcomp = problem.stage_time(i, j, u) / tn
            ecomp = problem.stage_energy(i, j, u) / en
            if constraints.enforce_memory:
                bad = ~problem.fits(i, j, u)
                tcomp = np.where(bad, np.inf, tcomp)
            ht, he = h_t[i, s, u], h_e[i, s, u]
            # last stage: layers i..L-1 on u (plus the output transfer to a sink)
            t_last, e_last = tcomp[-1], ecomp[-1]
            if snk is not None:
                t_last = max(t_last, problem.cut_time(n_layers, u, snk) / tn)
                e_last = e_last + problem.cut_energy(n_layers, u, snk) / en
            t_cost = max(t_last, ht)
            e_cost = e_last + he
            c = alpha * t_cost + (1 - alpha) * e_cost
            if np.isfinite(t_cost) and c < best[0]:
                best = (c, i, s, u, t_cost, e_cost)
            if len(j) == 1 or popcount[s] + 1 >= max_stages:
                continue
            # stages ending before L: send cut j to the next device v
            jj = j[:-1]
            s_next = s | (1 << u)
            vs = devices[(devices != u) & ~((s_next >> devices) & 1).astype(bool)]
            if len(vs) == 0:
                continue
            tcomm = problem.cut_time(jj[:, None], u, vs[None, :]) / tn
            ecomm = problem.cut_energy(jj[:, None], u, vs[None, :]) / en
            t_cost = np.maximum(np.maximum(tcomp[:-1, None], tcomm), ht)
            e_cost = ecomp[:-1, None] + ecomm + he
            c = alpha * t_cost + (1 - alpha) * e_cost
            c = np.where(np.isfinite(t_cost), c, np.inf)
            target = h_c[jj[:, None], s_next, vs[None, :]]
            better = c < target
            if not better.any():
                continue
            rows, cols = np.nonzero(better)
            jr, vr = jj[rows], vs[cols]
            h_c[jr, s_next, vr] = c[rows, cols]
            h_t[jr, s_next, vr] = t_cost[rows, cols]
            h_e[jr, s_next, vr] = e_cost[rows, cols]
            pred_i[jr, s_next, vr] = i
            pred_u[jr, s_next, vr] = u
    cost, i, s, u, t_best, e_best = best
    if not np.isfinite(cost):
        raise InfeasibleError(_why_infeasible(problem))
    # trace back (Algorithm 1, lines 36-43)
    bounds, devs = [n_layers], [u]
    while i > 0:
        bounds.append(i)
        pi, pu = pred_i[i, s, u], pred_u[i, s, u]
        s = s & ~(1 << pu)
        i, u = pi, pu
        devs.append(u)
    bounds.append(0)
    return DonnaResult(alpha, bounds[::-1], devs[::-1], float(cost), float(t_best), float(e_best))


def _why_infeasible(problem: SplitProblem) -> str:
    """Name a layer that no device can hold or run, if there is one."""
    for layer in range(problem.num_layers):
        need = problem.stage_mem(layer, layer + 1, np.arange(problem.num_devices))
        runnable = np.isfinite(problem.stage_time(layer, layer + 1, np.arange(problem.num_devices)))
        if not (runnable & (need <= problem.memory_bytes)).any():
            name = problem.graph.layers[layer].name
            return (f"layer {name!r} fits on no device: it needs {need.min():.4g} bytes "
                    f"(largest device memory: {problem.memory_bytes.max():.4g} bytes) or no device type can run it")
    return "no pipeline of at most one stage per device fits the devices' memory"


@register_partitioner("donna")
@dataclass
class Donna:
    """DONNA: one plan per alpha (alpha = 1 maximizes throughput, 0 minimizes energy)."""

    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    name: str = "donna"

    def solve(self, problem: SplitProblem) -> list[Plan]:
        plans = []
        for alpha in self.alphas:
            r = donna_dp(problem, float(alpha), self.constraints)
            plans.append(make_plan(problem, r.bounds, r.devices, self.name,
                                   {"alpha": float(alpha), "dp_cost": r.cost}))
        return plans
