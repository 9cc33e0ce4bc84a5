"""Plans: the Plan type, its JSON formats, validation and the TaskGraph a plan expands to (costed by
``estimate``; docs/architecture.md)."""

from hetsplit.plan.io import load_plan, load_plans, save_plan, save_plans
from hetsplit.plan.pareto import mark_pareto, pareto_mask
from hetsplit.plan.types import Metrics, Plan, Stage

__all__ = ["Metrics", "Plan", "Stage", "load_plan", "load_plans", "mark_pareto", "pareto_mask", "save_plan",
           "save_plans"]
