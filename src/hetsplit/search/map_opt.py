"""map-opt: hetsplit's own node-to-unit mapper, at least as good as LBLP and honest about its gap.

1. Start from the best of LBLP, WB, RR and HEFT (so it never returns less than LBLP's rate).
2. Solve the bottleneck exactly as a MILP (``mapping_milp``) within part of the time budget: for
   small graphs (ResNet-8, ResNet-18) it proves the optimum; for large ones (YOLOv8n) it gives a
   proven lower bound (of the MILP, or of its compute-only relaxation when the link terms would
   make it too large) and often a better mapping.
3. Polish the best mapping with the seeded local search (``mapping_local_search``): bottleneck
   first, then latency, for the rest of the budget.
The plan records the lower bound, the gap to it and whether the bottleneck is proven optimal.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.plan.types import Plan
from hetsplit.search.balance_mappers import round_robin_assignment, weights_balance_assignment
from hetsplit.search.base import register_partitioner
from hetsplit.search.heft import heft_assignment
from hetsplit.search.lblp import lblp_assignment
from hetsplit.search.mapping_local_search import LocalSearch, best_row, scores
from hetsplit.search.mapping_milp import PROOF_TOL, solve_bottleneck
from hetsplit.search.node_mapping import NodeMapping

MILP_SHARE = 0.6   # of the time budget


@register_partitioner("map-opt")
@dataclass
class MapOpt:
    """Exact (small graphs) or bounded (large graphs) node-to-unit mapping for throughput, then latency."""

    time_budget_s: float = 10.0
    seed: int = 0
    name: str = "map-opt"

    def __post_init__(self) -> None:
        if not (self.time_budget_s > 0 and np.isfinite(self.time_budget_s)):
            raise HetsplitError(f"map-opt: time_budget_s must be a positive number of seconds, "
                                f"got {self.time_budget_s!r}")

    def solve(self, problem: SplitProblem) -> list[Plan]:
        t0 = time.perf_counter()
        deadline = t0 + self.time_budget_s
        nm = NodeMapping(problem)
        starts = {"lblp": lblp_assignment(nm), "wb": weights_balance_assignment(nm),
                  "rr": round_robin_assignment(nm), "heft": heft_assignment(nm)[0]}
        milp = solve_bottleneck(nm, MILP_SHARE * max(0.0, deadline - time.perf_counter()))
        if milp.devices is not None:
            starts["milp"] = milp.devices
        names = list(starts)
        keys = scores(nm.evaluate(np.array([starts[n] for n in names])))
        origin = names[best_row(keys)]
        search = LocalSearch(nm, np.random.default_rng(self.seed))
        best = search.run(starts[origin], deadline, milp.lower_bound_s)
        plan = nm.plan(best, self.name)
        bottleneck = plan.metrics.bottleneck_s
        proven = plan.metrics.fits and bottleneck <= milp.lower_bound_s * (1 + PROOF_TOL)
        plan.params = {"seed": self.seed, "time_budget_s": self.time_budget_s,
                       "lower_bound_s": milp.lower_bound_s,
                       "gap": bottleneck / milp.lower_bound_s - 1 if milp.lower_bound_s > 0 else None,
                       "optimal": proven, "start": origin, "milp_status": milp.status,
                       "milp_links": milp.links_modelled, "milp_memory": milp.memory_modelled,
                       "milp_s": round(milp.seconds, 3), "search_steps": search.stats.steps,
                       "restarts": search.stats.restarts, "seconds": round(time.perf_counter() - t0, 3)}
        return [plan]
