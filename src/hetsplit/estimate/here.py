"""The ``here`` fidelity: a plan costed for the processes that would run it on this machine.

The runtime runs a plan as one worker process per device and a driver (``estimate.processes``). Here:

- each device is a ``local-cpu`` worker computing on one thread; per-layer times come from a
  local-cpu profile (``HereOptions.profile``, e.g. ``hetsplit profile MODEL --threads 1 --co-load K``)
  or, for a plan made on the ``local`` cluster, from the costs it was planned with
  (``processes.planned_profile``);
- the runtime's own costs (``RuntimeCosts``, measured by ``runtime.calibration``): the CPU a worker
  and the driver spend per message end (fixed + per byte), the wall time a message adds to an
  input alone, which becomes the loopback link's latency, and what each segment's executor call costs
  beyond its layers (call + per byte crossing its boundary): the workers' cost table's segment cost of
  the local-cpu type, so that the closed form and the simulator charge it by their one rule
  (``estimate.segments``), on the segment's first task and in its unit's compute;
- the discrete-event simulator streams inputs through the re-costed plan, each worker on a core of
  its own: ``simulated_throughput``; a plan whose sum combines cross devices (tensor-parallel, ``in``
  shards) runs input by input (``runtime.rounds``), so each worker there ends an input before it starts
  the next (``SimOptions.inputs_in_order``);
- the workers and the driver share this machine's ``C`` cores, which the simulator does not know.
  An input needs ``total work`` of CPU: its layers plus every process's CPU for its message ends, so
  no schedule beats ``C / total work`` (the core bound). When the processes outnumber the cores a
  worker's message threads get no core of their own either: a worker then needs its compute plus its
  ends' CPU per input, and waits at each end for the wake-ups that hand its tensors over
  (``end_wait_s``): the unit bound. Throughput is ``min(simulated, unit bound, core bound)``;
- latency: the simulated latency of one input alone at the profile's alone-vs-co-loaded factor, plus
  the driver's messages (the input in, the output out) at the measured per-message latency.

Energy, memory and per-device compute are the closed form's on the workers' costs. ``Here.predictions``
gives the whole ``LocalPrediction`` (what ``run --compare --here`` and ``plan``'s run-here table print).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.costs.profile import Profile
from hetsplit.errors import HetsplitError
from hetsplit.estimate.batch import BatchMetrics, concat_metrics, metrics_at
from hetsplit.estimate.fidelity import estimate, register_fidelity
from hetsplit.estimate.processes import (driver_message_sizes, ends_cpu, message_ends, planned_profile,
                                         workers_problem)
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.estimate.segments import segment_charges
from hetsplit.graph.types import Graph
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Plan


@dataclass
class LocalPrediction:
    """A plan costed for the worker processes that run it (SI units; see the module docstring)."""

    model: str
    algorithm: str
    plan_cluster: str                 # the cluster the plan was made for (e.g. imce-4)
    units: list[str]                  # the worker processes, one per unit with layers
    cores: int                        # cores the workers and the driver share
    layers_per_unit: dict[str, int]
    compute_s: dict[str, float]       # per unit: its layers' profiled times + what its segments add
    segments: dict[str, int]          # per unit: its segments (executor calls) per input
    segment_call_s: dict[str, float]  # per unit: what its segments add beyond its layers (in compute_s)
    simulated_throughput: float       # discrete-event simulator, each unit on a core of its own
    simulated_latency_s: float        # one input alone
    closed_form_throughput: float     # the closed form's bound on the same costs
    messages: int                     # per input, between workers and to / from the driver
    driver_messages: int
    message_cpu_s: dict[str, float]   # per process (the units and DRIVER): CPU of its message ends per input
    message_end_count: dict[str, int]  # per process: its message ends per input
    message_latency_s: float          # wall time a message adds to an input alone (the links' latency)
    compute_work_s: float             # sum of every unit's compute
    profile_source: str
    profile_co_load: int | None
    profile_threads: int | None
    unloaded_factor: float = 1.0      # one input alone costs this x the (co-loaded) profile's times
    runtime_source: str = ""          # where the runtime's costs come from
    end_wait_s: float = 0.0           # oversubscribed: a unit's wait per message end beyond its CPU

    @property
    def predicted_latency_s(self) -> float:
        """One input alone: the simulated latency at unloaded speed, plus the driver's messages
        (sending the input, receiving the output) at the measured per-message latency."""
        return self.simulated_latency_s * self.unloaded_factor + self.driver_messages * self.message_latency_s

    @property
    def message_cost_s(self) -> float:
        """The runtime's CPU per message, both ends, averaged over this plan's messages."""
        return sum(self.message_cpu_s.values()) / self.messages if self.messages else 0.0

    @property
    def total_work_s(self) -> float:
        """CPU one input needs: every layer, plus every process's CPU for its message ends."""
        return self.compute_work_s + sum(self.message_cpu_s.values())

    @property
    def core_bound_throughput(self) -> float:
        return self.cores / self.total_work_s if self.total_work_s > 0 else math.inf

    @property
    def oversubscribed(self) -> bool:
        """Whether the workers and the driver outnumber the cores (no core for message threads)."""
        return len(self.units) + 1 > self.cores

    @property
    def unit_busy_s(self) -> dict[str, float]:
        """Per unit, the time it needs per input: its compute, plus, when oversubscribed, its message
        ends' CPU and their wait (the measured ``end_wait_s`` each)."""
        if not self.oversubscribed:
            return {d: self.compute_s.get(d, 0.0) for d in self.units}
        return {d: self.compute_s.get(d, 0.0) + self.message_cpu_s.get(d, 0.0)
                + self.message_end_count.get(d, 0) * self.end_wait_s for d in self.units}

    @property
    def unit_bound_throughput(self) -> float:
        busiest = max(self.unit_busy_s.values(), default=0.0)
        return 1.0 / busiest if busiest > 0 else math.inf

    @property
    def predicted_throughput(self) -> float:
        """``min(simulated, unit bound, C / total work)``."""
        return min(self.simulated_throughput, self.unit_bound_throughput, self.core_bound_throughput)

    @property
    def limited_by(self) -> str:
        bounds = {"cores": self.core_bound_throughput, "units": self.simulated_throughput,
                  "units with their messages" if self.oversubscribed else "units": self.unit_bound_throughput}
        return min(bounds, key=bounds.__getitem__)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "algorithm": self.algorithm, "plan_cluster": self.plan_cluster,
                "units": list(self.units), "cores": self.cores, "layers_per_unit": dict(self.layers_per_unit),
                "compute_s": dict(self.compute_s), "segments": dict(self.segments),
                "segment_call_s": dict(self.segment_call_s), "simulated_throughput": self.simulated_throughput,
                "simulated_latency_s": self.simulated_latency_s, "unloaded_factor": self.unloaded_factor,
                "predicted_latency_s": self.predicted_latency_s,
                "closed_form_throughput": self.closed_form_throughput, "messages": self.messages,
                "driver_messages": self.driver_messages, "message_cost_s": self.message_cost_s,
                "message_cpu_s": dict(self.message_cpu_s), "message_end_count": dict(self.message_end_count),
                "end_wait_s": self.end_wait_s, "message_latency_s": self.message_latency_s,
                "unit_busy_s": self.unit_busy_s, "unit_bound_throughput": self.unit_bound_throughput,
                "runtime_source": self.runtime_source,
                "compute_work_s": self.compute_work_s, "total_work_s": self.total_work_s,
                "core_bound_throughput": self.core_bound_throughput,
                "predicted_throughput": self.predicted_throughput, "limited_by": self.limited_by,
                "profile_source": self.profile_source, "profile_co_load": self.profile_co_load,
                "profile_threads": self.profile_threads}


