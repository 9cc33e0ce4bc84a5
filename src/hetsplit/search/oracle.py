"""Brute-force oracle: every pipeline plan of a small instance, evaluated by the evaluator.

A plan is a sequence of stages over distinct devices (the search space of every pipeline solver);
the oracle enumerates all ordered device sequences and all compositions of the layers, evaluates
them in one batch and keeps those that fit memory (and honour the constraints). Its metrics are
the evaluator's, so it is the truth the exact solvers are checked against.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from math import comb, perm

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, InfeasibleError
from hetsplit.estimate import BatchMetrics, evaluate_pipelines, make_plan
from hetsplit.plan.pareto import pareto_mask
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, register_partitioner


def count_plans(num_layers: int, num_devices: int, max_stages: int) -> int:
    return sum(perm(num_devices, s) * comb(num_layers - 1, s - 1) for s in range(1, max_stages + 1))


CHUNK = 65_536   # plans evaluated per batch by the partitioner (its deadline is checked between batches)


def enumerate_plans(problem: SplitProblem, constraints: PipelineConstraints = PipelineConstraints(),
                    limit: int = 2_000_000, deadline: Deadline | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All plans as (bounds N x S+1, devices N x S) with -1 padding; first- and last-stage constraints
    applied (``deadline``: checked per number of stages, ``TimeBudgetSpent`` when spent)."""
    L, D = problem.num_layers, problem.num_devices
    s_max = min(constraints.max_stages or D, D, L)
    n = count_plans(L, D, s_max)
    if n > limit:
        raise HetsplitError(f"brute force would enumerate {n} plans (> {limit}); use a smaller instance")
    first = set(constraints.first_stage_indices(problem))
    last = set(constraints.last_stage_indices(problem))
    bounds, devs = [], []
    for s in range(1, s_max + 1):
        if deadline is not None:
            deadline.check("its enumeration")
        for cuts in itertools.combinations(range(1, L), s - 1):
            b = [0, *cuts, L] + [L] * (s_max - s)
            for seq in itertools.permutations(range(D), s):
                if seq[0] not in first or seq[-1] not in last:
                    continue
                bounds.append(b)
                devs.append(list(seq) + [-1] * (s_max - s))
    return np.array(bounds, dtype=np.int64).reshape(-1, s_max + 1), np.array(devs, dtype=np.int64).reshape(-1, s_max)


@dataclass
class OracleResult:
    bounds: np.ndarray
    devices: np.ndarray
    metrics: BatchMetrics   # of the plans that fit (the rows of bounds/devices)

    def min_bottleneck(self) -> float:
        return float(self.metrics.bottleneck_s.min())

    def front(self) -> np.ndarray:
        """Distinct (bottleneck, energy) points of the Pareto front, sorted by bottleneck."""
        pts = np.unique(np.stack([self.metrics.bottleneck_s, self.metrics.energy_j], axis=1), axis=0)
        # sorted by bottleneck, then energy: a point is on the front iff its energy is below every
        # energy before it (O(N log N), where a pairwise dominance mask is O(N^2))
        prev_min = np.minimum.accumulate(np.concatenate([[np.inf], pts[:-1, 1]]))
        return pts[pts[:, 1] < prev_min]


def brute_force(problem: SplitProblem, constraints: PipelineConstraints = PipelineConstraints()) -> OracleResult:
    """Evaluate every plan; keep those that fit. Raises InfeasibleError if none does."""
    b, d = enumerate_plans(problem, constraints)
    m = evaluate_pipelines(problem, b, d)
    keep = m.fits if constraints.enforce_memory else np.ones(len(m), dtype=bool)
    keep &= np.isfinite(m.bottleneck_s)
    if not keep.any():
        raise InfeasibleError(f"no pipeline plan of {problem.graph.name!r} fits {problem.cluster.name!r}")
    b, d = b[keep], d[keep]
    return OracleResult(b, d, evaluate_pipelines(problem, b, d))


@register_partitioner("bruteforce")
@dataclass
class BruteForce:
    """Every plan of a small instance; returns the Pareto front of (bottleneck, energy)."""

    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    name: str = "bruteforce"
    time_budget_s: float | None = None    # past it, the front of the plans evaluated so far, marked cut

    def solve(self, problem: SplitProblem) -> list[Plan]:
        deadline = Deadline(self.name, self.time_budget_s)
        r = self._evaluated(problem, deadline)
        plans = self._front(problem, r)
        if deadline.cut:
            deadline.mark_cut(plans, f"{len(r.bounds)} fitting plans evaluated before the budget ran out, "
                                     "not every plan")
        return plans

    def _evaluated(self, problem: SplitProblem, deadline: Deadline) -> OracleResult:
        """``brute_force`` in batches of ``CHUNK``, stopping (``deadline.cut``) when the deadline is spent."""
        b, d = enumerate_plans(problem, self.constraints, deadline=deadline)
        keep = np.zeros(len(b), dtype=bool)
        for lo in range(0, len(b), CHUNK):
            if deadline.spent():
                if not keep.any():
                    deadline.check("its enumeration found a plan that fits")
                deadline.cut = True
                break
            m = evaluate_pipelines(problem, b[lo:lo + CHUNK], d[lo:lo + CHUNK])
            ok = m.fits if self.constraints.enforce_memory else np.ones(len(m), dtype=bool)
            keep[lo:lo + CHUNK] = ok & np.isfinite(m.bottleneck_s)
        if not keep.any():
            raise InfeasibleError(f"no pipeline plan of {problem.graph.name!r} fits {problem.cluster.name!r}")
        b, d = b[keep], d[keep]
        return OracleResult(b, d, evaluate_pipelines(problem, b, d))

    def _front(self, problem: SplitProblem, r: OracleResult) -> list[Plan]:
        """The distinct Pareto-optimal (bottleneck, energy) plans of ``r``, fastest first."""
        obj = np.stack([r.metrics.bottleneck_s, r.metrics.energy_j], axis=1)
        idx = np.flatnonzero(pareto_mask(obj))
        _, first = np.unique(obj[idx], axis=0, return_index=True)
        plans = []
        for i in idx[np.sort(first)]:
            p = make_plan(problem, r.bounds[i], r.devices[i], self.name, {})
            p.pareto = True
            plans.append(p)
        return sorted(plans, key=lambda p: p.costed.bottleneck_s)
