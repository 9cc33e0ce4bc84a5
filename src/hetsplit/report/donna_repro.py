"""Figures, claims.md and results.json of ``hetsplit reproduce donna`` (AlShams et al., seed 000);
computes nothing: the scenarios and claims come from ``hetsplit.experiments.donna``."""

from __future__ import annotations

import json
from pathlib import Path

from hetsplit.experiments.claims import ClaimSet
from hetsplit.experiments.donna import EdgeResult, Scenario, pct
from hetsplit.plan.types import Plan
from hetsplit.report.claims import claims_section, write_claims_json
from hetsplit.outpath import write_text


# ---- figures and files ---------------------------------------------------------------------------

SET_MARKERS = {"4cpu": "o", "2cpu-2gpu": "s", "2cpu-2cim": "^", "2cpu-1gpu-1cim": "D"}


def plot_fig2(scen: list[Scenario], out: Path) -> list[Path]:
    """One figure per model: a panel per medium, energy vs throughput, DONNA markers and exact fronts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    cmap = plt.get_cmap("viridis")
    for model in dict.fromkeys(s.model for s in scen):
        media = list(dict.fromkeys(s.medium for s in scen if s.model == model))
        fig, axes = plt.subplots(1, len(media), figsize=(5 * len(media), 4.2), dpi=110, squeeze=False)
        for ax, medium in zip(axes[0], media):
            for k, s in enumerate(x for x in scen if x.model == model and x.medium == medium):
                color = f"C{k}"
                fr = sorted(s.front, key=lambda p: p.costed.throughput)
                ax.plot([p.costed.throughput for p in fr], [p.costed.energy_j for p in fr], "-", color=color,
                        lw=0.8, alpha=0.7, label=f"exact front {{{s.devices}}}")
                ax.scatter([p.costed.throughput for p in s.donna], [p.costed.energy_j for p in s.donna],
                           c=[cmap(p.params["alpha"]) for p in s.donna], marker=SET_MARKERS.get(s.devices, "o"),
                           edgecolors=color, s=45, zorder=3)
            ax.set_title(f"{model}, {medium}")
            ax.set_xlabel("throughput (inferences/s)")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
        axes[0][0].set_ylabel("energy per inference (J)")
        axes[0][0].legend(fontsize=7)
        sm = plt.cm.ScalarMappable(cmap=cmap)
        fig.colorbar(sm, ax=axes[0].tolist(), label="DONNA alpha (marker colour; shape = device set)")
        path = out / f"fig2_{model}.png"
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def plot_fig3(scen: list[Scenario], gpu: dict[str, Plan], out: Path, model: str = "resnet152") -> Path | None:
    """Speed-up, total energy and energy per participating device against one GPU (ResNet-152)."""
    if model not in gpu:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    g = gpu[model].costed
    rows = [(f"{s.devices}\n{s.medium} a{p.params['alpha']:.1f}", p.costed) for s in scen if s.model == model
            for p in s.donna if p.params["alpha"] in (0.2, 1.0)]
    labels = [r[0] for r in rows]
    series = [("throughput speed-up", [m.throughput / g.throughput for _, m in rows]),
              ("total energy / GPU", [m.energy_j / g.energy_j for _, m in rows]),
              ("energy per participating device / GPU",
               [m.energy_per_participating_device_j / g.energy_per_participating_device_j for _, m in rows])]
    fig, axes = plt.subplots(3, 1, figsize=(14, 9), dpi=110, sharex=True)
    for ax, (title, vals) in zip(axes, series):
        ax.bar(range(len(vals)), vals, color=["C0" if "a1.0" in lab else "C1" for lab in labels])
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.set_ylabel(title, fontsize=8)
        ax.grid(True, axis="y", alpha=0.3)
    axes[-1].set_xticks(range(len(labels)), labels, rotation=90, fontsize=6)
    axes[0].set_title(f"{model}: DONNA plans (alpha 1.0 blue, 0.2 orange) against one GPU")
    fig.tight_layout()
    path = out / "fig3.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_fig4(edge: list[EdgeResult], out: Path) -> Path | None:
    if not edge:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4), dpi=110)
    labels = [f"{e.model}\ncloud {e.cloud}" for e in edge]
    axes[0].bar(range(len(edge)), [e.donna.costed.throughput / e.offload.costed.throughput for e in edge])
    axes[0].set_title("(a) throughput speed-up over offloading")
    axes[1].bar(range(len(edge)), [e.offload.costed.energy_j / e.donna.costed.energy_j for e in edge])
    axes[1].set_title("(b) energy reduction over offloading")
    for ax in axes:
        ax.set_xticks(range(len(edge)), labels, fontsize=7)
        ax.set_yscale("log")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = out / "fig4.png"
    fig.savefig(path)
    plt.close(fig)
    return path


def _plan_summary(p: Plan) -> dict:
    m = p.costed
    return {"alpha": p.params.get("alpha"), "stages": [(s.device, len(s.layers)) for s in p.stages],
            "throughput": m.throughput, "bottleneck_s": m.bottleneck_s, "energy_j": m.energy_j,
            "energy_per_participating_device_j": m.energy_per_participating_device_j}


def write_report(out: Path, scen: list[Scenario], gpu: dict[str, Plan], edge: list[EdgeResult],
                 claims: ClaimSet) -> list[Path]:
    """Figures, claims.md and results.json under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = plot_fig2(scen, out)
    for p in (plot_fig3(scen, gpu, out), plot_fig4(edge, out)):
        if p is not None:
            paths.append(p)
    lines = ["# DONNA's findings, checked with hetsplit", "", *claims_section(claims), "",
             "Costs: hetsplit's device models (roofline CPU/GPU, analytical CIM after DNN+NeuroSim), not the "
             "paper's measured profiles; every number the paper states is compared with ours in the paper's band. "
             "Every cut moves all live tensors (skip connections included) and memory limits are enforced."]
    lines += ["", "## Exact front vs DONNA, per scenario", "",
              "| scenario | DONNA distinct points | front points | off the convex hull | DONNA plans dominated | "
              "largest energy saving at equal-or-better throughput |", "|---|---|---|---|---|---|"]
    for s in scen:
        dom = [d for d in s.dominations if d.dominated]
        distinct = len({(round(p.costed.bottleneck_s, 12), round(p.costed.energy_j, 12)) for p in s.donna})
        best = max((d.energy_saving_frac for d in s.dominations), default=0.0)
        lines.append(f"| {s.name} | {distinct} | {len(s.front)} | {len(s.unsupported())} | {len(dom)}/{len(s.donna)} "
                     f"| {pct(best)} |")
    md = out / "claims.md"
    write_text(md, "\n".join(lines) + "\n")
    data = {"format": "hetsplit.donna-repro/1",
            "claims": claims.to_dict(),
            "single_gpu": {m: _plan_summary(p) for m, p in gpu.items()},
            "scenarios": [{"model": s.model, "devices": s.devices, "medium": s.medium,
                           "donna": [_plan_summary(p) for p in s.donna],
                           "front": [_plan_summary(p) for p in s.front],
                           "dominated": [d.dominated for d in s.dominations],
                           "energy_saving_frac": [d.energy_saving_frac for d in s.dominations]} for s in scen],
            "edge": [{"model": e.model, "cloud": e.cloud, "donna": _plan_summary(e.donna),
                      "fastest": _plan_summary(e.fastest), "offload": _plan_summary(e.offload)} for e in edge]}
    js = out / "results.json"
    write_text(js, json.dumps(data, indent=1, default=float))
    return paths + [md, write_claims_json(out, claims), js]
