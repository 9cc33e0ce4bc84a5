"""Guo et al.'s hierarchical DSE (seed 004) here: ResNet-101 over 8 emulated PEs, three searches.

The searches (``search.hierarchical``) get their measured fitness from ``RunMeasurer``: a real run
of the plan by hetsplit's runtime on this machine, one process per PE, each worker throttled to the
relative speed of the PE it stands for (``run --emulate-devices``: cgroup CPU quotas; the emulated
cluster runs ``dilation`` times slower than the real one, and the measured times are divided by it).
What a run gives the search:

- throughput: the inputs streamed through the workers, emulated (measured x dilation); few inputs
  (``MeasureOptions.inputs``), so each measurement also records the spread of the emulated time
  between successive outputs (``interval_s``: min, median, max) beside the throughput they give;
- memory per device: the largest worker's peak RSS above an idle worker's (interpreter, torch and
  onnxruntime: ``hybrid_run.idle_worker_rss_bytes``; a warm process's own RSS when its run began),
  that is the sub-model and its buffers;
- energy per device: no power meter reads here (no RAPL; the Jetson's INA3221 is not ours), so a
  device's energy per input is its measured busy time (emulated) times the power its cost model
  gives while computing, plus the energy its cost model gives for what it sends. The time is measured;
  the power is the model's. Where a meter reads, the runtime's energy is used instead.

A measurement is made cheap enough for a search to measure hundreds of plans: the ranks run in warm
processes reused from plan to plan (``runtime.pool``: start-up, imports and the verification's reference
outputs paid once, the plan's sub-models loaded anew each time), the split skips its probe run of each
sub-model (the run itself loads and runs them, and verifies the outputs), and a plan the search has
measured is not run again (``search.hierarchical``'s cache, keyed by the plan's device per layer).

The three experiments (``EXPERIMENTS``) share the wall-clock budget equally: 3s-2l-SPE (3 stages, 2
levels, split point encoding), 1s-non-SPE and 1s-non-NE (one stage, measured level only). The paper
ran each for 70 h with populations of 100 on four Jetson Xavier NX boards; here each runs minutes
with a population of ``measured_pop``, so the curves compare the searches' early behaviour, which
is where the paper's claims separate them.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.experiments.claims import FAILS, HOLDS, PARTLY, Claim, ClaimSet, direction, inconclusive
from hetsplit.graph.input_shapes import InputShapes
from hetsplit.plan.types import Plan
from hetsplit.runtime.report import DeviceRun
from hetsplit.search.hierarchical import (HierarchicalOptions, HierarchicalResult, Measurement, MeasuredPoint,
                                          OutputSpacing, PlanMeasurer, RunDetails, hierarchical_explore)

Progress = Callable[[str], None]
MODEL = "resnet101"
CLUSTER = "jetson-xavier-nx-4"      # 4 boards x (CPU + GPU) = 8 PEs
EXPERIMENTS: dict[str, HierarchicalOptions] = {
    "3s-2l-SPE": HierarchicalOptions(encoding="spe"),
    "1s-non-SPE": HierarchicalOptions(encoding="spe", stages=1, analytic=False),
    "1s-non-NE": HierarchicalOptions(encoding="ne", stages=1, analytic=False),
}


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class MeasureOptions:
    """How each plan is run: ``inputs`` streamed (the first ``latency_inputs`` one at a time),
    ``emulate_devices``: throttle workers to their PEs' speeds (False: run at this machine's speed),
    ``emulate_links``: shape the links between workers to the cluster's (slowed by the same dilation;
    pipeline plans only, so the reproduction leaves it off: its NE plans are mappings and every experiment
    must be measured alike); ``pool``: warm processes shared by the runs."""

    inputs: int = 4
    latency_inputs: int = 0
    timeout_s: float = 60.0
    emulate_devices: bool = True
    emulate_links: bool = False
    pool: bool = True          # run the ranks in warm processes (runtime.pool; not with emulate_links)

    def __post_init__(self) -> None:
        if self.pool and self.emulate_links:
            raise HetsplitError("link emulation needs a fresh process per rank: measure without the pool")


SCRATCH = "hetsplit-hierdse-"      # a run's scratch directory: SCRATCH + the measuring process's pid + "-"


def _shm_dir() -> str | None:
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


class RunMeasurer:
    """A ``PlanMeasurer``: runs a plan of ``problem`` for real on this machine (see the module doc)."""

    def __init__(self, model: str, problem: SplitProblem, options: MeasureOptions = MeasureOptions()):
        """``model`` is loaded at the input shapes ``problem``'s graph records (``--input-shape``)."""
        from hetsplit.cluster.examples import usable_cores
        from hetsplit.experiments.hybrid_run import idle_worker_rss_bytes
        from hetsplit.runtime.run import resolve_model
        from hetsplit.workflow import load_problem

        if options.emulate_links:
            from hetsplit.runtime.netem import emulation_available

            why = emulation_available()
            if why:
                raise HetsplitError(f"cannot shape the links between workers: {why} (run without link emulation)")
        self.problem, self.options = problem, options
        shapes = problem.graph.meta.get("input_shapes") or None
        self.graph, self.model_path = resolve_model(model, shapes)
        self.host = load_problem(model, "local", input_shapes=shapes) if options.emulate_devices else None
        self.cores = usable_cores()
        self.baseline_rss = idle_worker_rss_bytes() or 0
        c = problem.costs
        self.power_w = {t: float(c.energy_j[:, i].sum() / c.time_s[:, i].sum()) for i, t in enumerate(c.types)}
        self.pool = None
        if options.pool:
            from hetsplit.runtime.pool import WorkerPool

            self.pool = WorkerPool()
            self.pool.warm(problem.num_devices)

    def close(self) -> None:
        """End the warm processes (a measurer without a pool has none)."""
        if self.pool is not None:
            self.pool.close()

    def __enter__(self) -> "RunMeasurer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def emulation(self, plan: Plan):
        from hetsplit.runtime.device_emulation import plan_emulation

        return plan_emulation(plan, self.problem, self.host, self.cores) if self.host is not None else None

    def __call__(self, plan: Plan) -> Measurement:
        from hetsplit.runtime import load_manifest, run_manifest, split_model
        from hetsplit.runtime.measure import read_driver_doc
        from hetsplit.runtime.netem import LinkMatrix
        from hetsplit.runtime.run import RunOptions

        t0 = time.perf_counter()
        emu = self.emulation(plan)
        try:
            with tempfile.TemporaryDirectory(prefix=f"{SCRATCH}{os.getpid()}-", dir=_shm_dir()) as d:
                split_model(plan, self.graph, self.model_path, Path(d) / "split", check=False,
                            cluster=self.problem.cluster)
                manifest = load_manifest(Path(d) / "split")
                links = LinkMatrix.from_cluster(manifest, self.problem.cluster) if self.options.emulate_links else None
                run_dir = Path(d) / "run"
                report = run_manifest(manifest, RunOptions(
                    inputs=self.options.inputs, latency_inputs=self.options.latency_inputs,
                    timeout_s=self.options.timeout_s, devices=emu, pool=self.pool, links=links, run_dir=run_dir))
                driver = read_driver_doc(run_dir) or {}
                start_rss = {row.rank: _start_rss(run_dir, row.rank) for row in report.devices}
        except HetsplitError as exc:          # RuntimeFailure included: a failed run is a result
            return Measurement(seconds=time.perf_counter() - t0, error=str(exc))
        dilation = emu.dilation if emu is not None else 1.0
        memory = max(max(0.0, float(row.peak_rss_bytes or 0) - (start_rss[row.rank] or self.baseline_rss))
                     for row in report.devices)
        energy = max(self.device_energy(plan, d, dilation) for d in report.devices)
        return Measurement(throughput=report.throughput * dilation, memory_per_device_bytes=memory,
                           energy_per_device_j=energy, seconds=time.perf_counter() - t0,
                           details=RunDetails(dilation=emu.dilation if emu is not None else None,
                                              verified=report.verify is None or report.verify.ok,
                                              latency_s=report.latency_s / dilation, inputs=report.inputs,
                                              interval_s=output_intervals(driver, dilation)))

    def device_energy(self, plan: Plan, row: DeviceRun, dilation: float) -> float:
        """A device's energy per input: metered where the runtime read a meter, else its measured busy
        time (emulated) x its cost model's power, plus the cost model's energy of what it sends."""
        if row.energy_j is not None:
            return float(row.energy_j)
        name = row.device
        dev = self.problem.cluster.devices[self.problem.cluster.index(name)]
        power = self.power_w[dev.type]
        m = plan.metrics
        predicted_compute_j = power * m.compute_s_per_device.get(name, 0.0) if m is not None else 0.0
        sends_j = (m.energy_per_device_j.get(name, 0.0) - predicted_compute_j) if m is not None else 0.0
        return power * float(row.compute_mean_s) / dilation + max(0.0, sends_j)


