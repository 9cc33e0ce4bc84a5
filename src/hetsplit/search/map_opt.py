"""map-opt: hetsplit's own node-to-unit mapper for the objective a user asks for, proven where possible.

``objective``: ``throughput`` (the default), ``latency`` or ``energy``; memory is always respected
(a plan that fits, or an error naming the device and how far over). The plan records the proven
lower bound of its objective, the gap to it and whether it is proven optimal.

Throughput (least bottleneck):
1. Start from the best of LBLP, WB, RR and HEFT (so it never returns less than LBLP's rate).
2. Solve the bottleneck exactly as a MILP (``mapping_milp``, HiGHS) within part of the time budget:
   for small graphs (ResNet-8, ResNet-18) it proves the optimum; for large ones (YOLOv8n) it gives a
   proven lower bound (of the MILP, or of its compute-only relaxation when the link terms would
   make it too large) and often a better mapping.
3. Polish the best mapping with the seeded local search (``mapping_local_search``): bottleneck
   first, then latency, for the rest of the budget.
4. The closed form's rate is an upper bound that an event-driven schedule does not always sustain
   (a unit that holds layers of far-apart parts of the graph can idle waiting for one input while
   another's work queues). So the finalists (the searched mapping and every start, LBLP among them)
   are simulated over a saturated stream of ``verify_inputs`` inputs, and the one with the highest
   simulated rate is returned (ties: the lower closed-form bottleneck, then latency). map-opt's
   simulated rate is therefore never below LBLP's for the same simulation.

Latency (one input): the list schedulers, then a CP-SAT scheduling model (``latency_search``); the
plan carries its run order. Energy (per inference): an exact MILP (``mapping_energy``, HiGHS).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.plan.types import Plan
from hetsplit.search.balance_mappers import round_robin_assignment, weights_balance_assignment
from hetsplit.search.base import register_partitioner
from hetsplit.search.heft import heft_schedule
from hetsplit.search.latency_search import minimize_latency
from hetsplit.search.lblp import lblp_assignment
from hetsplit.search.mapping_energy import solve_energy
from hetsplit.search.mapping_fit import no_fit_error
from hetsplit.search.mapping_local_search import LocalSearch, best_row, scores
from hetsplit.search.mapping_milp import PROOF_TOL, solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping

MILP_SHARE = 0.6   # of the time budget


OBJECTIVES = ("throughput", "latency", "energy")


@register_partitioner("map-opt")
@dataclass
class MapOpt:
    """Exact (small graphs) or bounded (large graphs) node-to-unit mapping for one objective."""

    time_budget_s: float = 10.0
    seed: int = 0
    verify_inputs: int = 200      # simulated stream for the final choice (0: closed form only; throughput)
    objective: str = "throughput"
    name: str = "map-opt"

    def __post_init__(self) -> None:
        if not (self.time_budget_s > 0 and np.isfinite(self.time_budget_s)):
            raise HetsplitError(f"map-opt: time_budget_s must be a positive number of seconds, "
                                f"got {self.time_budget_s!r}")
        if self.verify_inputs < 0:
            raise HetsplitError(f"map-opt: verify_inputs must be >= 0, got {self.verify_inputs!r}")
        if self.objective not in OBJECTIVES:
            raise HetsplitError(f"map-opt: unknown objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")

    def solve(self, problem: SplitProblem) -> list[Plan]:
        require_known_energy(problem, "map-opt --objective energy", self.objective == "energy")
        t0 = time.perf_counter()
        deadline = t0 + self.time_budget_s
        nm = NodeMapping(problem)
        search = {"throughput": self._throughput, "latency": self._latency, "energy": self._energy}[self.objective]
        plan, params = search(nm, deadline)
        if not plan.costed.fits:
            raise no_fit_error(nm, plan.metrics, proven=False)
        plan.params = {"objective": self.objective, "seed": self.seed, "time_budget_s": self.time_budget_s, **params,
                       "seconds": round(time.perf_counter() - t0, 3)}
        return [plan]

    def _latency(self, nm: NodeMapping, deadline: float) -> tuple[Plan, dict]:
        plan, params = minimize_latency(nm, deadline, self.name)
        params.pop("objective", None)
        return plan, params

    def _energy(self, nm: NodeMapping, deadline: float) -> tuple[Plan, dict]:
        starts = _starts(nm)
        milp = solve_energy(nm, max(0.0, deadline - time.perf_counter()))
        if milp.infeasible:
            raise no_fit_error(nm)
        if milp.devices is not None:
            starts["milp"] = milp.devices
        names = list(starts)
        batch = nm.evaluate(np.array([starts[n] for n in names]))
        k = int(np.lexsort((batch.latency_s, batch.energy_j, ~batch.fits))[0])
        plan = nm.plan(starts[names[k]], self.name)
        bound = min(milp.lower_bound_s, plan.costed.energy_j)     # HiGHS's bound may pass the optimum by its tolerance
        return plan, {"solver": "highs", "lower_bound_j": bound, "gap": plan.costed.energy_j / bound - 1 if bound > 0
                      else None, "optimal": plan.costed.energy_j <= bound * (1 + PROOF_TOL) and milp.optimal,
                      "chosen": names[k], "milp_status": milp.status, "milp_s": round(milp.seconds, 3)}

    def _throughput(self, nm: NodeMapping, deadline: float) -> tuple[Plan, dict]:
        starts = _starts(nm)
        keys = scores(nm.evaluate(np.array(list(starts.values()))))
        fitting = keys[keys[:, 0] == 0, 1]
        milp = solve_bottleneck(nm, MILP_SHARE * max(0.0, deadline - time.perf_counter()),
                                incumbent_s=float(fitting.min()) if len(fitting) else np.inf)
        if milp.infeasible and milp.exact:
            raise no_fit_error(nm)
        if milp.devices is not None:
            starts["milp"] = milp.devices
            keys = np.concatenate([keys, scores(nm.evaluate(milp.devices))])
        names = list(starts)
        origin = names[best_row(keys)]
        search = LocalSearch(nm, np.random.default_rng(self.seed))
        searched = search.run(starts[origin], deadline, milp.lower_bound_s)
        chosen, simulated = self._verify(nm, {"search": searched, **starts})
        plan = nm.plan(chosen[1], self.name)
        bottleneck = plan.costed.bottleneck_s
        proven = plan.costed.fits and bottleneck <= milp.lower_bound_s * (1 + PROOF_TOL)
        return plan, {"solver": "highs", "lower_bound_s": milp.lower_bound_s,
                      "gap": bottleneck / milp.lower_bound_s - 1 if milp.lower_bound_s > 0 else None,
                      "optimal": proven, "start": origin, "chosen": chosen[0],
                      "simulated_throughput": simulated, "milp_status": milp.status,
                      "milp_links": milp.links_modelled, "milp_memory": milp.memory_modelled,
                      "milp_exact": milp.exact, "evaluated": search.stats.evaluated,
                      "milp_s": round(milp.seconds, 3), "search_steps": search.stats.steps,
                      "restarts": search.stats.restarts}
    def _verify(self, nm: NodeMapping, finalists: dict[str, np.ndarray]) -> tuple[tuple[str, np.ndarray], float | None]:
        """The finalist with the highest simulated rate (closed form only when ``verify_inputs`` is 0)."""
        from hetsplit.estimate.simulate import SimOptions, simulate

        names = list(finalists)
        keys = scores(nm.evaluate(np.array([finalists[n] for n in names])))
        if self.verify_inputs <= 0:
            k = best_row(keys)
            return (names[k], finalists[names[k]]), None
        seen: dict[bytes, float] = {}
        rates = []
        for n in names:
            dev = finalists[n]
            if dev.tobytes() not in seen:
                options = SimOptions(inputs=self.verify_inputs, keep_timeline=False)
                seen[dev.tobytes()] = simulate(nm.problem, nm.task_graph(dev), options, nm.evaluator.costs).throughput
            rates.append(seen[dev.tobytes()])
        k = min(range(len(names)), key=lambda i: (-rates[i], keys[i, 0], keys[i, 1], keys[i, 3]))
        return (names[k], finalists[names[k]]), float(rates[k])


def _starts(nm: NodeMapping) -> dict[str, np.ndarray]:
    """The quick mappers' mappings, the starts of the throughput and energy searches."""
    return {"lblp": lblp_assignment(nm), "wb": weights_balance_assignment(nm), "rr": round_robin_assignment(nm),
            "heft": heft_schedule(nm)[0]}
