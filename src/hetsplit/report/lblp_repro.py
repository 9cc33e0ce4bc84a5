"""Draw the IMC paper's reproduction (Bougioukou & Antonakopoulos, seed 001) from the runner's results.

Takes ``hetsplit.experiments.lblp`` results and writes, without searching or simulating anything:
fig2_resnet8.png, fig3_resnet18.png, fig_yolov8n.png (normalized processing rate and latency vs the
number of units, one line per algorithm), fig4_mix.png (ResNet-18 with the IMC/DPU mix varied),
table1.md (Table I: layers, weight area and utilization per unit), claims.md and results.json.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from hetsplit.experiments.claims import ClaimSet
from hetsplit.experiments.lblp import ALGORITHMS, TIE, Case, LblpResults, SearchComparison, Sweep, imc_units
from hetsplit.experiments.lblp_claims import TableOneSide, Unit, table_one
from hetsplit.report.claims import claims_section, write_claims_json
from hetsplit.outpath import write_text

FIGURE_NAMES = {"resnet8": "fig2_resnet8.png", "resnet18": "fig3_resnet18.png", "yolov8n": "fig_yolov8n.png"}
LABELS = {"lblp": "LBLP", "wb": "WB", "rr": "RR", "rd": "RD", "heft": "HEFT", "map-opt": "map-opt"}
STYLES = {"lblp": ("C3", "o", "-"), "wb": ("C0", "s", "-"), "rr": ("C2", "^", "-"), "rd": ("C1", "v", "-"),
          "heft": ("C4", "D", "--"), "map-opt": ("k", "x", ":")}
FORMAT = "hetsplit.lblp-repro/1"
LATENCY_TITLE = "(b) latency of one input / min"
SETUP_NOTES = [
    "Numbers come from hetsplit's discrete-event simulator with the IMC emulator's unit models "
    "(src/hetsplit/cluster/presets/imce-imc.yaml, imce-dpu.yaml, imce-ipi.yaml); their cost figures are stated "
    "assumptions, not the paper's measurements. The paper publishes normalized curves only, so its absolute "
    "rates and latencies cannot be compared; factors, utilizations and trends are what is checked.",
    "Processing rate: steady-state throughput of a saturated stream (the estimator's simulator). Latency: one "
    "input alone, the estimator's closed form, what the planners report; the median latency of inputs fed at "
    "the mapping's own rate (one every max(closed-form bottleneck, 1 / simulated rate)) is beside it in "
    "results.json and the tables. Normalized as the paper does: rate / the highest rate over all algorithms and "
    "unit counts of the model, latency / the lowest.",
    "Units: N = IMC + DPU with DPU = max(1, round(N x d / L)), d the model's layers whose fastest unit is a DPU, "
    "L its layers; so at N = L every unit can hold exactly one layer. A layer's processing type is the unit "
    "type that runs it fastest (with these cost models some small convolutions, e.g. ResNet-8's stem and "
    "downsample, run faster on a DPU than through the IMC unit's I/O).",
    "RD: the mean over its seeds (the figures shade min to max). HEFT and map-opt are not in the paper; "
    "map-opt is a search with a time budget per case.",
    "YOLOv8n: hetsplit's grouping has 87 layers (conv + activation fused, etc.); the paper counts 233 ONNX nodes.",
]


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ordered(algorithms: list[str]) -> list[str]:
    return [a for a in ALGORITHMS if a in algorithms] + [a for a in algorithms if a not in ALGORITHMS]


def _draw_algorithm(ax, cases: list[Case], algorithm: str, value, label: str, style=None) -> None:
    """One line over the cases' unit counts; several runs (RD seeds): their mean, shaded min to max."""
    cases = [c for c in cases if c.has(algorithm)]
    xs = [c.units for c in cases]
    vals = [[value(r) for r in c.runs_of(algorithm)] for c in cases]
    color, marker, line = style or STYLES.get(algorithm, ("C7", ".", "-"))
    ax.plot(xs, [sum(v) / len(v) for v in vals], line, color=color, marker=marker, ms=4, lw=1.2, label=label)
    if any(len(v) > 1 for v in vals):
        ax.fill_between(xs, [min(v) for v in vals], [max(v) for v in vals], color=color, alpha=0.15, lw=0)


def _finish_axes(axes, xs: list[int]) -> None:
    log = max(xs) / max(min(xs), 1) > 16
    for ax in axes:
        if log:
            ax.set_xscale("log", base=2)
        ax.set_xticks(xs, [str(x) for x in xs], fontsize=7)
        ax.set_xlabel("number of units (IMC + DPU)")
        ax.grid(True, alpha=0.3)


