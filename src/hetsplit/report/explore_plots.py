"""Plots of NSGA-II explorations: convergence per objective and hypervolume per generation.

Every function draws data it is given (best value per generation, hypervolumes); nothing here
searches or scores.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from hetsplit.outpath import replacing  # noqa: E402
import numpy as np  # noqa: E402

DISPLAY = {"energy-per-device": ("energy per device", "J", 1.0), "memory-per-device": ("memory per device", "MB", 1e-6),
           "latency": ("latency", "ms", 1e3), "throughput": ("bottleneck (1 / throughput)", "ms", 1e3),
           "energy": ("energy per inference", "J", 1.0)}


def convergence_plot(runs: dict[str, np.ndarray], objectives: tuple[str, ...], path: str | Path,
                     title: str = "") -> Path:
    """One panel per objective: the best feasible value per generation of every run.

    ``runs`` maps a label to a G x K array (generation x objective, inf where nothing was feasible)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    k = len(objectives)
    fig, axes = plt.subplots(1, k, figsize=(4.2 * k, 3.4), dpi=110, squeeze=False)
    for j, name in enumerate(objectives):
        ax = axes[0, j]
        label, unit, scale = DISPLAY.get(name, (name, "", 1.0))
        for run, best in runs.items():
            y = np.where(np.isfinite(best[:, j]), best[:, j] * scale, np.nan)
            ax.plot(np.arange(1, len(y) + 1), y, label=run, lw=1.4)
        ax.set_xlabel("generation")
        ax.set_ylabel(f"{label} ({unit})" if unit else label)
        ax.grid(alpha=0.3)
    axes[0, 0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def hypervolume_plot(runs: dict[str, np.ndarray], path: str | Path, title: str = "",
                     exact: float | None = None) -> Path:
    """Hypervolume per generation of every run (same reference point), with an exact front's
    hypervolume as a horizontal line when there is one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=110)
    for run, hv in runs.items():
        ax.plot(np.arange(1, len(hv) + 1), hv, label=run, lw=1.4)
    if exact is not None:
        ax.axhline(exact, color="k", ls="--", lw=1, label="exact front")
    ax.set_xlabel("generation")
    ax.set_ylabel("hypervolume (normalized)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return _save(fig, path)


MEASURED_PANELS = (("throughput", "images/s", lambda v: 1.0 / v), ("memory per device", "MB", lambda v: v / 1e6),
                   ("energy per device", "J/img", lambda v: v))


def search_time_plot(curves: dict[str, tuple[np.ndarray, np.ndarray]], path: str | Path, title: str = "") -> Path:
    """Guo et al.'s Fig. 4: per objective (throughput, memory per device, energy per device), the best
    measured value found so far against search time, one step line per search.

    ``curves`` maps a label to (times in s, T x 3 best-so-far minimized objectives: 1 / throughput,
    bytes, joules); values of failed runs (>= 1e30) are not drawn."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6), dpi=110)
    for j, (name, unit, show) in enumerate(MEASURED_PANELS):
        ax = axes[j]
        for label, (t, best) in curves.items():
            ok = best[:, j] < 1e30
            if ok.any():
                ax.step(t[ok] / 60.0, show(best[ok, j]), where="post", label=label, lw=1.4)
        ax.set_xlabel("search time (min)")
        ax.set_ylabel(f"{name} ({unit})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    return _save(fig, path)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    with replacing(path) as tmp:        # a regular file, replaced atomically
        fig.savefig(tmp)
    plt.close(fig)
    return path
