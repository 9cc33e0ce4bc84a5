"""NSGA-II design space exploration over a chromosome encoding (thesis 4.2, Guo et al.'s SPE).

``explore(problem, options)`` runs NSGA-II (search/nsga2.py, on arrays, ask/tell) on one encoding
(search/encodings.py): every generation's offspring are evaluated in one call of the batch
evaluator, memory overflow is a constraint, and the result is the Pareto set as plans (with metrics
from the one evaluator) plus a per-generation history: the best value of each objective among
feasible individuals, the non-dominated front, evaluations so far. ``hypervolume`` scores fronts against a reference point.

Objectives (all minimized; any non-empty subset):
  energy-per-device   largest energy per inference of one device (J)    [thesis]
  memory-per-device   largest memory of one device (bytes)              [thesis]
  latency             one input through the plan (s)                    [thesis]
  throughput          inferences per second, as its bottleneck time (s)
  energy              total energy per inference (J)
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.limits import check_memory
from hetsplit.estimate.batch import BatchMetrics
from hetsplit.estimate.energy_known import require_known_energy
from hetsplit.plan.pareto import pareto_mask
from hetsplit.plan.types import Plan
from hetsplit.search.encodings import ENCODINGS, Encoding, make_encoding
from hetsplit.search.hypervolume import exact_hypervolume
from hetsplit.search.nsga2 import NSGA2, GASettings

OBJECTIVES: dict[str, Callable[[BatchMetrics], np.ndarray]] = {
    "energy-per-device": lambda m: m.energy_per_device_j.max(axis=1),
    "memory-per-device": lambda m: m.memory_per_device_bytes.max(axis=1),
    "latency": lambda m: m.latency_s,
    "throughput": lambda m: m.bottleneck_s,
    "energy": lambda m: m.energy_j,
}
THESIS_OBJECTIVES = ("energy-per-device", "memory-per-device", "latency")
OBJECTIVE_UNITS = {"energy-per-device": "J", "memory-per-device": "B", "latency": "s", "throughput": "s",
                   "energy": "J"}


def check_objectives(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Validate a non-empty subset of OBJECTIVES (no repeats)."""
    out = tuple(names)
    bad = [n for n in out if n not in OBJECTIVES]
    if bad or not out or len(set(out)) != len(out):
        raise HetsplitError(f"objectives {list(out)}: choose distinct names from {', '.join(OBJECTIVES)}")
    return out


def objective_matrix(batch: BatchMetrics, names: tuple[str, ...]) -> np.ndarray:
    """N x K objective values (minimized; non-finite values become 1e30)."""
    f = np.stack([OBJECTIVES[n](batch) for n in names], axis=1).astype(np.float64)
    return np.nan_to_num(f, nan=1e30, posinf=1e30)


