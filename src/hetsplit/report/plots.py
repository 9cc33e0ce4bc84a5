"""Plots (matplotlib, headless): the energy-vs-throughput plane of a plan set."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hetsplit.plan.types import Plan  # noqa: E402
from hetsplit.report.tables import describe_params  # noqa: E402


def _merged_labels(plans: list[Plan]) -> dict[tuple[float, float], str]:
    """One label per plotted point: plans at the same spot share it ("α=0.2,0.4,0.6")."""
    labels: dict[tuple[float, float], list[str]] = {}
    for p in plans:
        if "alpha" in p.params or "device" in p.params:
            key = (round(p.metrics.throughput, 6), round(p.metrics.energy_j, 12))
            text = describe_params(p).split(" ", 1)[-1]
            labels.setdefault(key, [])
            if text not in labels[key]:
                labels[key].append(text)
    merged = {}
    for key, texts in labels.items():
        alphas = [t[2:] for t in texts if t.startswith("α=")]
        others = [t for t in texts if not t.startswith("α=")]
        merged[key] = ", ".join(([f"α={','.join(alphas)}"] if alphas else []) + others)
    return merged


def pareto_plot(plans: list[Plan], path: str | Path, title: str = "") -> Path:
    """Energy per inference vs throughput: the exact front (if any) as small points and a line,
    every other algorithm's plans as labelled markers on top."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    shown = [p for p in plans if p.metrics and p.metrics.throughput > 0]
    front = sorted((p for p in shown if p.pareto), key=lambda p: p.metrics.throughput)
    if len(front) > 1:
        ax.plot([p.metrics.throughput for p in front], [p.metrics.energy_j for p in front], "--", color="0.4",
                lw=1, label="Pareto front", zorder=1)
    markers = "osD^vP*X"
    for k, algo in enumerate(dict.fromkeys(p.algorithm for p in shown)):
        pts = [p for p in shown if p.algorithm == algo]
        small = algo == "pareto"
        ax.scatter([p.metrics.throughput for p in pts], [p.metrics.energy_j for p in pts],
                   marker="." if small else markers[k % len(markers)], s=30 if small else 55,
                   alpha=0.6 if small else 0.9, label=f"{algo} ({len(pts)})", zorder=2 if small else 3)
    for (x, y), text in _merged_labels(shown).items():
        ax.annotate(text, (x, y), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("energy per inference (J)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or (plans[0].model if plans else ""))
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
