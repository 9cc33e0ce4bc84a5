"""Every way to cost plans, behind one interface: ``estimate(problem, plans, fidelity)``.

Fidelities ``closed`` (closed forms: pipelines, any TaskGraph; vectorized over many plans),
``simulated`` (the discrete-event simulator) and ``here`` (the processes that would run a plan on this
machine, with the runtime's calibrated per-message costs); task costs; what a plan sends; the
memory-hierarchy effects of chips that keep weights off chip (``memory.py``, applied by every
fidelity). See docs/architecture.md, "The estimator".
"""

from hetsplit.estimate.batch import BatchMetrics, concat_metrics, metrics_at
from hetsplit.estimate.evaluate import evaluate, make_plan, plan_to_arrays
from hetsplit.estimate.fidelity import (Fidelity, estimate, estimate_plan, fidelity_names, make_fidelity,
                                        register_fidelity)
from hetsplit.estimate.here import Here, HereOptions, LocalPrediction, predict_here
from hetsplit.estimate.mapping import MappingEvaluator, TaskOverrides, evaluate_mappings
from hetsplit.estimate.pipeline import evaluate_pipelines
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.estimate.simulate import SimOptions, SimResult, simulate, simulate_plan
from hetsplit.estimate.task_costs import TaskCosts, task_costs

__all__ = ["BatchMetrics", "Fidelity", "Here", "HereOptions", "LocalPrediction", "MappingEvaluator", "RuntimeCosts",
           "SimOptions", "SimResult", "TaskCosts", "TaskOverrides", "concat_metrics", "estimate", "estimate_plan",
           "evaluate", "evaluate_mappings", "evaluate_pipelines", "fidelity_names", "make_fidelity", "make_plan",
           "metrics_at", "plan_to_arrays", "predict_here", "register_fidelity", "simulate", "simulate_plan",
           "task_costs"]
