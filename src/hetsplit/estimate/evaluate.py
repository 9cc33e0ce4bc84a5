"""One plan's closed-form metrics, and plans made from pipeline arrays with their metrics."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.fidelity import estimate_plan
from hetsplit.plan.check import stage_bounds
from hetsplit.plan.types import Metrics, Plan, Stage


def plan_to_arrays(problem: SplitProblem, plan: Plan) -> tuple[np.ndarray, np.ndarray]:
    """Bounds and device indices of a whole-layer pipeline plan, validated by ``check_plan``'s rules."""
    if plan.model and plan.model != problem.graph.name:
        raise PlanError(f"the plan is for model {plan.model!r}, not {problem.graph.name!r}")
    if not plan.is_pipeline:
        raise PlanError("the plan is a mapping (assign), not a pipeline of stages; evaluate it with evaluate()")
    bounds, devs = stage_bounds(problem.graph, problem.cluster, plan)
    return np.array([bounds]), np.array([devs])


def evaluate(problem: SplitProblem, plan: Plan) -> Metrics:
    """Closed-form metrics of one plan, a pipeline or a mapping (raises PlanError naming what is wrong):
    ``estimate_plan(problem, plan, "closed")``."""
    return estimate_plan(problem, plan, "closed")


def make_plan(problem: SplitProblem, bounds: Sequence[int] | np.ndarray, devices: Sequence[int] | np.ndarray,
              algorithm: str, params: dict[str, Any] | None = None) -> Plan:
    """A Plan (with its closed-form metrics) from one row of stage bounds and device indices."""
    b = [int(x) for x in np.asarray(bounds).ravel()]
    d = [int(x) for x in np.asarray(devices).ravel()]
    used = [s for s in range(len(d)) if d[s] >= 0]
    names = problem.graph.names
    stages = [Stage(problem.cluster.names[d[s]], names[b[s]:b[s + 1]]) for s in used]
    plan = Plan(problem.graph.name, problem.cluster.name, algorithm, stages, dict(params or {}))
    plan.metrics = evaluate(problem, plan)
    return plan
