"""hetsplit demo: ResNet-152 on a heterogeneous CPU+GPU+CIM cluster against a single GPU."""

from __future__ import annotations

from hetsplit.cli.common import add_command, progress
from hetsplit.report.console import wide_console
from hetsplit.report.files import write_plan_outputs
from hetsplit.report.tables import (
    describe_params,
    describe_stages,
    print_plans,
    thin_front,
)
from hetsplit.search import partitioner_names
from hetsplit.search.pareto_exact import compare_to_front
from hetsplit.workflow import (
    PlanRequest,
    compare_to,
    find_plans,
    load_problem,
    output_dir,
    report_details,
)

DEMO_MODEL = "resnet152"
DEMO_CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"
FRONT_ROWS = 8  # front plans shown in the table (all are in plans.json)


def register(sub) -> None:
    p = add_command(sub, "demo", "plan ResNet-152 on a built-in CPU+GPU+CIM cluster and compare with one GPU",
                    ["hetsplit demo", "hetsplit demo --out demo-out/",
                     "hetsplit demo --model vgg19 --cluster donna-2cpu-2gpu-hb-wcc"])
    p.add_argument("--model", default=DEMO_MODEL, help=f"zoo model (default {DEMO_MODEL})")
    p.add_argument("--cluster", default=DEMO_CLUSTER, help=f"built-in cluster (default {DEMO_CLUSTER})")
    p.add_argument("--out", default=None, metavar="DIR", help="also write plans.json, pareto.png and report.html to DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    console = wide_console()
    with progress(f"loading {args.model} and {args.cluster}"):
        problem = load_problem(args.model, args.cluster)
    algos = [a for a in ("donna", "exact", "pareto") if a in partitioner_names()]
    with progress(f"searching with {', '.join(algos)}"):
        plans = find_plans(problem, PlanRequest(algorithms=algos))
    front = [p for p in plans if p.algorithm == "pareto"]
    shown = [p for p in plans if p.algorithm != "pareto"] + thin_front(front, FRONT_ROWS)
    print_plans(shown, f"{problem.graph.name} ({problem.num_layers} layers, {problem.graph.total_macs / 1e9:.1f} "
                       f"GMAC) on {problem.cluster.name}: {len(plans)} plans, {len(shown)} shown", console)
    if front:
        donna = [p for p in plans if p.algorithm == "donna"]
        dominated = [d for d in compare_to_front(donna, front) if d.dominated]
        worst = max(dominated, key=lambda d: d.energy_saving_frac, default=None)
        console.print(f"the exact Pareto front has {len(front)} plans ({len(thin_front(front, FRONT_ROWS))} shown); "
                      f"{len(dominated)} of DONNA's {len(donna)} alpha plans {'is' if len(dominated) == 1 else 'are'} dominated"
                      + (f", the worst by {worst.energy_saving_frac:.0%} of its energy at equal or better "
                         f"throughput" if worst and worst.energy_saving_frac > 0 else ""))
    gpus = [p for p in plans if p.algorithm == "single" and problem.cluster.device(p.stages[0].device).kind == "gpu"]
    if not gpus:
        console.print("no single-GPU baseline in this cluster: nothing to compare against")
        return 0
    baseline = gpus[0]
    split = [c for c in compare_to(plans, baseline) if c.plan.algorithm != "single"]
    fastest = max(split, key=lambda c: (c.speedup, -c.plan.costed.energy_j))
    frugal = min(split, key=lambda c: (c.plan.costed.energy_j, -c.speedup))
    console.print(f"\nagainst one GPU ({baseline.stages[0].device}: {baseline.costed.throughput:.1f} inferences/s, "
                  f"{baseline.costed.energy_j * 1e3:.1f} mJ per inference):")
    for label, c in (("fastest split", fastest), ("most frugal split", frugal)):
        console.print(f"  {label:18s} {describe_params(c.plan):12s} {describe_stages(c.plan, 60)}: "
                      f"{c.speedup:.2f}x throughput, {c.energy_ratio:.3g}x total energy, "
                      f"{c.energy_per_device_ratio:.3g}x energy per participating device")
    out = output_dir(args.out)
    if out is not None:
        details = report_details(problem, plans)
        written = write_plan_outputs(plans, out, problem.graph.name, problem.cluster.name, details)
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0
