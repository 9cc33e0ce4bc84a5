"""``pipeedge``: PipeEdge's minimum-bottleneck DP (Hu et al., DSD 2022) as a baseline.

Implemented from its description: state = (layers placed, multiset of device types used, type of
the next stage); value = the slowest stage or transfer so far; memory limits enforced. Devices are
grouped into the classes of ``search.classes`` (same type, memory and links), which are PipeEdge's
types when links are uniform; with all-different devices the multiset is a subset and the DP is
exponential in the number of devices, as PipeEdge's is.

Differences from PipeEdge (on purpose): a cut moves every tensor live across it (skip connections
included). ``last_output_only=True`` reproduces PipeEdge's accounting (a cut moves only the output
of the stage's last layer) for the search; the returned plan's metrics are always the evaluator's,
with every live tensor counted, so the flaw shows up as a worse real bottleneck (or a plan that
does not fit). The DP keeps a single value per state (no tie-break), as PipeEdge does.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import InfeasibleError
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline, PipelineConstraints, register_partitioner
from hetsplit.search.classes import build_classes, check_layers_fit, check_state_budget, infeasible_message, to_plan
from hetsplit.search.value_dp import value_dp


def last_output_cut_bytes(problem: SplitProblem) -> np.ndarray:
    """PipeEdge's cut sizes: the model input at cut 0, else the output of the layer before the cut."""
    g = problem.graph
    return np.concatenate([[float(g.input_bytes)], g.out_bytes]).astype(np.float64)


@register_partitioner("pipeedge")
@dataclass
class PipeEdge:
    """PipeEdge's DP: minimum bottleneck over (layers placed, types used, next type)."""

    constraints: PipelineConstraints = field(default_factory=PipelineConstraints)
    last_output_only: bool = False
    state_budget_bytes: float = 2**30
    name: str = "pipeedge"
    time_budget_s: float | None = None    # past it, TimeBudgetSpent (the DP has no partial answer)

    def solve(self, problem: SplitProblem) -> list[Plan]:
        cb = last_output_cut_bytes(problem) if self.last_output_only else None
        cm = build_classes(problem, self.constraints, cut_bytes=cb, units=False)
        check_layers_fit(cm)
        check_state_budget(cm, 1, self.state_budget_bytes, self.name)
        vr = value_dp(cm, np.inf, "bottleneck", None, Deadline(self.name, self.time_budget_s))
        if vr is None:
            raise InfeasibleError(infeasible_message(cm))
        params = {"last_output_only": self.last_output_only, "dp_bottleneck_s": vr.primary,
                  "classes": cm.num_classes, "multisets": cm.num_multisets}
        return [to_plan(cm, vr.bounds, vr.moves, self.name, params)]