def _start_rss(run_dir: Path, rank: int) -> float | None:
    """The RSS a warm process began its rank of the run with (None: a fresh process)."""
    try:
        return json.loads((run_dir / f"rank{rank}.json").read_text()).get("start_rss_bytes")
    except (OSError, ValueError):
        return None


def output_intervals(driver: dict, dilation: float) -> OutputSpacing:
    """The emulated seconds between successive outputs of the streamed inputs (what the throughput is
    measured over): their count, min, median and max."""
    k, t = int(driver.get("latency_inputs", 0)), driver.get("t_out", [])
    gaps = np.diff(t[k:]) / dilation if len(t) - k >= 2 else np.zeros(0)
    if not len(gaps):
        return OutputSpacing()
    return OutputSpacing(int(len(gaps)), float(gaps.min()), float(np.median(gaps)), float(gaps.max()))


def explore_measured(model: str, cluster: str, options: HierarchicalOptions, measure: MeasureOptions,
                     on_point: Callable[[MeasuredPoint], None] | None = None,
                     input_shapes: InputShapes | None = None) -> tuple[SplitProblem, HierarchicalResult]:
    """``hetsplit explore --hierarchical``: the exploration of ``model`` (its symbolic input dims fixed by
    ``input_shapes``) on ``cluster`` with real runs."""
    from hetsplit.workflow import load_problem

    problem = load_problem(model, cluster, input_shapes=input_shapes)
    with RunMeasurer(model, problem, measure) as measurer:
        return problem, hierarchical_explore(problem, measurer, options, on_point)


