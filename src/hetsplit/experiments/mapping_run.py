"""A node-to-unit mapping run for real on this machine, beside the simulator costed for the same processes.

A mapping made for an IMC cluster (``imce-N``: layers on IMC and DPU units) runs with ``hetsplit run``
as one worker process per unit on this machine's CPU (onnxruntime, one thread each). The plan's own
metrics come from the IMC emulator's cost model, another machine: setting them beside the run
compares nothing. Here the *same mapping* (layer -> unit) is costed for the processes that run it:

- every unit becomes a ``local-cpu`` device (the built-in ``local`` cluster's device) under its own
  name, so the plan applies unchanged; per-layer times come from a ``hetsplit.profile/1`` profile
  measured here with one thread (``hetsplit profile MODEL --threads 1 --co-load K``), given or taken
  on the spot with ``K = min(units, cores) - 1``: as many other cores busy as workers compute at once;
- the runtime's own costs come from ``runtime_calibration.runtime_costs`` (measured here on first use
  with toy runs, cached): the CPU a worker and the driver spend per message end (fixed + per byte)
  and the wall time a message adds to an input alone, which becomes the loopback link's latency
  (bytes at the ``local`` link's 1 GB/s);
- the discrete-event simulator (``plan.simulate``) streams inputs through the re-costed mapping, each
  unit computing on a core of its own: ``simulated_throughput``;
- the workers (and the driver that feeds them) share this machine's ``C`` cores, which the simulator
  does not know. An input needs ``total work`` of CPU: the sum of its layers' times plus every
  process's CPU for its message ends. So no schedule beats ``C / total work``, the core-sharing
  bound. When the processes outnumber the cores, a worker's message threads get no core of their
  own either: a unit then needs its compute plus its ends' CPU per input, and waits at each end
  for the wake-ups that hand its tensors over (``end_wait_s``, measured): the unit bound. The
  prediction is the least of the three: ``1 / max(per-unit bottleneck, unit busy, total work / C)``.

Measured beside it (``MappingRunResult``): throughput over the streamed inputs (their count over
the time from the first one sent to the last output; the runtime's own figure, from the spacing of
the outputs, is kept beside it: it overstates when outputs reach a core-starved driver in bursts),
unloaded latency, every output checked against the unsplit model (max abs error), per unit its
compute (wall time of its segments; CPU inside its sub-models with one compute thread) and process
CPU per input, and the *measured CPU bound* ``C / (CPU per input of every process)``: how fast the
machine could go given the CPU the run really spent. Its gap to the prediction is CPU the calibrations
did not foresee (the machine drifted, or the runtime spent more per message); the gap between it and
the measured throughput is time no process computed (the stages' waits at their message ends, which
the unit bound models when the processes outnumber the cores).
"""

from __future__ import annotations

import contextlib
import json
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsplit.cluster.examples import usable_cores
from hetsplit.cluster.types import Cluster
from hetsplit.costs.profile import Profile
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.graph.types import Graph
from hetsplit.plan.tasks import TaskGraph
from hetsplit.plan.types import Plan
from hetsplit.runtime.measure import RunReport

if TYPE_CHECKING:
    from hetsplit.experiments.runtime_calibration import RuntimeCosts

LOCAL_TEMPLATE = "local"      # the built-in cluster whose device and link stand for this machine's processes


# ---- the machine the mapping really runs on ------------------------------------------------------

