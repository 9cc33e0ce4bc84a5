"""NSGA-II design space exploration over a chromosome encoding (thesis 4.2, Guo et al.'s SPE).

``explore(problem, options)`` runs pymoo's NSGA-II on one encoding (search/encodings.py): every
generation's population is evaluated in one call of the batch evaluator, memory overflow is a
constraint, and the result is the Pareto set as plans (with metrics from the one evaluator) plus a
per-generation history: the best value of each objective among feasible individuals, the
non-dominated front, evaluations so far. ``hypervolume`` scores fronts against a reference point.

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
from numba import njit
from pymoo.algorithms.moo.nsga2 import NSGA2
from pymoo.core.callback import Callback
from pymoo.core.problem import Problem
from pymoo.indicators.hv import HV
from pymoo.operators.crossover.ux import UniformCrossover
from pymoo.operators.sampling.rnd import IntegerRandomSampling
from pymoo.optimize import minimize

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.limits import check_memory
from hetsplit.estimate.batch import BatchMetrics
from hetsplit.plan.pareto import pareto_mask
from hetsplit.plan.types import Plan
from hetsplit.search.encodings import ENCODINGS, Encoding, make_encoding
from hetsplit.search.ga_operators import RandomResetMutation, RowDuplicates

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
        """The rest of the run: the GA library's selection, variation, survival and bookkeeping, and the
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


class _EncodedProblem(Problem):
    """pymoo's view of an encoding: integer genes, K objectives, one memory constraint."""

    def __init__(self, enc: Encoding, objectives: tuple[str, ...], capacity: np.ndarray):
        super().__init__(n_var=enc.n_var, n_obj=len(objectives), n_ieq_constr=1, xl=0, xu=enc.upper, vtype=int)
        self.enc, self.names, self.capacity = enc, objectives, capacity
        self.eval_seconds = 0.0
        self.evaluations = 0

    def _evaluate(self, x, out, *args, **kwargs):
        t0 = time.perf_counter()
        batch = self.enc.evaluate(np.asarray(x, dtype=np.int64), latency="latency" in self.names)
        out["F"] = objective_matrix(batch, self.names)
        out["G"] = memory_violation(batch, self.capacity)[:, None]
        self.eval_seconds += time.perf_counter() - t0
        self.evaluations += len(x)


class _Recorder(Callback):
    def __init__(self, total: int, on_generation: Callable[[int, int], None] | None):
        super().__init__()
        self.total, self.on_generation = total, on_generation
        self.history: list[Generation] = []
        self.seconds = 0.0

    def notify(self, algorithm):
        t0 = time.perf_counter()
        pop = algorithm.pop
        f, g = pop.get("F"), pop.get("G")
        ok = (g <= 0).all(axis=1)
        best = f[ok].min(axis=0) if ok.any() else np.full(f.shape[1], np.inf)
        front = _front(f[ok])
        self.history.append(Generation(algorithm.n_gen, algorithm.evaluator.n_eval, best, front))
        self.seconds += time.perf_counter() - t0
        if self.on_generation is not None:
            self.on_generation(algorithm.n_gen, self.total)


def _front(f: np.ndarray) -> np.ndarray:
    """The distinct non-dominated rows of ``f``, in lexicographic order (``pareto_mask`` of the unique
    rows, found in one compiled sweep: every generation of a 1000-individual run asks for one)."""
    if not len(f):
        return f.reshape(0, f.shape[1] if f.ndim == 2 else 0)
    uniq = np.unique(np.asarray(f, dtype=np.float64), axis=0)
    return uniq[_sorted_front_mask(uniq)]


@njit(cache=True)
def _sorted_front_mask(rows: np.ndarray) -> np.ndarray:
    """Non-dominated rows of distinct, lexicographically sorted ``rows`` (all minimized). A row that
    dominates another comes before it in that order, and a dominated row's dominator is dominated by,
    or is, a row of the front so far; so each row is compared with the front found before it only."""
    n, k = rows.shape
    keep = np.zeros(n, dtype=np.bool_)
    front = np.empty(n, dtype=np.int64)
    size = 0
    for i in range(n):
        dominated = False
        for m in range(size):
            j = front[m]
            le, lt = True, False
            for c in range(k):
                if rows[j, c] > rows[i, c]:
                    le = False
                    break
                if rows[j, c] < rows[i, c]:
                    lt = True
            if le and lt:
                dominated = True
                break
        if not dominated:
            keep[i] = True
            front[size] = i
            size += 1
    return keep


