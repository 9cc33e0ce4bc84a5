"""The thesis's Table 3 (seed 003, 5.2.1) here: the best hybrid plans explored, run for real, measured.

For each chromosome (naive; advanced with p = 2, 4, ...) NSGA-II explores ``model`` on a cluster of
``workers`` local worker processes (``cluster.local.local_cluster``: ``local-cpu`` devices joined by the
loopback link), so every plan's predicted metrics are for *this machine*: the per-layer costs come from
a ``hetsplit.profile/1`` of this CPU, one thread per layer under the co-load of the run
(``workflow.here.profile_here``, measured on the spot by default; ``HybridRunOptions.profile`` names a
saved one instead, e.g. from ``hetsplit profile MODEL --threads 1 --co-load 1``). The profiles under
``bench/data/epyc-milan-1t`` are not used by default: they were taken without co-load. A profile
measured on the spot is noisy, so the explored plans vary from run to run; pass a saved one to repeat.

From each chromosome's Pareto set the thesis's three points are taken: the best energy per device,
the best memory per device and the best latency (one run for a plan that is best in several). If none
of them splits a layer, the best-latency plan that does is run too (``added_for_split``). Each runs
with ``mapping_run.run_mapping``: one process per device, real tensors, every output checked against
the unsplit model. A row sets beside each other:

- latency (s): the explorer's analytic value (the GA's fitness, Table 3's "predicted"), the
  discrete-event simulator's unloaded latency, and the measured unloaded latency;
- throughput (1/s): the explorer's analytic value (each worker on a core of its own), the ``here``
  fidelity's prediction (simulator capped by the core-sharing bound: the workers share this machine's cores),
  and the measured one over the streamed inputs;
- memory per device (bytes): the model's largest device memory (weights, live tensors, bytes sent and
  received) beside the largest worker's peak RSS as the runtime reports it (each worker's own VmHWM,
  ``runtime.process.peak_rss_bytes``). A worker's RSS also holds the interpreter, torch and onnxruntime:
  an idle process with the worker's imports is measured once (``memory_baseline_bytes``), so
  ``measured - baseline`` compares with the model;
- energy per device (J): the model's value rests on an assumed power per busy core (the profile's
  estimate); measured only where the runtime reads a meter (RAPL), else None with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from hetsplit.costs.profile import Profile
from hetsplit.errors import HetsplitError
from hetsplit.estimate.processes import workers_problem
from hetsplit.experiments.mapping_run import MappingRunOptions, run_mapping
from hetsplit.workflow.here import HereComparison, profile_here
from hetsplit.plan.types import Plan
from hetsplit.search.explore import THESIS_OBJECTIVES, ExploreOptions, ExploreResult, explore

BEST_OF = THESIS_OBJECTIVES        # energy-per-device, memory-per-device, latency: the thesis's three points
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class HybridRunOptions:
    """What to explore and run.

    ``encodings`` (naive, advanced) x ``splits`` (p of the advanced chromosome; naive runs once);
    ``pop_size`` x ``generations`` per exploration; ``inputs`` per run, the first ``latency_inputs``
    one at a time; ``profile``: a local-cpu profile of ``model`` (path or Profile), None to measure one
    now (``profile_repeats`` runs per layer); ``baseline_rss``: measure an idle worker's RSS once.
    """

    model: str = "alexnet"
    workers: int = 4
    encodings: tuple[str, ...] = ("naive", "advanced")
    splits: tuple[int, ...] = (2, 4)
    pop_size: int = 60
    generations: int = 30
    seed: int = 0
    inputs: int = 40
    latency_inputs: int = 5
    timeout_s: float = 120.0
    profile: str | Path | Profile | None = None
    profile_repeats: int = 10
    baseline_rss: bool = True

    def __post_init__(self) -> None:
        if self.workers < 2:
            raise HetsplitError(f"HybridRunOptions.workers = {self.workers}: a split layer needs at least 2 workers")
        bad = [e for e in self.encodings if e not in ("naive", "advanced")]
        if bad or not self.encodings:
            raise HetsplitError(f"HybridRunOptions.encodings = {list(self.encodings)}: choose from naive, advanced "
                                "(the hybrid chromosomes; spe never splits a layer)")
        if "advanced" in self.encodings and (not self.splits or min(self.splits) < 1):
            raise HetsplitError(f"HybridRunOptions.splits = {list(self.splits)}: give p >= 1 for the advanced chromosome")
        if self.latency_inputs < 1 or self.inputs < self.latency_inputs + 2:
            raise HetsplitError(f"HybridRunOptions: inputs = {self.inputs} must exceed latency_inputs = "
                                f"{self.latency_inputs} (>= 1) by at least 2, to measure a streamed throughput")

    def chromosomes(self) -> list[tuple[str, int]]:
        """(encoding, p) per exploration (p = 0 for naive)."""
        return [(e, p) for e in self.encodings for p in ((0,) if e == "naive" else self.splits)]


@dataclass
class HybridRunRow:
    """One explored plan, predicted beside measured (SI units; None where not measured, see the notes)."""

    encoding: str                        # "naive", "advanced p=2", ...
    best: tuple[str, ...]                # objectives of BEST_OF this plan is best for (in its Pareto set)
    added_for_split: bool                # run because no best point split a layer (the best-latency plan
                                         # among those that do; ``best`` is then empty)
    plan: Plan
    split_layers: tuple[str, ...]        # layers cut into >= 2 shards on distinct devices
    predicted_latency_s: float           # the explorer's analytic model (the GA's fitness)
    simulated_latency_s: float           # discrete-event simulator, one input alone
    measured_latency_s: float            # median of the unloaded inputs
    analytic_throughput: float           # the explorer's model: each worker on a core of its own
    predicted_throughput: float          # the here fidelity: simulator capped by the core-sharing bound
    measured_throughput: float           # over the streamed inputs
    predicted_memory_per_device_bytes: float
    measured_memory_per_device_bytes: float | None   # the largest worker's peak RSS (its VmHWM)
    memory_baseline_bytes: float | None  # peak RSS of an idle process with the worker's imports
    predicted_energy_per_device_j: float
    measured_energy_per_device_j: float | None
    max_abs_err: float
    outputs_checked: int
    run: HereComparison = field(repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def n_split_layers(self) -> int:
        return len(self.split_layers)

    @property
    def measured_memory_above_baseline_bytes(self) -> float | None:
        if self.measured_memory_per_device_bytes is None or self.memory_baseline_bytes is None:
            return None
        return self.measured_memory_per_device_bytes - self.memory_baseline_bytes

    def to_dict(self) -> dict[str, Any]:
        return {"encoding": self.encoding, "best": list(self.best), "added_for_split": self.added_for_split,
                "split_layers": list(self.split_layers), "n_split_layers": self.n_split_layers,
                "devices": self.plan.devices,
                "predicted_latency_s": self.predicted_latency_s, "simulated_latency_s": self.simulated_latency_s,
                "measured_latency_s": self.measured_latency_s, "analytic_throughput": self.analytic_throughput,
                "predicted_throughput": self.predicted_throughput, "measured_throughput": self.measured_throughput,
                "predicted_memory_per_device_bytes": self.predicted_memory_per_device_bytes,
                "measured_memory_per_device_bytes": self.measured_memory_per_device_bytes,
                "memory_baseline_bytes": self.memory_baseline_bytes,
                "measured_memory_above_baseline_bytes": self.measured_memory_above_baseline_bytes,
                "predicted_energy_per_device_j": self.predicted_energy_per_device_j,
                "measured_energy_per_device_j": self.measured_energy_per_device_j,
                "max_abs_err": self.max_abs_err, "outputs_checked": self.outputs_checked,
                "notes": list(self.notes), "plan": self.plan.to_dict(), "run": self.run.to_dict()}


# ---- the parts ------------------------------------------------------------------------------------

def worker_names(count: int) -> list[str]:
    """The local workers' device names (those of the built-in ``local`` cluster)."""
    return [f"local-cpu{i}" for i in range(count)]