def local_cluster(devices: list[str], name: str = "local-processes", link_latency_s: float | None = None) -> Cluster:
    """A cluster of ``devices`` (the plan's unit names), each a ``local-cpu`` worker process, joined by
    the ``local`` built-in's loopback link (its latency ``link_latency_s`` when given, e.g. measured)."""
    from hetsplit.cluster.examples import builtin_spec
    from hetsplit.cluster.loader import cluster_from_dict

    if not devices:
        raise HetsplitError("a mapping run needs at least one device")
    spec = builtin_spec(LOCAL_TEMPLATE)
    template = {k: v for k, v in spec["devices"][0].items() if k not in ("name", "count")}
    spec.update(name=name, description=f"{len(devices)} worker process(es) of this machine, named after the "
                                       "plan's units (the built-in local cluster's device and loopback link)",
                devices=[{**template, "name": d} for d in devices])
    spec.pop("groups", None)
    if link_latency_s is not None:
        spec["links"] = {"default": {**spec["links"]["default"], "latency": f"{float(link_latency_s)!r}s"}}
    return cluster_from_dict(spec, origin=f"built-in {LOCAL_TEMPLATE}, renamed to the plan's units")


def default_co_load(units: int, cores: int) -> int:
    """Other cores busy while a worker computes: as many workers as there are cores compute at once."""
    return max(0, min(units, cores) - 1)


def profile_here(model: str, units: int, cores: int | None = None, repeats: int = 20, warmup: int = 5,
                 co_load: int | None = None) -> Profile:
    """Measure ``model``'s per-layer times on this machine's CPU as the workers will see them: one
    thread, ``co_load`` (default ``min(units, cores) - 1``) other cores running the model meanwhile."""
    from hetsplit.costs.profiler import LOCAL_CPU, profile_model

    cores = cores or usable_cores()
    k = default_co_load(units, cores) if co_load is None else co_load
    return profile_model(model, LOCAL_CPU, repeats=repeats, warmup=warmup, threads=1, co_load=k)


def _as_profile(profile: str | Path | Profile) -> Profile:
    if isinstance(profile, Profile):
        return profile
    from hetsplit.costs import load_profile

    return load_profile(profile)


# ---- the prediction ------------------------------------------------------------------------------

@dataclass
class LocalPrediction:
    """The mapping costed for the worker processes that run it (SI units; see the module docstring)."""

    model: str
    algorithm: str
    plan_cluster: str                 # the cluster the plan was made for (e.g. imce-4)
    units: list[str]                  # the worker processes, one per unit with layers
    cores: int                        # cores the workers and the driver share
    layers_per_unit: dict[str, int]
    compute_s: dict[str, float]       # per unit: the sum of its layers' profiled times
    simulated_throughput: float       # discrete-event simulator, each unit on a core of its own
    simulated_latency_s: float        # one input alone
    closed_form_throughput: float     # the closed-form evaluator's bound on the same costs
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
        return min(bounds, key=bounds.get)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "algorithm": self.algorithm, "plan_cluster": self.plan_cluster,
                "units": list(self.units), "cores": self.cores, "layers_per_unit": dict(self.layers_per_unit),
                "compute_s": dict(self.compute_s), "simulated_throughput": self.simulated_throughput,
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


def local_problem(plan: Plan, graph: Graph, profile: Profile, link_latency_s: float | None = None) -> SplitProblem:
    """The SplitProblem of ``graph`` on the plan's units as local-cpu workers, costs from ``profile``."""
    return workers_problem(graph, profile, plan.devices, link_latency_s)


def workers_problem(graph: Graph, profile: Profile, devices: list[str],
                    link_latency_s: float | None = None) -> SplitProblem:
    """The SplitProblem of ``graph`` on ``devices`` as local-cpu worker processes, costs from ``profile``
    (links: the loopback link, at ``link_latency_s`` when given)."""
    from hetsplit.costs import build_problem
    from hetsplit.costs.profiler import LOCAL_CPU

    if LOCAL_CPU not in profile.costs.types:
        raise HetsplitError(f"the profile has no {LOCAL_CPU!r} costs (it has {profile.costs.types}); measure one "
                            f"here with: hetsplit profile {graph.name} --threads 1")
    if list(profile.costs.layer_names) != list(graph.names):
        raise HetsplitError(f"the profile's layers are not those of {graph.name!r} (first difference at "
                            f"{_first_diff(profile.costs.layer_names, graph.names)!r}); profile this model")
    return build_problem(graph, local_cluster(devices, link_latency_s=link_latency_s),
                         profile.costs.select([LOCAL_CPU]))


