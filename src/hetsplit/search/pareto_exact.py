"""``pareto``: the exact Pareto front of (bottleneck, energy per inference) among plans that fit.

Epsilon-constraint sweep: with a bound T on every stage and transfer, a lexicographic DP finds the
least energy and, among those, the least bottleneck: a front point (B, E). The next point is the
same DP with T = the largest candidate bottleneck value below B, until no plan is left. One DP per
front point (plus one), each exact (energy is additive, so (energy, bottleneck) is decomposable).
Unlike DONNA's alpha-weighted sum, this reaches non-convex parts of the front.

``compare_to_front`` says, for plans of another solver (DONNA's alphas), whether the front
dominates each and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.plan.types import Plan
from hetsplit.search.base import PipelineConstraints, register_partitioner
from hetsplit.search.classes import (ClassModel, build_classes, check_layers_fit, check_state_budget,
                                     infeasible_message, path_bottleneck, to_plan)
from hetsplit.search.value_dp import RTOL, ValueResult, value_dp

REL_EPS = 1e-9  # relative tolerance when comparing bottlenecks and energies of different plans


def pareto_sweep(cm: ClassModel, max_points: int | None = None) -> list[ValueResult]:
    """Front points in order of decreasing bottleneck (increasing energy).

    Each DP minimizes energy alone under the bound; when several plans tie on energy the DP may
    return one with a larger bottleneck, and the next bound then finds the same energy at a smaller
    bottleneck: the dominated twin is dropped at the end (ties within ``RTOL``).
    """
    cand = cm.candidates()
    lb = cm.lower_bound()
    bound = np.inf
    raw: list[ValueResult] = []
    while max_points is None or len(raw) < max_points:
        vr = value_dp(cm, bound, "energy", None)
        if vr is None:
            break
        vr.secondary = path_bottleneck(cm, vr.bounds, vr.moves)
        raw.append(vr)
        idx = int(np.searchsorted(cand, vr.secondary, side="left")) - 1
        if idx < 0 or cand[idx] < lb:
            break
        bound = float(cand[idx])
    # raw is sorted by decreasing bottleneck; a point is kept unless the next one ties its energy
    out = [vr for vr, nxt in zip(raw, raw[1:] + [None])
           if nxt is None or nxt.primary > vr.primary + RTOL * abs(vr.primary)]
    return out


@register_partitioner("pareto")
@dataclass
class ParetoExact:
    """Every Pareto-optimal (bottleneck, energy) plan, one plan per front point."""

    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    max_points: int | None = None
    state_budget_bytes: float = 2**30
    name: str = "pareto"

    def solve(self, problem: SplitProblem) -> list[Plan]:
        cm = build_classes(problem, self.constraints)
        check_layers_fit(cm)
        check_state_budget(cm, 1, self.state_budget_bytes, self.name)
        points = pareto_sweep(cm, self.max_points)
        if not points:
            raise InfeasibleError(infeasible_message(cm))
        plans = []
        for rank, vr in enumerate(reversed(points)):  # fastest first
            p = to_plan(cm, vr.bounds, vr.moves, self.name, {"front_index": rank})
            p.pareto = True
            plans.append(p)
        return plans


@dataclass
class Domination:
    """How a plan compares with the exact front."""

    plan: Plan
    dominated: bool
    energy_saving_j: float          # best front energy at an equal-or-better bottleneck: E - E_front
    energy_saving_frac: float
    speedup: float                  # best front throughput at equal-or-less energy over the plan's
    better: Plan | None = field(default=None, repr=False)  # the front plan with that energy saving


def compare_to_front(plans: list[Plan], front: list[Plan]) -> list[Domination]:
    """For each plan: is it dominated by the front, and by how much (energy and throughput)."""
    fb = np.array([f.metrics.bottleneck_s for f in front])
    fe = np.array([f.metrics.energy_j for f in front])
    out = []
    for p in plans:
        b, e = p.metrics.bottleneck_s, p.metrics.energy_j
        if not p.metrics.fits:
            out.append(Domination(p, True, np.inf, 1.0, np.inf, None))
            continue
        at_b = np.flatnonzero(fb <= b * (1 + REL_EPS))
        at_e = np.flatnonzero(fe <= e * (1 + REL_EPS))
        saving, better = 0.0, None
        if at_b.size:
            i = at_b[np.argmin(fe[at_b])]
            saving, better = max(0.0, e - fe[i]), front[i]
        speedup = float(b / fb[at_e].min()) if at_e.size and fb[at_e].min() > 0 else 1.0
        dominated = saving > REL_EPS * abs(e) or speedup > 1 + REL_EPS
        out.append(Domination(p, bool(dominated), float(saving), float(saving / e) if e > 0 else 0.0,
                              max(1.0, speedup), better))
    return out
