"""Figures, tables and claims.md of ``hetsplit reproduce hybrid`` (thesis, seed 003); computes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from hetsplit.experiments.claims import ClaimSet
from hetsplit.experiments.hybrid import EXACT_OBJECTIVES, HybridResults, RunRecord
from hetsplit.report.claims import claims_section, write_claims_json
from hetsplit.report.explore_plots import convergence_plot, hypervolume_plot
from hetsplit.search.explore import THESIS_OBJECTIVES
from hetsplit.outpath import write_text

THESIS_FIGURES = {("alexnet", "cpu"): "Fig. 12", ("alexnet", "cpu+gpu"): "Fig. 13", ("vgg16", "cpu"): "Fig. 19",
                  ("vgg16", "cpu+gpu"): "Fig. 20", ("densenet121", "cpu"): "Fig. 25", ("densenet121", "cpu+gpu"): "Fig. 26"}
VERTICAL_FIGURES = {"alexnet": "Fig. 14", "vgg16": "Fig. 21", "densenet121": "Fig. 27"}


def _chromosome_runs(results: HybridResults, model: str, setting: str) -> list[RunRecord]:
    return [r for r in results.runs if (r.model, r.setting) == (model, setting) and r.label != "spe"
            and r.objectives == THESIS_OBJECTIVES]


def write_figures(results: HybridResults, out: Path) -> list[Path]:
    paths = []
    for model, setting in results.cases():
        tag = f"{model}-{setting.replace('+', '-')}"
        runs = _chromosome_runs(results, model, setting)
        fig = THESIS_FIGURES.get((model, setting), "")
        title = f"{model}, {setting}: naive vs advanced chromosome ({fig} of the thesis)"
        paths.append(convergence_plot({r.label: r.best for r in runs}, THESIS_OBJECTIVES,
                                      out / f"convergence-{tag}.png", title))
        paths.append(hypervolume_plot({r.label: r.hypervolume for r in runs}, out / f"hypervolume-{tag}.png", title))
        spe, hyb = results.run_of(model, setting, "spe"), results.run_of(model, setting, "advanced p=2")
        if spe and hyb:
            paths.append(convergence_plot({"vertical (SPE)": spe.best, "hybrid (advanced p=2)": hyb.best},
                                          THESIS_OBJECTIVES, out / f"vertical-vs-hybrid-{tag}.png",
                                          f"{model}, {setting}: vertical vs hybrid ({VERTICAL_FIGURES.get(model, '')})"))
    for gap in results.gaps:
        tag = f"{gap.model}-{gap.setting.replace('+', '-')}"
        runs = [r for r in results.runs if (r.model, r.setting) == (gap.model, gap.setting)
                and r.objectives == EXACT_OBJECTIVES]
        paths.append(hypervolume_plot({r.label: r.hypervolume for r in runs}, out / f"exact-gap-{tag}.png",
                                      f"{gap.model}, {gap.setting}: GA vs the exact vertical front (bottleneck, energy)",
                                      exact=gap.exact_hv))
    return paths


def _runs_table(results: HybridResults) -> list[str]:
    lines = ["| model | PEs | chromosome | genes | energy/device (mJ) | memory/device (MB) | latency (ms) | "
             "hypervolume | time (s) | evaluations/s |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results.runs:
        if r.objectives != THESIS_OBJECTIVES:
            continue
        e, m, lat = r.final
        lines.append(f"| {r.model} | {r.setting} | {r.label} | {r.genes} | {e * 1e3:.4g} | {m / 1e6:.4g} | "
                     f"{lat * 1e3:.4g} | {r.hypervolume[-1]:.4f} | {r.seconds:.1f} | {r.evaluations_per_s:,.0f} |")
    return lines


def _gap_table(results: HybridResults) -> list[str]:
    if not results.gaps:
        return []
    lines = ["", "## Beyond the thesis: the GA against the exact vertical front", "",
             "Objectives (bottleneck time, energy per inference), where hetsplit's `pareto` solver gives the exact "
             "front of pipeline (vertical) plans. The SPE GA searches a subset of that space (devices in cluster "
             "order), so its gap is search error plus encoding restriction. The hybrid GA's plans split layers "
             "(LOP) and route tensors directly, so its hypervolume may exceed the vertical front's.", "",
             "| model | PEs | exact points | HV exact | HV SPE GA | SPE gap | HV hybrid GA (p=2) | hybrid / exact |",
             "|---|---|---|---|---|---|---|---|"]
    for g in results.gaps:
        lines.append(f"| {g.model} | {g.setting} | {g.exact_points} | {g.exact_hv:.4f} | {g.spe_hv:.4f} | "
                     f"{g.spe_gap:.2%} | {g.hybrid_hv:.4f} | {g.hybrid_ratio:.3f} |")
    return lines


def _memory_runs_table(results: HybridResults) -> list[str]:
    rows = [(m, r) for m, runs in results.tables.memory_runs.items() for r in runs]
    if not rows:
        return []
    lines = ["", "## Peak memory runs (the runtime on this machine's CPU, no throttling)", "",
             "| model | plan | predicted memory per device (MB) | measured peak RSS above an idle worker's (MB) |",
             "|---|---|---|---|"]
    for model, r in rows:
        got = f"{r.measured_bytes / 1e6:.0f}" if r.measured_bytes else f"failed: {r.error}"
        lines.append(f"| {model} | {r.label} | {r.predicted_bytes / 1e6:.0f} | {got} |")
    return lines


def claims_lines(results: HybridResults, claims: ClaimSet) -> list[str]:
    c = results.config
    lines = ["# Hybrid CNN partitioning (Savva, MSc thesis, seed 003): claims checked", "",
             *claims_section(claims), "", "## Set-up", "",
             f"NSGA-II, population {c.pop_size} x {c.generations} generations, seed {c.seed}; costs from hetsplit's "
             "device models of the Jetson Xavier NX CPU and GPU (the thesis used its own calibrated analytical model "
             "and AutoDiCE measurements on the boards).", ""]
    lines += ["## Final best values per run (thesis objectives)", ""] + _runs_table(results) + _gap_table(results)
    return lines + _memory_runs_table(results)


def results_dict(results: HybridResults, claims: ClaimSet) -> dict:
    runs = [{"model": r.model, "setting": r.setting, "chromosome": r.label, "objectives": list(r.objectives),
             "genes": r.genes, "final_best": r.final.tolist(), "hypervolume": r.hypervolume.tolist(),
             "seconds": r.seconds, "evaluations": r.evaluations, "evaluations_per_s": r.evaluations_per_s}
            for r in results.runs]
    gaps = [{**g.__dict__, "spe_gap": g.spe_gap, "hybrid_ratio": g.hybrid_ratio} for g in results.gaps]
    memory = {m: [r.__dict__ for r in runs] for m, runs in results.tables.memory_runs.items()}
    return {"config": results.config.__dict__, "runs": runs, "exact_gaps": gaps, "memory_runs": memory,
            "claims": claims.to_dict()}


def write_report(out: Path, results: HybridResults, claims: ClaimSet) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    paths = write_figures(results, out)
    md = out / "claims.md"
    write_text(md, "\n".join(claims_lines(results, claims)) + "\n")
    js = out / "results.json"
    write_text(js, json.dumps(results_dict(results, claims), indent=1, default=list))
    return [md, write_claims_json(out, claims), js] + paths
