"""Plans: the Plan type, its JSON format, validation, and the evaluators."""

from hetsplit.plan.evaluate import BatchMetrics, evaluate, evaluate_pipelines, make_plan, plan_to_arrays
from hetsplit.plan.io import load_plan, load_plans, save_plan, save_plans
from hetsplit.plan.pareto import mark_pareto, pareto_mask
from hetsplit.plan.types import Metrics, Plan, Stage

__all__ = ["BatchMetrics", "Metrics", "Plan", "Stage", "evaluate", "evaluate_pipelines", "load_plan", "load_plans",
           "make_plan", "mark_pareto", "pareto_mask", "plan_to_arrays", "save_plan", "save_plans"]