def initial_population(enc: Encoding, pop_size: int, seeds: np.ndarray | None, rng: np.random.Generator) -> np.ndarray:
    """``pop_size`` chromosomes: the distinct ``seeds`` first (at most ``pop_size``), then uniform
    random ones."""
    rows = np.zeros((0, enc.n_var), dtype=np.int64)
    if seeds is not None and len(seeds):
        rows = np.unique(np.asarray(seeds, dtype=np.int64).reshape(-1, enc.n_var), axis=0)[:pop_size]
    fill = rng.integers(0, enc.upper + 1, size=(pop_size - len(rows), enc.n_var))
    return np.concatenate([rows, fill]).astype(np.int64)


def nsga2(options: ExploreOptions, initial: np.ndarray | None = None) -> NSGA2:
    """pymoo's NSGA-II with the options' operators; ``initial``: the first population (else random)."""
    return NSGA2(pop_size=options.pop_size, sampling=IntegerRandomSampling() if initial is None else initial,
                 crossover=UniformCrossover(prob=options.crossover_prob),
                 mutation=RandomResetMutation(prob=options.mutation_prob, prob_var=options.mutation_rate),
                 eliminate_duplicates=RowDuplicates())


def explore(problem: SplitProblem, options: ExploreOptions,
            on_generation: Callable[[int, int], None] | None = None,
            seeds: np.ndarray | None = None) -> ExploreResult:
    """Run NSGA-II with ``options`` on ``problem``; ``on_generation(done, total)`` reports progress;
    ``seeds``: chromosomes put in the first population (the rest random)."""
    t0 = time.perf_counter()
    enc = make_encoding(problem, options.encoding, options.splits, options.devices)
    need = explore_bytes(options.pop_size, enc.n_var, problem.graph.num_layers, problem.cluster.num_devices)
    check_memory(need, f"a population of {options.pop_size:,}", "give a smaller population (explore --pop)")
    setup = time.perf_counter() - t0
    prob = _EncodedProblem(enc, options.objectives, problem.memory_bytes.astype(np.float64))
    initial = None
    if seeds is not None and len(seeds):
        initial = initial_population(enc, options.pop_size, seeds, np.random.default_rng(options.seed))
    recorder = _Recorder(options.generations, on_generation)
    res = minimize(prob, nsga2(options, initial), ("n_gen", options.generations), seed=options.seed,
                   callback=recorder, verbose=False)
    plans, front, front_x = _pareto_plans(enc, res, options)
    return ExploreResult(options, plans, front, recorder.history, front_x, time.perf_counter() - t0,
                         prob.eval_seconds, setup, recorder.seconds, prob.evaluations, enc.n_var)


def explore_bytes(pop: int, genes: int, layers: int, devices: int) -> float:
    """About the memory NSGA-II takes with ``pop`` individuals (measured: ~40 kB each for a small
    model, mostly the library's per-individual objects), parents and offspring together, each with its
    chromosome and the evaluator's per-layer, per-device arrays."""
    return 2.0 * pop * (40e3 + 8.0 * (genes + 4 * layers * devices))


def _pareto_plans(enc: Encoding, res, options: ExploreOptions) -> tuple[list[Plan], np.ndarray, np.ndarray]:
    """The feasible non-dominated chromosomes of the final population as plans (one per distinct
    objective vector, in order of the first objective)."""
    pop = res.pop
    f, g, x = pop.get("F"), pop.get("G"), pop.get("X")
    ok = np.flatnonzero((g <= 0).all(axis=1))
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
    return float(HV(ref_point=np.asarray(ref) / s)(pts[inside]))


def reference_point(fronts: list[np.ndarray], margin: float = 1.1) -> np.ndarray:
    """A shared reference point: the worst value of each objective over ``fronts``, times ``margin``."""
    pts = [f for f in fronts if len(f)]
    if not pts:
        raise HetsplitError("no feasible front to take a reference point from")
    return np.vstack(pts).max(axis=0) * margin


def hypervolume_history(fronts: list[np.ndarray], ref: np.ndarray) -> np.ndarray:
    """The hypervolume of every generation's front against ``ref``."""
    return np.array([hypervolume(f, ref) for f in fronts])
