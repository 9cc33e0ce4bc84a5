"""The thesis's experiments (seed 003, section 5): NSGA-II over hybrid vertical + LOP partitionings.

For AlexNet, VGG-16 and DenseNet-121 on the 8-board Jetson Xavier NX cluster (CPUs only, and CPUs +
GPUs = 16 PEs), with the analytical costs of hetsplit's device models:

- naive vs advanced chromosome (p = 2, 4, 6), the thesis's three objectives (energy per device,
  memory per device, latency), population x generations as configured (the thesis: 1000 x 100);
- vertical (SPE, Guo et al.) vs hybrid (advanced, p = 2);
- beyond the thesis: on (bottleneck, total energy), where the exact pipeline front exists (the
  ``pareto`` solver), the SPE GA's hypervolume gap to it and the hybrid GA's hypervolume beside it.

Every run of one (model, cluster) is scored against one shared reference point, so hypervolumes
compare. ``check_claims`` grades the claims of section 5.2 with numbers; ``report/hybrid_repro.py``
draws and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np

from hetsplit.costs.problem import SplitProblem
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

    @classmethod
    def quick(cls, models: tuple[str, ...] = MODELS) -> "HybridConfig":
        return cls(models=models, pop_size=100, generations=25)


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
    exact = np.array([[p.metrics.bottleneck_s, p.metrics.energy_j] for p in exact_plans if p.metrics.fits])
    progress(f"{model} {setting}: SPE and advanced p=2 on (bottleneck, energy) against {len(exact)} exact points")
    spe = _explore(problem, model, setting, "spe", 0, EXACT_OBJECTIVES, config)
    hyb = _explore(problem, model, setting, "advanced", 2, EXACT_OBJECTIVES, config)
    ref = _score([spe, hyb], (exact,))
    gap = ExactGap(model, setting, len(exact), hypervolume(exact, ref), hypervolume(spe.front, ref),
                   hypervolume(hyb.front, ref), len(spe.front), len(hyb.front))
    return gap, [spe, hyb]


def run(config: HybridConfig = HybridConfig(), progress: Progress = _quiet) -> HybridResults:
    """Every exploration of ``config`` (see the module docstring)."""
    runs: list[RunRecord] = []
    gaps: list[ExactGap] = []
    for model in config.models:
        for setting in config.settings:
            problem = load_problem(model, SETTINGS[setting])
            case: list[RunRecord] = []
            for encoding, splits in [("naive", 0)] + [("advanced", p) for p in config.splits] + [("spe", 0)]:
                progress(f"{model} {setting}: {_label(encoding, splits)} ({config.pop_size} x {config.generations})")
                case.append(_explore(problem, model, setting, encoding, splits, THESIS_OBJECTIVES, config))
            _score(case)
            runs += case
            if config.exact_gap:
                gap, extra = _exact_gap(problem, model, setting, config, progress)
                gaps.append(gap)
                runs += extra
    return HybridResults(config, runs, gaps)


# ---- the claims of section 5.2 -------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    claim: str
    verdict: str      # holds, partly, does not hold, not run
    evidence: str


def _grade(passed: int, total: int) -> str:
    if not total:
        return "not run"
    if passed == total:
        return "holds"
    return "partly" if 2 * passed >= total else "does not hold"


def _fmt(name: str, value: float) -> str:
    scale, unit = {"energy-per-device": (1e3, "mJ"), "memory-per-device": (1e-6, "MB"), "latency": (1e3, "ms")}.get(
        name, (1.0, ""))
    return f"{value * scale:.4g} {unit}".strip()


def _advanced(results: HybridResults, model: str, setting: str) -> list[RunRecord]:
    return [r for r in (results.run_of(model, setting, _label("advanced", p)) for p in results.config.splits) if r]


def _naive_beside_advanced(results: HybridResults) -> Iterator[tuple[str, str, RunRecord, list[RunRecord]]]:
    """(model, setting, the naive run, the advanced runs) of every case that has both."""
    for model, setting in results.cases():
        naive = results.run_of(model, setting, "naive")
        adv = _advanced(results, model, setting)
        if naive is not None and adv:
            yield model, setting, naive, adv


def claim_advanced_converges_faster(results: HybridResults) -> Claim:
    """Fig. 12, 13, 19, 20, 25, 26: the advanced chromosome converges faster and ends better."""
    passed, total, notes = 0, 0, []
    early = max(1, results.config.generations // 10)
    for model, setting, naive, adv in _naive_beside_advanced(results):
        best_adv_final = np.min([r.final for r in adv], axis=0)
        best_adv_early = np.min([r.best[early - 1] for r in adv], axis=0)
        wins_final = int((best_adv_final < naive.final).sum())
        wins_early = int((best_adv_early < naive.best[early - 1]).sum())
        hv_adv = max(r.hypervolume[-1] for r in adv)
        total += 1
        ok = wins_final == len(THESIS_OBJECTIVES) and wins_early == len(THESIS_OBJECTIVES)
        passed += ok
        notes.append(f"{model} {setting}: advanced better in {wins_early}/3 objectives at generation {early}, "
                     f"{wins_final}/3 at the end; hypervolume {hv_adv:.3f} vs naive {naive.hypervolume[-1]:.3f}")
    return Claim("The advanced chromosome converges faster than the naive one and ends with better energy, memory "
                 "and latency per device", _grade(passed, total), "; ".join(notes))


def claim_alexnet_cpu_ranks(results: HybridResults) -> Claim:
    """Fig. 12: AlexNet on CPUs, p = 2 ends best in energy and latency, p = 4 in memory."""
    adv = {r.label: r for r in _advanced(results, "alexnet", "cpu")}
    need = {"advanced p=2", "advanced p=4"}
    if not need <= set(adv):
        return Claim("AlexNet, CPUs: advanced p=2 ends lowest in energy and latency, p=4 in memory", "not run", "")
    finals = {k: r.final for k, r in adv.items()}
    winner = [min(finals, key=lambda k: finals[k][j]) for j in range(3)]
    checks = [winner[0] == "advanced p=2", winner[2] == "advanced p=2", winner[1] == "advanced p=4"]
    ev = "; ".join(f"{name}: " + ", ".join(f"{k.split()[-1]} {_fmt(name, finals[k][j])}" for k in sorted(finals))
                   + f" (lowest: {winner[j]})" for j, name in enumerate(THESIS_OBJECTIVES))
    return Claim("AlexNet, CPUs: advanced p=2 ends lowest in energy and latency per device, p=4 in memory",
                 _grade(sum(checks), 3), ev)


def claim_vertical_vs_hybrid(results: HybridResults, small: float = 0.25, big: float = 0.2) -> Claim:
    """Fig. 14, 21, 27: SPE beats hybrid (p = 2) on energy and latency by a small margin (here: hybrid
    at most ``small`` worse), hybrid wins memory by a big margin (here: at least ``big`` lower)."""
    passed, total, notes = 0, 0, []
    for model in results.config.models:
        spe, hyb = results.run_of(model, "cpu", "spe"), results.run_of(model, "cpu", "advanced p=2")
        if spe is None or hyb is None:
            continue
        r = hyb.final / spe.final
        ok = [1.0 <= r[0] <= 1 + small, r[1] <= 1 - big, 1.0 <= r[2] <= 1 + small]
        total += 3
        passed += sum(ok)
        notes.append(f"{model}: hybrid / vertical = energy {r[0]:.2f}, memory {r[1]:.2f}, latency {r[2]:.2f}")
    return Claim(f"CPUs: vertical (SPE) ends better than hybrid (p=2) in energy and latency by a small margin "
                 f"(<= {small:.0%}), hybrid wins memory per device by a big one (>= {big:.0%} lower)",
                 _grade(passed, total), "; ".join(notes))


def claim_gpus_do_not_help(results: HybridResults) -> Claim:
    """Sec. 5.2 (RQ3): adding the GPUs does not lower energy or memory per device after 100 generations."""
    passed, total, notes = 0, 0, []
    for model in results.config.models:
        best = {}
        for setting in ("cpu", "cpu+gpu"):
            rs = [r for r in results.runs if r.model == model and r.setting == setting and r.label != "spe"
                  and r.objectives == THESIS_OBJECTIVES]
            if rs:
                best[setting] = np.min([r.final for r in rs], axis=0)
        if len(best) < 2:
            continue
        ratio = best["cpu+gpu"] / best["cpu"]
        total += 2
        passed += int(ratio[0] >= 1.0) + int(ratio[1] >= 1.0)
        notes.append(f"{model}: CPU+GPU / CPU best = energy {ratio[0]:.2f}, memory {ratio[1]:.2f}, "
                     f"latency {ratio[2]:.2f}")
    return Claim("Adding the GPUs (16 PEs) does not lower the best energy or memory per device found",
                 _grade(passed, total), "; ".join(notes))


def claim_best_scores_are_advanced(results: HybridResults) -> Claim:
    """Sec. 5.2: every best score comes from an advanced chromosome."""
    passed, total, losers = 0, 0, []
    for model, setting, naive, adv in _naive_beside_advanced(results):
        best_adv = np.min([r.final for r in adv], axis=0)
        for j, name in enumerate(THESIS_OBJECTIVES):
            total += 1
            if best_adv[j] <= naive.final[j]:
                passed += 1
            else:
                losers.append(f"{model} {setting} {name}: naive {_fmt(name, naive.final[j])} < "
                              f"advanced {_fmt(name, best_adv[j])}")
    return Claim("Every best score (per model, cluster and objective) comes from an advanced chromosome",
                 _grade(passed, total), f"{passed}/{total} best scores from advanced chromosomes"
                 + (f"; exceptions: {'; '.join(losers)}" if losers else ""))


def check_claims(results: HybridResults) -> list[Claim]:
    return [claim_advanced_converges_faster(results), claim_alexnet_cpu_ranks(results),
            claim_vertical_vs_hybrid(results), claim_gpus_do_not_help(results),
            claim_best_scores_are_advanced(results)]
