"""Everything a planning run leaves in its output folder."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hetsplit.plan.pareto import DEFAULT_FRONT
from hetsplit.plan import save_plans
from hetsplit.plan.types import Plan

if TYPE_CHECKING:
    from hetsplit.search.hierarchical import HierarchicalResult
    from hetsplit.workflow import ReportDetails


def write_plan_outputs(plans: list[Plan], out: Path, model: str, cluster: str,
                       details: ReportDetails | None = None, front: tuple[str, ...] = DEFAULT_FRONT) -> list[Path]:
    """plans.json (the plan set), pareto.png (energy vs throughput) and report.html (with ``details``:
    cluster, transfers, timeline; see ``workflow.report_details``); returns the paths."""
    from hetsplit.report.html import write_report
    from hetsplit.report.plots import pareto_plot

    title = f"{model} on {cluster}"
    rec = details.recommendation if details is not None else None
    return [save_plans(plans, out / "plans.json", model=model, cluster=cluster, front=list(front),
                       **({"recommendation": rec.to_dict()} if rec is not None else {})),
            pareto_plot(plans, out / "pareto.png", title),
            write_report(plans, out / "report.html", title, details, front)]


def write_explore_outputs(plans: list[Plan], best: np.ndarray, hypervolumes: np.ndarray, objectives: tuple[str, ...],
                          out: Path, model: str, cluster: str, label: str, **extra) -> list[Path]:
    """An exploration's plans.json (the Pareto set, with its per-generation history), convergence.png
    (best value per objective per generation), hypervolume.png and report.html."""
    from hetsplit.report.explore_plots import convergence_plot, hypervolume_plot
    from hetsplit.report.html import write_report

    title = f"{model} on {cluster}: {label}"
    finite = [[float(v) if np.isfinite(v) else None for v in row] for row in best]
    history = {"objectives": list(objectives), "best": finite, "hypervolume": [float(h) for h in hypervolumes]}
    return [save_plans(plans, out / "plans.json", model=model, cluster=cluster, history=history, **extra),
            convergence_plot({label: best}, objectives, out / "convergence.png", title),
            hypervolume_plot({label: hypervolumes}, out / "hypervolume.png", title),
            write_report(plans, out / "report.html", title)]


def write_hierarchical_outputs(result: HierarchicalResult, out: Path, model: str, cluster: str, label: str) -> list[Path]:
    """A hierarchical exploration's plans.json (the measured Pareto set, each plan's measurement in its
    ``params.measured``, every measured point in ``history``), search_time.png (best measured value per
    objective against search time) and report.html."""
    from hetsplit.report.explore_plots import search_time_plot
    from hetsplit.report.html import write_report

    title = f"{model} on {cluster}: {label}"
    history = {"objectives": ["1/throughput (s)", "memory per device (B)", "energy per device (J)"],
               "points": [{"t_s": p.t_s, "stage": p.stage, "devices": p.devices,
                           "objectives": [float(v) for v in p.objectives], "error": p.measurement.error}
                          for p in result.points],
               "stages": [vars(s) for s in result.stages]}
    measured = [replace(plan, params={**plan.params, "measured": m.to_dict()})   # each plan's own run, in its file
                for plan, m in zip(result.plans, result.measurements)]
    return [save_plans(measured, out / "plans.json", model=model, cluster=cluster, history=history),
            search_time_plot({label: result.best_over_time()}, out / "search_time.png", title),
            write_report(result.plans, out / "report.html", title)]