def _first_diff(a: list[str], b: list[str]) -> str:
    for x, y in zip(a, b):
        if x != y:
            return x
    return "(one list is longer)"


DRIVER = "driver"             # the process that feeds the workers and collects the outputs


def driver_message_sizes(tg: TaskGraph) -> list[tuple[str, float]]:
    """``(unit, bytes)`` of every message the driver sends or receives per input: each model input
    once to every unit that reads it, each model output once from the unit that makes it (as the
    runtime's layout does)."""
    from hetsplit.plan.tasks import SINK, SOURCE

    found: dict[tuple, tuple[str, float]] = {}
    names = tg.cluster.names
    for e in range(len(tg.edge_src)):
        p, q, pay = int(tg.edge_src[e]), int(tg.edge_dst[e]), int(tg.edge_payload[e])
        if p == SOURCE and q >= 0:
            found.setdefault(("in", pay, tg.tasks[q].device), (names[tg.tasks[q].device], float(tg.edge_bytes[e])))
        elif q == SINK and p >= 0:
            found.setdefault(("out", pay), (names[tg.tasks[p].device], float(tg.edge_bytes[e])))
    return list(found.values())


def message_ends(tg: TaskGraph) -> dict[str, list[float]]:
    """Per process (every unit and ``DRIVER``), the bytes of each message end it handles per input:
    both ends of every message between units and of every driver message."""
    names = tg.cluster.names
    ends: dict[str, list[float]] = {d: [] for d in [*names, DRIVER]}
    for m in tg.messages():
        ends[names[m.src]].append(m.nbytes)
        ends[names[m.dst]].append(m.nbytes)
    for unit, nbytes in driver_message_sizes(tg):
        ends[unit].append(nbytes)
        ends[DRIVER].append(nbytes)
    return ends


def message_cpu(tg: TaskGraph, runtime: "RuntimeCosts") -> dict[str, float]:
    """Per process (every unit and ``DRIVER``), the CPU its message ends cost per input."""
    return ends_cpu(message_ends(tg), runtime)


def ends_cpu(ends: dict[str, list[float]], runtime: "RuntimeCosts") -> dict[str, float]:
    """The CPU of ``message_ends``' ends per process."""
    return {proc: sum(runtime.end_cpu_s(proc == DRIVER, b) for b in nbytes) for proc, nbytes in ends.items()}


def predict_here(plan: Plan, graph: Graph, profile: str | Path | Profile, cores: int | None = None,
                 runtime: "RuntimeCosts | None" = None, sim_inputs: int = 200) -> LocalPrediction:
    """Cost ``plan`` for its worker processes on this machine (``cores`` shared; default this
    process's) and simulate it. ``runtime``: the runtime's own costs (default: this machine's,
    ``runtime_calibration.runtime_costs``, measured on first use)."""
    from hetsplit.experiments.runtime_calibration import runtime_costs
    from hetsplit.plan.check import check_plan
    from hetsplit.estimate.evaluate import evaluate
    from hetsplit.estimate.simulate import SimOptions, simulate

    prof = _as_profile(profile)
    runtime = runtime or runtime_costs()
    problem = local_problem(plan, graph, prof, runtime.message_latency_s)
    cl = problem.cluster
    tg = check_plan(graph, cl, plan)
    sim = simulate(problem, tg, SimOptions(inputs=max(2, sim_inputs), keep_timeline=False))
    metrics = evaluate(problem, plan)
    layers = {d: 0 for d in cl.names}
    for where in plan.placements().values():
        for dev in [where] if isinstance(where, str) else [s.device for s in where]:  # whole, or shards
            layers[dev] += 1
    driver = len(driver_message_sizes(tg))
    ends = message_ends(tg)
    meta = prof.meta
    return LocalPrediction(
        model=graph.name, algorithm=plan.algorithm, plan_cluster=plan.cluster, units=list(cl.names),
        cores=cores or usable_cores(), layers_per_unit=layers,
        compute_s={d: float(metrics.compute_s_per_device.get(d, 0.0)) for d in cl.names},
        simulated_throughput=float(sim.throughput), simulated_latency_s=float(sim.unloaded_latency_s),
        closed_form_throughput=float(metrics.throughput), messages=len(tg.messages()) + driver,
        driver_messages=driver, message_cpu_s=ends_cpu(ends, runtime),
        message_end_count={proc: len(nbytes) for proc, nbytes in ends.items()},
        message_latency_s=runtime.message_latency_s, end_wait_s=runtime.end_wait_s,
        compute_work_s=float(sum(metrics.compute_s_per_device.values())), profile_source=str(meta.get("source", "")),
        profile_co_load=None if meta.get("co_load") is None else int(meta["co_load"]),
        profile_threads=None if meta.get("threads") is None else int(meta["threads"]),
        unloaded_factor=float(meta.get("unloaded_factor") or 1.0), runtime_source=runtime.source)


