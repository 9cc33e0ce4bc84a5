"""``pareto``: the exact Pareto front of (bottleneck, energy per inference) among plans that fit.

Epsilon-constraint sweep: with a bound T on every stage and transfer, a lexicographic DP finds the
least energy and, among those, the least bottleneck: a front point (B, E). The next point is the
same DP with T = the largest candidate bottleneck value below B, until no plan is left. One DP per
front point (plus one), each exact (energy is additive, so (energy, bottleneck) is decomposable).
Unlike DONNA's alpha-weighted sum, this reaches non-convex parts of the front. Where the
evaluator's link carries two transfers (``coupling``), the front is merged from three plan sets
on which the sweep is exact; with shared ports it is the front for per-cut transfers, and says so.

``compare_to_front`` says, for plans of another solver (DONNA's alphas), whether the front
dominates each and by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, TimeBudgetSpent, register_partitioner
from hetsplit.search.classes import (ClassModel, build_classes, check_layers_fit, check_state_budget,
                                     infeasible_message, path_bottleneck, to_plan)
from hetsplit.search.coupling import PlanSet, solve_for_estimator
from hetsplit.search.value_dp import RTOL, ValueResult, value_dp

REL_EPS = 1e-9  # relative tolerance when comparing bottlenecks and energies of different plans


def pareto_sweep(cm: ClassModel, max_points: int | None = None, floor: float = 0.0,
                 deadline: Deadline | None = None) -> list[ValueResult]:
    """Front points in order of decreasing bottleneck (increasing energy).

    Each DP minimizes energy alone under the bound; when several plans tie on energy the DP may
    return one with a larger bottleneck, and the next bound then finds the same energy at a smaller
    bottleneck: the dominated twin is dropped at the end (ties within ``RTOL``); with ``max_points``
    the sweep runs until that many points are known not to be such twins. It also stops
    after the first point with a bottleneck <= ``floor`` (when every bottleneck is lifted to at least
    ``floor``, later points are dominated by it). When ``deadline`` runs out the points found so far
    are returned and ``deadline.cut`` is set (none found yet: ``TimeBudgetSpent``).
    """
    cand = cm.candidates()
    lb = cm.lower_bound()
    bound = np.inf
    raw: list[ValueResult] = []
    settled = 0  # points whose next one costs more energy (not a dominated twin)
    while max_points is None or settled < max_points:
        try:
            vr = value_dp(cm, bound, "energy", None, deadline)
        except TimeBudgetSpent:
            if not raw or deadline is None:
                raise
            deadline.cut = True
            break
        if vr is None:
            break
        vr.secondary = path_bottleneck(cm, vr.bounds, vr.moves)
        settled += bool(raw) and _costlier(vr, raw[-1])
        raw.append(vr)
        idx = int(np.searchsorted(cand, vr.secondary, side="left")) - 1
        if vr.secondary <= floor or idx < 0 or cand[idx] < lb:
            break
        bound = float(cand[idx])
    # raw is sorted by decreasing bottleneck; a point is kept unless the next one ties its energy
    out = [vr for vr, nxt in zip(raw, raw[1:] + [None]) if nxt is None or _costlier(nxt, vr)]
    return out[:max_points]


def _costlier(a: ValueResult, b: ValueResult) -> bool:
    """``a`` needs more energy than ``b`` (beyond a tie within ``RTOL``)."""
    return a.primary > b.primary + RTOL * abs(b.primary)


@register_partitioner("pareto")
@dataclass
class ParetoExact:
    """Every Pareto-optimal (bottleneck, energy) plan, one plan per front point."""

    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    max_points: int | None = None
    state_budget_bytes: float = 2**30
    name: str = "pareto"
    time_budget_s: float | None = None    # past it, the front points found so far, marked cut

    def solve(self, problem: SplitProblem) -> list[Plan]:
        require_known_energy(problem, "pareto (the throughput-energy front)")
        deadline = Deadline(self.name, self.time_budget_s)
        plans = solve_for_estimator(problem, self.constraints, partial(self._front, problem, deadline=deadline),
                                    self._merge, deadline)
        if deadline.cut:
            deadline.mark_cut(plans, "the front sweep stopped early: the faster end of the front is missing")
        return plans

    def _front(self, problem: SplitProblem, constraints: PipelineConstraints, plan_set: PlanSet | None,
               deadline: Deadline | None = None) -> list[Plan]:
        """The per-cut front of the plans ``constraints`` allow, fastest first; with a ``plan_set``,
        every bottleneck floored at ``plan_set.floor`` and no ``max_points`` (``_merge`` applies it)."""
        cm = build_classes(problem, constraints)
        check_layers_fit(cm)
        check_state_budget(cm, 1, self.state_budget_bytes, self.name)
        floor = plan_set.floor if plan_set is not None else 0.0
        points = pareto_sweep(cm, self.max_points if plan_set is None else None, floor, deadline)
        if not points:
            raise InfeasibleError(infeasible_message(cm))
        plans = []
        for rank, vr in enumerate(reversed(points)):  # fastest first
            p = to_plan(cm, vr.bounds, vr.moves, self.name,
                        {"front_index": rank, "bottleneck_s": max(vr.secondary, floor)})
            p.pareto = True
            plans.append(p)
        return plans

    def _merge(self, plans: list[Plan]) -> list[Plan]:
        """The plans (of the plan sets) no other one dominates, fastest first, at most ``max_points``
        of them (the least-energy ones); ties within ``RTOL`` keep the faster plan."""
        front: list[Plan] = []
        for p in sorted(plans, key=lambda p: (p.costed.bottleneck_s, p.costed.energy_j)):
            e = p.costed.energy_j
            if not front or e < front[-1].costed.energy_j - RTOL * abs(front[-1].costed.energy_j):
                front.append(p)
        if self.max_points is not None:
            front = front[max(0, len(front) - self.max_points):]
        for rank, p in enumerate(front):
            p.params["front_index"] = rank
        return front


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
    fb = np.array([f.costed.bottleneck_s for f in front])
    fe = np.array([f.costed.energy_j for f in front])
    out = []
    for p in plans:
        b, e = p.costed.bottleneck_s, p.costed.energy_j
        if not p.costed.fits:
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