def memory_violation(batch: BatchMetrics, capacity: np.ndarray) -> np.ndarray:
    """Largest memory overflow of a device as a fraction of its capacity (<= 0: fits)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        frac = batch.memory_per_device_bytes / capacity[None, :]
    return np.nan_to_num(frac.max(axis=1) - 1.0, nan=1e30, posinf=1e30)


@dataclass(frozen=True)
class ExploreOptions:
    """One NSGA-II exploration.

    encoding: naive, advanced, spe or ne; splits: p of the advanced chromosome; pop_size and
    generations as in the thesis (1000 x 100) or smaller; crossover_prob: probability that a mating
    is a uniform crossover; mutation_rate: per-gene reset probability (None: 1 / genes);
    mutation_prob: probability that an offspring is mutated at all; devices: spe and ne only, the
    cluster's first ``devices`` devices (None: all).
    """

    encoding: str = "advanced"
    splits: int = 2
    objectives: tuple[str, ...] = THESIS_OBJECTIVES
    pop_size: int = 100
    generations: int = 100
    seed: int = 0
    crossover_prob: float = 0.9
    mutation_rate: float | None = None
    mutation_prob: float = 1.0
    devices: int | None = None

    def __post_init__(self) -> None:
        if self.encoding not in ENCODINGS:
            raise HetsplitError(f"unknown encoding {self.encoding!r}; choose one of {', '.join(ENCODINGS)}")
        check_objectives(self.objectives)
        if self.pop_size < 2 or self.generations < 1:
            raise HetsplitError(f"need --pop >= 2 and --gens >= 1 (got {self.pop_size}, {self.generations})")


@dataclass
class Generation:
    """One generation of an exploration."""

    index: int                 # 1-based
    evaluations: int
    best: np.ndarray           # K: best value of each objective among feasible individuals (inf: none)
    front: np.ndarray          # F x K: the feasible non-dominated objective vectors


@dataclass
class ExploreResult:
    """The Pareto set as plans, the front's objective values and the history."""

    options: ExploreOptions
    plans: list[Plan]
    front: np.ndarray
    history: list[Generation] = field(default_factory=list)
    front_x: np.ndarray | None = None   # the chromosomes of ``plans``, row by row
    seconds: float = 0.0
    eval_seconds: float = 0.0
    setup_seconds: float = 0.0          # building the encoding (its template and cost tables)
    record_seconds: float = 0.0         # the per-generation history (best values and fronts)
    evaluations: int = 0
    genes: int = 0

    @property
    def library_seconds(self) -> float:
        """The rest of the run: the GA's selection, variation, duplicate removal and survival, and the
        final plans."""
        return max(0.0, self.seconds - self.setup_seconds - self.eval_seconds - self.record_seconds)

    @property
    def evaluations_per_s(self) -> float:
        return self.evaluations / self.eval_seconds if self.eval_seconds > 0 else float("inf")

    @property
    def best(self) -> np.ndarray:
        """G x K: the best feasible value of each objective per generation."""
        return np.array([g.best for g in self.history])

    def hypervolumes(self, ref: np.ndarray | None = None) -> np.ndarray:
        """Hypervolume per generation against ``ref`` (default: 1.1 x the worst front value seen)."""
        fronts = [g.front for g in self.history]
        return hypervolume_history(fronts, reference_point(fronts) if ref is None else ref)


def _generation(index: int, evaluations: int, ga: NSGA2) -> Generation:
    """A generation's record: the best feasible value of each objective and the feasible front (the
    survivors of rank 0: every other survivor is dominated by one of them, or all survivors are of
    rank 0), distinct rows in lexicographic order."""
    ok = ga.cv <= 0
    best = ga.f[ok].min(axis=0) if ok.any() else np.full(ga.f.shape[1], np.inf)
    return Generation(index, evaluations, best, np.unique(ga.f[ok & (ga.rank == 0)], axis=0))


def ga_settings(options: ExploreOptions) -> GASettings:
    """The NSGA-II operators' parameters of ``options``."""
    return GASettings(options.pop_size, options.crossover_prob, options.mutation_prob, options.mutation_rate)


