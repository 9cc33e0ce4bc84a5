"""What the runtime's segments cost beyond their tasks: one executor call per segment and input.

The runtime runs each device's tasks as segments (``TaskGraph.segments``), one sub-model each. Per input a
segment's inputs are handed to its executor and its outputs come back as arrays of their own, where the
whole model keeps them inside one session; a tensor that crosses a segment's boundary is written and read
once more, and the call itself costs a little. A profile's per-layer (kernel) times leave all of that
out: a mapping that crosses devices at every other layer computed 1.4-1.7x its layers' profiled times on
this 2-core VM, a pipeline (one segment per device) 1.05x. ``SegmentCost`` charges each segment
``fixed_s + byte_s x`` the bytes crossing its boundary (``TaskGraph.segment_boundary_bytes``);
``runtime.calibration`` measures both on this machine and the ``here`` fidelity charges them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from hetsplit.errors import HetsplitError
from hetsplit.estimate.task_costs import TaskCosts
from hetsplit.plan.tasks import TaskGraph


@dataclass(frozen=True)
class SegmentCost:
    """Seconds one segment costs per input beyond its tasks: ``fixed_s + byte_s x`` its boundary bytes."""

    fixed_s: float = 0.0
    byte_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("fixed_s", "byte_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise HetsplitError(f"SegmentCost.{name} = {value!r}: a segment's cost is a finite number >= 0")

    def seconds(self, tg: TaskGraph) -> dict[int, list[float]]:
        """Per device (index), each of its segments' cost per input, in ``tg.segments`` order."""
        out: dict[int, list[float]] = {}
        for device, nbytes in tg.segment_boundary_bytes():
            out.setdefault(device, []).append(self.fixed_s + self.byte_s * nbytes)
        return out

    def charged(self, costs: TaskCosts, tg: TaskGraph) -> TaskCosts:
        """``costs`` with each segment's cost added to the time of its first task (on every device type:
        a task's own type is the one that counts), as a part of its own ("segment call")."""
        extra = np.zeros_like(costs.time_s)
        for device, seconds in self.seconds(tg).items():
            for segment, cost in zip(tg.segments[device], seconds):
                extra[segment[0]] += cost
        parts = {k: v.copy() for k, v in costs.parts.items()} or {"compute": costs.time_s.copy()}
        parts["segment call"] = extra
        return TaskCosts(costs.time_s + extra, costs.energy_j, costs.mem_bytes, parts)
