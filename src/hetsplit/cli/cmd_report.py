"""hetsplit report PLANS.json: an HTML report (table, Pareto plot, stages) of a plan set."""

from __future__ import annotations

from pathlib import Path

from hetsplit.cli.common import add_command
from hetsplit.plan import load_plans
from hetsplit.report.console import wide_console


def register(sub) -> None:
    p = add_command(sub, "report", "write an HTML report of a plan set (table, Pareto plot, per-stage breakdown)",
                    ["hetsplit plan resnet152 -c donna-2cpu-1gpu-1cim-hb-wcc --out out/ && hetsplit report out/plans.json",
                     "hetsplit report plans.json --out resnet152.html"])
    p.add_argument("plans", help="plan or plan-set JSON written by hetsplit plan")
    p.add_argument("--out", "-o", default=None, metavar="FILE", help="HTML file (default: next to PLANS, .html)")
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.report.html import write_report  # matplotlib only for this command

    plans = load_plans(args.plans)
    out = Path(args.out) if args.out else Path(args.plans).with_suffix(".html")
    title = f"{plans[0].model} on {plans[0].cluster}" if plans else "empty plan set"
    write_report(plans, out, title)
    wide_console().print(f"wrote {out}")
    return 0
