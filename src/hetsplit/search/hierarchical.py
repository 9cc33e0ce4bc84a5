"""Multi-stage, two-level design space exploration (Guo et al., seed 004): analytical search, then
real measured runs.

K stages (the paper: K = ceil(log2 N)); stage k searches mappings on the cluster's first 2^k
devices (the last stage on all N). In each stage:

- level 1: NSGA-II with the analytical batch evaluator (``search.explore``), its first population
  seeded with the previous stage's measured Pareto plans;
- level 2: NSGA-II whose fitness is a *measured* run of each plan, its first population the
  previous stage's measured front and level 1's front (then level 1's other plans, then random).

Objectives (minimized): 1 / throughput, the largest memory of one device, the largest energy per
inference of one device, as measured. The measuring is not done here: the caller gives a
``PlanMeasurer`` (the workflow runs the plan with the runtime); this module touches no process. Every
plan is measured once (a cache keyed by its device per layer), and a wall-clock budget stops the
search between two measurements; the budget is shared out over the stages still to run when each
begins. A stage small enough to list (two devices) ends as soon as every one of its plans has run,
leaving the rest of the budget to the stages after it. ``stages=1, analytic=False`` is the paper's one-stage, non-hierarchical baseline (1s-non-SPE,
1s-non-NE with the ``ne`` encoding).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.plan.pareto import pareto_mask
from hetsplit.plan.types import Plan
from hetsplit.search.encodings import Encoding, LayerEncoding, SplitPointEncoding, make_encoding
from hetsplit.search.explore import ExploreOptions, explore
from hetsplit.search.nsga2 import NSGA2, GASettings

OBJECTIVES = ("throughput", "memory-per-device", "energy-per-device")
HIERARCHICAL_ENCODINGS = ("spe", "ne")
FAILED = 1e30                      # objective value of a plan whose run failed
SPACE_LISTED_MAX = 4096            # a stage's space of at most this many chromosomes is listed, to stop once all ran


@dataclass(frozen=True)
class OutputSpacing:
    """Seconds between successive outputs of a measured stream (what its throughput is measured over):
    their count, min, median and max (``n`` = 0: fewer than two outputs)."""

    n: int = 0
    min: float = 0.0
    median: float = 0.0
    max: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {"n": self.n} if self.n == 0 else {"n": self.n, "min": self.min, "median": self.median,
                                                   "max": self.max}


@dataclass(frozen=True)
class RunDetails:
    """What a measuring run recorded beside its figures: the time dilation of emulated devices (None:
    real speed), whether every output was verified, one input's latency, the inputs streamed and the
    spacing of their outputs."""

    dilation: float | None = None
    verified: bool = True
    latency_s: float | None = None
    inputs: int = 0
    interval_s: OutputSpacing = OutputSpacing()

    def to_dict(self) -> dict[str, Any]:
        return {"dilation": self.dilation, "verified": self.verified, "latency_s": self.latency_s,
                "inputs": self.inputs, "interval_s": self.interval_s.to_dict()}


@dataclass(frozen=True)
class Measurement:
    """What a real run of one plan measured (SI units); ``error`` when the run failed."""

    throughput: float = 0.0                 # inferences/s
    memory_per_device_bytes: float = 0.0    # the largest device's
    energy_per_device_j: float = 0.0        # the largest device's, per inference
    seconds: float = 0.0                    # wall time the measurement took
    error: str | None = None
    details: RunDetails = RunDetails()

    def to_dict(self) -> dict[str, Any]:
        """The measurement as JSON (the run's own details, e.g. its interval, beside the figures)."""
        return {"throughput": self.throughput, "memory_per_device_bytes": self.memory_per_device_bytes,
                "energy_per_device_j": self.energy_per_device_j, "seconds": self.seconds, "error": self.error,
                **self.details.to_dict()}

    def objectives(self) -> np.ndarray:
        """The three minimized objectives (FAILED for a failed run)."""
        if self.error is not None or not self.throughput > 0:
            return np.full(3, FAILED)
        return np.array([1.0 / self.throughput, self.memory_per_device_bytes, self.energy_per_device_j])


class PlanMeasurer(Protocol):
    """Runs one plan for real and says what it measured (never raises for a failed run)."""

    def __call__(self, plan: Plan) -> Measurement: ...


@dataclass(frozen=True)
class HierarchicalOptions:
    """One hierarchical exploration.

    stages: K (None: ceil(log2 N), the paper); analytic: run level 1 in every stage (False: only
    the measured level, the paper's one-stage baselines); analytic_pop x analytic_gens: level 1's
    NSGA-II; measured_pop: level 2's population (each individual a real run); budget_s: wall clock
    for the whole search; crossover_prob, mutation_prob: the paper's 0.5 and 0.2.
    """

    encoding: str = "spe"
    stages: int | None = None
    analytic: bool = True
    analytic_pop: int = 100
    analytic_gens: int = 50
    measured_pop: int = 10
    budget_s: float = 600.0
    seed: int = 0
    crossover_prob: float = 0.5
    mutation_prob: float = 0.2

    def __post_init__(self) -> None:
        if self.encoding not in HIERARCHICAL_ENCODINGS:
            raise HetsplitError(f"hierarchical exploration encodes with {' or '.join(HIERARCHICAL_ENCODINGS)}, "
                                f"not {self.encoding!r}")
        if self.stages is not None and self.stages < 1:
            raise HetsplitError(f"--stages {self.stages}: give 1 or more")
        if self.measured_pop < 2 or self.analytic_pop < 2 or self.analytic_gens < 1:
            raise HetsplitError("need populations of 2 or more and 1 or more analytic generations")
        if not self.budget_s > 0:
            raise HetsplitError(f"a budget of {self.budget_s} s: give a positive wall-clock budget")

    def stage_devices(self, num_devices: int) -> list[int]:
        """The devices searched in each stage: 2, 4, ... up to all of them."""
        k = self.stages if self.stages is not None else max(1, math.ceil(math.log2(max(2, num_devices))))
        return sorted({min(num_devices, 2 ** (i + 1)) for i in range(k - 1)} | {num_devices})


@dataclass
class MeasuredPoint:
    """One measured plan, in the order the search measured them."""

    t_s: float              # seconds since the search began, when the measurement ended
    stage: int              # 1-based
    devices: int            # devices the stage searched
    objectives: np.ndarray  # 1 / throughput, memory per device, energy per device
    plan: Plan
    measurement: Measurement


@dataclass
class StageRecord:
    """What one stage did."""

    stage: int
    devices: int
    carried: int = 0                # the previous stage's measured Pareto plans seeding this one
    analytic_front: int = 0         # level 1's Pareto plans
    analytic_seconds: float = 0.0
    measured: int = 0               # real runs (cache hits not counted)
    cached: int = 0                 # plans met again, answered from the cache without a run
    generations: int = 0            # level 2 generations completed
    seconds: float = 0.0


@dataclass
class HierarchicalResult:
    """The measured Pareto plans with their measurements (``measurements[i]`` is ``plans[i]``'s) and the
    history."""

    options: HierarchicalOptions
    plans: list[Plan]
    measurements: list[Measurement]
    front: np.ndarray
    points: list[MeasuredPoint]
    stages: list[StageRecord]
    seconds: float

    def best_over_time(self) -> tuple[np.ndarray, np.ndarray]:
        """(times, best-so-far objectives): after every measurement, the best value of each objective
        among the plans measured so far (failed runs count as FAILED)."""
        if not self.points:
            return np.zeros(0), np.zeros((0, 3))
        t = np.array([p.t_s for p in self.points])
        f = np.vstack([p.objectives for p in self.points])
        return t, np.minimum.accumulate(f, axis=0)


class _Clock:
    def __init__(self, budget_s: float):
        self.t0, self.budget_s = time.perf_counter(), budget_s

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.budget_s - self.elapsed()


class _OutOfTime(Exception):
    pass


def plan_key(plan: Plan) -> tuple:
    """A plan's device per layer (two chromosomes that decode to one plan share it)."""
    return tuple(sorted((layer, str(dev)) for layer, dev in plan.assign.items())) if plan.assign else \
        tuple((s.device, tuple(s.layers)) for s in plan.stages)


class _Measured:
    """The measuring level's bookkeeping: the cache, the points, the clock."""

    def __init__(self, measure: PlanMeasurer, clock: _Clock, on_point: Callable[[MeasuredPoint], None] | None):
        self.measure, self.clock, self.on_point = measure, clock, on_point
        self.cache: dict[tuple, MeasuredPoint] = {}
        self.hits = 0                        # plans answered from the cache
        self.points: list[MeasuredPoint] = []
        self.durations: list[float] = []     # wall time of each measurement, on the search's clock

    def expected_s(self) -> float:
        """How long the next measurement will likely take (the median of the last five)."""
        return float(np.median(self.durations[-5:])) if self.durations else 0.0

    def objectives(self, plan: Plan, stage: int, devices: int, deadline: float) -> np.ndarray:
        key = plan_key(plan)
        if key in self.cache:
            self.hits += 1
            return self.cache[key].objectives
        start = self.clock.elapsed()
        if start + self.expected_s() >= deadline:
            raise _OutOfTime
        m = self.measure(plan)
        self.durations.append(self.clock.elapsed() - start)
        point = MeasuredPoint(self.clock.elapsed(), stage, devices, m.objectives(), plan, m)
        self.cache[key] = point
        self.points.append(point)
        if self.on_point is not None:
            self.on_point(point)
        return point.objectives


def _measured_level(enc: Encoding, seeds: np.ndarray | None, opts: HierarchicalOptions, measured: _Measured,
                    stage: int, devices: int, deadline: float,
                    record: StageRecord) -> tuple[np.ndarray, np.ndarray]:
    """Level 2: NSGA-II whose fitness is a real run, until ``deadline`` (seconds on the clock); every
    chromosome it evaluated (cache hits too) and its objectives."""
    ga = NSGA2(enc.upper, GASettings(opts.measured_pop, opts.crossover_prob, opts.mutation_prob),
               opts.seed + stage, initial=seeds)
    xs, fs = [np.zeros((0, enc.n_var), np.int64)], [np.zeros((0, 3))]
    space = _space_keys(enc, stage, devices)
    while measured.clock.elapsed() < deadline:       # a generation of cache hits measures nothing new
        if space is not None and space <= measured.cache.keys():
            break                                      # every plan of the stage has run: nothing is left to find
        x = ga.ask()
        if not len(x):                                 # no offspring left that is not a duplicate
            break
        plans = enc.plans(x, {"stage": stage, "devices": devices})
        rows = []
        try:
            for p in plans:
                rows.append(measured.objectives(p, stage, devices, deadline))
        except _OutOfTime:
            xs.append(x[:len(rows)])
            fs.append(np.array(rows).reshape(-1, 3))
            return np.concatenate(xs), np.concatenate(fs)
        f = np.vstack(rows)
        xs.append(x)
        fs.append(f)
        ga.tell(f, (f[:, 0] >= FAILED).astype(np.float64))      # a failed run is infeasible
        record.generations += 1
    return np.concatenate(xs), np.concatenate(fs)


def _space_keys(enc: Encoding, stage: int, devices: int) -> set[tuple] | None:
    """The distinct plans (by ``plan_key``) of every chromosome of ``enc``, when there are at most
    ``SPACE_LISTED_MAX`` chromosomes (a small stage, e.g. two devices); None for a larger one."""
    if float(np.prod(enc.upper.astype(np.float64) + 1)) > SPACE_LISTED_MAX:
        return None
    every = np.array(list(itertools.product(*(range(int(u) + 1) for u in enc.upper))), np.int64)
    return {plan_key(p) for p in enc.plans(every.reshape(-1, enc.n_var), {"stage": stage, "devices": devices})}


def _analytic_level(problem: SplitProblem, opts: HierarchicalOptions, devices: int, seeds: np.ndarray | None,
                    stage: int) -> np.ndarray:
    """Level 1: NSGA-II on the analytical evaluator; the chromosomes of its Pareto plans."""
    ga_opts = ExploreOptions(encoding=opts.encoding, objectives=OBJECTIVES, pop_size=opts.analytic_pop,
                             generations=opts.analytic_gens, seed=opts.seed + stage, devices=devices,
                             crossover_prob=opts.crossover_prob, mutation_prob=opts.mutation_prob)
    front_x = explore(problem, ga_opts, seeds=seeds).front_x
    return front_x if front_x is not None else np.zeros((0, 0), np.int64)


def _front_rows(x: np.ndarray, f: np.ndarray) -> np.ndarray:
    """The distinct chromosomes of ``x`` whose measured objectives are non-dominated (failed runs out)."""
    ok = f[:, 0] < FAILED
    if not ok.any():
        return x[:0]
    x, f = x[ok], f[ok]
    return np.unique(x[pareto_mask(f)], axis=0)


def _final_front(points: list[MeasuredPoint]) -> tuple[list[MeasuredPoint], np.ndarray]:
    """The measured Pareto points over every stage (a plan on fewer devices is a plan on all of them),
    in order of throughput (best first); of plans measured equal, the first measured."""
    good = [p for p in points if p.objectives[0] < FAILED]
    if not good:
        return [], np.zeros((0, 3))
    _, first = np.unique(np.vstack([p.objectives for p in good]), axis=0, return_index=True)
    good = [good[i] for i in sorted(first)]
    f = np.vstack([p.objectives for p in good])
    keep = np.flatnonzero(pareto_mask(f))
    keep = keep[np.lexsort(f[keep].T[::-1])]
    for i in keep:
        good[i].plan.pareto = True
    return [good[i] for i in keep], f[keep]


def hierarchical_explore(problem: SplitProblem, measure: PlanMeasurer, options: HierarchicalOptions,
                         on_point: Callable[[MeasuredPoint], None] | None = None,
                         on_stage: Callable[[StageRecord], None] | None = None) -> HierarchicalResult:
    """Run the multi-stage two-level exploration of ``problem``'s plans, measuring with ``measure``."""
    require_known_energy(problem, "the hierarchical exploration (energy per device is one of its objectives)")
    clock = _Clock(options.budget_s)
    measured = _Measured(measure, clock, on_point)
    sizes = options.stage_devices(problem.num_devices)
    records: list[StageRecord] = []
    carried: np.ndarray | None = None      # the previous stage's measured front, as its chromosomes
    prev_enc: SplitPointEncoding | LayerEncoding | None = None
    for stage, devices in enumerate(sizes, start=1):
        record = StageRecord(stage, devices)
        start = clock.elapsed()
        enc = make_encoding(problem, options.encoding, devices=devices)
        assert isinstance(enc, (SplitPointEncoding, LayerEncoding))     # HIERARCHICAL_ENCODINGS: they widen
        seeds = prev_enc.widen(carried, devices) if carried is not None and prev_enc is not None else None
        record.carried = 0 if seeds is None else len(seeds)
        level2_seeds = [] if seeds is None else [seeds]
        if options.analytic:
            front_x = _analytic_level(problem, options, devices, seeds, stage)
            record.analytic_front, record.analytic_seconds = len(front_x), clock.elapsed() - start
            level2_seeds.append(front_x)
        share = clock.left() / (len(sizes) - stage + 1)
        deadline = clock.elapsed() + max(0.0, share)
        initial = np.concatenate(level2_seeds) if level2_seeds else None
        before, hits = len(measured.points), measured.hits
        x, f = _measured_level(enc, initial, options, measured, stage, devices, deadline, record)
        record.measured, record.cached = len(measured.points) - before, measured.hits - hits
        record.seconds = clock.elapsed() - start
        records.append(record)
        if on_stage is not None:
            on_stage(record)
        front_rows = _front_rows(x, f)
        if len(front_rows):
            carried, prev_enc = front_rows, enc
    best, front = _final_front(measured.points)
    return HierarchicalResult(options, [p.plan for p in best], [p.measurement for p in best], front, measured.points,
                              records, clock.elapsed())
