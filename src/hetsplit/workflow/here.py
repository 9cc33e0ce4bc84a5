"""A run on this machine beside the ``here`` fidelity: the same plan costed for the processes that ran it.

A plan made for another cluster (an IMC mapping, ``imce-N``) runs with ``hetsplit run`` as one worker process
per device on this machine's CPU (onnxruntime, one thread each): setting the plan's own metrics beside the run
compares nothing. Here the *same placement* is costed for those processes by the ``here`` fidelity
(``estimate.here``): every device a ``local-cpu`` worker under its own name, per-layer times from a
``hetsplit.profile/1`` measured here with one thread (given, or taken on the spot with ``--co-load K``,
``K = min(units, cores) - 1``), the runtime's per-message costs from ``runtime.calibration.runtime_costs``.

Measured beside it (``HereComparison``): throughput over the streamed inputs (their count over first sent to
last output; the outputs' spacing, the runtime's own figure, kept beside it: it overstates when outputs reach
a core-starved driver in bursts), unloaded latency, every output checked, per unit its compute and process
CPU per input, and the *measured CPU bound* ``C / (CPU per input of every process)``: how fast the machine
could go given the CPU the run really spent. Its gap to the prediction is CPU the calibrations did not
foresee; the gap between it and the measured throughput is time no process computed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hetsplit.cluster.examples import usable_cores
from hetsplit.costs.profile import Profile
from hetsplit.estimate.here import LocalPrediction, predict_here
from hetsplit.estimate.runtime_costs import RuntimeCosts
from hetsplit.graph.input_shapes import InputShapes
from hetsplit.graph.types import Graph
from hetsplit.plan.types import Plan
from hetsplit.runtime.measure import stream_throughput
from hetsplit.runtime.report import RunReport
from hetsplit.workflow.comparison import Row


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
class HereComparison:
    """A run (``report``) beside the ``here`` prediction for the processes that ran it (``latency_inputs``:
    the run's first inputs sent one at a time)."""

    prediction: LocalPrediction
    report: RunReport
    latency_inputs: int
    notes: list[str] = field(default_factory=list)

    @property
    def measured_throughput(self) -> float:
        """Streamed inputs / (last output - first streamed input sent)."""
        return stream_throughput(self.report, self.latency_inputs)

    @property
    def output_rate(self) -> float:
        """The runtime's throughput: from the spacing of the outputs."""
        return float(self.report.throughput)

    @property
    def measured_latency_s(self) -> float:
        """Unloaded (the first inputs one at a time)."""
        return float(self.report.latency_s)

    @property
    def max_abs_err(self) -> float:
        """Every output against the unsplit model (NaN: not verified)."""
        return self.report.verify.max_abs_err if self.report.verify is not None else math.nan

    @property
    def outputs_checked(self) -> int:
        return self.report.verify.outputs_checked if self.report.verify is not None else 0

    @property
    def inputs(self) -> int:
        return int(self.report.inputs)

    @property
    def driver_cpu_per_input_s(self) -> float | None:
        return self.report.driver_cpu_per_input_s

    @property
    def units(self) -> list[UnitCompute]:
        """Per unit of the prediction: its layers, profiled compute and what the run measured."""
        p, out = self.prediction, []
        for dev in p.units:
            d = self.report.device(dev)
            out.append(UnitCompute(dev, p.layers_per_unit.get(dev, 0), p.compute_s.get(dev, 0.0),
                                   float(d.compute_s) if d is not None else math.nan,
                                   d.cpu_per_input_s if d is not None else None,
                                   d.compute_cpu_per_input_s if d is not None else None))
        return out

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
        cpus = [u.cpu_s for u in self.units if u.cpu_s is not None]
        if len(cpus) < len(self.units) or self.driver_cpu_per_input_s is None:
            return None
        return sum(cpus) + self.driver_cpu_per_input_s

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

    def rows(self) -> list[Row]:
        """The rows ``hetsplit run --compare --here`` prints."""
        p, thr, lat = self.prediction, self.measured_throughput, self.measured_latency_s
        rows = [Row("throughput, simulated (1/s)", p.simulated_throughput, thr),
                Row(f"throughput, core bound {p.cores} cores (1/s)", p.core_bound_throughput, thr),
                Row("throughput, unit bound: compute + message ends (1/s)" if p.oversubscribed else
                    "throughput, unit bound: compute (1/s)", p.unit_bound_throughput, thr),
                Row("throughput, predicted = min (1/s)", p.predicted_throughput, thr),
                Row("throughput, measured-CPU bound (1/s)", self.measured_cpu_bound_throughput, thr),
                Row("throughput, output spacing (1/s)", p.predicted_throughput, self.output_rate),
                Row("latency, simulated (s)", p.simulated_latency_s, lat),
                Row("latency, predicted: alone + driver messages (s)", p.predicted_latency_s, lat),
                Row("CPU per input, all processes (s)", p.total_work_s, self.measured_cpu_per_input_s),
                Row("runtime CPU per message (s)", p.message_cost_s, self.runtime_cpu_per_message_s)]
        return rows + [Row(f"compute {u.device} ({u.layers} layers) (s)", u.predicted_s, u.measured_s)
                       for u in self.units]

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
                "runtime_cpu_per_message_s": self.runtime_cpu_per_message_s,
                "rows": [r.to_dict() for r in self.rows()], "notes": list(self.notes), "measured": self.report.to_dict()}


def compare_here(report: RunReport, prediction: LocalPrediction, latency_inputs: int) -> HereComparison:
    """The run's measurements beside the prediction for the same processes (``latency_inputs``: the
    run's first inputs sent one at a time)."""
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
    return HereComparison(prediction, report, latency_inputs, notes)


def compare_run_here(report: RunReport, plan: Plan, graph: Graph, model: str,
                     profile: str | Path | Profile | None = None, latency_inputs: int = 2, cores: int | None = None,
                     recalibrate: bool = False) -> HereComparison:
    """A finished run of ``plan`` beside the prediction for its worker processes (what ``hetsplit run
    --compare --here`` shows): costs from ``profile`` (a local-cpu profile), or profiled now; the
    runtime's own costs this machine's (``recalibrate``: measured anew)."""
    from hetsplit.runtime.calibration import runtime_costs

    prediction = prediction_here(model, plan, graph, profile, cores or usable_cores(), runtime_costs(recalibrate))
    return compare_here(report, prediction, latency_inputs)
