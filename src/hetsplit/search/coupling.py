"""Transfers that share a wire: how the per-cut solvers (``exact``, ``pareto``) stay exact.

The DP tables (``classes``) charge every transfer on its own: their bottleneck of a plan, the
*per-cut* bottleneck pc, is the largest stage compute time or single transfer time. The evaluator
(``estimate.pipeline``) charges a wire (a directed link, or with ``ports="shared"`` a device's
port) the sum of the transfers it carries, so a plan's true bottleneck is >= its pc, and equal when
no wire carries two transfers. Energy and latency are sums in both, so they agree.

Links (``ports="links"``). Let s be the source, k the sink, s != k, and
K = cut_time(0, s, k) + cut_time(L, s, k) (a constant of the problem). Every plan lies in exactly one of
  A: the first stage is not on k;
  C: the first stage is on k and the last stage is not on s;
  B: the first stage is on k and the last stage is on s.
Claim: in A and C, true = pc; in B, true = max(pc, K).
Proof. A plan's stages run on distinct devices u_0 .. u_{S-1}. The cut between stages i and i+1
uses the link u_i -> u_{i+1}; these links are pairwise distinct (their heads are). None of them is
s -> u_0 (only stage 0 runs on u_0, and an inner cut ends on a later stage) nor u_{S-1} -> k (only
the last stage runs on u_{S-1}, and an inner cut starts on an earlier one). So the only two
transfers that can share a link are the input s -> u_0 and the output u_{S-1} -> k, and only when
u_0 = k and u_{S-1} = s, i.e. in B (where S >= 2 as k != s). In B the link s -> k is busy
K per input, every other wire carries one transfer, and pc already counts each of the two
transfers alone, so true = max(pc, K).

Minimum bottleneck (ties: least energy, then least latency). Let P0 be the per-cut optimum (pc
T0, least energy and latency among the plans with pc <= T0). If true(P0) = T0, P0 is optimal: every
plan has true >= pc >= T0, and the plans with true = T0 are among those with pc <= T0, of which
P0 is the best and one. Otherwise the optimum T* is the least of A's and C's per-cut optima and
B's max(K, per-cut optimum of B) = T_B; a plan of B has true <= T_B iff its pc <= T_B, so B's
best plan is the tie-break DP's at the bound T_B. The best of the three by (bottleneck, energy,
latency) is optimal.

Pareto front of (bottleneck, energy). If every point of the per-cut front has true = pc, it is
the true front: each plan is weakly per-cut dominated by a front point f, and true(f) = pc(f) <=
pc <= true of the plan; no plan dominates f under the truth, as it would under pc (pc <= true).
Otherwise the true front is the non-dominated union of the fronts of A, C and B, the last with
every bottleneck lifted to max(pc, K): a point of the true front is on the true front of its set;
in A and C that is the per-cut front; in B, max(., K) is non-decreasing, so a per-cut dominated
plan stays dominated after lifting. B's sweep stops at its first point with pc <= K: later
points cost more energy and lift to K too.

Shared ports (``ports="shared"``): a device's port carries the cut into and the cut out of its
stage, so adjacent cuts couple throughout the pipeline; no split of the plans makes the per-cut
objective exact there. The plans then say what they are optimal for (``params["optimal_for"]``)
and, when the evaluator's bottleneck is higher than the solver's, by how much.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, TimeBudgetSpent

PER_CUT_ONLY = ("per-cut transfers (this cluster's devices share one port each; the estimator's "
                "bottleneck may be higher)")


@dataclass(frozen=True)
class PlanSet:
    """One of the plan sets A, C, B: the constraints that select it and the floor of its bottleneck
    (true bottleneck = max(per-cut bottleneck, floor))."""

    name: str
    constraints: PipelineConstraints
    floor: float = 0.0


@dataclass(frozen=True)
class SharedLink:
    """A source s and a sink k (s != k) whose link s -> k carries the input and the output together
    when the first stage runs on k and the last on s; ``both_s`` is K, the two transfers' time."""

    source: int
    sink: int
    both_s: float

    def plan_sets(self, problem: SplitProblem, constraints: PipelineConstraints) -> list[PlanSet]:
        """The sets A, C, B within ``constraints`` (those that no plan can be in are left out)."""
        names = problem.cluster.names
        first = set(constraints.first_stage_indices(problem))
        last = set(constraints.last_stage_indices(problem))
        s, k = self.source, self.sink
        sets = [(f"first stage not on {names[k]}", first - {k}, None, 0.0),
                (f"first stage on {names[k]}, last not on {names[s]}", first & {k}, last - {s}, 0.0),
                (f"first stage on {names[k]}, last on {names[s]}", first & {k}, last & {s}, self.both_s)]
        out = []
        for name, firsts, lasts, floor in sets:
            if not firsts or lasts == set():
                continue
            c = replace(constraints, first_stage_devices=tuple(names[d] for d in sorted(firsts)),
                        last_stage_devices=constraints.last_stage_devices if lasts is None
                        else tuple(names[d] for d in sorted(lasts)))
            out.append(PlanSet(name, c, floor))
        return out

    def describe(self, problem: SplitProblem) -> str:
        s, k = problem.cluster.names[self.source], problem.cluster.names[self.sink]
        return (f"link {s}->{k} carries the input and the output ({self.both_s:.6g} s per input) when the "
                f"first stage runs on {k} and the last on {s}: solved as three plan sets")


