"""Everything a planning run leaves in its output folder."""

from __future__ import annotations

from pathlib import Path

from hetsplit.plan import save_plans
from hetsplit.plan.types import Plan


def write_plan_outputs(plans: list[Plan], out: Path, model: str, cluster: str) -> list[Path]:
    """plans.json (the plan set), pareto.png (energy vs throughput) and report.html; returns the paths."""
    from hetsplit.report.html import write_report
    from hetsplit.report.plots import pareto_plot

    title = f"{model} on {cluster}"
    return [save_plans(plans, out / "plans.json", model=model, cluster=cluster),
            pareto_plot(plans, out / "pareto.png", title),
            write_report(plans, out / "report.html", title)]