@dataclass(frozen=True)
class HereOptions:
    """How to cost plans for this machine's processes: ``runtime``, the runtime's per-message costs
    (``runtime.calibration.runtime_costs()`` measures this machine's); ``cores`` the workers and the
    driver share (None: those this process may use); ``profile``, local-cpu per-layer costs of the
    model (None: the problem's own, for plans made on the ``local`` cluster); ``sim_inputs`` streamed
    through the simulator."""

    runtime: RuntimeCosts
    cores: int | None = None
    profile: Profile | None = None
    sim_inputs: int = 200

    def __post_init__(self) -> None:
        if self.cores is not None and self.cores < 1:
            raise HetsplitError(f"HereOptions.cores = {self.cores}: the processes need at least one core")
        if self.sim_inputs < 2:
            raise HetsplitError(f"HereOptions.sim_inputs = {self.sim_inputs}: stream at least 2 inputs")


def predict_here(plan: Plan, graph: Graph, profile: Profile, cores: int, runtime: RuntimeCosts,
                 sim_inputs: int = 200) -> LocalPrediction:
    """Cost ``plan`` for its worker processes on ``cores`` cores of this machine, per-layer times from
    ``profile``, the runtime's per-message costs ``runtime`` (see the module docstring)."""
    return _costed(plan, graph, profile, cores, runtime, sim_inputs)[0]


