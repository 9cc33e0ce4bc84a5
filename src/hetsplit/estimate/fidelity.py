"""Fidelities: the ways to cost plans, registered by name like partitioners, one call for all.

``estimate(problem, plans, fidelity)`` returns the metrics of every plan as one ``BatchMetrics``:

- ``closed``: the closed forms (``pipeline.py`` for pipelines, ``mapping.py`` for any TaskGraph),
  vectorized; throughput is the inverse of the busiest device or link, latency one input's schedule;
  a plan the runtime runs input by input (a sum combine across devices) streams as that order allows
  (``input_by_input.py``);
- ``simulated``: the discrete-event simulator (``simulate.py``) streams inputs through each plan;
  throughput is its steady state, latency one input alone; energy and memory as the closed form;
- more fidelities register themselves with ``register_fidelity`` (e.g. ``here``: the processes
  that would run the plan on this machine).

docs/architecture.md, "The estimator", says what each fidelity means.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.estimate.batch import BatchMetrics, concat_metrics, metrics_at
from hetsplit.estimate.energy_known import mask_unknown_energy
from hetsplit.estimate.input_by_input import as_the_runtime_runs
from hetsplit.estimate.mapping import evaluate_mappings
from hetsplit.estimate.pipeline import evaluate_pipelines
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.plan.check import check_plan, stage_bounds
from hetsplit.plan.types import Metrics, Plan
from hetsplit.registry import Registry


class Fidelity(Protocol):
    """``estimate(problem, plans) -> BatchMetrics``, row n the metrics of ``plans[n]``."""

    @property
    def name(self) -> str: ...   # read-only, so a frozen dataclass's field satisfies it

    def estimate(self, problem: SplitProblem, plans: Sequence[Plan]) -> BatchMetrics: ...


FidelityFactory = Callable[..., Fidelity]
FIDELITIES: Registry[FidelityFactory] = Registry("fidelity", "hetsplit.estimate")   # the package imports `here`
register_fidelity = FIDELITIES.register
fidelity_names = FIDELITIES.names


def make_fidelity(name: str, options: Any = None) -> Fidelity:
    """The fidelity registered as ``name``, built from its typed ``options`` (None: its defaults)."""
    factory = FIDELITIES.lookup(name)
    return factory() if options is None else factory(options)


def estimate(problem: SplitProblem, plans: Sequence[Plan], fidelity: str | Fidelity = "closed",
             options: Any = None) -> BatchMetrics:
    """The metrics of every plan at one fidelity (a name, with its typed ``options``, or a Fidelity); a plan
    using a device whose energy is unknown has NaN energy (``estimate.energy_known``)."""
    f = make_fidelity(fidelity, options) if isinstance(fidelity, str) else fidelity
    if not plans:
        raise HetsplitError("no plans to estimate")
    return mask_unknown_energy(problem, f.estimate(problem, list(plans)))


def estimate_plan(problem: SplitProblem, plan: Plan, fidelity: str | Fidelity = "closed",
                  options: Any = None) -> Metrics:
    """The Metrics of one plan at one fidelity."""
    return metrics_at(problem, estimate(problem, [plan], fidelity, options), 0)


# ---- closed form ----------------------------------------------------------------------------------

@register_fidelity("closed")
@dataclass(frozen=True)
class ClosedForm:
    """Pipelines in one vectorized batch, every mapping through its TaskGraph (streamed as the runtime runs
    it: ``input_by_input``)."""

    name: str = field(default="closed", init=False)

    def estimate(self, problem: SplitProblem, plans: Sequence[Plan]) -> BatchMetrics:
        parts: list[BatchMetrics] = []
        rows: list[int] = []
        pipes = [i for i, p in enumerate(plans) if p.is_pipeline]
        if pipes:
            parts.append(self._pipelines(problem, [plans[i] for i in pipes]))
            rows += pipes
        for i, p in enumerate(plans):
            if not p.is_pipeline:
                _same_model(problem, p)
                tg = check_plan(problem.graph, problem.cluster, p)
                parts.append(as_the_runtime_runs(problem, tg, evaluate_mappings(problem, tg)))
                rows.append(i)
        return concat_metrics(parts).take(np.argsort(rows, kind="stable"))

    @staticmethod
    def _pipelines(problem: SplitProblem, plans: list[Plan]) -> BatchMetrics:
        arrays = []
        for p in plans:
            _same_model(problem, p)
            arrays.append(stage_bounds(problem.graph, problem.cluster, p))
        s_max = max(len(d) for _, d in arrays)
        n_layers = problem.num_layers
        bounds = np.full((len(plans), s_max + 1), n_layers, dtype=np.int64)
        devices = np.full((len(plans), s_max), -1, dtype=np.int64)
        for n, (b, d) in enumerate(arrays):
            bounds[n, :len(b)], devices[n, :len(d)] = b, d
        return evaluate_pipelines(problem, bounds, devices)


def _same_model(problem: SplitProblem, plan: Plan) -> None:
    if plan.model and plan.model != problem.graph.name:
        from hetsplit.errors import PlanError

        raise PlanError(f"the plan is for model {plan.model!r}, not {problem.graph.name!r}")


# ---- simulated ------------------------------------------------------------------------------------

@register_fidelity("simulated")
@dataclass(frozen=True)
class Simulated:
    """The discrete-event simulator: steady-state throughput of ``options.inputs`` streamed inputs and
    one input's latency alone; energy, memory and per-device compute as the closed form (the same tasks)."""

    options: SimOptions = SimOptions(keep_timeline=False)
    name: str = field(default="simulated", init=False)

    def estimate(self, problem: SplitProblem, plans: Sequence[Plan]) -> BatchMetrics:
        out = ClosedForm().estimate(problem, plans)
        for n, plan in enumerate(plans):
            sim = simulate(problem, check_plan(problem.graph, problem.cluster, plan), self.options)
            out.throughput[n] = sim.throughput
            out.bottleneck_s[n] = 1.0 / sim.throughput if sim.throughput > 0 else np.inf
            out.latency_s[n] = sim.unloaded_latency_s
        out.edp[:] = out.energy_j * out.latency_s
        return out
