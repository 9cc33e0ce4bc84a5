"""Plan tables for the terminal (rich) and as plain rows for files."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from rich.console import Console, JustifyMethod
from rich.markup import escape
from rich.table import Table

from hetsplit.plan.pareto import DEFAULT_FRONT, front_label
from hetsplit.plan.types import Plan
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity

if TYPE_CHECKING:
    from hetsplit.estimate.accuracy import Recommendation
    from hetsplit.workflow import HerePredictions
    from hetsplit.workflow.refine import Refinement

UNKNOWN = "unknown"   # how a figure nobody measured or estimated (NaN) is printed


def energy_text(value: float, digits: int = 3) -> str:
    """An energy in SI units, or "unknown": NaN (a device of unknown energy takes part), or infinite (a
    plan file's null, which ``Metrics.from_dict`` reads back as inf)."""
    return format_quantity(value, "J", digits) if math.isfinite(value) else UNKNOWN


def versus_single(rec: "Recommendation | None", index: int) -> str:
    """The cell saying how plan ``index`` stands against the best single device: its predicted gain and
    its kind's measured error, "best single" for that device's row."""
    if rec is None:
        return ""
    if index == rec.single_index and rec.single is not None:
        return "best single"
    v = rec.verdict(index)
    if v is None:
        return ""
    gain = UNKNOWN if math.isnan(v.gain) else f"{v.gain:+.0%}"
    return f"{gain} (err {v.error.error:.0%} {v.kind})"


def recommendation_lines(rec: "Recommendation") -> list[str]:
    """The recommendation's note, then each judged kind's measured error and the run that measured it."""
    lines = [f"recommended ({rec.objective}): {rec.note}"]
    seen: dict[str, str] = {}
    for v in rec.verdicts:
        seen.setdefault(v.kind, f"measured error of the estimate, {v.kind}: {v.error.says}; {v.error.run.source}")
    return lines + list(seen.values())


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


def plans_table(plans: list[Plan], title: str = "", rec: "Recommendation | None" = None,
                figures: Mapping[int, str] | None = None) -> Table:
    """A rich table of plans with their metrics; Pareto-optimal rows are starred. With ``rec``: the
    recommended row marked ✔, each split's gain over the best single device beside its kind's measured
    error, and that device's row (added below when the set lacks it, numbered "-"). With ``figures`` (plan
    index -> "measured", "modelled", ...): a column saying what each plan's segment figures are."""
    table = Table(title=title or None, show_lines=False, header_style="bold")
    columns: list[tuple[str, JustifyMethod]] = [("", "left"), ("#", "right"), ("found by", "left"), (escape("stages (device[layers])"), "left"),
               ("thru/s", "right"), ("bottleneck", "left"), ("latency", "right"), ("energy", "right"),
               ("E/device", "right"), ("max mem", "right"), ("fits", "center")]
    if rec is not None:
        columns.insert(0, ("rec", "center"))
        columns.append(("vs best single", "left"))
    if figures is not None:
        columns.append(("segments", "left"))
    for col, justify in columns:
        table.add_column(col, justify=justify)
    rows: list[tuple[int | None, Plan]] = list(enumerate(plans))
    if rec is not None and rec.single is not None and rec.single_index is None:
        rows.append((None, rec.single))
    for i, plan in rows:
        r = plan_row(plan)
        cells = ["★" if r["pareto"] and i is not None else "", "-" if i is None else str(i),
                 escape(r["how"] if i is not None else f"best single device ({r['how']})"), escape(r["stages"]),
                 f"{r['throughput']:.4g}", r["bottleneck"], format_quantity(r["latency_s"], "s"),
                 energy_text(r["energy_j"]), energy_text(r["energy_per_device_j"]),
                 format_quantity(r["max_mem_bytes"], "B"), "yes" if r["fits"] else "NO"]
        if rec is not None:
            chosen = rec.recommended == i if i is not None else not rec.recommends_split
            cells = ["✔" if chosen else ""] + cells + [escape("best single" if i is None else versus_single(rec, i))]
        if figures is not None:
            cells.append(escape(figures.get(i, "modelled") if i is not None else "modelled"))
        table.add_row(*cells)
    return table


def here_table(found: "HerePredictions", plans: list[Plan], title: str = "") -> Table:
    """Plans on this machine's ``local`` cluster beside what running them here is predicted to give."""
    table = Table(title=title or None, header_style="bold")
    for col in ("#", "found by", escape("stages (device[layers])"), "planned thru/s", "here thru/s", "here/planned",
                "here latency", "limited here by"):
        table.add_column(col, justify="left" if col in ("found by", "limited here by") or col.startswith("stages")
                         else "right")
    for i, pred in found.predictions:
        planned = plans[i].costed.throughput
        table.add_row(str(i), escape(describe_params(plans[i])), escape(describe_stages(plans[i])), f"{planned:.4g}",
                      f"{pred.predicted_throughput:.4g}", f"{pred.predicted_throughput / planned:.2f}",
                      format_quantity(pred.predicted_latency_s, "s"), pred.limited_by)
    return table


def refine_table(found: "Refinement", plans: list[Plan], title: str = "") -> Table:
    """The finalists measured here (``plan --refine``): each plan's modelled and refined figure, its rank
    before and after, over its measured segments what the estimate gave them (layers + cuts) against what
    they measured, and what cutting adds, modelled and measured: the segments' sum less the whole model as
    one segment on that device type (``Refinement.cut_extra``; "-" where no such single device was measured)."""
    table = Table(title=title or None, header_style="bold")
    figure = found.objective
    for col in ("#", "found by", escape("stages (device[layers])"), f"modelled {figure}", f"refined {figure}",
                "rank", "segments measured", "modelled / measured", "cuts add: modelled / measured", "figures"):
        table.add_column(col, justify="left" if col in ("found by", "figures") or col.startswith("stages")
                         else "right")

    def show(m: Any) -> str:
        if figure == "throughput":
            return f"{m.throughput:.4g}/s"
        return format_quantity(m.latency_s, "s") if figure == "latency" else energy_text(m.energy_j)

    for i in found.before:
        r = found.of(i)
        if r is None:
            continue
        modelled, measured, _, _ = r.totals()
        count = sum(1 for s in r.segments if s.measured_s == s.measured_s)
        extra = found.cut_extra(i)
        cuts = "-" if extra is None else f"{format_quantity(extra[0], 's')} / {format_quantity(extra[1], 's')}"
        table.add_row(str(i), escape(describe_params(plans[i])), escape(describe_stages(plans[i])), show(r.modelled),
                      show(r.refined), f"{found.before.index(i) + 1} → {found.after.index(i) + 1}",
                      f"{count} of {len(r.segments)}",
                      f"{format_quantity(modelled, 's')} / {format_quantity(measured, 's')}",
                      cuts, escape(r.label))
    return table


def thin_front(front: list[Plan], keep: int) -> list[Plan]:
    """At most ``keep`` plans of a front, spread evenly by throughput rank, both ends kept."""
    ordered = sorted(front, key=lambda p: -p.costed.throughput)
    if len(ordered) <= keep:
        return ordered
    picks = sorted({round(k * (len(ordered) - 1) / (keep - 1)) for k in range(keep)})
    return [ordered[k] for k in picks]


def print_plans(plans: list[Plan], title: str = "", console: Console | None = None,
                front: tuple[str, ...] = DEFAULT_FRONT, rec: "Recommendation | None" = None,
                figures: Mapping[int, str] | None = None) -> None:
    """The plan table, what its ★ marks (a front over ``front``'s figures) and, with ``rec``, the
    recommendation and the measured errors it weighed; ``figures``: see ``plans_table``."""
    console = console or wide_console()
    console.print(plans_table(plans, title, rec, figures))
    if any(p.pareto for p in plans):
        console.print(f"★ = Pareto-optimal in {front_label(front)} among plans that fit")
    for line in recommendation_lines(rec) if rec is not None else []:
        console.print(line, markup=False, highlight=False)
