"""A node-to-unit mapping run for real on this machine, beside the simulator costed for the same processes.

A mapping made for an IMC cluster (``imce-N``: layers on IMC and DPU units) runs with ``hetsplit run``
as one worker process per unit on this machine's CPU (onnxruntime, one thread each). The plan's own
metrics come from the IMC emulator's cost model, another machine: setting them beside the run
compares nothing. Here the *same mapping* (layer -> unit) is costed for the processes that run it,
by the ``here`` fidelity (``estimate.here``): every unit a ``local-cpu`` worker under its own name,
per-layer times from a ``hetsplit.profile/1`` measured here with one thread (``hetsplit profile MODEL
--threads 1 --co-load K``), given or taken on the spot with ``K = min(units, cores) - 1`` (as many other
cores busy as workers compute at once), the runtime's per-message costs from
``runtime.calibration.runtime_costs`` (measured here on first use with toy runs, cached).

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
import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsplit.cluster.examples import usable_cores
from hetsplit.cluster.local import local_cluster
from hetsplit.costs.profile import Profile
from hetsplit.errors import HetsplitError
from hetsplit.estimate.here import LocalPrediction, predict_here
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.graph.input_shapes import InputShapes
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.measure import RunReport, read_driver_doc, stream_throughput


def default_co_load(units: int, cores: int) -> int:
    """Other cores busy while a worker computes: as many workers as there are cores compute at once."""
    return max(0, min(units, cores) - 1)


def profile_here(model: str, units: int, cores: int | None = None, repeats: int = 20, warmup: int = 5,
                 co_load: int | None = None, input_shapes: InputShapes | None = None) -> Profile:
    """Measure ``model``'s per-layer times on this machine's CPU as the workers will see them: one
    thread, ``co_load`` (default ``min(units, cores) - 1``) other cores running the model meanwhile;
    ``input_shapes``: its symbolic input dims (``graph.input_shapes``)."""
    from hetsplit.costs.profiler import LOCAL_CPU, profile_model

    cores = cores or usable_cores()
    k = default_co_load(units, cores) if co_load is None else co_load
    return profile_model(model, LOCAL_CPU, repeats=repeats, warmup=warmup, threads=1, co_load=k,
                         input_shapes=input_shapes)


def prediction_here(model: str, plan: Plan, graph: Graph, profile: str | Path | Profile | None, cores: int,
                    runtime: RuntimeCosts, repeats: int = 20, co_load: int | None = None,
                    sim_inputs: int = 200) -> LocalPrediction:
    """``plan`` costed for its worker processes by the ``here`` fidelity (``estimate.here.predict_here``):
    per-layer costs from ``profile`` (a local-cpu profile, path or Profile) or profiled now (``repeats``
    runs per layer, ``co_load``: see ``profile_here``)."""
    if profile is None:
        prof = profile_here(model, len(plan.devices), cores, repeats, co_load=co_load,
                            input_shapes=graph.meta.get("input_shapes"))
    elif isinstance(profile, Profile):
        prof = profile
    else:
        from hetsplit.costs import load_profile

        prof = load_profile(profile)
    prediction = predict_here(plan, graph, prof, cores, runtime, sim_inputs)
    if profile is not None and not isinstance(profile, Profile):
        prediction.profile_source = f"{profile}: {prediction.profile_source}"
    return prediction


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


def compare_run_here(report: RunReport, plan: Plan, graph: Graph, model: str,
                     profile: str | Path | Profile | None = None, latency_inputs: int = 2,
                     run_dir: str | Path | None = None, cores: int | None = None,
                     recalibrate: bool = False) -> MappingRunResult:
    """A finished run of ``plan`` beside the prediction for its worker processes (what ``hetsplit run
    --compare --here`` shows): costs from ``profile`` (a local-cpu profile), or profiled now; the
    runtime's own costs this machine's (``recalibrate``: measured anew)."""
    from hetsplit.runtime.calibration import runtime_costs

    prediction = prediction_here(model, plan, graph, profile, cores or usable_cores(), runtime_costs(recalibrate))
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
    runtime: RuntimeCosts | None = None
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
    from hetsplit.runtime.calibration import runtime_costs

    graph, path = resolve_model(model)
    prediction = prediction_here(model, plan, graph, opts.profile, opts.cores or usable_cores(),
                                 opts.runtime or runtime_costs(), opts.profile_repeats, opts.co_load, opts.sim_inputs)
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
    if len(manifest.messages) != prediction.messages:
        result.notes.append(f"the run moved {len(manifest.messages)} messages per input, the prediction counted "
                            f"{prediction.messages}")
    return result
