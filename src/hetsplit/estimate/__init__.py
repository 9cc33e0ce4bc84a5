"""Every way to cost plans, behind one interface: ``estimate(problem, plans, fidelity)``.

Closed forms (pipelines, any TaskGraph; vectorized over many plans), the discrete-event simulator,
task costs, what a plan sends, and the memory-hierarchy effects of chips that keep weights off chip
(``memory.py``, applied by every fidelity). See docs/architecture.md, "The estimator".
"""

from hetsplit.estimate.batch import BatchMetrics, concat_metrics, metrics_at
from hetsplit.estimate.evaluate import evaluate, make_plan, plan_to_arrays
from hetsplit.estimate.fidelity import (Fidelity, estimate, estimate_plan, fidelity_names, make_fidelity,
                                        register_fidelity)
from hetsplit.estimate.mapping import MappingEvaluator, TaskOverrides, evaluate_mappings
from hetsplit.estimate.pipeline import evaluate_pipelines
from hetsplit.estimate.simulate import SimOptions, SimResult, simulate, simulate_plan
from hetsplit.estimate.task_costs import TaskCosts, task_costs

__all__ = ["BatchMetrics", "Fidelity", "MappingEvaluator", "SimOptions", "SimResult", "TaskCosts", "TaskOverrides",
           "concat_metrics", "estimate", "estimate_plan", "evaluate", "evaluate_mappings", "evaluate_pipelines",
           "fidelity_names", "make_fidelity", "make_plan", "metrics_at", "plan_to_arrays", "register_fidelity",
           "simulate", "simulate_plan", "task_costs"]
