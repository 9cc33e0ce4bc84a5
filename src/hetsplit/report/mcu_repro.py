"""Figures, tables and claims of ``hetsplit reproduce mcu`` (Bochem et al., seed 002); computes nothing.

From ``hetsplit.experiments.mcu`` results it writes fig4_speedup_breakdown.png (speed-up lines over
latency bars split into compute / chip-to-chip / L2 / L3, per model), fig5_energy_latency.png
(energy vs latency per point), fig6_scaled_speedup.png (the 64-head variant on 1 .. 64 chips),
fig_tp_vs_pipeline.png, claims.md (the labelled claims, their counts first), claims.json
(``hetsplit.claims/1``, docs/claims.md) and results.json (every point with its
breakdown and per-chip costs, and the claims).
"""

from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from hetsplit.experiments.claims import ClaimSet  # noqa: E402
from hetsplit.experiments.mcu import WORKLOAD, McuResults, PipelineRow, Point  # noqa: E402
from hetsplit.jsonfile import json_safe  # noqa: E402
from hetsplit.report.claims import claims_section, write_claims_json  # noqa: E402
from hetsplit.outpath import write_text

FORMAT = "hetsplit.mcu-repro/1"
PART_LABELS = {"compute": "compute", "c2c": "chip-to-chip", "l2": "L2", "l3": "L3"}
PART_COLORS = {"compute": "C0", "c2c": "C3", "l2": "C2", "l3": "C1"}
FIG4 = (("tinyllama-ar", "(a)"), ("tinyllama-prompt", "(b)"), ("mobilebert", "(c)"))
FIG5 = ((("tinyllama-ar", "tinyllama64-ar"), "(a) TinyLlama autoregressive"),
        (("tinyllama-prompt", "tinyllama64-prompt"), "(b) TinyLlama prompt"), (("mobilebert",), "(c) MobileBERT"))
PAPER_POINTS = {"tinyllama-ar": {8: 26.1}, "tinyllama-prompt": {8: 9.9}, "mobilebert": {4: 4.7},
                "tinyllama64-ar": {64: 60.1}}
SETUP = [
    "Every number is hetsplit's: one Transformer block built from the paper's dimensions "
    "(graph/transformer_shapes.py), split by the tensor-parallel partitioner (heads and F over the chips, "
    "all-reduces in groups of 4) on the built-in siracusa-N clusters and costed by the estimator like any plan: "
    "latency, energy and throughput from its closed form, the Siracusa model (presets/siracusa.yaml) per chip with "
    "the model deployed in int8 (one byte per element, messages included), MIPI links (0.5 GB/s, 100 pJ/B) with one "
    "port per chip (links.ports: shared), and each chip's L3 regime from its own share of the weights "
    "(estimate/memory.py: resident / prefetched, i.e. double-buffered, with the loads on the chip's memory channel / "
    "streamed). The paper's numbers come from GVSoC; ours from an analytical model whose parameters are documented, "
    "stated assumptions, or (four of them) fitted each to one figure of the paper (the preset says which).",
    "Per block, as the paper reports: the block's problem says it is one of the model's blocks (ModelScope: TinyLlama "
    "8, MobileBERT 24), so a chip's regime is judged on its share of the whole model. Energy: N_c2c E_c2c + sum over "
    "chips (P T_comp + N_L3 E_L3 + N_L2 E_L2), T_comp being compute time.",
    "Reading the breakdown: the four parts follow the critical path of one simulated input (each job back to the one "
    "that let it start), so they add up to its latency. On a prefetched point, L3 is the part of the weight loads "
    "(double buffering: a block loads while the one before runs, the first again during the last) that the chip's own "
    "work does not hide.",
    "MobileBERT as the paper models it: E = F = 512, 4 heads, S = 268, one FFN, post-norm (the real MobileBERT's "
    "bottlenecks and stacked FFNs are not in the paper's description).",
]


