"""hetsplit report PLANS.json: an HTML report of a plan set (table, Pareto plot, stages and transfers,
the cluster, a simulated timeline, and a run measured against its prediction)."""

from __future__ import annotations

from pathlib import Path

from hetsplit.cli.common import add_command
from hetsplit.errors import HetsplitError
from hetsplit.outpath import output_file
from hetsplit.plan import load_plans
from hetsplit.report.console import wide_console


def register(sub) -> None:
    p = add_command(sub, "report", "write an HTML report of a plan set (table, Pareto plot, per-stage breakdown and "
                                   "transfers, cluster and links, timeline, measured vs predicted)",
                    ["hetsplit plan resnet152 -c donna-2cpu-1gpu-1cim-hb-wcc --out out/ && hetsplit report out/plans.json",
                     "hetsplit report plans.json --out resnet152.html",
                     "hetsplit run plan.json resnet18 --out run.json && hetsplit report plan.json --run run.json"])
    p.add_argument("plans", help="plan or plan-set JSON written by hetsplit plan")
    p.add_argument("--out", "-o", default=None, metavar="FILE", help="HTML file (default: next to PLANS, .html)")
    p.add_argument("--run", default=None, metavar="RUN.json",
                   help="a run's JSON (hetsplit run --out, with or without --compare): measured vs predicted")
    p.add_argument("--index", type=int, default=None,
                   help="the plan the timeline and --run are about (default: the one run picks from the set)")
    p.add_argument("--model", "-m", default=None, help="zoo name, .onnx or profile (default: the plans' model)")
    p.add_argument("--cluster", "-c", default=None, help="built-in name or YAML (default: the plans' cluster)")
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.report.html import write_report  # matplotlib only for this command
    from hetsplit.workflow import load_plan_cluster, load_problem, plan_model, read_run_doc, report_details

    console = wide_console()
    plans = load_plans(args.plans)
    out = output_file(args.out) if args.out else Path(args.plans).with_suffix(".html")
    title = f"{plans[0].model} on {plans[0].cluster}" if plans else "empty plan set"
    details = None
    if plans:
        run_doc = read_run_doc(args.run) if args.run else None
        try:
            problem = load_problem(args.model or plan_model(plans[0]),
                                   load_plan_cluster(plans[0], args.cluster, required=True),
                                   input_shapes={k: tuple(v) for k, v in plans[0].input_shapes.items()} or None)   # what the plans recorded
        except HetsplitError as exc:
            if args.run or args.model or args.cluster:
                raise
            console.print(f"note: {exc}; the report shows the plans only (give --model/--cluster for the rest)")
        else:
            details = report_details(problem, plans, args.index, run_doc)
    write_report(plans, out, title, details)
    console.print(f"wrote {out}")
    return 0