def planned_profile(problem: SplitProblem) -> Profile:
    """The costs of ``problem`` (on this machine's ``local`` cluster) as a local-cpu profile, with the
    local calibration's alone-vs-co-loaded factor when those costs are the calibration's."""
    from hetsplit.costs.local_calibration import local_costs

    cal = local_costs().calibration
    calibrated = cal is not None and cal.source() in problem.costs.sources.values()
    source = "; ".join(dict.fromkeys(problem.costs.sources.values()))
    return Profile(problem.graph, problem.costs, {"source": source, "threads": 1,
                                                   "unloaded_factor": cal.unloaded_factor if calibrated else 1.0})


def predict_planned_here(problem: SplitProblem, plan: Plan, cores: int | None = None,
                         runtime: "RuntimeCosts | None" = None) -> LocalPrediction:
    """``plan``, made for this machine's ``local`` cluster on ``problem``, costed for the worker
    processes that would run it here (``predict_here``) with the costs it was planned with."""
    return predict_here(plan, problem.graph, planned_profile(problem), cores, runtime)


# ---- prediction beside measurement ----------------------------------------------------------------

@dataclass
class UnitCompute:
    """One unit's worker: its layers, the profiled compute per input, what the run measured."""

    device: str
    layers: int
    predicted_s: float            # sum of its layers' profiled times
    measured_s: float             # median wall time of its segments per input (time-sharing included)
    cpu_s: float | None           # its process's CPU time per input (compute and transfer threads)
    compute_cpu_s: float | None = None   # CPU per input inside its sub-models (one compute thread only)

    def to_dict(self) -> dict[str, Any]:
        return {"device": self.device, "layers": self.layers, "predicted_s": self.predicted_s,
                "measured_s": self.measured_s, "cpu_s": self.cpu_s, "compute_cpu_s": self.compute_cpu_s}