def _save(fig, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def _bars(ax, points: list[Point]) -> None:
    """Each chip count's latency as stacked shares of its critical-path parts (the latency in ms on
    top), speed-up over one chip on a twin axis."""
    x = list(range(len(points)))
    bottom = [0.0] * len(points)
    for part, label in PART_LABELS.items():
        h = [100 * p.cost.breakdown_s[part] / p.cost.latency_s for p in points]
        ax.bar(x, h, bottom=bottom, color=PART_COLORS[part], label=label, width=0.6)
        bottom = [b + v for b, v in zip(bottom, h)]
    for i, p in enumerate(points):
        ax.annotate(f"{p.cost.latency_s * 1e3:.3g} ms", (i, 100), ha="center", va="bottom", fontsize=7,
                    xytext=(0, 2), textcoords="offset points")
    ax.set_xticks(x, [str(p.chips) for p in points])
    ax.set_xlabel("chips")
    ax.set_ylabel("share of the latency per block (%)")
    ax.set_ylim(0, 112)
    twin = ax.twinx()
    twin.plot(x, [p.speedup for p in points], "k-o", lw=1.5, label="speed-up (ours)")
    twin.plot(x, [p.chips for p in points], "k:", lw=1, label="linear")
    paper = PAPER_POINTS.get(points[0].workload, {})
    px = [i for i, p in enumerate(points) if p.chips in paper]
    if px:
        twin.plot(px, [paper[points[i].chips] for i in px], "r*", ms=12, label="paper")
    twin.set_ylim(0, 1.12 * max([p.speedup for p in points] + [v for v in paper.values()]))
    twin.set_ylabel("speed-up over 1 chip")
    twin.legend(fontsize=7, loc="center left")


def figure4(results: McuResults, out: Path) -> Path | None:
    panels = [(key, tag) for key, tag in FIG4 if len(results.series(key)) > 1]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.0), dpi=110, squeeze=False)
    for ax, (key, tag) in zip(axes[0], panels):
        _bars(ax, results.series(key))
        ax.set_title(f"{tag} {WORKLOAD[key].label}", fontsize=9)
    axes[0, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.18, 1.0))
    fig.suptitle("Fig. 4 (Bochem et al.): speed-up and breakdown of the latency per block (critical path)",
                 fontsize=10)
    return _save(fig, out / "fig4_speedup_breakdown.png")


