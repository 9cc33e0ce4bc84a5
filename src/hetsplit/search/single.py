"""Single-device baselines: the whole model on one device, for every device that can hold it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate import evaluate_pipelines, make_plan
from hetsplit.plan.types import Plan
from hetsplit.search.base import register_partitioner


@register_partitioner("single")
@dataclass
class SingleDevice:
    """One plan per device type (its first device) that can run and hold the whole model."""

    devices: tuple[str, ...] | None = None  # restrict to these device names
    name: str = "single"

    def solve(self, problem: SplitProblem) -> list[Plan]:
        cl = problem.cluster
        if self.devices is not None:
            candidates = [cl.index(n) for n in self.devices]
        else:
            first_of_type: dict[str, int] = {}
            for k, d in enumerate(cl.devices):
                first_of_type.setdefault(d.type, k)
            candidates = list(first_of_type.values())
        n = problem.num_layers
        bounds = np.array([[0, n]] * len(candidates))
        batch = evaluate_pipelines(problem, bounds, np.array(candidates)[:, None])
        ok = np.isfinite(batch.bottleneck_s) & batch.fits
        return [make_plan(problem, [0, n], [d], self.name, {"device": cl.names[d]})
                for d, good in zip(candidates, ok) if good]
