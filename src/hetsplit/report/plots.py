"""Plots (matplotlib, headless): the energy-vs-throughput plane of a plan set."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hetsplit.outpath import replacing  # noqa: E402
from matplotlib.artist import Artist  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.text import Annotation  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from hetsplit.plan.types import Plan  # noqa: E402
from hetsplit.report.tables import describe_params  # noqa: E402


def _merged_labels(plans: list[Plan]) -> dict[tuple[float, float], str]:
    """One label per plotted point: plans at the same spot share it ("α=0.2,0.4,0.6")."""
    labels: dict[tuple[float, float], list[str]] = {}
    for p in plans:
        if "alpha" in p.params or "device" in p.params:
            key = (round(p.costed.throughput, 6), round(p.costed.energy_j, 12))
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


# Where a label may sit, in points from its marker: beside it, then above and below, then farther out.
_OFFSETS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (5, 15), (5, -22), (-5, 15), (-5, -22), (5, 26), (-5, 26),
            (5, -33), (-5, -33), (5, 37), (-5, 37))


def place_labels(ax: Axes, labels: dict[tuple[float, float], str], avoid: Sequence[Artist] = ()) -> list[Annotation]:
    """Annotate each point with its label at the first offset (``_OFFSETS``) where it stays inside the axes
    and overlaps no labelled point, no label placed before and nothing in ``avoid`` (the legend); where
    none is free, at the last offset with a leader line. Call once the limits and layout are final."""
    renderer = ax.figure.canvas.get_renderer()  # type: ignore[attr-defined]  # the Agg canvas reports draw on
    frame = ax.get_window_extent(renderer)
    taken = [a.get_window_extent(renderer) for a in avoid]
    taken += [ax.transData.transform_bbox(Bbox.from_bounds(x, y, 0, 0)).padded(3) for x, y in labels]
    out = []
    for (x, y), text in sorted(labels.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        for k, (dx, dy) in enumerate(_OFFSETS):
            last = k == len(_OFFSETS) - 1
            ann = ax.annotate(text, (x, y), fontsize=7, xytext=(dx, dy), textcoords="offset points",
                              ha="left" if dx > 0 else "right", va="bottom" if dy > 0 else "top",
                              arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4"} if last else None)
            box = ann.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if last or (inside and not any(box.overlaps(t) for t in taken)):
                taken.append(box)
                out.append(ann)
                break
            ann.remove()
    return out


def pareto_plot(plans: list[Plan], path: str | Path, title: str = "") -> Path:
    """Energy per inference vs throughput: the exact front (if any) as small points and a line,
    every other algorithm's plans as labelled markers on top."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7.5, 4.8), dpi=120)
    shown = [p for p in plans if p.metrics and p.metrics.throughput > 0]
    front = sorted((p for p in shown if p.pareto), key=lambda p: p.costed.throughput)
    if len(front) > 1:
        ax.plot([p.costed.throughput for p in front], [p.costed.energy_j for p in front], "--", color="0.4",
                lw=1, label="Pareto front", zorder=1)
    markers = "osD^vP*X"
    for k, algo in enumerate(dict.fromkeys(p.algorithm for p in shown)):
        pts = [p for p in shown if p.algorithm == algo]
        small = algo == "pareto"
        ax.scatter([p.costed.throughput for p in pts], [p.costed.energy_j for p in pts],
                   marker="." if small else markers[k % len(markers)], s=30 if small else 55,
                   alpha=0.6 if small else 0.9, label=f"{algo} ({len(pts)})", zorder=2 if small else 3)
    ax.set_xlabel("throughput (inferences/s)")
    ax.set_ylabel("energy per inference (J)")
    ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or (plans[0].model if plans else ""))
    legend = ax.legend(fontsize=8)
    fig.tight_layout()
    place_labels(ax, _merged_labels(shown), avoid=[legend])
    with replacing(path) as tmp:        # a regular file, replaced atomically
        fig.savefig(tmp)
    plt.close(fig)
    return path