def explore(problem: SplitProblem, options: ExploreOptions,
            on_generation: Callable[[int, int], None] | None = None,
            seeds: np.ndarray | None = None) -> ExploreResult:
    """Run NSGA-II with ``options`` on ``problem``; ``on_generation(done, total)`` reports progress;
    ``seeds``: chromosomes put in the first population (the rest random)."""
    require_known_energy(problem, "explore with an energy objective", any("energy" in o for o in options.objectives))
    t0 = time.perf_counter()
    enc = make_encoding(problem, options.encoding, options.splits, options.devices)
    need = explore_bytes(options.pop_size, enc.n_var, problem.graph.num_layers, problem.cluster.num_devices)
    check_memory(need, f"a population of {options.pop_size:,}", "give a smaller population (explore --pop)")
    setup = time.perf_counter() - t0
    capacity = problem.memory_bytes.astype(np.float64)
    latency = "latency" in options.objectives
    ga = NSGA2(enc.upper, ga_settings(options), options.seed, initial=seeds)
    history: list[Generation] = []
    eval_s = record_s = 0.0
    evaluations = 0
    for gen in range(1, options.generations + 1):
        x = ga.ask()
        t1 = time.perf_counter()
        if len(x):
            batch = enc.evaluate(x, latency=latency)
            f, cv = objective_matrix(batch, options.objectives), memory_violation(batch, capacity)
        else:                                   # no new distinct chromosome: the population stays
            f, cv = np.zeros((0, len(options.objectives))), np.zeros(0)
        evaluations += len(x)
        t2 = time.perf_counter()
        ga.tell(f, cv)
        t3 = time.perf_counter()
        history.append(_generation(gen, evaluations, ga))
        eval_s += t2 - t1
        record_s += time.perf_counter() - t3
        if on_generation is not None:
            on_generation(gen, options.generations)
    plans, front, front_x = _pareto_plans(enc, ga, options)
    return ExploreResult(options, plans, front, history, front_x, time.perf_counter() - t0,
                         eval_s, setup, record_s, evaluations, enc.n_var)


def explore_bytes(pop: int, genes: int, layers: int, devices: int) -> float:
    """About the memory NSGA-II takes with ``pop`` individuals, parents and offspring together: each
    one's chromosome twice (the array and its hashed copy for duplicates), the evaluator's per-layer,
    per-device arrays and ~1 kB of the rest."""
    return 2.0 * pop * (1e3 + 8.0 * (2 * genes + 4 * layers * devices))


def _pareto_plans(enc: Encoding, ga: NSGA2, options: ExploreOptions) -> tuple[list[Plan], np.ndarray, np.ndarray]:
    """The feasible non-dominated chromosomes of the final population as plans (one per distinct
    objective vector, in order of the first objective)."""
    f, x = ga.f, ga.x
    ok = np.flatnonzero(ga.cv <= 0)
    if not len(ok):
        raise HetsplitError("no explored plan fits the devices' memory; try more generations or a larger cluster")
    _, first = np.unique(f[ok], axis=0, return_index=True)
    cand = ok[first]
    cand = cand[pareto_mask(f[cand])]
    cand = cand[np.lexsort(f[cand].T[::-1])]
    params = {"objectives": list(options.objectives), "pop": options.pop_size, "gens": options.generations,
              "seed": options.seed}
    if options.encoding == "advanced":
        params["splits"] = options.splits
    front_x = np.asarray(x[cand], dtype=np.int64)
    plans = enc.plans(front_x, params)
    for plan in plans:
        plan.pareto = True
    return plans, f[cand], front_x


def hypervolume(front: np.ndarray, ref: np.ndarray, scale: np.ndarray | None = None) -> float:
    """Hypervolume of ``front`` (minimized objectives) up to ``ref``, each objective divided by
    ``scale`` first (default: ``ref``, so objectives of different units weigh alike)."""
    if not len(front):
        return 0.0
    s = np.asarray(ref if scale is None else scale, dtype=np.float64)
    pts = np.asarray(front, dtype=np.float64) / s
    inside = (pts < np.asarray(ref) / s).all(axis=1)
    if not inside.any():
        return 0.0
    return exact_hypervolume(pts[inside], np.asarray(ref) / s)


def reference_point(fronts: list[np.ndarray], margin: float = 1.1) -> np.ndarray:
    """A shared reference point: the worst value of each objective over ``fronts``, times ``margin``."""
    pts = [f for f in fronts if len(f)]
    if not pts:
        raise HetsplitError("no feasible front to take a reference point from")
    return np.vstack(pts).max(axis=0) * margin


def hypervolume_history(fronts: list[np.ndarray], ref: np.ndarray) -> np.ndarray:
    """The hypervolume of every generation's front against ``ref``."""
    return np.array([hypervolume(f, ref) for f in fronts])
