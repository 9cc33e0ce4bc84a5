"""Gantt chart (matplotlib, headless) of a simulated timeline: one row per device and per link."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hetsplit.outpath import replacing  # noqa: E402

from hetsplit.estimate.simulate import SimResult  # noqa: E402

_UNITS = ((10.0, 1.0, "s"), (1e-2, 1e3, "ms"), (0.0, 1e6, "µs"))  # (from makespan, scale, unit)


def gantt_plot(result: SimResult, path: str | Path, title: str = "") -> Path:
    """Draw every span of ``result.timeline`` as a bar on its resource's row, coloured by input
    (a cycle of 20 colours), devices above links; returns the PNG's path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _, scale, unit = next(u for u in _UNITS if result.makespan_s >= u[0])
    row = {name: k for k, name in enumerate(result.resources)}
    bars: list[list[tuple[float, float]]] = [[] for _ in result.resources]
    colors: list[list] = [[] for _ in result.resources]
    cmap = plt.get_cmap("tab20")
    for s in result.timeline:
        bars[row[s.resource]].append((s.start * scale, (s.end - s.start) * scale))
        colors[row[s.resource]].append(cmap(s.input % 20))
    fig, ax = plt.subplots(figsize=(11, 1.2 + 0.32 * len(result.resources)), dpi=110)
    for k in range(len(result.resources)):
        if bars[k]:
            ax.broken_barh(bars[k], (k - 0.4, 0.8), facecolors=colors[k], edgecolor="0.2", linewidth=0.2)
    ax.set_yticks(range(len(result.resources)), result.resources, fontsize=7)
    ax.set_ylim(len(result.resources) - 0.5, -0.5)
    ax.set_xlim(0, result.makespan_s * scale)
    ax.set_xlabel(f"time ({unit}); colour = input (cycle of 20)")
    ax.grid(True, axis="x", alpha=0.3)
    ax.set_title(title or f"{result.inputs} inputs, {result.throughput:.4g} inferences/s in steady state")
    fig.tight_layout()
    with replacing(path) as tmp:        # a regular file, replaced atomically
        fig.savefig(tmp)
    plt.close(fig)
    return path