@dataclass(frozen=True)
class HierDseOptions:
    """The reproduction: ``budget_s`` of wall clock shared by the ``experiments``."""

    model: str = MODEL
    cluster: str = CLUSTER
    budget_s: float = 1200.0
    experiments: tuple[str, ...] = tuple(EXPERIMENTS)
    measured_pop: int = 6
    analytic_pop: int = 100
    analytic_gens: int = 50
    seed: int = 0
    measure: MeasureOptions = field(default_factory=MeasureOptions)

    def __post_init__(self) -> None:
        bad = [e for e in self.experiments if e not in EXPERIMENTS]
        if bad or not self.experiments:
            raise HetsplitError(f"experiments {bad or '[]'}: choose from {', '.join(EXPERIMENTS)}")
        if not self.budget_s > 0:
            raise HetsplitError(f"--budget {self.budget_s:g} s: give a positive budget")


@dataclass(frozen=True)
class Dilations:
    """The time dilations the measured runs used (each plan's own: its slowest PE sets it)."""

    median: float
    low: float
    high: float

    def to_dict(self) -> dict[str, float]:
        return {"dilation": self.median, "dilation_min": self.low, "dilation_max": self.high}


@dataclass
class HierDseResults:
    options: HierDseOptions
    runs: dict[str, HierarchicalResult]
    seconds: float
    layers: int                                       # the grouped layers the plans split between
    emulation: Dilations | None = None                # the runs' time dilations (None: no device emulation)


def experiment_options(name: str, options: HierDseOptions, budget_s: float) -> HierarchicalOptions:
    return replace(EXPERIMENTS[name], budget_s=budget_s, measured_pop=options.measured_pop,
                   analytic_pop=options.analytic_pop, analytic_gens=options.analytic_gens, seed=options.seed)


def run(options: HierDseOptions = HierDseOptions(), progress: Progress = _quiet,
        measurer: Callable[[SplitProblem], PlanMeasurer] | None = None) -> HierDseResults:
    """Run the experiments one after the other, each with its share of the budget (what is left when it
    starts, over the experiments still to run, and at least a quarter of an equal share: a search may
    end one measurement past its budget); ``measurer`` builds the fitness (default: RunMeasurer)."""
    from hetsplit.workflow import load_problem

    t0 = time.perf_counter()
    progress(f"costing {options.model} on {options.cluster}")
    problem = load_problem(options.model, options.cluster)
    measure = (measurer or (lambda p: RunMeasurer(options.model, p, options.measure)))(problem)
    runs: dict[str, HierarchicalResult] = {}
    with contextlib.ExitStack() as stack:
        if hasattr(measure, "close"):
            stack.callback(measure.close)       # a RunMeasurer's warm processes end with the runs
        for i, name in enumerate(options.experiments):
            left = options.budget_s - (time.perf_counter() - t0)
            n = len(options.experiments)   # what is left, but never less than a quarter of an equal share:
            share = max(left / (n - i), options.budget_s / n / 4)   # an earlier overrun starves no search
            progress(f"{name}: {share:.0f} s")

            def on_point(p: MeasuredPoint, name=name) -> None:
                f = p.objectives
                what = p.measurement.error or fmt_objectives(f)
                progress(f"  {name} stage {p.stage} ({p.devices} PEs) t={p.t_s:.0f} s: {what}")

            runs[name] = hierarchical_explore(problem, measure, experiment_options(name, options, share), on_point)
    return HierDseResults(options, runs, time.perf_counter() - t0, problem.num_layers, dilation_summary(runs))