def _costed(plan: Plan, graph: Graph, profile: Profile, cores: int, runtime: RuntimeCosts,
            sim_inputs: int) -> tuple[LocalPrediction, SplitProblem, BatchMetrics]:
    """The prediction, the workers' problem and the closed form's metrics on it."""
    problem = workers_problem(graph, profile, plan.devices, runtime.message_latency_s, runtime.segment)
    cl = problem.cluster
    batch = estimate(problem, [plan], "closed")
    closed = metrics_at(problem, batch, 0)
    tg = check_plan(graph, cl, plan)
    charges = segment_charges(problem, tg).total_s
    beyond = {d: 0.0 for d in cl.names}
    for t, task in enumerate(tg.tasks):
        beyond[cl.names[task.device]] += float(charges[t])
    sim = simulate(problem, tg, SimOptions(inputs=max(2, sim_inputs), keep_timeline=False))
    layers = {d: 0 for d in cl.names}
    for where in plan.placements().values():
        for dev in [where] if isinstance(where, str) else [s.device for s in where]:  # whole, or shards
            layers[dev] += 1
    driver = len(driver_message_sizes(tg))
    ends = message_ends(tg)
    meta = profile.meta
    prediction = LocalPrediction(
        model=graph.name, algorithm=plan.algorithm, plan_cluster=plan.cluster, units=list(cl.names),
        cores=cores, layers_per_unit=layers,
        compute_s={d: float(closed.compute_s_per_device.get(d, 0.0)) for d in cl.names},
        segments={d: len(tg.segments.get(cl.names.index(d), ())) for d in cl.names},
        segment_call_s=beyond,
        simulated_throughput=sim.throughput, simulated_latency_s=sim.unloaded_latency_s,
        closed_form_throughput=closed.throughput, messages=len(tg.messages()) + driver,
        driver_messages=driver, message_cpu_s=ends_cpu(ends, runtime),
        message_end_count={proc: len(nbytes) for proc, nbytes in ends.items()},
        message_latency_s=runtime.message_latency_s, end_wait_s=runtime.end_wait_s,
        compute_work_s=float(sum(closed.compute_s_per_device.values())),
        profile_source=str(meta.get("source", "")),
        profile_co_load=None if meta.get("co_load") is None else int(meta["co_load"]),
        profile_threads=None if meta.get("threads") is None else int(meta["threads"]),
        unloaded_factor=float(meta.get("unloaded_factor") or 1.0), runtime_source=runtime.source)
    return prediction, problem, batch


@register_fidelity("here")
@dataclass(frozen=True)
class Here:
    """Plans costed for the processes that would run them on this machine (see the module docstring)."""

    options: HereOptions | None = None
    name: str = field(default="here", init=False)

    def predictions(self, problem: SplitProblem, plans: Sequence[Plan]) -> list[LocalPrediction]:
        """The whole prediction of each plan, in order."""
        return [pred for pred, _, _ in self._costed(problem, plans)]

    def estimate(self, problem: SplitProblem, plans: Sequence[Plan]) -> BatchMetrics:
        return concat_metrics([_onto(problem, workers, closed, pred)
                               for pred, workers, closed in self._costed(problem, plans)])

    def _costed(self, problem: SplitProblem,
                plans: Sequence[Plan]) -> list[tuple[LocalPrediction, SplitProblem, BatchMetrics]]:
        from hetsplit.cluster.examples import usable_cores

        if self.options is None:
            raise HetsplitError("the here fidelity needs the runtime's costs on this machine: HereOptions(runtime=...) "
                                "(runtime.calibration.runtime_costs() measures them)")
        opts = self.options
        profile = opts.profile if opts.profile is not None else planned_profile(problem)
        cores = opts.cores or usable_cores()
        return [_costed(p, problem.graph, profile, cores, opts.runtime, opts.sim_inputs) for p in plans]


def _onto(problem: SplitProblem, workers: SplitProblem, closed: BatchMetrics, pred: LocalPrediction) -> BatchMetrics:
    """One plan's row on ``problem``'s devices: the closed form's figures on the workers' costs (their
    devices carry the plan's device names), throughput and latency the prediction's."""
    names = problem.cluster.names
    missing = [d for d in workers.cluster.names if d not in names]
    if missing:
        raise HetsplitError(f"the plan's device {missing[0]!r} is not in cluster {problem.cluster.name!r}")
    cols = np.array([names.index(d) for d in workers.cluster.names], dtype=np.int64)
    out = {}
    for f in BatchMetrics.__dataclass_fields__:
        a = getattr(closed, f)
        if a.ndim == 2 and f != "max_transfer_link":          # per device: onto the problem's columns
            full = np.zeros((1, len(names)), dtype=a.dtype)
            full[:, cols] = a
            a = full
        out[f] = a.copy()
    link = out["max_transfer_link"]
    out["max_transfer_link"] = np.where(link >= 0, cols[np.maximum(link, 0)], -1)
    thr = pred.predicted_throughput
    out["throughput"][:] = thr
    out["bottleneck_s"][:] = 1.0 / thr if thr > 0 else np.inf
    out["latency_s"][:] = pred.predicted_latency_s
    out["edp"][:] = out["energy_j"] * out["latency_s"]
    return BatchMetrics(**out)