def split_layers(plan: Plan) -> tuple[str, ...]:
    """Layers of ``plan`` cut into at least two shards on distinct devices (LOP splits), in order."""
    return tuple(name for name, where in plan.placements().items()
                 if not isinstance(where, str) and len({s.device for s in where}) >= 2)


def _plan_key(plan: Plan) -> str:
    """What makes two plans the same mapping: assign and combine."""
    assign = {k: v if isinstance(v, str) else [s.to_dict() for s in v] for k, v in plan.assign.items()}
    return json.dumps({"assign": assign, "combine": {k: c.to_dict() for k, c in plan.combine.items()}},
                      sort_keys=True)


@dataclass
class PickedPlan:
    """A plan picked from one exploration's Pareto set, and why."""

    plan: Plan
    best: tuple[str, ...]            # objectives it is best for; empty when added_for_split
    added_for_split: bool = False


def pick_best_plans(result: ExploreResult, best_of: tuple[str, ...] = BEST_OF,
                    ensure_split: bool = True) -> list[PickedPlan]:
    """The Pareto plan with the lowest value of each objective in ``best_of`` (first on ties), one
    entry per distinct mapping; if none splits a layer and ``ensure_split``, also the best-latency
    plan that does (marked ``added_for_split``), when the Pareto set has one."""
    names = result.options.objectives
    missing = [o for o in best_of if o not in names]
    if missing:
        raise HetsplitError(f"the exploration minimized {list(names)}, not {missing}: explore with those objectives")
    picked: dict[str, PickedPlan] = {}
    for obj in best_of:
        i = int(result.front[:, names.index(obj)].argmin())
        key = _plan_key(result.plans[i])
        if key in picked:
            picked[key].best += (obj,)
        else:
            picked[key] = PickedPlan(result.plans[i], (obj,))
    out = list(picked.values())
    if ensure_split and not any(split_layers(p.plan) for p in out):
        with_split = [i for i, pl in enumerate(result.plans) if split_layers(pl)]
        if with_split:
            col = names.index("latency") if "latency" in names else 0
            i = min(with_split, key=lambda j: result.front[j, col])
            out.append(PickedPlan(result.plans[i], (), True))
    return out


