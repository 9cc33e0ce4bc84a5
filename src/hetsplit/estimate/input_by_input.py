"""The stream of a plan that the runtime runs input by input.

A plan whose sum combines cross devices (tensor-parallel slices, ``in`` shards:
``TaskGraph.sums_across_devices``) runs input by input (``runtime.rounds`` says why): a device
starts no task of input i+1 before it has done every one of its tasks of input i. Its devices take
turns on one input, so it streams slower than its busiest device or link allows: a tensor-parallel
plan whose root device runs both the first and the last layers starts no input before the one
before it has left, and streams at about one input per latency. The closed form's throughput (the
inverse of the busiest resource) only bounds such a plan from above; ``in_order_throughput`` is
the stream in that order, from the simulator's schedule of a few inputs, in order (one input's
schedule repeats from the second input on, so a few inputs give the steady state).
"""

from __future__ import annotations

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate.batch import BatchMetrics
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.plan.tasks import TaskGraph

INPUTS = 8          # inputs scheduled in order for the steady state (the first fills the devices)


def in_order_throughput(problem: SplitProblem, tg: TaskGraph) -> float:
    """Inputs per second of ``tg`` when every device ends an input before it starts the next."""
    return simulate(problem, tg, SimOptions(inputs=INPUTS, keep_timeline=False, inputs_in_order=True)).throughput


def as_the_runtime_runs(problem: SplitProblem, tg: TaskGraph, batch: BatchMetrics) -> BatchMetrics:
    """The closed form's metrics of ``tg`` (one plan), its throughput that of the order the runtime runs
    it in: unchanged unless a sum combine crosses devices, then at most the in-order stream's."""
    if not tg.sums_across_devices():
        return batch
    rate = min(float(batch.throughput[0]), in_order_throughput(problem, tg))
    batch.throughput[0] = rate
    batch.bottleneck_s[0] = 1.0 / rate if rate > 0 else np.inf
    return batch
