"""The thesis's experiments (seed 003, section 5): NSGA-II over hybrid vertical + LOP partitionings.

For AlexNet, VGG-16 and DenseNet-121 on the 8-board Jetson Xavier NX cluster (CPUs only, and CPUs +
GPUs = 16 PEs), with the analytical costs of hetsplit's device models:

- naive vs advanced chromosome (p = 2, 4, 6), the thesis's three objectives (energy per device,
  memory per device, latency), population x generations as configured (the thesis: 1000 x 100);
- vertical (SPE, Guo et al.) vs hybrid (advanced, p = 2);
- beyond the thesis: on (bottleneck, total energy), where the exact pipeline front exists (the
  ``pareto`` solver), the SPE GA's hypervolume gap to it and the hybrid GA's hypervolume beside it.

Every run of one (model, cluster) is scored against one shared reference point, so hypervolumes
compare. On the CPU cluster, each chromosome's best-memory plan (``measured_picks``) and the
unpartitioned model are also run by the runtime for their peak memory, and the thesis's hard numbers
are set beside ours (``experiments/thesis_tables.py``). ``experiments/hybrid_claims.py`` labels the
claims; ``report/hybrid_repro.py`` draws and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.experiments.thesis_tables import ThesisTables, estimate_tables, measure_memory
from hetsplit.plan.types import Plan
from hetsplit.search import make_partitioner
from hetsplit.search.explore import (THESIS_OBJECTIVES, ExploreOptions, explore, hypervolume, hypervolume_history,
                                     reference_point)
from hetsplit.workflow import load_problem

MODELS = ("alexnet", "vgg16", "densenet121")
SETTINGS = {"cpu": "jetson-xavier-nx-8-cpu", "cpu+gpu": "jetson-xavier-nx-8"}
EXACT_OBJECTIVES = ("throughput", "energy")      # the pareto solver's (bottleneck, energy per inference)
Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class HybridConfig:
    """What ``run`` explores; the defaults are the thesis's setting."""

    models: tuple[str, ...] = MODELS
    settings: tuple[str, ...] = ("cpu", "cpu+gpu")
    splits: tuple[int, ...] = (2, 4, 6)
    pop_size: int = 1000
    generations: int = 100
    seed: int = 0
    exact_gap: bool = True
    measured_picks: str = "each"     # run for peak memory: "each" chromosome's best-memory plan, the "best"
                                     # predicted one only, or "none"

    def __post_init__(self) -> None:
        if self.measured_picks not in ("each", "best", "none"):
            raise HetsplitError(f"HybridConfig.measured_picks = {self.measured_picks!r}: choose each, best or none")

    @classmethod
    def quick(cls, models: tuple[str, ...] = MODELS) -> "HybridConfig":
        return cls(models=models, pop_size=100, generations=25, measured_picks="best")


@dataclass
class RunRecord:
    """One exploration: its best value per objective per generation, final front and hypervolumes."""

    model: str
    setting: str
    label: str                     # "naive", "advanced p=2", "spe"
    objectives: tuple[str, ...]
    best: np.ndarray               # G x K
    front: np.ndarray              # F x K (final)
    fronts: list[np.ndarray]       # per generation
    seconds: float
    evaluations: int
    evaluations_per_s: float
    genes: int
    plans: list[Plan] = field(default_factory=list, repr=False)
    hypervolume: np.ndarray = field(default_factory=lambda: np.zeros(0))

    @property
    def final(self) -> np.ndarray:
        return self.best[-1]


@dataclass
class ExactGap:
    """A (model, cluster)'s exact vertical front beside the GA fronts, on (bottleneck, energy)."""

    model: str
    setting: str
    exact_points: int
    exact_hv: float
    spe_hv: float
    hybrid_hv: float
    spe_points: int
    hybrid_points: int

    @property
    def spe_gap(self) -> float:
        """1 - HV(SPE GA) / HV(exact): the share of the exact front's hypervolume the GA misses."""
        return 1.0 - self.spe_hv / self.exact_hv if self.exact_hv > 0 else float("nan")

    @property
    def hybrid_ratio(self) -> float:
        return self.hybrid_hv / self.exact_hv if self.exact_hv > 0 else float("nan")