def plot_sweep(sweep: Sweep, path: Path) -> Path:
    """Fig. 2 / 3: normalized processing rate (a) and latency (b) against the number of units."""
    plt = _pyplot()
    top, low = sweep.max_rate(), sweep.min_latency()
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    algorithms = _ordered(list(dict.fromkeys(x for c in sweep.cases for x in c.algorithms)))
    for alg in algorithms:
        _draw_algorithm(a, sweep.cases, alg, lambda r: r.rate / top, LABELS.get(alg, alg))
        _draw_algorithm(b, sweep.cases, alg, lambda r: r.unloaded_latency_s / low, LABELS.get(alg, alg))
    if "lblp" in algorithms:
        _draw_algorithm(b, sweep.cases, "lblp", lambda r: r.latency_s / low, "LBLP, fed at its rate",
                        ("0.5", "", "-."))
    a.set_ylabel("normalized processing rate")
    a.set_title("(a) processing rate / max", fontsize=9)
    b.set_ylabel("normalized latency")
    b.set_title(LATENCY_TITLE, fontsize=9)
    _finish_axes((a, b), [c.units for c in sweep.cases])
    a.legend(fontsize=7)
    fig.suptitle(f"{sweep.model}: {sweep.layers} layers, {sweep.dpu_layers} on DPUs; "
                 f"DPUs = max(1, round(N x {sweep.dpu_layers}/{sweep.layers}))", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_mix(cases: list[Case], path: Path) -> Path:
    """Fig. 4: normalized rate and latency against the number of units, a line per (algorithm, DPUs)."""
    plt = _pyplot()
    top = max(r.rate for c in cases for r in c.runs)
    low = min(r.unloaded_latency_s for c in cases for r in c.runs)
    fig, (a, b) = plt.subplots(1, 2, figsize=(11, 4.2), dpi=110)
    dpus = sorted({c.dpus for c in cases})
    for alg in _ordered(list(dict.fromkeys(x for c in cases for x in c.algorithms))):
        line = STYLES.get(alg, ("", "o", "-"))
        for k, d in enumerate(dpus):
            group = [c for c in cases if c.dpus == d]
            style = (f"C{k}", line[1], line[2])
            label = f"{LABELS.get(alg, alg)}, {d} DPU"
            _draw_algorithm(a, group, alg, lambda r: r.rate / top, label, style)
            _draw_algorithm(b, group, alg, lambda r: r.unloaded_latency_s / low, label, style)
    a.set_ylabel("normalized processing rate")
    b.set_ylabel("normalized latency")
    a.set_title("(a) processing rate / max", fontsize=9)
    b.set_title(LATENCY_TITLE, fontsize=9)
    _finish_axes((a, b), sorted({c.units for c in cases}))
    a.legend(fontsize=6, ncol=2)
    fig.suptitle(f"{cases[0].model}: IMC/DPU mix (colour: DPUs; line style: algorithm)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- tables --------------------------------------------------------------------------------------

def _units_row(units: tuple[Unit, ...], width: int, cell) -> str:
    return " | ".join([cell(u) for u in units] + ["(not listed)" if len(units) < width else ""] *
                      (width - len(units)))


def table1_side_by_side(sides: list[TableOneSide]) -> list[str]:
    """Table I, the paper's rows above ours per algorithm; each side's units by weights area, largest first
    (unit numbers are arbitrary on both sides, and node ids number different graphs)."""
    width = max(max(len(s.paper), len(s.ours)) for s in sides)  # the paper's 7 listed units pad to ours
    lines = ["| algorithm | row | " + " | ".join(f"unit {k}" for k in range(1, width + 1)) + " | mean |",
             "|---|---|" + "---|" * (width + 1)]
    for s in sides:
        name = LABELS.get(s.algorithm, s.algorithm)
        for who, units, mean in (("paper", s.paper, s.paper_mean_utilization),
                                 ("ours", s.ours, s.ours_mean_utilization))[0 if s.paper else 1:]:
            lines.append(f"| {name} | {who}: nodes | " + _units_row(units, width, lambda u: ", ".join(map(str, u.nodes))
                                                                     or "-") + " | |")
            lines.append(f"| {name} | {who}: weights area [%] | "
                         + _units_row(units, width, lambda u: f"{u.weights_pct:.1f}") + " | |")
            lines.append(f"| {name} | {who}: utilization [%] | "
                         + _units_row(units, width, lambda u: f"{u.utilization_pct:.1f}") + f" | {'-' if mean is None else f'{100 * mean:.1f}'} |")
    return lines


def table1_lines(case: Case, layer_names: list[str] | None = None) -> list[str]:
    """Table I as markdown: the paper's units beside ours, then the DPU units and our layer ids."""
    units = imc_units(case)
    lines = [f"# Table I: {case.model} on {case.cluster} ({case.imc} IMC + {case.dpus} DPU)", "",
             "Node ids: the paper's number its ONNX nodes, ours are 1-based in hetsplit's topological order (listed "
             "below). Weights area: the unit's weight bytes / the largest IMC unit's (as the paper normalizes). "
             "Utilization: the unit's steady-state busy share (busy time per input x the sustained rate). The "
             "paper's text lists 7 of its 8 IMC units; its means are over 8.", ""]
    lines += table1_side_by_side(table_one(case))
    lines += ["", "DPU units (layers; utilization %): "
              + "; ".join(f"{LABELS.get(a, a)}: " + ", ".join(
                  f"{u} [{', '.join(str(i + 1) for i in case.runs_of(a)[0].layers[u])}] "
                  f"{100 * case.runs_of(a)[0].utilization[u]:.1f}"
                  for u in case.runs_of(a)[0].utilization if u not in units) for a in case.algorithms)]
    if layer_names:
        lines += ["", "| id | layer |", "|---|---|"] + [f"| {i + 1} | {n} |" for i, n in enumerate(layer_names)]
    return lines


def _sweep_table(sweep: Sweep) -> list[str]:
    """Rates (inferences/s) and latencies (ms: one input, fed at its rate) per unit count and algorithm."""
    algs = _ordered(list(dict.fromkeys(x for c in sweep.cases for x in c.algorithms)))
    lines = [f"### {sweep.model} ({sweep.layers} layers, {sweep.dpu_layers} DPU-type)", "",
             "| N | IMC+DPU | " + " | ".join(f"{LABELS.get(a, a)} rate/s, ms, ms fed" for a in algs) + " |",
             "|---|---|" + "---|" * len(algs)]
    for c in sweep.cases:
        cells = [f"{c.rate(a):.4g}, {1e3 * c.latency(a):.4g}, {1e3 * c.loaded(a):.4g}" if c.has(a) else "-"
                 for a in algs]
        lines.append(f"| {c.units} | {c.imc}+{c.dpus} | " + " | ".join(cells) + " |")
    return lines + [""]


def claims_lines(results: LblpResults, claims: ClaimSet, searches: list[SearchComparison]) -> list[str]:
    lines = ["# Bougioukou & Antonakopoulos (IMC, LBLP): findings checked with hetsplit", ""]
    lines += claims_section(claims)
    if results.table is not None and any(s.paper for s in table_one(results.table)):
        lines += ["", "## Table I side by side", ""] + table1_side_by_side(table_one(results.table))
    lines += ["", "## Set-up", ""] + [f"- {n}" for n in SETUP_NOTES]
    cfg = results.config
    lines += [f"- This run: {cfg.inputs} inputs per simulation, RD over {cfg.rd_seeds} seeds, map-opt budget "
              f"{cfg.budget_s:g} s per case, ties within {100 * TIE:.1f}%; wall time {results.wall_s:.0f} s."]
    if results.missing:
        lines.append(f"- Not registered in this build, so not run: {', '.join(results.missing)}.")
    lines += ["", "## Where a search beats LBLP", ""] + [f"- {s.summary()}" for s in searches]
    for s in searches:
        up = sorted(s.better_rate(), key=lambda g: -g.rate_gain)
        if up:
            lines += ["", f"| model | cluster | {s.algorithm} rate gain | latency gain |", "|---|---|---|---|"]
            lines += [f"| {g.model} | {g.cluster} | {100 * g.rate_gain:+.1f}% | {100 * g.latency_gain:+.1f}% |"
                      for g in up]
    lines += ["", "## Measured values", ""]
    for sweep in results.sweeps:
        lines += _sweep_table(sweep)
    return lines


def results_dict(results: LblpResults, claims: ClaimSet, searches: list[SearchComparison]) -> dict:
    return {"format": FORMAT, "config": asdict(results.config), "missing": results.missing,
            "wall_s": results.wall_s, "claims": claims.to_dict(),
            "table1": [asdict(s) for s in table_one(results.table)] if results.table else [],
            "searches": [asdict(s) for s in searches],
            "sweeps": [asdict(s) for s in results.sweeps], "mix": [asdict(c) for c in results.mix],
            "table": asdict(results.table) if results.table else None, "table_layers": results.table_layers}


def write_report(out: Path, results: LblpResults, claims: ClaimSet,
                 searches: list[SearchComparison]) -> list[Path]:
    """Figures, table1.md, claims.md and results.json under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = [plot_sweep(s, out / FIGURE_NAMES.get(s.model, f"fig_{s.model}.png")) for s in results.sweeps]
    if results.mix:
        paths.append(plot_mix(results.mix, out / "fig4_mix.png"))
    if results.table:
        paths.append(out / "table1.md")
        write_text(paths[-1], "\n".join(table1_lines(results.table, results.table_layers)) + "\n")
    paths.append(out / "claims.md")
    write_text(paths[-1], "\n".join(claims_lines(results, claims, searches)) + "\n")
    paths.append(write_claims_json(out, claims))
    paths.append(out / "results.json")
    write_text(paths[-1], json.dumps(results_dict(results, claims, searches), indent=1, default=float))
    return paths
