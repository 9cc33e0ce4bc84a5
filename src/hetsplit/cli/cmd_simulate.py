"""hetsplit simulate PLAN: stream inputs through a plan, event by event (queueing, utilization, timeline)."""

from __future__ import annotations

import json
import sys

from rich.console import Console
from rich.table import Table

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, progress
from hetsplit.estimate.simulate import LINK_ORDERS
from hetsplit.plan.types import Metrics
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity


def register(sub) -> None:
    p = add_command(sub, "simulate", "simulate a stream of inputs through a plan (throughput, latency percentiles, "
                                     "utilization, trace and Gantt chart)",
                    ["hetsplit simulate out/plans.json",
                     "hetsplit simulate plan.json --model alexnet --cluster jetson-xavier-nx-4 -n 500 --out sim/",
                     "hetsplit simulate plan.json --profile prof.json --interval 0.01 --json"])
    p.add_argument("plan", help="plan or plan-set JSON; a set gives its best Pareto plan (or --index)")
    p.add_argument("--model", "-m", default=None, help="zoo name or .onnx file (default: the plan's model)")
    p.add_argument("--cluster", "-c", default=None, help="built-in cluster name or YAML (default: the plan's cluster)")
    p.add_argument("--profile", default=None, help="hetsplit.profile/1 JSON whose costs to use (instead of --model)")
    p.add_argument("--index", type=int, default=None, help="which plan of a plan set")
    p.add_argument("--inputs", "-n", type=int, default=100, help="inputs streamed (default 100)")
    p.add_argument("--interval", type=float, default=0.0, metavar="S",
                   help="seconds between arrivals (default 0: all inputs waiting at t=0, a saturated stream)")
    p.add_argument("--link-order", choices=LINK_ORDERS, default="input",
                   help="which ready message a link sends first: input (lowest input first, as devices do and "
                        "as the runtime's workers send; default) or fifo (by ready time)")
    p.add_argument("--out", "-o", default=None, metavar="DIR", help="write DIR/trace.json (Perfetto) and DIR/gantt.png")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.estimate.evaluate import evaluate
    from hetsplit.estimate.simulate import SimOptions, simulate_plan
    from hetsplit.workflow import load_plan_problem, output_dir

    options = SimOptions(inputs=args.inputs, interval_s=args.interval, keep_timeline=args.out is not None,
                         link_order=args.link_order)
    out = output_dir(args.out)
    with progress(f"loading {args.plan}"):
        plan, problem = load_plan_problem(args.plan, args.index, args.model, args.cluster, args.profile,
                                          input_shapes(args))
    with progress(f"simulating {args.inputs} inputs"):
        result = simulate_plan(problem, plan, options)
    predicted = evaluate(problem, plan)
    console = wide_console(stderr=args.json)
    title = f"{problem.graph.name} on {problem.cluster.name} ({plan.algorithm or 'plan'})"
    if args.json:
        json.dump({"model": problem.graph.name, "cluster": problem.cluster.name, **result.summary(),
                   "closed_form": predicted.to_dict()}, sys.stdout, indent=1)
        print()
    else:
        print_simulation(result, predicted, title, console)
    if out is not None:
        from hetsplit.report.trace import write_trace
        from hetsplit.report.gantt import gantt_plot

        written = [write_trace(result, out / "trace.json", title), gantt_plot(result, out / "gantt.png", title)]
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0


def print_simulation(result, predicted: Metrics, title: str, console: Console) -> None:
    """The simulated figures beside the closed form's, then every resource's utilization."""
    t = Table(title=f"{title}: {result.inputs} inputs simulated ({result.events:,} events)")
    for col in ("metric", "simulated", "closed form"):
        t.add_column(col, justify="right")
    s = lambda v: format_quantity(v, "s")  # noqa: E731
    rows = [("throughput (steady state)", f"{result.throughput:.4g}/s", f"{predicted.throughput:.4g}/s"),
            ("latency, one input alone", s(result.unloaded_latency_s), s(predicted.latency_s)),
            ("latency p50 under load", s(result.latency_percentile(50)), "-"),
            ("latency p90 under load", s(result.latency_percentile(90)), "-"),
            ("latency p99 under load", s(result.latency_percentile(99)), "-"),
            ("latency max under load", s(float(result.latency_s.max())), "-"),
            ("makespan", s(result.makespan_s), "-"),
            ("energy / inference", format_quantity(result.energy_j, "J"), format_quantity(predicted.energy_j, "J"))]
    for row in rows:
        t.add_row(*row)
    console.print(t)
    u = Table(title="utilization (busy / makespan)")
    for col in ("resource", "kind", "busy", "utilization"):
        u.add_column(col, justify="right")
    util = result.utilization
    for name, kind in zip(result.resources, result.resource_kinds):
        u.add_row(name, kind, s(result.busy_s[name]), f"{util[name]:.1%}")
    console.print(u)