@dataclass
class MappingRunResult:
    """Simulated (for this machine's processes) beside measured, for one mapping run."""

    prediction: LocalPrediction
    measured_throughput: float                 # streamed inputs / (last output - first streamed input sent)
    output_rate: float                         # the runtime's throughput: from the spacing of the outputs
    measured_latency_s: float                  # unloaded (the first inputs one at a time)
    max_abs_err: float                         # every output against the unsplit model
    outputs_checked: int
    inputs: int
    units: list[UnitCompute]
    driver_cpu_per_input_s: float | None
    notes: list[str] = field(default_factory=list)
    report: RunReport | None = None            # the run's full measurements

    @property
    def simulated_throughput(self) -> float:
        return self.prediction.simulated_throughput

    @property
    def predicted_throughput(self) -> float:
        return self.prediction.predicted_throughput

    @property
    def ratio(self) -> float:
        """Measured / predicted throughput (the prediction with the core-sharing bound)."""
        p = self.predicted_throughput
        return self.measured_throughput / p if p > 0 else math.nan

    @property
    def simulated_ratio(self) -> float:
        """Measured / simulated throughput (each unit on a core of its own)."""
        s = self.simulated_throughput
        return self.measured_throughput / s if s > 0 else math.nan

    @property
    def measured_cpu_per_input_s(self) -> float | None:
        """CPU time per input of every process of the run (workers and driver)."""
        if any(u.cpu_s is None for u in self.units) or self.driver_cpu_per_input_s is None:
            return None
        return sum(u.cpu_s for u in self.units) + self.driver_cpu_per_input_s

    @property
    def measured_cpu_bound_throughput(self) -> float | None:
        """``cores / measured CPU per input``: the best the machine allows for the CPU the run spent."""
        cpu = self.measured_cpu_per_input_s
        return self.prediction.cores / cpu if cpu else None

    @property
    def runtime_cpu_per_message_s(self) -> float | None:
        """Process CPU per input beyond the workers' compute (its CPU where measured, else its wall
        time), per message: the runtime's own CPU for a message as this run spent it (compare
        ``prediction.message_cost_s``)."""
        cpu = self.measured_cpu_per_input_s
        if cpu is None or not self.prediction.messages:
            return None
        compute = sum(u.measured_s if u.compute_cpu_s is None else u.compute_cpu_s for u in self.units)
        return max(0.0, cpu - compute) / self.prediction.messages

    def rows(self) -> list[dict[str, Any]]:
        """``metric, predicted, measured, ratio`` rows (what ``hetsplit run --compare`` prints)."""
        p = self.prediction
        rows = [
            {"metric": "throughput, simulated (1/s)", "predicted": p.simulated_throughput,
             "measured": self.measured_throughput},
            {"metric": f"throughput, core bound {p.cores} cores (1/s)", "predicted": p.core_bound_throughput,
             "measured": self.measured_throughput},
            {"metric": "throughput, unit bound: compute + message ends (1/s)" if p.oversubscribed else
             "throughput, unit bound: compute (1/s)", "predicted": p.unit_bound_throughput,
             "measured": self.measured_throughput},
            {"metric": "throughput, predicted = min (1/s)", "predicted": p.predicted_throughput,
             "measured": self.measured_throughput},
            {"metric": "throughput, measured-CPU bound (1/s)", "predicted": self.measured_cpu_bound_throughput,
             "measured": self.measured_throughput},
            {"metric": "throughput, output spacing (1/s)", "predicted": p.predicted_throughput,
             "measured": self.output_rate},
            {"metric": "latency, simulated (s)", "predicted": p.simulated_latency_s,
             "measured": self.measured_latency_s},
            {"metric": "latency, predicted: alone + driver messages (s)", "predicted": p.predicted_latency_s,
             "measured": self.measured_latency_s},
            {"metric": "CPU per input, all processes (s)", "predicted": p.total_work_s,
             "measured": self.measured_cpu_per_input_s},
            {"metric": "runtime CPU per message (s)", "predicted": p.message_cost_s,
             "measured": self.runtime_cpu_per_message_s},
        ]
        for u in self.units:
            rows.append({"metric": f"compute {u.device} ({u.layers} layers) (s)", "predicted": u.predicted_s,
                         "measured": u.measured_s})
        for r in rows:
            pr, me = r["predicted"], r["measured"]
            r["ratio"] = me / pr if pr and me is not None and math.isfinite(pr) else None
        return rows

    def to_dict(self) -> dict[str, Any]:
        return {"prediction": self.prediction.to_dict(), "measured_throughput": self.measured_throughput,
                "output_rate": self.output_rate, "measured_latency_s": self.measured_latency_s,
                "simulated_throughput": self.simulated_throughput,
                "predicted_throughput": self.predicted_throughput, "ratio": self.ratio,
                "simulated_ratio": self.simulated_ratio, "max_abs_err": self.max_abs_err,
                "outputs_checked": self.outputs_checked, "inputs": self.inputs,
                "units": [u.to_dict() for u in self.units], "driver_cpu_per_input_s": self.driver_cpu_per_input_s,
                "measured_cpu_per_input_s": self.measured_cpu_per_input_s,
                "measured_cpu_bound_throughput": self.measured_cpu_bound_throughput,
                "runtime_cpu_per_message_s": self.runtime_cpu_per_message_s, "rows": self.rows(),
                "notes": list(self.notes), "measured": self.report.to_dict() if self.report is not None else None}


