"""map-pareto: a Pareto set of node-to-unit mappings over (throughput, latency, energy) in one call.

1. The optimum of each objective alone (map-opt, a share of the time budget each), and every list
   scheduler's plan (with its run order): the front's corners and good points between them.
2. NSGA-II over the whole-layer encoding (``ne``) for the three objectives, its first population
   seeded with all of those mappings.
3. The plans that fit memory and that no other dominates in (bottleneck, latency, energy), one per
   distinct figure; at most ``max_plans`` of them (the best of each objective kept, the rest spread
   evenly by throughput), in order of throughput; each is marked ``pareto`` and says where it came from.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.plan.pareto import MAPPING_FRONT, pareto_mask, plan_objectives
from hetsplit.plan.types import Plan
from hetsplit.search.base import register_partitioner
from hetsplit.search.explore import ExploreOptions, explore
from hetsplit.search.list_schedulers import LIST_SCHEDULERS
from hetsplit.search.map_opt import OBJECTIVES, MapOpt
from hetsplit.search.mapping_fit import no_fit_error
from hetsplit.search.node_mapping import NodeMapping

ANCHOR_SHARE = 0.25     # of the time budget, per objective optimized alone


@register_partitioner("map-pareto")
@dataclass
class MapPareto:
    """The (throughput, latency, energy) front of node-to-unit mappings."""

    time_budget_s: float = 10.0   # for the three optima (a quarter each); the GA runs its generations
    seed: int = 0
    pop_size: int = 100           # NSGA-II over the whole-layer encoding
    generations: int = 100
    max_plans: int = 20           # the front is thinned to this many (each objective's best kept)
    name: str = "map-pareto"

    def __post_init__(self) -> None:
        if not (self.time_budget_s > 0 and np.isfinite(self.time_budget_s)):
            raise HetsplitError(f"map-pareto: time_budget_s must be a positive number of seconds, "
                                f"got {self.time_budget_s!r}")
        if self.max_plans < len(MAPPING_FRONT):
            raise HetsplitError(f"map-pareto: max_plans must be >= {len(MAPPING_FRONT)} (a plan per objective's best), "
                                f"got {self.max_plans}")

    def solve(self, problem: SplitProblem) -> list[Plan]:
        require_known_energy(problem, "map-pareto (a front over throughput, latency and energy)")
        t0 = time.perf_counter()
        nm = NodeMapping(problem)
        found: list[tuple[str, Plan]] = []
        for objective in OBJECTIVES:
            try:
                plan, = MapOpt(self.time_budget_s * ANCHOR_SHARE, self.seed, 0, objective).solve(problem)
            except HetsplitError:
                continue                      # no mapping fits: said below, with the closest one
            found.append((f"map-opt {objective}", plan))
        for name, scheduler in LIST_SCHEDULERS.items():
            s = scheduler(nm)
            found.append((name, nm.plan(s.device, self.name, start_order=s.start_order())))
        seeds = np.array([nm.devices_of(p) for _, p in found])
        ga = explore(problem, ExploreOptions(encoding="ne", objectives=MAPPING_FRONT, pop_size=self.pop_size,
                                             generations=self.generations, seed=self.seed), seeds=seeds)
        found += [("nsga2", p) for p in ga.plans]
        fits = [(o, p) for o, p in found if p.costed.fits]
        if not fits:
            closest = min((p for _, p in found), key=lambda p: max(p.costed.memory_per_device_bytes.values()))
            raise no_fit_error(nm, closest.metrics, proven=False)
        return self._front(fits, time.perf_counter() - t0)

    def _front(self, found: list[tuple[str, Plan]], seconds: float) -> list[Plan]:
        f = plan_objectives([p for _, p in found], MAPPING_FRONT)
        _, first = np.unique(f, axis=0, return_index=True)
        distinct = np.sort(first)                      # the first plan of each distinct figure
        keep = sorted(distinct[pareto_mask(f[distinct])], key=lambda k: tuple(f[k]))
        if len(keep) > self.max_plans:
            corners = {min(keep, key=lambda k: (f[k, j], tuple(f[k]))) for j in range(f.shape[1])}
            spread = np.linspace(0, len(keep) - 1, self.max_plans - len(corners)).round().astype(int)
            keep = sorted(corners | {keep[i] for i in spread}, key=lambda k: tuple(f[k]))
        out = []
        for k in keep:
            origin, plan = found[k]
            plan.algorithm, plan.pareto = self.name, True
            plan.params = {"objectives": list(MAPPING_FRONT), "found_by": origin, "seed": self.seed,
                           "time_budget_s": self.time_budget_s, "seconds": round(seconds, 3)}
            out.append(plan)
        return out

