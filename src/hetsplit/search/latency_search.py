"""map-opt's latency objective: the list schedulers, then the CP-SAT model (``mapping_latency``).

1. Every list scheduler (HEFT, CPOP, PEFT, MinMin, MaxMin, ETF) schedules the input; each schedule is
   a plan with its run order. The one of least estimator latency (among those that fit memory) is the
   incumbent, so the result is never worse than the best of them.
2. The model without link queueing, seeded with the incumbent's schedule, for up to half the time:
   a proven lower bound, and candidate plans (each improving solution, with its run order).
3. When the best plan's estimator latency is above that bound, time is left and the model stays small
   enough, the model with link queueing, seeded with the best plan and told the bound.
The best plan by the estimator's latency is returned; its params record the bound, the gap to it
and whether it is proven optimal: its estimator latency within the model's rounding (a time unit per
job on a chain) of the bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetsplit.plan.types import Plan
from hetsplit.search.list_schedulers import LIST_SCHEDULERS
from hetsplit.search.mapping_latency import (FIRST_PHASE_SHARE, MAX_MESSAGES, LatencyBound, LatencyModel,
                                             message_count)
from hetsplit.search.mapping_fit import no_fit_error
from hetsplit.search.mapping_milp import PROOF_TOL, memory_could_bind, solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping

CANDIDATES_KEPT = 12      # the model's last improving solutions judged by the estimator, per phase


@dataclass
class _Best:
    plan: Plan
    origin: str
    start_s: np.ndarray

    @property
    def latency_s(self) -> float:
        return self.plan.costed.latency_s if self.plan.costed.fits else np.inf


def minimize_latency(nm: NodeMapping, deadline: float, algorithm: str, workers: int = 0) -> tuple[Plan, dict]:
    """The plan of least one-input latency found before ``deadline`` and what the search established."""
    best: _Best | None = None
    for name, scheduler in LIST_SCHEDULERS.items():
        s = scheduler(nm)
        plan = nm.plan(s.device, algorithm, start_order=s.start_order())
        if best is None or plan.costed.fits and plan.costed.latency_s < best.latency_s:
            best = _Best(plan, name, s.start)
    assert best is not None
    if not np.isfinite(best.latency_s):            # memory binds: a mapping that fits, from the exact MILP
        fit = solve_bottleneck(nm, FIRST_PHASE_SHARE * max(0.0, deadline - time.perf_counter()))
        if fit.devices is None or not nm.evaluate(fit.devices).fits[0]:
            raise no_fit_error(nm, best.plan.metrics, proven=fit.infeasible and fit.exact)
        best = _Best(nm.plan(fit.devices, algorithm), "milp", np.zeros(nm.num_layers))
    memory = memory_could_bind(nm)
    phases: list[LatencyBound] = []
    horizon = best.latency_s
    for links in (False, True):
        left = deadline - time.perf_counter()
        if left <= 0.05 or (links and (message_count(nm) > MAX_MESSAGES or not phases)):
            break
        bound = phases[-1].lower_bound_s if phases else 0.0
        if links and best.latency_s <= bound + phases[-1].slack_s:
            break
        model = LatencyModel(nm, horizon, links=links, memory=memory)
        model.hint(nm.devices_of(best.plan), best.start_s)
        limit = left * FIRST_PHASE_SHARE if not links and message_count(nm) <= MAX_MESSAGES else left
        phases.append(model.solve(limit, at_least_s=bound, workers=workers))
        for k, cand in enumerate(phases[-1].candidates[-CANDIDATES_KEPT:]):
            plan = nm.plan(cand.devices, algorithm, start_order=cand.order)
            if plan.costed.fits and plan.costed.latency_s < best.latency_s:
                best = _Best(plan, f"cp-sat{' links' if links else ''}", cand.start_s)
    lower = max([p.lower_bound_s for p in phases], default=0.0)
    slack = min([p.slack_s for p in phases], default=0.0)
    params = {"objective": "latency", "lower_bound_s": lower,
              "gap": best.latency_s / lower - 1 if lower > 0 else None,
              "optimal": bool(lower > 0 and best.latency_s <= lower * (1 + PROOF_TOL) + slack),
              "rounding_s": slack, "chosen": best.origin,
              "solver": "cp-sat", "phases": [{"links": p.links_modelled, "status": p.status,
                                              "bound_s": p.lower_bound_s, "seconds": round(p.seconds, 3),
                                              "solutions": len(p.candidates)} for p in phases]}
    return best.plan, params