def stream_throughput(report: RunReport, latency_inputs: int, driver_doc: dict | None = None) -> float:
    """Inputs per second over the streamed inputs (all but the first ``latency_inputs``): their count /
    (last output - first streamed input sent). Unlike the spacing of the outputs (``report.throughput``)
    it does not grow when outputs reach the driver in bursts, as they do when the driver waits for a
    core. Exact with the driver's record (``rank0.json`` of the run directory); without it the streamed
    inputs, all posted at once, are taken to leave together: the time is their longest latency."""
    if driver_doc is not None:
        t_in, t_out, k = driver_doc["t_in"], driver_doc["t_out"], int(driver_doc["latency_inputs"])
        if len(t_out) > k and t_out[-1] > t_in[k]:
            return (len(t_out) - k) / (t_out[-1] - t_in[k])
    lat = list(report.latencies_s)
    streamed = lat[latency_inputs:] if len(lat) > latency_inputs else lat
    span = max(streamed) if streamed else 0.0
    return len(streamed) / span if span > 0 else 0.0


def compare_here(report: RunReport, prediction: LocalPrediction, latency_inputs: int,
                 driver_doc: dict | None = None) -> MappingRunResult:
    """The run's measurements beside the prediction for the same processes (``latency_inputs``: the
    run's first inputs sent one at a time; ``driver_doc``: the driver's record, ``rank0.json``, for the
    exact streamed throughput)."""
    by_dev = {d["device"]: d for d in report.devices}
    units = [UnitCompute(dev, prediction.layers_per_unit.get(dev, 0), prediction.compute_s.get(dev, 0.0),
                         float(by_dev[dev]["compute_s"]) if dev in by_dev else math.nan,
                         by_dev[dev].get("cpu_per_input_s") if dev in by_dev else None,
                         by_dev[dev].get("compute_cpu_per_input_s") if dev in by_dev else None)
             for dev in prediction.units]
    verify = report.verify or {}
    workers = len(report.devices)
    notes = [f"{workers} worker process(es) and the driver share {prediction.cores} core(s); the simulator gives "
             f"each unit a core of its own, the core-sharing bound {prediction.cores} / total work "
             f"({prediction.total_work_s * 1e3:.3f} ms per input) caps it; prediction limited by "
             f"{prediction.limited_by}", f"the runtime's own costs: {prediction.runtime_source}"]
    if prediction.profile_co_load is not None and \
            prediction.profile_co_load != default_co_load(workers, prediction.cores):
        notes.append(f"the profile was taken with co-load {prediction.profile_co_load}; "
                     f"{min(workers, prediction.cores)} workers computed at once here")
    if prediction.profile_threads not in (None, 1):
        notes.append(f"the profile used {prediction.profile_threads} threads per layer; each worker computes with 1")
    return MappingRunResult(prediction, stream_throughput(report, latency_inputs, driver_doc), float(report.throughput),
                            float(report.latency_s),
                            float(verify.get("max_abs_err", math.nan)), int(verify.get("outputs_checked", 0)),
                            int(report.inputs), units, report.extra.get("driver_cpu_per_input_s"), notes, report)


def read_driver_doc(run_dir: str | Path | None) -> dict | None:
    """The driver's record of a run (``rank0.json`` in its run directory), or None."""
    if run_dir is None:
        return None
    path = Path(run_dir) / "rank0.json"
    return json.loads(path.read_text()) if path.is_file() else None


