"""Plan tables for the terminal (rich) and as plain rows for files."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from hetsplit.plan.pareto import DEFAULT_FRONT, front_label
from hetsplit.plan.types import Plan
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity

if TYPE_CHECKING:
    from hetsplit.workflow import HerePredictions


def describe_params(plan: Plan) -> str:
    """Short label of how a plan was found: "donna a=0.4", "single gpu0", "exact"."""
    p = plan.params
    if "alpha" in p:
        return f"{plan.algorithm} α={p['alpha']:g}"
    if "device" in p:
        return f"{plan.algorithm} {p['device']}"
    if plan.algorithm == "map-opt" and "objective" in p:
        return f"{plan.algorithm} {p['objective']}"
    return plan.algorithm


def distinct_digits(values: Iterable[float], least: int = 4, most: int = 12) -> int:
    """Fewest significant digits, from ``least`` to ``most``, at which values that differ (beyond ``most``
    digits) print differently: enough for two plans a Pareto mark tells apart to show apart."""
    finite = {float(f"{v:.{most}g}") for v in values if math.isfinite(v)}
    for digits in range(least, most):
        if len({f"{v:.{digits}g}" for v in finite}) == len(finite):
            return digits
    return most


def describe_stages(plan: Plan, max_chars: int = 48) -> str:
    """Stages as "gpu0[12] → cim0[40]" (device and number of layers); a mapping as "cpu0[7] + cpu1[5]"
    (layers and shards per device)."""
    joiner = " → " if plan.is_pipeline else " + "
    text = joiner.join(f"{s.device}[{len(s.layers)}]" for s in plan.work_by_device())
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def plan_row(plan: Plan) -> dict[str, Any]:
    """The figures of one plan for a table, in display units."""
    m = plan.metrics
    assert m is not None, "plans are evaluated before they are shown"
    return {
        "how": describe_params(plan), "stages": describe_stages(plan), "devices": len(m.compute_s_per_device),
        "throughput": m.throughput, "bottleneck": m.bottleneck, "latency_s": m.latency_s, "energy_j": m.energy_j,
        "energy_per_device_j": m.energy_per_participating_device_j,
        "max_mem_bytes": max(m.memory_per_device_bytes.values(), default=0.0), "fits": m.fits,
        "pareto": bool(plan.pareto),
    }


def plans_table(plans: list[Plan], title: str = "") -> Table:
    """A rich table of plans with their metrics; Pareto-optimal rows are starred."""
    table = Table(title=title or None, show_lines=False, header_style="bold")
    for col, justify in (("", "left"), ("#", "right"), ("found by", "left"), (escape("stages (device[layers])"), "left"),
                         ("thru/s", "right"), ("bottleneck", "left"), ("latency", "right"), ("energy", "right"),
                         ("E/device", "right"), ("max mem", "right"), ("fits", "center")):
        table.add_column(col, justify=justify)
    for i, plan in enumerate(plans):
        r = plan_row(plan)
        table.add_row("★" if r["pareto"] else "", str(i), escape(r["how"]), escape(r["stages"]), f"{r['throughput']:.4g}",
                      r["bottleneck"], format_quantity(r["latency_s"], "s"), format_quantity(r["energy_j"], "J"),
                      format_quantity(r["energy_per_device_j"], "J"), format_quantity(r["max_mem_bytes"], "B"),
                      "yes" if r["fits"] else "NO")
    return table


def here_table(found: "HerePredictions", plans: list[Plan], title: str = "") -> Table:
    """Plans on this machine's ``local`` cluster beside what running them here is predicted to give."""
    table = Table(title=title or None, header_style="bold")
    for col in ("#", "found by", escape("stages (device[layers])"), "planned thru/s", "here thru/s", "here/planned",
                "here latency", "limited here by"):
        table.add_column(col, justify="left" if col in ("found by", "limited here by") or col.startswith("stages")
                         else "right")
    for i, pred in found.predictions:
        planned = plans[i].metrics.throughput
        table.add_row(str(i), escape(describe_params(plans[i])), escape(describe_stages(plans[i])), f"{planned:.4g}",
                      f"{pred.predicted_throughput:.4g}", f"{pred.predicted_throughput / planned:.2f}",
                      format_quantity(pred.predicted_latency_s, "s"), pred.limited_by)
    return table


def thin_front(front: list[Plan], keep: int) -> list[Plan]:
    """At most ``keep`` plans of a front, spread evenly by throughput rank, both ends kept."""
    ordered = sorted(front, key=lambda p: -p.metrics.throughput)
    if len(ordered) <= keep:
        return ordered
    picks = sorted({round(k * (len(ordered) - 1) / (keep - 1)) for k in range(keep)})
    return [ordered[k] for k in picks]


def print_plans(plans: list[Plan], title: str = "", console: Console | None = None,
                front: tuple[str, ...] = DEFAULT_FRONT) -> None:
    """The plan table and what its ★ marks (a front over ``front``'s figures)."""
    console = console or wide_console()
    console.print(plans_table(plans, title))
    if any(p.pareto for p in plans):
        console.print(f"★ = Pareto-optimal in {front_label(front)} among plans that fit")
