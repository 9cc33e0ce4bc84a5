"""A self-contained HTML report of a plan set: the table, the Pareto plot and each plan's stages; with
``workflow.ReportDetails`` (computed by ``workflow.report_details``) also the cluster and its links, each
plan's transfers, a simulated timeline and a run measured against its prediction. It draws; it computes
nothing."""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path
from typing import Any, Callable

from hetsplit.estimate.simulate import SimResult
from hetsplit.estimate.transfers import Transfer
from hetsplit.plan.pareto import DEFAULT_FRONT, front_label
from hetsplit.plan.types import Plan
from hetsplit.report.gantt import gantt_plot
from hetsplit.report.plots import pareto_plot
from hetsplit.estimate.accuracy import Recommendation
from hetsplit.report.tables import describe_params, distinct_digits, energy_text, plan_row, recommendation_lines, \
    versus_single
from hetsplit.units import format_quantity
from hetsplit.workflow import ReportDetails
from hetsplit.workflow.comparison import Comparison
from hetsplit.outpath import write_text

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; text-align: left; }
td.l { text-align: left; }
tr.pareto td:first-child { color: #b8860b; font-weight: bold; }
tr.recommended td { background: #eef7ee; }
.bar { display: inline-block; height: 10px; background: #4a7ebb; vertical-align: middle; }
details { margin: 0.3em 0; }
img { max-width: 100%; }
"""


def _q(value: float, unit: str, digits: int = 3) -> str:
    return html.escape(format_quantity(value, unit, digits))


def _e(value: float, digits: int = 3) -> str:
    """An energy, or "unknown" (NaN)."""
    return html.escape(energy_text(value, digits))


def _table(head: list[str], rows: list[str], cls: str = "") -> str:
    cells = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return f"<table{f' class={cls}' if cls else ''}><tr>{cells}</tr>{''.join(rows)}</table>"


def _png_uri(draw: Callable[[Path], Path]) -> str:
    """A plot drawn to a temporary PNG, as a data URI."""
    with tempfile.TemporaryDirectory() as tmp:
        png = draw(Path(tmp) / "plot.png")
        return "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode("ascii")


def _transfers_table(transfers: list[Transfer]) -> str:
    """One row per message (exact bytes in ``data-bytes``), then the totals per inference."""
    if not transfers:
        return "<p>no transfers: the plan keeps every tensor on one device</p>"
    rows = [f"<tr data-cut><td class=l>{html.escape(t.payload)}</td>"
            f"<td class=l>{html.escape(t.src)} → {html.escape(t.dst)}</td>"
            f"<td data-bytes='{t.nbytes:.0f}'>{_q(t.nbytes, 'B', 4)}</td>"
            f"<td data-s='{t.time_s!r}'>{_q(t.time_s, 's', 4)}</td>"
            f"<td data-j='{t.energy_j!r}'>{_q(t.energy_j, 'J', 4)}</td></tr>" for t in transfers]
    total = (f"<tr><th>total</th><th>{len(transfers)} message(s)</th><td>{_q(sum(t.nbytes for t in transfers), 'B', 4)}"
             f"</td><td>{_q(sum(t.time_s for t in transfers), 's', 4)}</td>"
             f"<td>{_q(sum(t.energy_j for t in transfers), 'J', 4)}</td></tr>")
    return _table(["payload (cut)", "from → to", "bytes", "time", "energy"], rows + [total], "transfers")


def _plan_details(i: int, plan: Plan, transfers: list[Transfer] | None) -> str:
    """Per-stage breakdown of one plan (layers, compute time, memory, energy per device, with bars) and
    its transfers per inference."""
    m = plan.costed
    longest = max(m.compute_s_per_device.values(), default=0.0) or 1.0
    rows = []
    parts = plan.work_by_device()
    for s in parts:
        t = m.compute_s_per_device.get(s.device, 0.0)
        width = int(200 * t / longest)
        first, last = html.escape(s.layers[0]), html.escape(s.layers[-1])
        rows.append(f"<tr><td class=l>{html.escape(s.device)}</td><td>{len(s.layers)}</td>"
                    f"<td class=l>{first} … {last}</td><td>{_q(t, 's')}</td>"
                    f"<td class=l><span class=bar style='width:{width}px'></span></td>"
                    f"<td>{_q(m.memory_per_device_bytes.get(s.device, 0.0), 'B')}</td>"
                    f"<td>{_e(m.energy_per_device_j.get(s.device, 0.0))}</td></tr>")
    stages = _table(["device", "layers", "first … last", "compute", "", "memory", "energy"], rows)
    cuts = "" if transfers is None else _transfers_table(transfers)
    return (f"<details><summary id=plan{i}>plan {i}: {html.escape(describe_params(plan))} — {len(parts)} "
            f"{'stage' if plan.is_pipeline else 'device'}(s), bottleneck {html.escape(m.bottleneck)}"
            f"</summary>{stages}{cuts}</details>")


def _plans_table(plans: list[Plan], rec: Recommendation | None = None) -> str:
    """The plan table; throughput, bottleneck time and energy with the digits that tell plans apart. With
    ``rec``: the recommended row marked ✔ (class ``recommended``), each split's gain over the best single
    device beside its kind's measured error, and that device's row (added last, numbered "-", when the set
    lacks it), then the recommendation's note and the errors it weighed."""
    rows: list[tuple[int | None, Plan]] = list(enumerate(plans))
    if rec is not None and rec.single is not None and rec.single_index is None:
        rows.append((None, rec.single))
    shown = [p for _, p in rows]
    digits = {key: distinct_digits(plan_row(p)[key] for p in shown) for key in ("throughput", "energy_j")}
    digits["throughput"] = max(digits["throughput"], distinct_digits(p.costed.bottleneck_s for p in shown))
    body = []
    for i, plan in rows:
        r = plan_row(plan)
        d = digits["throughput"]
        star = r["pareto"] and i is not None
        chosen = rec is not None and (rec.recommended == i if i is not None else not rec.recommends_split)
        how = r["how"] if i is not None else f"best single device ({r['how']})"
        classes = " ".join(c for c, on in (("pareto", star), ("recommended", chosen)) if on)
        rec_cells = ("" if rec is None else f"<td>{'✔' if chosen else ''}</td>",
                     "" if rec is None else
                     f"<td class=l>{html.escape('best single' if i is None else versus_single(rec, i))}</td>")
        body.append(f"<tr class='{classes}'>{rec_cells[0]}<td>{'★' if star else ''}</td>"
                    f"<td>{'-' if i is None else i}</td><td class=l>{html.escape(how)}</td>"
                    f"<td class=l>{html.escape(r['stages'])}</td>"
                    f"<td>{r['throughput']:.{d}g}</td><td class=l>{html.escape(r['bottleneck'])}</td>"
                    f"<td>{_q(plan.costed.bottleneck_s, 's', d)}</td>"
                    f"<td>{_q(r['latency_s'], 's')}</td><td>{_e(r['energy_j'], digits['energy_j'])}</td>"
                    f"<td>{_e(r['energy_per_device_j'])}</td><td>{_q(r['max_mem_bytes'], 'B')}</td>"
                    f"<td>{'yes' if r['fits'] else 'NO'}</td>{rec_cells[1]}</tr>")
    head = ["★", "#", "found by", "stages", "thru/s", "bottleneck", "bottleneck time", "latency", "energy",
            "E/device", "max mem", "fits"]
    if rec is None:
        return _table(head, body, "plans")
    notes = "".join(f"<li>{html.escape(line)}</li>" for line in recommendation_lines(rec))
    return _table(["rec"] + head + ["vs best single"], body, "plans") + f"<ul class=recommendation>{notes}</ul>"


def _cluster_section(cluster: dict[str, Any]) -> str:
    """The cluster's devices and its links (one row per medium and figures, with the pairs it joins)."""
    devices = [f"<tr><td class=l>{html.escape(d['name'])}</td><td class=l>{html.escape(d['kind'])}</td>"
               f"<td class=l>{html.escape(d['type'])}</td><td class=l>{html.escape(d['preset'] or '-')}</td>"
               f"<td>{_q(d['memory_bytes'], 'B')}</td><td class=l>{html.escape(d['group'] or '-')}</td></tr>"
               for d in cluster["devices"]]
    links = [f"<tr><td class=l>{html.escape(k['medium'])}</td><td>{_q(k['bandwidth'], 'B/s')}</td>"
             f"<td>{_q(k['latency_s'], 's')}</td><td>{_q(k['energy_per_byte'], 'J/B')}</td><td>{k['pairs']}</td></tr>"
             for k in cluster["links"]]
    ends = ", ".join(f"{role} {html.escape(cluster[role])}" for role in ("source", "sink") if cluster.get(role))
    return (f"<section id=cluster><h2>Cluster {html.escape(cluster['name'])}</h2>"
            f"<p>{html.escape(cluster.get('description') or '')}{' — ' + ends if ends else ''}</p>"
            + _table(["device", "kind", "type", "preset", "memory", "group"], devices, "devices")
            + _table(["link medium", "bandwidth", "latency", "energy/byte", "device pairs"], links, "links")
            + "</section>")


def _timeline_section(k: int, result: SimResult) -> str:
    """The featured plan's simulated timeline as a Gantt chart, with its figures."""
    image = _png_uri(lambda path: gantt_plot(result, path))
    util = ", ".join(f"{html.escape(r)} {u:.0%}" for r, u in result.utilization.items())
    return (f"<section id=timeline><h2>Timeline of plan {k}</h2><p>{result.inputs} inputs simulated event by event: "
            f"{result.throughput:.4g} inferences/s in steady state, one input alone "
            f"{_q(result.unloaded_latency_s, 's', 4)}, makespan {_q(result.makespan_s, 's', 4)}; "
            f"utilization {util}.</p><img alt='timeline of plan {k}' src='{image}'></section>")


def _run_section(k: int, run: Comparison) -> str:
    """A run's measurements beside the prediction of the plan it ran, with the run's notes."""
    def cell(v: Any, spec: str = ".4g") -> str:
        return "-" if v is None else format(v, spec)

    rows = [f"<tr><td class=l>{html.escape(r.metric)}</td><td>{cell(r.predicted)}</td>"
            f"<td>{cell(r.measured)}</td><td>{cell(r.ratio, '.3f')}</td></tr>" for r in run.rows]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in run.notes)
    return (f"<section id=measured><h2>Measured vs predicted (plan {k})</h2>"
            + _table(["metric", "predicted", "measured", "measured/predicted"], rows, "measured")
            + (f"<ul>{notes}</ul>" if notes else "") + "</section>")


def plans_html(plans: list[Plan], title: str, details: ReportDetails | None = None,
               front: tuple[str, ...] = DEFAULT_FRONT) -> str:
    """The report as one HTML document (plots embedded as PNG data URIs); ★ marks a front over ``front``."""
    image = _png_uri(lambda path: pareto_plot(plans, path, title))
    extra = ""
    if details is not None:
        extra = _cluster_section(details.cluster)
        if details.timeline is not None:
            extra += _timeline_section(details.featured, details.timeline)
        if details.run is not None:
            extra += _run_section(details.featured, details.run)
    stages = "".join(_plan_details(i, p, None if details is None else details.transfers.get(i))
                     for i, p in enumerate(plans))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{len(plans)} plans; ★ marks the Pareto-optimal ones in {html.escape(front_label(front))} "
            f"among plans that fit memory.</p>"
            f"<img alt='energy vs throughput' src='{image}'>"
            f"{_plans_table(plans, None if details is None else details.recommendation)}{extra}"
            f"<h2>Stages and transfers of each plan</h2>{stages}</body></html>")


def write_report(plans: list[Plan], path: str | Path, title: str, details: ReportDetails | None = None,
                 front: tuple[str, ...] = DEFAULT_FRONT) -> Path:
    """Write ``plans_html`` to ``path``; returns it."""
    return write_text(path, plans_html(plans, title, details, front))