def dilation_summary(runs: dict[str, HierarchicalResult]) -> Dilations | None:
    """The time dilations the measured runs used; None when no run emulated its devices."""
    d = [dilation for r in runs.values() for p in r.points if (dilation := p.measurement.details.dilation) is not None]
    if not d:
        return None
    return Dilations(float(np.median(d)), float(min(d)), float(max(d)))


# ---- claims -------------------------------------------------------------------------------------

OBJECTIVE_NAMES = ("throughput", "memory per device", "energy per device")
PAPER = "Guo et al., hierarchical DSE (seed 004)"
MIN_MEASURED = 30        # measured plans a search's curve needs before it backs a verdict


def best_at(result: HierarchicalResult, t_s: float) -> np.ndarray:
    """The best measured value of each objective found by ``t_s`` seconds (inf: none yet)."""
    t, best = result.best_over_time()
    k = np.searchsorted(t, t_s, side="right")
    return best[k - 1] if k else np.full(3, np.inf)


def time_to_reach(result: HierarchicalResult, target: np.ndarray) -> list[float | None]:
    """Per objective, when ``result`` first found a value at least as good as ``target`` (None: never)."""
    t, best = result.best_over_time()
    out: list[float | None] = []
    for k in range(3):
        hit = np.flatnonzero(best[:, k] <= target[k]) if np.isfinite(target[k]) else np.zeros(0, int)
        out.append(float(t[hit[0]]) if len(hit) else None)
    return out


def _verdict(better: int, worse: int) -> str:
    if better == 3:
        return HOLDS
    return PARTLY if better > worse else FAILS


def best_after(result: HierarchicalResult, n: int) -> np.ndarray:
    """The best measured value of each objective among the first ``n`` plans measured (inf: none)."""
    f = [p.objectives for p in result.points[:n]]
    return np.min(np.vstack(f), axis=0) if f else np.full(3, np.inf)


def _compare(fa: np.ndarray, fb: np.ndarray) -> tuple[list[str], list[str]]:
    """The objectives ``fa`` is better in, and worse in, than ``fb``."""
    return ([OBJECTIVE_NAMES[k] for k in range(3) if fa[k] < fb[k]],
            [OBJECTIVE_NAMES[k] for k in range(3) if fa[k] > fb[k]])


def measured_with_all_pes(result: HierarchicalResult) -> int:
    """Plans the search measured in its stage over all the PEs (its last)."""
    full = max((s.devices for s in result.stages), default=max((p.devices for p in result.points), default=0))
    return sum(p.devices == full for p in result.points)


def horizon_s(results: HierDseResults) -> float:
    """The search time every experiment had: the smallest budget share (a search ends before its
    share when its next run would not fit; a later one gets what an earlier one left)."""
    return min((r.options.budget_s for r in results.runs.values()), default=0.0)


def _counts(results: HierDseResults, names: tuple[str, ...]) -> str:
    return "; ".join(f"{n}: {len(results.runs[n].points)} plans measured ("
                     + ", ".join(f"stage {s.stage} ({s.devices} PEs) {s.measured}" for s in results.runs[n].stages) + ")"
                     for n in names)


def claim_spe_vs_ne(results: HierDseResults) -> Claim:
    """SPE against NE, one stage each, compared after the same number of measured plans."""
    key, text = "spe-beats-ne", "SPE finds better mappings than NE, which stalls in dominance resistant solutions"
    a, b = "1s-non-SPE", "1s-non-NE"
    if a not in results.runs or b not in results.runs:
        return inconclusive(key, text, 0, f"{a} or {b} was not run", needed=MIN_MEASURED, where="Sect. 5, Fig. 4")
    k = min(len(results.runs[a].points), len(results.runs[b].points))
    counts = _counts(results, (a, b))
    if k < MIN_MEASURED:
        return inconclusive(key, text, k, f"each search measured at least {k} plans ({counts}); a verdict compares "
                            f"them after the same number, at least {MIN_MEASURED}", needed=MIN_MEASURED,
                            where="Sect. 5, Fig. 4")
    fa, fb = best_after(results.runs[a], k), best_after(results.runs[b], k)
    better, worse = _compare(fa, fb)
    return direction(key, text, _verdict(len(better), len(worse)),
                     f"best after {k} measured plans each: {a} {fmt_objectives(fa)} vs {b} {fmt_objectives(fb)}; "
                     f"{a} better in {', '.join(better) or 'none'}" + (f", worse in {', '.join(worse)}" if worse else "")
                     + f" ({counts})", "", evaluations=2 * k, where="Sect. 5, Fig. 4")