def idle_worker_rss_bytes() -> int | None:
    """Peak RSS (VmHWM) of an idle rank started as the runtime starts ranks (forked by its zygote, else a
    fresh process) that imports what a mapping worker imports (interpreter, numpy, torch, onnxruntime,
    the runtime), with no model loaded; None where it cannot be measured."""
    from hetsplit.runtime.zygote import idle_rank_peak_rss_bytes

    forked = idle_rank_peak_rss_bytes()
    if forked is not None:
        return forked
    code = ("import onnxruntime, hetsplit.runtime.worker\n"
            "from hetsplit.runtime.process import limit_threads, peak_rss_bytes\n"
            "limit_threads()\n"
            "print(peak_rss_bytes())\n")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
        return int(out.stdout.split()[-1])
    except (subprocess.SubprocessError, OSError, ValueError):
        return None


def energy_unavailable_reason() -> str:
    """Why the runtime reads no CPU energy here (the CPU meter's own words)."""
    from hetsplit.costs.meters import describe, meter_for

    return describe(meter_for("cpu"))


def measured_row(label: str, pick: PickedPlan, run: HereComparison, baseline: int | None) -> HybridRunRow:
    """One picked plan's prediction (its explored metrics and the run's re-costing) beside its run."""
    m = pick.plan.metrics
    if m is None:
        raise HetsplitError(f"{label}: an explored plan has no metrics; explore() fills them")
    devices = run.report.devices
    notes = list(run.notes)
    reported = [d.peak_rss_bytes for d in devices]
    measured_mem = float(max(reported)) if reported and all(reported) else None
    if measured_mem is None:
        notes.append("memory: not measured (a worker reported no peak RSS)")
    else:
        notes.append("memory: measured is the largest worker's peak RSS (VmHWM), interpreter, torch and onnxruntime "
                     "included" + ("" if baseline is None else
                                   f"; an idle process with those imports peaks at {baseline / 1e6:.1f} MB"))
    energy = [d.energy_j for d in devices]
    known = [e for e in energy if e is not None]
    measured_energy = max(known) if energy and len(known) == len(energy) else None
    if measured_energy is None:
        notes.append(f"energy: not measured ({energy_unavailable_reason()}); the predicted value rests on the "
                     "profile's assumed power per busy core")
    return HybridRunRow(
        encoding=label, best=pick.best, added_for_split=pick.added_for_split, plan=pick.plan,
        split_layers=split_layers(pick.plan), predicted_latency_s=float(m.latency_s),
        simulated_latency_s=run.prediction.simulated_latency_s, measured_latency_s=run.measured_latency_s,
        analytic_throughput=float(m.throughput), predicted_throughput=run.predicted_throughput,
        measured_throughput=run.measured_throughput,
        predicted_memory_per_device_bytes=float(max(m.memory_per_device_bytes.values())),
        measured_memory_per_device_bytes=measured_mem, memory_baseline_bytes=None if baseline is None else float(baseline),
        predicted_energy_per_device_j=float(max(m.energy_per_device_j.values())),
        measured_energy_per_device_j=None if measured_energy is None else float(measured_energy),
        max_abs_err=run.max_abs_err, outputs_checked=run.outputs_checked, run=run, notes=notes)