def figure5(results: McuResults, out: Path) -> Path | None:
    panels = [(keys, title) for keys, title in FIG5 if any(results.series(k) for k in keys)]
    if not panels:
        return None
    fig, axes = plt.subplots(1, len(panels), figsize=(4.8 * len(panels), 3.8), dpi=110, squeeze=False)
    for ax, (keys, title) in zip(axes[0], panels):
        for key in keys:
            pts = results.series(key)
            scaled = WORKLOAD[key].scaled
            ax.plot([p.cost.latency_s * 1e3 for p in pts], [p.cost.energy_j * 1e3 for p in pts],
                    "o" if scaled else "x", color="C3", mfc="none" if scaled else None, ms=7,
                    label="64 heads" if scaled else "default")
            for p in pts:
                ax.annotate(str(p.chips), (p.cost.latency_s * 1e3, p.cost.energy_j * 1e3), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xscale("log")
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(ticker.NullFormatter())
        ax.set_xlabel("latency per block (ms)")
        ax.set_ylabel("energy per block (mJ)")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("Fig. 5 (Bochem et al.): energy vs latency (labels: chips)", fontsize=10)
    return _save(fig, out / "fig5_energy_latency.png")


def figure6(results: McuResults, out: Path) -> Path | None:
    series = {k: results.series(k) for k in ("tinyllama64-ar", "tinyllama64-prompt") if len(results.series(k)) > 1}
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    chips = sorted({p.chips for pts in series.values() for p in pts})
    ax.plot(chips, chips, "k:", lw=1, label="linear")
    for (key, pts), marker in zip(series.items(), "os"):
        ax.plot([p.chips for p in pts], [p.speedup for p in pts], marker=marker, lw=1.5,
                label=WORKLOAD[key].label.split(", ", 2)[-1])
    ax.plot([64], [PAPER_POINTS["tinyllama64-ar"][64]], "r*", ms=12, label="paper (autoregressive, 64 chips)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xlabel("chips")
    ax.set_ylabel("speed-up over 1 chip")
    ax.set_title("Fig. 6 (Bochem et al.): TinyLlama with 64 heads", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out / "fig6_scaled_speedup.png")


def figure_pipeline(results: McuResults, out: Path) -> Path | None:
    if not results.pipeline:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), dpi=110)
    kinds = list(dict.fromkeys(r.kind for r in results.pipeline))
    for kind, marker in zip(kinds, "osD^"):
        best: dict[int, PipelineRow] = {}
        for r in results.pipeline:
            if r.kind == kind and (r.chips not in best or r.latency_s < best[r.chips].latency_s):
                best[r.chips] = r
        rows = [best[n] for n in sorted(best)]
        axes[0].plot([r.chips for r in rows], [r.latency_s * 1e3 for r in rows], marker=marker, label=kind)
        axes[1].plot([r.chips for r in rows], [r.throughput for r in rows], marker=marker, label=kind)
    for ax, ylabel in zip(axes, ("latency per token, one user (ms)", "tokens/s, many users in flight")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("chips")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("Beyond the paper: the whole TinyLlama-42M decoding one token, tensor-parallel vs pipelines "
                 "(pipelines of TP groups: the lowest-latency layout)", fontsize=9)
    return _save(fig, out / "fig_tp_vs_pipeline.png")


# ---- tables ---------------------------------------------------------------------------------------

def points_table(points: list[Point]) -> list[str]:
    lines = ["| chips | regime | latency (ms) | compute | chip-to-chip | L2 | L3 | energy (mJ) | speed-up | "
             "energy gain | EDP gain | heads / chip | F / chip | weights / chip (KiB, model) | in L2 (KiB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in points:
        c, b = p.cost, p.cost.breakdown_s
        heads = ",".join(map(str, sorted(set(p.heads_per_chip), reverse=True)))
        ffn = ",".join(map(str, sorted(set(p.ffn_per_chip), reverse=True)))
        model_w = max(ch.model_weight_bytes for ch in c.chips) / 1024
        l2_w = max(ch.l2_weight_bytes for ch in c.chips) / 1024
        lines.append(f"| {p.chips} | {c.regime} | {c.latency_s * 1e3:.4g} | " + " | ".join(
            f"{b[k] * 1e3:.3g}" for k in PART_LABELS) + f" | {c.energy_j * 1e3:.4g} | {p.speedup:.2f} | "
            f"{p.energy_gain:.2f} | {p.edp_gain:.2f} | {heads} | {ffn} | {model_w:.0f} | {l2_w:.0f} |")
    return lines


def pipeline_table(rows: list[PipelineRow]) -> list[str]:
    lines = ["| chips | plan | layout | latency / token (ms) | tokens/s, one user | tokens/s, many users | "
             "energy / token (mJ) | regime |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.chips} | {r.kind} | {r.layout} | {r.latency_s * 1e3:.3g} | {r.single_user_rate:.3g} | "
                     f"{r.throughput:.3g} | {r.cost.energy_j * 1e3:.3g} | {r.cost.regime} |")
    return lines


def claims_lines(results: McuResults, claims: ClaimSet) -> list[str]:
    lines = ["# Distributed Transformer inference on Siracusa MCUs (Bochem et al., seed 002): claims checked", ""]
    lines += claims_section(claims, "## Claims")
    lines += ["", "## Set-up", ""] + [f"- {s}" for s in SETUP]
    for key in dict.fromkeys(p.workload for p in results.points):
        lines += ["", f"## {WORKLOAD[key].label}: per block", ""] + points_table(results.series(key))
    if results.pipeline:
        lines += ["", "## Whole TinyLlama-42M (embedding, 8 blocks, LM head) decoding one token: tensor-parallel vs "
                  "pipelines", "",
                  "The problem `hetsplit plan tinyllama-42m --cluster siracusa-N --decode 128` costs, every row by the "
                  "same estimator: a chip's regime is judged per segment (each block, the LM head) on its own share "
                  "of the weights; the embedding table stays in L3 and a token reads its one row. 'pipeline (exact)' "
                  "is hetsplit's exact minimum-bottleneck pipeline, optimal on the per-layer cost table (one chip "
                  "holding the whole graph), its figures from the estimator like every row's; 'tokens/s, one user' "
                  "is 1 / latency (each token waits for the one before), 'many users' the rate of the busiest chip "
                  "resource with enough independent requests in flight.", ""]
        lines += pipeline_table(results.pipeline)
    return lines


def results_dict(results: McuResults, claims: ClaimSet) -> dict:
    points = [{"workload": p.workload, "chips": p.chips, "speedup": p.speedup, "energy_gain": p.energy_gain,
               "edp_gain": p.edp_gain, "heads_per_chip": p.heads_per_chip, "ffn_per_chip": p.ffn_per_chip,
               **p.cost.to_dict()} for p in results.points]
    pipeline = [{"chips": r.chips, "kind": r.kind, "layout": r.layout, "chips_used": r.chips_used,
                 "single_user_tokens_per_s": r.single_user_rate, **r.cost.to_dict()} for r in results.pipeline]
    return json_safe({"format": FORMAT, "config": results.config.__dict__, "points": points, "pipeline": pipeline,
                      "claims": claims.to_dict()})


def write_report(out: Path, results: McuResults, claims: ClaimSet) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    md = out / "claims.md"
    write_text(md, "\n".join(claims_lines(results, claims)) + "\n")
    cj = write_claims_json(out, claims)
    rj = out / "results.json"
    write_text(rj, json.dumps(results_dict(results, claims), indent=1))
    figures = [f(results, out) for f in (figure4, figure5, figure6, figure_pipeline)]
    return [md, cj, rj] + [p for p in figures if p is not None]