def _better(horizon: float, hier: HierarchicalResult, single: HierarchicalResult) -> tuple[str, str]:
    fa, fb = best_at(hier, horizon), best_at(single, horizon)
    better, worse = _compare(fa, fb)
    return _verdict(len(better), len(worse)), (
        f"best by {horizon:.0f} s: 3s-2l-SPE {fmt_objectives(fa)} vs 1s-non-SPE {fmt_objectives(fb)}; 3s-2l-SPE better "
        f"in {', '.join(better) or 'none'}" + (f", worse in {', '.join(worse)}" if worse else ""))


def _sooner(horizon: float, hier: HierarchicalResult, single: HierarchicalResult) -> tuple[str, str]:
    reach = time_to_reach(hier, best_at(single, horizon))
    sooner = sum(1 for t in reach if t is not None and t < horizon)
    return _verdict(sooner, 3 - sooner), "3s-2l-SPE reached 1s-non-SPE's best " + "; ".join(
        f"{name} after {t:.0f} s" if t is not None else f"{name} never" for name, t in zip(OBJECTIVE_NAMES, reach)) \
        + f" (1s-non-SPE searched {horizon:.0f} s)"


HIERARCHY_CLAIMS = (
    ("hierarchy-better", "multiple stages and two levels find better mappings than one-stage SPE in the same search "
                         "time", _better),
    ("hierarchy-sooner", "the hierarchy accelerates the search: 3s-2l-SPE reaches one-stage SPE's final mappings "
                         "sooner", _sooner),
)


def claim_hierarchy(results: HierDseResults, key: str, text: str,
                    judge: Callable[[float, HierarchicalResult, HierarchicalResult], tuple[str, str]]) -> Claim:
    """3s-2l-SPE against 1s-non-SPE at the same search time; inconclusive unless the hierarchy's last stage
    (all PEs) and the one-stage search each measured ``MIN_MEASURED`` plans."""
    a, b = "3s-2l-SPE", "1s-non-SPE"
    where = "Sect. 5, Fig. 4"
    if a not in results.runs or b not in results.runs:
        return inconclusive(key, text, 0, f"{a} or {b} was not run", needed=MIN_MEASURED, where=where)
    last, single = measured_with_all_pes(results.runs[a]), len(results.runs[b].points)
    if min(last, single) < MIN_MEASURED:
        return inconclusive(key, text, min(last, single),
                            f"{a}'s last stage (all PEs) measured {last} plans, {b} {single} ({_counts(results, (a, b))}); "
                            f"a verdict needs at least {MIN_MEASURED} each", needed=MIN_MEASURED, where=where)
    verdict, evidence = judge(horizon_s(results), results.runs[a], results.runs[b])
    return direction(key, text, verdict, f"{evidence} ({_counts(results, (a, b))})", evaluations=len(results.runs[a].points) + single, where=where)


def check_claims(results: HierDseResults) -> ClaimSet:
    """The paper's claims (Sect. 5, Fig. 4), each a direction or, on too few measured plans, inconclusive."""
    return ClaimSet(PAPER, (claim_spe_vs_ne(results), *(claim_hierarchy(results, *c) for c in HIERARCHY_CLAIMS)),
                    notes=(f"A search's curve backs a verdict once it has measured at least {MIN_MEASURED} plans (five "
                           "generations of the default measured population); SPE and NE are compared after the same "
                           "number of measured plans, the hierarchy against one-stage SPE at the same search time, "
                           "with its last stage (all PEs) measured at least as often. Every verdict names the plans "
                           "each stage ran (a plan met again is answered from the search's cache and not counted).",))


def fmt_objectives(f: np.ndarray) -> str:
    """1 / throughput, bytes, joules as a reader wants them."""
    if not np.isfinite(f).all() or f[0] <= 0 or f[0] >= 1e30:
        return "(none measured)"
    return f"{1 / f[0]:.3g}/s, {f[1] / 1e6:.0f} MB, {f[2]:.3g} J"