def shared_link(problem: SplitProblem) -> SharedLink | None:
    """The coupling of the problem's source and sink, or None when no plan can put two transfers on
    one link (no source or sink, the same device, a transfer that moves nothing, shared ports)."""
    cl = problem.cluster
    s, k, L = cl.source_index, cl.sink_index, problem.num_layers
    if cl.links.shared or s is None or k is None or s == k or L < 2:
        return None
    t_in, t_out = problem.cut_time(0, s, k), problem.cut_time(L, s, k)
    if t_in <= 0 or t_out <= 0:
        return None
    return SharedLink(s, k, t_in + t_out)


PlanSetSolver = Callable[[PipelineConstraints, PlanSet | None], list[Plan]]


def solve_for_estimator(problem: SplitProblem, constraints: PipelineConstraints, solve: PlanSetSolver,
                        combine: Callable[[list[Plan]], list[Plan]], deadline: Deadline | None = None) -> list[Plan]:
    """Plans optimal for the evaluator's bottleneck, from a per-cut solver (module docstring).

    ``solve(constraints, None)`` answers over every plan, ``solve(constraints, plan_set)`` over one
    set, the bottleneck floored at ``plan_set.floor``; each plan's ``params["bottleneck_s"]`` is the
    solver's bottleneck of it. When these disagree with the evaluator on a shared link, the sets
    A, C and B are solved and ``combine`` merges their plans; with shared ports the plans are
    returned as they are, marked as optimal for per-cut transfers only. A ``deadline`` that runs out in a
    plan set keeps the plans of the sets before it, or the per-cut answer when there are none, and sets
    ``deadline.cut``.
    """
    plans = solve(constraints, None)
    if problem.cluster.links.shared:
        for p in plans:
            _mark_per_cut(p)
        return plans
    link = shared_link(problem)
    if link is None or all(p.costed.bottleneck_s == p.params["bottleneck_s"] for p in plans):
        return plans
    found: list[Plan] = []
    note = link.describe(problem)
    for ps in link.plan_sets(problem, constraints):
        try:
            got = solve(ps.constraints, ps)
        except InfeasibleError:
            continue
        except TimeBudgetSpent:
            if deadline is None:
                raise
            deadline.cut = True     # the sets done so far; none: the per-cut answer, costed by the evaluator
            found = found or plans
            break
        for p in got:
            p.params.update(shared_link=note, plan_set=ps.name)
        found += got
    return combine(found)


def _mark_per_cut(plan: Plan) -> None:
    """Say that ``plan`` is optimal for per-cut transfers, and when the evaluator's bottleneck is higher."""
    plan.params["optimal_for"] = PER_CUT_ONLY
    own, true = plan.params["bottleneck_s"], plan.costed.bottleneck_s
    if true != own:
        plan.params["bottleneck_note"] = (f"the estimator's bottleneck is {true:.6g} s ({plan.costed.bottleneck}), "
                                          f"above the {own:.6g} s the solver optimized")
