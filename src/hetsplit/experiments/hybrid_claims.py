"""The thesis's claims (seed 003) against ``experiments.hybrid``'s explorations and runs, each labelled.

Two kinds. The DSE claims of section 5.2 (Figs. 12-14, 19-21, 25-27) are about the analytical
fitness the searches minimize, which ours minimize too: ``direction`` claims on our explorations. The
hard numbers of Tables 2, 3 (4), 5, 6 and 7 are measurements on the Jetson cluster
(``experiments/thesis_tables.py`` says which are estimated, which measured here, and which cannot be
rehearsed). One band, ``thesis_tables.BAND``, for every number and for the DSE claims' "small margin".
"""

from __future__ import annotations

from typing import Iterator

import numpy as np

from hetsplit.experiments.claims import FAILS, HOLDS, Claim, ClaimSet, direction, grade, inconclusive
from hetsplit.experiments.hybrid import HybridResults, RunRecord
from hetsplit.experiments.thesis_tables import (BAND, TABLE2, WHERE, table2_claims, table4_claims,
                                                table7_claims)
from hetsplit.search.explore import THESIS_OBJECTIVES

PAPER = "Savva, hybrid CNN partitioning (MSc thesis, seed 003)"
# Tables 3, 5, 6: the chromosome whose best-memory plan measured the least memory
LOWEST_MEMORY = {"alexnet": "naive", "vgg16": "advanced p=2", "densenet121": "advanced p=2"}


def _fmt(name: str, value: float) -> str:
    scale, unit = {"energy-per-device": (1e3, "mJ"), "memory-per-device": (1e-6, "MB"), "latency": (1e3, "ms")}.get(
        name, (1.0, ""))
    return f"{value * scale:.4g} {unit}".strip()


def _advanced(results: HybridResults, model: str, setting: str) -> list[RunRecord]:
    labels = [f"advanced p={p}" for p in results.config.splits]
    return [r for r in (results.run_of(model, setting, label) for label in labels) if r]


def _naive_beside_advanced(results: HybridResults) -> Iterator[tuple[str, str, RunRecord, list[RunRecord]]]:
    """(model, setting, the naive run, the advanced runs) of every case that has both."""
    for model, setting in results.cases():
        naive = results.run_of(model, setting, "naive")
        adv = _advanced(results, model, setting)
        if naive is not None and adv:
            yield model, setting, naive, adv


def _not_run(key: str, text: str, where: str) -> Claim:
    return inconclusive(key, text, 0, "the explorations it needs were not run", where=where)


def _graded(key: str, text: str, where: str, passed: int, total: int, notes: list[str]) -> Claim:
    """A direction graded over its (model, cluster) checks; inconclusive when none could be made."""
    if not total:
        return _not_run(key, text, where)
    return direction(key, text, grade(passed, total), "; ".join(notes), where=where)


