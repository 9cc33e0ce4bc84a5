"""``exact``: the minimum-bottleneck pipeline under memory limits, exactly, on any cluster.

Every device may differ in type, memory and every link (bandwidth, latency, energy), with source
and sink transfers. Method (``classes``, ``reach``): interchangeable devices, and whole boards that
can be permuted as blocks (``units``), collapse into classes whose states count units per usage
pattern (``states``); the answer is one of the sorted distinct values a bottleneck can take (stage
compute times that fit memory, cut transfer times). It is bracketed below by the optimum when
classes may be reused (an O(L^2 C) relaxation; when its plan can be placed on devices it is the
answer, with no search) and above by the best single-device plan; a binary search in between tests
each bound by propagating boolean families of usage states over cut positions (packed bit rows
for all-different devices), and jumps to the bottleneck of each feasible witness plan.

Tie-break among the plans with the optimal bottleneck T*: least energy per inference, then least
latency (a lexicographic DP under the bound T*, exact because energy and latency are additive).
When the dense tables of that DP would exceed ``tie_break_budget_bytes``, a sparse DP
(``tie_break``) runs over the states both reachable and completable within T* (forward and backward
families), which every optimal plan passes through (done for all-different devices, whose families
are packed bits); otherwise the plan is any optimal-bottleneck plan and ``params["tie_break"]`` says so.

The DP charges each transfer alone; where the evaluator's link carries two (a source and a sink
that differ, the first stage on the sink and the last on the source), ``coupling`` splits the
plans into three sets on which the DP is exact, so the answer is optimal for the evaluator. With
shared ports it is optimal for per-cut transfers only, and the plan's params say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, SolveStats, register_partitioner
from hetsplit.search.classes import (ClassModel, build_classes, check_layers_fit, infeasible_message,
                                     path_bottleneck, path_is_valid, relaxed_min_bottleneck, to_plan)
from hetsplit.search.coupling import PlanSet, solve_for_estimator
from hetsplit.search.reach import Reach, backtrack_reach, co_reach, families, reach
from hetsplit.search.tie_break import sparse_tie_break
from hetsplit.search.value_dp import value_dp


def min_bottleneck(cm: ClassModel, stats: SolveStats | None = None,
                   deadline: Deadline | None = None) -> tuple[float, Reach | tuple[list, list]]:
    """The least feasible bottleneck, with the reachability families at it or a plan (bounds, classes).

    The bracket: below, the optimum with classes reusable (a relaxation, O(L^2 C); when its plan
    happens to be valid it is the answer); above, the best single-device plan, which needs no check.
    """
    lb, rb, rc = relaxed_min_bottleneck(cm)
    if not np.isfinite(lb):
        raise InfeasibleError(infeasible_message(cm))
    if path_is_valid(cm, rc):
        if stats is not None:
            stats.extra.update(checks=0, relaxation="tight", classes=cm.num_classes, multisets=cm.num_multisets)
        return lb, (rb, rc)
    cand = cm.candidates()
    cand = cand[cand >= max(lb, cm.lower_bound())]
    L = cm.num_layers
    single = np.maximum(np.maximum(cm.time[0, L, :], cm.src_time), cm.snk_time)
    hi_known = float(single.min()) if np.isfinite(single).any() else np.inf
    lo, hi = 0, len(cand) - 1
    best: Reach | None = None
    checks = 0
    if np.isfinite(hi_known):
        hi = int(np.searchsorted(cand, hi_known))  # a single-device plan reaches it: feasible
    else:
        best = reach(cm, float(cand[hi]), deadline=deadline) if len(cand) else None
        checks += 1
        if best is None or not best.feasible:
            raise InfeasibleError(infeasible_message(cm))
    while lo < hi:
        mid = (lo + hi) // 2
        r = reach(cm, float(cand[mid]), deadline=deadline)
        checks += 1
        if r.feasible:
            # the witness plan may be better than the bound: jump to its bottleneck
            b, c = backtrack_reach(cm, r)
            hi, best = min(mid, int(np.searchsorted(cand, path_bottleneck(cm, b, c)))), r
        else:
            lo = mid + 1
    t_star = float(cand[hi])
    if best is None or not best.feasible:
        best = reach(cm, t_star, deadline=deadline)
        checks += 1
    if stats is not None:
        stats.extra.update(checks=checks, candidates=len(cand), classes=cm.num_classes,
                           multisets=cm.num_multisets)
    return t_star, best


@register_partitioner("exact")
@dataclass
class Exact:
    """Exact minimum bottleneck (ties: least energy, then least latency)."""

    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    tie_break_budget_bytes: float = 192 * 2**20
    name: str = "exact"
    time_budget_s: float | None = None    # past it, TimeBudgetSpent (the DPs have no partial answer)

    def solve(self, problem: SplitProblem) -> list[Plan]:
        deadline = Deadline(self.name, self.time_budget_s)
        return solve_for_estimator(problem, self.constraints,
                                   lambda c, plan_set: [self._solve(problem, c, plan_set, deadline)], _best)

    def _solve(self, problem: SplitProblem, constraints: PipelineConstraints, plan_set: PlanSet | None,
               deadline: Deadline | None = None) -> Plan:
        """The per-cut optimum among the plans ``constraints`` allow; with a ``plan_set``, its
        bottleneck floored at ``plan_set.floor`` (the tie-break runs under the floored bound)."""
        stats = SolveStats()
        cm = build_classes(problem, constraints)
        check_layers_fit(cm)
        t_star, r = min_bottleneck(cm, stats, deadline)
        bound = max(t_star, plan_set.floor) if plan_set is not None else t_star
        params = {"bottleneck_s": bound, **stats.extra}
        # tie-break: dense DP over every multiset when its tables fit the budget, else a sparse DP
        # over the states both reachable and completable within the bound (worth it with packed subsets)
        dense = 2 * 8 * (cm.num_layers + 1) * cm.num_classes * cm.num_multisets
        vr = None
        if dense <= self.tie_break_budget_bytes:
            vr = value_dp(cm, bound, "energy", "latency", deadline)
        elif families(cm).packed:
            if isinstance(r, tuple) or r.bound != bound:  # families at exactly the bound
                r = reach(cm, bound, deadline=deadline)
            if deadline is not None:
                deadline.check("its tie-break DP")
            G = co_reach(cm, r)
            states = int(np.unpackbits((r.A & G).view(np.uint8)).sum())
            params["tie_break_states"] = states
            if 64 * states <= self.tie_break_budget_bytes:
                if deadline is not None:
                    deadline.check("its tie-break DP")
                vr = sparse_tie_break(cm, r, G, bound)
        if vr is not None:
            params["tie_break"] = "energy, latency"
            return to_plan(cm, vr.bounds, vr.moves, self.name, params)
        params["tie_break"] = "none (the tie-break DP would exceed tie_break_budget_bytes)"
        bounds, classes = r if isinstance(r, tuple) else backtrack_reach(cm, r)
        return to_plan(cm, bounds, classes, self.name, params)


def _best(plans: list[Plan]) -> list[Plan]:
    """The best plan of the plan sets by (bottleneck, energy, latency); its tie-break is as good as
    the weakest among the sets that reach its bottleneck."""
    best = min(plans, key=lambda p: (p.costed.bottleneck_s, p.costed.energy_j, p.costed.latency_s))
    for p in plans:
        if p.costed.bottleneck_s == best.costed.bottleneck_s and p.params["tie_break"].startswith("none"):
            best.params["tie_break"] = p.params["tie_break"]
    return [best]
