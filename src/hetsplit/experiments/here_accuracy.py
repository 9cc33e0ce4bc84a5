"""How close plans run on this machine come to the ``here`` fidelity's prediction.

Two plans of ResNet-18 (CIFAR) over two of this machine's worker processes, each run for real
(``mapping_run.run_mapping``: one worker per device, every output verified) beside its prediction:

- ``pipeline``: the exact minimum-bottleneck split in two stages (what ``hetsplit plan MODEL --cluster
  local --algo exact`` finds);
- ``branches``: a mapping whose residual branches cross devices (``branching_mapping``): device 1 runs
  the second stage's second block, then the next block's convolutions run back on device 0 while its
  shortcut runs on device 1, so tensors go 0 -> 1 -> 0 -> 1 and two branches compute at once.

Each run records the share of the CPU other processes used meanwhile (``machine_load``; the run's own
processes, this one and its ranks, which report their CPU to it, not counted): a run on a busy machine
says so, and its ratios say more about the neighbours than about the prediction.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hetsplit.costs.machine_load import LoadWatch
from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.profile import Profile
from hetsplit.errors import HetsplitError
from hetsplit.estimate.here import LocalPrediction
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.plan.types import Placement, Plan

MODEL = "resnet18"
CASES = ("pipeline", "branches")
BRANCH_BLOCK = "layer.2.0"       # ResNet-18's third stage's first block: its convolutions go to device 0


def two_stage_plan(problem: SplitProblem) -> Plan:
    """The exact solver's two-stage plan of least bottleneck on ``problem``."""
    from hetsplit.search import make_partitioner

    plans = [p for p in make_partitioner("exact").solve(problem) if len(p.devices) == 2]
    if not plans:
        raise HetsplitError(f"no two-stage plan of {problem.graph.name} on {problem.cluster.name}")
    return min(plans, key=lambda p: p.metrics.bottleneck_s if p.metrics is not None else math.inf)


def branching_mapping(problem: SplitProblem, devices: tuple[str, str] | None = None) -> Plan:
    """ResNet-18 on two devices with residual branches across them: device 0 runs the stem, the first
    stage and the second's first block, then the convolutions of ``BRANCH_BLOCK``; device 1 the rest
    (the second stage's second block, ``BRANCH_BLOCK``'s shortcut and add, and everything after), with
    its ``closed`` fidelity metrics."""
    from hetsplit.estimate import estimate_plan

    names = problem.graph.names
    d0, d1 = devices or tuple(problem.cluster.names[:2])
    split = names.index("layer.1.1/conv1.0/Conv")
    convs = {f"{BRANCH_BLOCK}/conv1.0/Conv", f"{BRANCH_BLOCK}/conv2.0/Conv"}
    if not convs <= set(names):
        raise HetsplitError(f"{problem.graph.name} has no {BRANCH_BLOCK} block with conv1 and conv2: not ResNet-18")
    assign: dict[str, Placement] = {n: d0 if i < split or n in convs else d1 for i, n in enumerate(names)}
    plan = Plan(problem.graph.name, problem.cluster.name, "hand: residual branches across devices", assign=assign)
    plan.metrics = estimate_plan(problem, plan, "closed")
    return plan


@dataclass
class HereRun:
    """One plan run here beside the ``here`` fidelity's prediction for it."""

    case: str
    plan: Plan
    prediction: LocalPrediction
    measured_throughput: float
    measured_latency_s: float
    max_abs_err: float
    others_share: float | None          # the CPU other processes used during the run (None: unknown)
    measured_compute_s: dict[str, float] = field(default_factory=dict)   # per unit: its compute per input

    @property
    def throughput_ratio(self) -> float:
        """Measured / predicted throughput."""
        return self.measured_throughput / self.prediction.predicted_throughput

    @property
    def latency_ratio(self) -> float:
        """Measured / predicted latency of one input alone."""
        return self.measured_latency_s / self.prediction.predicted_latency_s


def run_here(case: str, plan: Plan, profile: Profile, runtime: RuntimeCosts, inputs: int,
             latency_inputs: int = 10, fill: int = 0) -> HereRun:
    """Run ``plan`` on this machine (``inputs``, the first ``latency_inputs`` alone; at least ``fill`` times
    the plan's depth streamed: ``MappingRunOptions.fill``) beside the ``here`` prediction from
    ``profile``'s per-layer costs and ``runtime``'s per-message costs."""
    from hetsplit.experiments.mapping_run import MappingRunOptions, run_mapping

    with LoadWatch() as watch:
        res = run_mapping(plan.model, plan, MappingRunOptions(inputs=inputs, latency_inputs=latency_inputs,
                                                              profile=profile, runtime=runtime, timeout_s=120,
                                                              fill=fill))
    return HereRun(case, plan, res.prediction, res.measured_throughput, res.measured_latency_s, res.max_abs_err,
                   watch.share, {u.device: u.measured_s for u in res.units})
