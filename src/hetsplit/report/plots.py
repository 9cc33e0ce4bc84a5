"""Plots (matplotlib, headless): the energy-vs-throughput plane of a plan set."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hetsplit.plan.types import Plan  # noqa: E402
from hetsplit.report.tables import describe_params  # noqa: E402


def pareto_plot(plans: list[Plan], path: str | Path, title: str = "") -> Path:
    """Energy per inference vs throughput, one marker per algorithm, the Pareto front as a line."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    algos = list(dict.fromkeys(p.algorithm for p in plans))
    markers = "osD^vP*X"
    for k, algo in enumerate(algos):
        pts = [p for p in plans if p.algorithm == algo and p.metrics and p.metrics.throughput > 0]
        ax.scatter([p.metrics.throughput for p in pts], [p.metrics.energy_j for p in pts],
                   marker=markers[k % len(markers)], s=40, alpha=0.8, label=algo, zorder=3)
        for p in pts:
            if "alpha" in p.params or "device" in p.params:
                ax.annotate(describe_params(p).split(" ", 1)[-1], (p.metrics.throughput, p.metrics.energy_j),
                            fontsize=7, xytext=(3, 3), textcoords="offset points")
    front = sorted((p for p in plans if p.pareto), key=lambda p: p.metrics.throughput)
    if len(front) > 1:
        ax.plot([p.metrics.throughput for p in front], [p.metrics.energy_j for p in front], "k--", lw=1,
                label="Pareto front", zorder=2)
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
