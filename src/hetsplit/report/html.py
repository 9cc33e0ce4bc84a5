"""A self-contained HTML report of a plan set: the table, the Pareto plot and each plan's stages."""

from __future__ import annotations

import base64
import html
import tempfile
from pathlib import Path

from hetsplit.plan.types import Plan
from hetsplit.report.plots import pareto_plot
from hetsplit.report.tables import describe_params, plan_row
from hetsplit.units import format_quantity

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; margin: 1em 0; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: right; }
th { background: #f3f3f3; text-align: left; }
td.l { text-align: left; }
tr.pareto td:first-child { color: #b8860b; font-weight: bold; }
.bar { display: inline-block; height: 10px; background: #4a7ebb; vertical-align: middle; }
details { margin: 0.3em 0; }
"""


def _q(value: float, unit: str) -> str:
    return html.escape(format_quantity(value, unit))


def _plan_details(i: int, plan: Plan) -> str:
    """Per-stage breakdown of one plan: layers, compute time and memory per device, with bars."""
    m = plan.metrics
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
                    f"<td>{_q(m.energy_per_device_j.get(s.device, 0.0), 'J')}</td></tr>")
    return (f"<details><summary>plan {i}: {html.escape(describe_params(plan))} — {len(parts)} {'stage' if plan.is_pipeline else 'device'}(s), "
            f"bottleneck {html.escape(m.bottleneck)}"
            f"</summary><table><tr><th>device</th><th>layers</th><th>first … last</th><th>compute</th><th></th>"
            f"<th>memory</th><th>energy</th></tr>{''.join(rows)}</table></details>")


def plans_html(plans: list[Plan], title: str) -> str:
    """The report as one HTML document (the plot embedded as a PNG data URI)."""
    with tempfile.TemporaryDirectory() as tmp:
        png = pareto_plot(plans, Path(tmp) / "pareto.png", title)
        image = base64.b64encode(png.read_bytes()).decode("ascii")
    head = ("<tr><th>★</th><th>#</th><th>found by</th><th>stages</th><th>thru/s</th><th>bottleneck</th>"
            "<th>latency</th><th>energy</th><th>E/device</th><th>max mem</th><th>fits</th></tr>")
    body = []
    for i, plan in enumerate(plans):
        r = plan_row(plan)
        body.append(f"<tr class='{'pareto' if r['pareto'] else ''}'><td>{'★' if r['pareto'] else ''}</td>"
                    f"<td>{i}</td><td class=l>{html.escape(r['how'])}</td><td class=l>{html.escape(r['stages'])}</td>"
                    f"<td>{r['throughput']:.4g}</td><td class=l>{html.escape(r['bottleneck'])}</td>"
                    f"<td>{_q(r['latency_s'], 's')}</td><td>{_q(r['energy_j'], 'J')}</td>"
                    f"<td>{_q(r['energy_per_device_j'], 'J')}</td><td>{_q(r['max_mem_bytes'], 'B')}</td>"
                    f"<td>{'yes' if r['fits'] else 'NO'}</td></tr>")
    details = "".join(_plan_details(i, p) for i, p in enumerate(plans))
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body><h1>{html.escape(title)}</h1>"
            f"<p>{len(plans)} plans; ★ marks the Pareto-optimal ones in (bottleneck time, energy per inference) "
            f"among plans that fit memory.</p>"
            f"<img alt='energy vs throughput' src='data:image/png;base64,{image}'>"
            f"<table>{head}{''.join(body)}</table><h2>Stages of each plan</h2>{details}</body></html>")


def write_report(plans: list[Plan], path: str | Path, title: str) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(plans_html(plans, title), encoding="utf-8")
    return path