@dataclass
class HybridResults:
    config: HybridConfig
    runs: list[RunRecord]
    gaps: list[ExactGap]
    tables: ThesisTables = field(default_factory=ThesisTables)

    def run_of(self, model: str, setting: str, label: str, objectives: tuple[str, ...] = THESIS_OBJECTIVES
               ) -> RunRecord | None:
        for r in self.runs:
            if (r.model, r.setting, r.label, r.objectives) == (model, setting, label, objectives):
                return r
        return None

    def cases(self) -> list[tuple[str, str]]:
        return list(dict.fromkeys((r.model, r.setting) for r in self.runs))


def _label(encoding: str, splits: int) -> str:
    return f"advanced p={splits}" if encoding == "advanced" else encoding


def _explore(problem: SplitProblem, model: str, setting: str, encoding: str, splits: int,
             objectives: tuple[str, ...], config: HybridConfig) -> RunRecord:
    res = explore(problem, ExploreOptions(encoding=encoding, splits=splits, objectives=objectives,
                                          pop_size=config.pop_size, generations=config.generations, seed=config.seed))
    return RunRecord(model, setting, _label(encoding, splits), objectives, res.best, res.front,
                     [g.front for g in res.history], res.seconds, res.evaluations, res.evaluations_per_s, res.genes,
                     res.plans)


def _score(runs: list[RunRecord], others: tuple[np.ndarray, ...] = ()) -> np.ndarray:
    """Hypervolumes of runs that share a problem and objectives, against one reference point (taken
    over their fronts and ``others``), which is returned."""
    ref = reference_point([f for r in runs for f in r.fronts] + list(others))
    for r in runs:
        r.hypervolume = hypervolume_history(r.fronts, ref)
    return ref


def _exact_gap(problem: SplitProblem, model: str, setting: str, config: HybridConfig,
               progress: Progress) -> tuple[ExactGap, list[RunRecord]]:
    exact_plans = make_partitioner("pareto").solve(problem)
    exact = np.array([[p.costed.bottleneck_s, p.costed.energy_j] for p in exact_plans if p.costed.fits])
    progress(f"{model} {setting}: SPE and advanced p=2 on (bottleneck, energy) against {len(exact)} exact points")
    spe = _explore(problem, model, setting, "spe", 0, EXACT_OBJECTIVES, config)
    hyb = _explore(problem, model, setting, "advanced", 2, EXACT_OBJECTIVES, config)
    ref = _score([spe, hyb], (exact,))
    gap = ExactGap(model, setting, len(exact), hypervolume(exact, ref), hypervolume(spe.front, ref),
                   hypervolume(hyb.front, ref), len(spe.front), len(hyb.front))
    return gap, [spe, hyb]


def memory_picks(case: list[RunRecord], which: str) -> list[tuple[str, Plan]]:
    """(chromosome, its best-memory Pareto plan) of a case's hybrid explorations: each one's, or ("best")
    the one the estimator says is lowest, or none."""
    col = THESIS_OBJECTIVES.index("memory-per-device")
    picks = [(r.label, r.plans[int(r.front[:, col].argmin())], float(r.front[:, col].min()))
             for r in case if r.label != "spe" and r.plans]
    if which == "best":
        picks = sorted(picks, key=lambda p: p[2])[:1]
    return [] if which == "none" else [(label, plan) for label, plan, _ in picks]


def run(config: HybridConfig = HybridConfig(), progress: Progress = _quiet) -> HybridResults:
    """Every exploration of ``config`` (see the module docstring)."""
    runs: list[RunRecord] = []
    gaps: list[ExactGap] = []
    cpu_problems = {m: load_problem(m, SETTINGS["cpu"]) for m in config.models}
    tables = estimate_tables(cpu_problems)
    for model in config.models:
        for setting in config.settings:
            problem = cpu_problems[model] if setting == "cpu" else load_problem(model, SETTINGS[setting])
            case: list[RunRecord] = []
            for encoding, splits in [("naive", 0)] + [("advanced", p) for p in config.splits] + [("spe", 0)]:
                progress(f"{model} {setting}: {_label(encoding, splits)} ({config.pop_size} x {config.generations})")
                case.append(_explore(problem, model, setting, encoding, splits, THESIS_OBJECTIVES, config))
            _score(case)
            runs += case
            if setting == "cpu" and config.measured_picks != "none":
                tables.memory_runs[model] = measure_memory(model, problem, memory_picks(case, config.measured_picks),
                                                           progress)
            if config.exact_gap:
                gap, extra = _exact_gap(problem, model, setting, config, progress)
                gaps.append(gap)
                runs += extra
    return HybridResults(config, runs, gaps, tables)