def _label(encoding: str, splits: int) -> str:
    return f"advanced p={splits}" if encoding == "advanced" else encoding


# ---- the whole experiment -------------------------------------------------------------------------

def run_best_hybrid_plans(options: HybridRunOptions | None = None,
                          progress: Progress = _quiet) -> list[HybridRunRow]:
    """Explore ``options.model`` on ``options.workers`` local workers with every chromosome, run each
    chromosome's best-energy, best-memory and best-latency plans for real, and return predicted
    beside measured, one row per distinct plan (chromosome order, then BEST_OF order)."""
    from hetsplit.runtime import resolve_model

    opts = options or HybridRunOptions()
    graph, _ = resolve_model(opts.model)
    devices = worker_names(opts.workers)
    if opts.profile is None:
        progress(f"profiling {opts.model} here ({opts.profile_repeats} runs per layer, co-load as the run)")
        profile = profile_here(opts.model, opts.workers, repeats=opts.profile_repeats)
    elif isinstance(opts.profile, Profile):
        profile = opts.profile
    else:
        from hetsplit.costs import load_profile

        profile = load_profile(opts.profile)
    problem = workers_problem(graph, profile, devices)
    picks: list[tuple[str, PickedPlan]] = []
    for encoding, p in opts.chromosomes():
        label = _label(encoding, p)
        res = explore(problem, ExploreOptions(encoding=encoding, splits=max(p, 1), objectives=THESIS_OBJECTIVES,
                                              pop_size=opts.pop_size, generations=opts.generations, seed=opts.seed))
        chosen = pick_best_plans(res)
        progress(f"{label}: {len(res.plans)} Pareto plans, {len(chosen)} to run")
        picks += [(label, c) for c in chosen]
    if not any(split_layers(c.plan) for _, c in picks):
        raise HetsplitError(f"no explored plan of {opts.model} splits a layer across the {opts.workers} workers; "
                            "explore longer (HybridRunOptions.generations, pop_size) or with another seed")
    baseline = idle_worker_rss_bytes() if opts.baseline_rss else None
    rows = []
    for label, pick in picks:
        progress(f"{label}, best {'/'.join(pick.best) or '(split)'}: running on {len(pick.plan.devices)} workers "
                 f"({len(split_layers(pick.plan))} split layers)")
        with tempfile.TemporaryDirectory(prefix="hetsplit-hybrid-run-") as tmp:
            run_opts = MappingRunOptions(inputs=opts.inputs, latency_inputs=opts.latency_inputs,
                                         timeout_s=opts.timeout_s, profile=profile, run_dir=Path(tmp))
            run = run_mapping(opts.model, pick.plan, run_opts)
        if opts.profile is not None and not isinstance(opts.profile, Profile):
            run.prediction.profile_source = f"{opts.profile}: {run.prediction.profile_source}"
        rows.append(measured_row(label, pick, run, baseline))
    return rows