def claim_advanced_converges_faster(results: HybridResults) -> Claim:
    key, where = "advanced-faster", "Figs. 12, 13, 19, 20, 25, 26"
    text = ("The advanced chromosome converges faster than the naive one and ends with better energy, memory and "
            "latency per device (analytical fitness)")
    passed, total, notes = 0, 0, []
    early = max(1, results.config.generations // 10)
    for model, setting, naive, adv in _naive_beside_advanced(results):
        best_adv_final = np.min([r.final for r in adv], axis=0)
        best_adv_early = np.min([r.best[early - 1] for r in adv], axis=0)
        wins_final = int((best_adv_final < naive.final).sum())
        wins_early = int((best_adv_early < naive.best[early - 1]).sum())
        hv_adv = max(r.hypervolume[-1] for r in adv)
        total += 1
        passed += wins_final == len(THESIS_OBJECTIVES) and wins_early == len(THESIS_OBJECTIVES)
        notes.append(f"{model} {setting}: advanced better in {wins_early}/3 objectives at generation {early}, "
                     f"{wins_final}/3 at the end; hypervolume {hv_adv:.3f} vs naive {naive.hypervolume[-1]:.3f}")
    return _graded(key, text, where, passed, total, notes)


def claim_alexnet_cpu_ranks(results: HybridResults) -> Claim:
    key, where = "alexnet-cpu-ranks", "Fig. 12"
    text = "AlexNet, CPUs: advanced p=2 ends lowest in energy and latency per device, p=4 in memory (analytical)"
    adv = {r.label: r for r in _advanced(results, "alexnet", "cpu")}
    if not {"advanced p=2", "advanced p=4"} <= set(adv):
        return _not_run(key, text, where)
    finals = {k: r.final for k, r in adv.items()}
    winner = [min(finals, key=lambda k: finals[k][j]) for j in range(3)]
    checks = [winner[0] == "advanced p=2", winner[2] == "advanced p=2", winner[1] == "advanced p=4"]
    ev = "; ".join(f"{name}: " + ", ".join(f"{k.split()[-1]} {_fmt(name, finals[k][j])}" for k in sorted(finals))
                   + f" (lowest: {winner[j]})" for j, name in enumerate(THESIS_OBJECTIVES))
    return direction(key, text, grade(sum(checks), 3), ev, where=where)


def claim_vertical_vs_hybrid(results: HybridResults) -> Claim:
    """SPE beats hybrid (p = 2) on energy and latency by a small margin (hybrid at most the band worse),
    hybrid wins memory by a big one (at least the band lower)."""
    key, where, margin = "vertical-vs-hybrid", "Figs. 14, 21, 27", BAND.rel
    text = (f"CPUs: vertical (SPE) ends better than hybrid (p=2) in energy and latency by a small margin (<= "
            f"{margin:.0%}), hybrid wins memory per device by a big one (>= {margin:.0%} lower) (analytical)")
    passed, total, notes = 0, 0, []
    for model in results.config.models:
        spe, hyb = results.run_of(model, "cpu", "spe"), results.run_of(model, "cpu", "advanced p=2")
        if spe is None or hyb is None:
            continue
        r = hyb.final / spe.final
        total += 3
        passed += sum([1.0 <= r[0] <= 1 + margin, r[1] <= 1 - margin, 1.0 <= r[2] <= 1 + margin])
        notes.append(f"{model}: hybrid / vertical = energy {r[0]:.2f}, memory {r[1]:.2f}, latency {r[2]:.2f}")
    return _graded(key, text, where, passed, total, notes)


def claim_gpus_do_not_help(results: HybridResults) -> Claim:
    key, where = "gpus-do-not-help", "Sec. 5.2 (RQ3)"
    text = "Adding the GPUs (16 PEs) does not lower the best energy or memory per device found (analytical)"
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
    return _graded(key, text, where, passed, total, notes)


def claim_advanced_better_mostly(results: HybridResults) -> Claim:
    """Sec. 6: the advanced chromosome's DSE "finds better mappings in each objective in most cases"
    (of its analytical scores; the thesis's measured rankings are Tables 3, 5, 6)."""
    key, where = "advanced-better-mostly", "Sec. 6"
    text = ("The advanced chromosome's DSE ends with better scores than the naive one in most (model, cluster, "
            "objective) cases (analytical)")
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
    if not total:
        return _not_run(key, text, where)
    return direction(key, text, HOLDS if 2 * passed > total else FAILS,
                     f"{passed}/{total} best scores from advanced chromosomes"
                     + (f"; exceptions: {'; '.join(losers)}" if losers else ""), where=where)


def claim_lowest_memory_chromosome(results: HybridResults, model: str) -> Claim | None:
    """Tables 3, 5, 6: which chromosome's best-memory plan measured the least memory."""
    runs = [r for r in results.tables.memory_runs.get(model, []) if r.label != "unpartitioned"]
    if results.config.measured_picks != "each" or model not in LOWEST_MEMORY:
        return None
    expected = LOWEST_MEMORY[model]
    text = f"{model}: of the chromosomes' best-memory plans, {expected}'s measures the least memory per device"
    where = WHERE[model]
    ok = [r for r in runs if r.measured_bytes]
    if len(ok) < 2:
        return inconclusive(f"{model}-lowest-memory", text, len(ok), "fewer than two of the plans ran", needed=2,
                            where=where)
    lowest = min(ok, key=lambda r: r.peak)
    return direction(f"{model}-lowest-memory", text, lowest.label == expected,
                     "measured (peak RSS above an idle worker's): " + ", ".join(
                         f"{r.label} {r.peak / 1e6:.0f} MB (predicted {r.predicted_bytes / 1e6:.0f})"
                         for r in ok), "our search's best-memory plans are not the thesis's", where=where,
                     evaluations=len(ok))


def check_claims(results: HybridResults) -> ClaimSet:
    claims = [claim_advanced_converges_faster(results), claim_alexnet_cpu_ranks(results),
              claim_vertical_vs_hybrid(results), claim_gpus_do_not_help(results),
              claim_advanced_better_mostly(results)]
    t = results.tables
    models = [m for m in results.config.models if m in TABLE2 and m in t.unpartitioned]
    for model in models:
        claims += table2_claims(model, t)
    claims += table4_claims(t)
    for model in models:
        claims += table7_claims(model, t, results.config.measured_picks != "none")
        lowest = claim_lowest_memory_chromosome(results, model)
        if lowest is not None:
            claims.append(lowest)
    return ClaimSet(PAPER, tuple(claims), BAND, (
        "DSE claims are about the analytical fitness both searches minimize (ours: hetsplit's device models); "
        "the tables are measurements on 8 Jetson Xavier NX boards.",
        "Tables 3, 5 and 6 are compared figure by figure only for Table 4's plan (the only published one); their "
        "other rows belong to plans the thesis does not publish. Their memory columns are compared by ranking, on "
        "our search's best-memory plans run here.",
        "Measured here: peak memory (the runtime on this machine's CPU). Not rehearsable here, so inconclusive "
        "with no run: measured latency and energy (device emulation and shaped links would replay the "
        "xavier-nx-cpu model and the cluster's links, the estimator's own figures; no power meter)."))