def compare_run_here(report: RunReport, plan: Plan, graph: Graph, model: str,
                     profile: str | Path | Profile | None = None, latency_inputs: int = 2,
                     run_dir: str | Path | None = None, cores: int | None = None,
                     recalibrate: bool = False) -> MappingRunResult:
    """A finished run of ``plan`` beside the prediction for its worker processes (what ``hetsplit run
    --compare --here`` shows): costs from ``profile`` (a local-cpu profile), or profiled now; the
    runtime's own costs this machine's (``recalibrate``: measured anew)."""
    from hetsplit.experiments.runtime_calibration import runtime_costs

    cores = cores or usable_cores()
    prof = profile_here(model, len(plan.devices), cores) if profile is None else _as_profile(profile)
    prediction = predict_here(plan, graph, prof, cores, runtime_costs(recalibrate))
    if profile is not None and not isinstance(profile, Profile):
        prediction.profile_source = f"{profile}: {prediction.profile_source}"
    return compare_here(report, prediction, latency_inputs, read_driver_doc(run_dir))


# ---- the whole experiment ------------------------------------------------------------------------

@dataclass
class MappingRunOptions:
    """How to run: ``inputs`` in all, the first ``latency_inputs`` one at a time (their median is the
    unloaded latency; the first input of a run also pays every process's first-use costs), the rest
    streamed; ``profile``: a
    ``hetsplit.profile/1`` with local-cpu costs (path or Profile), None to measure one now
    (``profile_repeats`` runs, ``co_load`` default ``min(units, cores) - 1``); ``cores``: shared by the
    processes (default: this process's); ``runtime``: the runtime's own costs (default: this
    machine's, measured on first use)."""

    inputs: int = 200
    latency_inputs: int = 5
    timeout_s: float = 60.0
    profile: str | Path | Profile | None = None
    profile_repeats: int = 20
    co_load: int | None = None
    cores: int | None = None
    runtime: "RuntimeCosts | None" = None
    sim_inputs: int = 200
    pin: bool = False
    split_dir: Path | None = None
    run_dir: Path | None = None


def run_mapping(model: str, plan: Plan | str | Path, options: MappingRunOptions | None = None) -> MappingRunResult:
    """Profile (or load) ``model``'s costs here, simulate ``plan`` for its worker processes, run it
    for real (one process per unit, every output verified) and set the two side by side."""
    from hetsplit.plan.io import load_plan
    from hetsplit.runtime import RunOptions, resolve_model, run_manifest, split_model

    opts = options or MappingRunOptions()
    if not isinstance(plan, Plan):
        plan = load_plan(plan)
    graph, path = resolve_model(model)
    cores = opts.cores or usable_cores()
    if opts.profile is None:
        prof = profile_here(model, len(plan.devices), cores, opts.profile_repeats, co_load=opts.co_load)
    else:
        prof = _as_profile(opts.profile)
    prediction = predict_here(plan, graph, prof, cores, opts.runtime, opts.sim_inputs)
    if opts.profile is not None and not isinstance(opts.profile, Profile):
        prediction.profile_source = f"{opts.profile}: {prediction.profile_source}"
    with contextlib.ExitStack() as stack:
        split_dir = opts.split_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-split-")))
        run_dir = opts.run_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-run-")))
        manifest = split_model(plan, graph, path, Path(split_dir), cluster=local_cluster(plan.devices))
        report = run_manifest(manifest, RunOptions(inputs=opts.inputs, latency_inputs=opts.latency_inputs,
                                                   timeout_s=opts.timeout_s, run_dir=Path(run_dir), pin=opts.pin))
        if report is None:  # only in multi-host runs, which this does not start
            raise HetsplitError("the run returned no measurements")
        driver_doc = read_driver_doc(run_dir)
    result = compare_here(report, prediction, opts.latency_inputs, driver_doc)
    moved = getattr(manifest, "messages", None)      # a mapping's manifest lists them; a pipeline's does not
    if moved is not None and len(moved) != prediction.messages:
        result.notes.append(f"the run moved {len(moved)} messages per input, the prediction counted "
                            f"{prediction.messages}")
    return result
