"""hetsplit demo: ResNet-152 on a heterogeneous CPU+GPU+CIM cluster against a single GPU."""

from __future__ import annotations

from hetsplit.cli.common import add_command, progress
from hetsplit.plan import save_plans
from hetsplit.report.tables import wide_console, describe_params, describe_stages, print_plans
from hetsplit.search import partitioner_names
from hetsplit.workflow import PlanRequest, compare_to, find_plans, load_problem, output_dir

DEMO_MODEL = "resnet152"
DEMO_CLUSTER = "donna-2cpu-1gpu-1cim-hb-wcc"


def register(sub) -> None:
    p = add_command(sub, "demo", "plan ResNet-152 on a built-in CPU+GPU+CIM cluster and compare with one GPU",
                    ["hetsplit demo", "hetsplit demo --out demo-out/",
                     "hetsplit demo --model vgg19 --cluster donna-2cpu-2gpu-hb-wcc"])
    p.add_argument("--model", default=DEMO_MODEL, help=f"zoo model (default {DEMO_MODEL})")
    p.add_argument("--cluster", default=DEMO_CLUSTER, help=f"built-in cluster (default {DEMO_CLUSTER})")
    p.add_argument("--out", default=None, metavar="DIR", help="also write plans.json and pareto.png to DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    console = wide_console()
    with progress(f"loading {args.model} and {args.cluster}"):
        problem = load_problem(args.model, args.cluster)
    algos = [a for a in ("donna", "exact", "pareto") if a in partitioner_names()]
    with progress(f"searching with {', '.join(algos)}"):
        plans = find_plans(problem, PlanRequest(algorithms=algos))
    print_plans(plans, f"{problem.graph.name} ({problem.num_layers} layers, "
                       f"{problem.graph.total_macs / 1e9:.1f} GMAC) on {problem.cluster.name}", console)
    gpus = [p for p in plans if p.algorithm == "single" and
            problem.cluster.device(p.stages[0].device).kind == "gpu"]
    if not gpus:
        console.print("no single-GPU baseline in this cluster: nothing to compare against")
        return 0
    baseline = gpus[0]
    split = [c for c in compare_to(plans, baseline) if c.plan.algorithm != "single"]
    fastest = max(split, key=lambda c: c.speedup)
    frugal = min(split, key=lambda c: c.plan.metrics.energy_j)
    console.print(f"\nagainst one GPU ({baseline.stages[0].device}: {baseline.metrics.throughput:.1f} inferences/s, "
                  f"{baseline.metrics.energy_j * 1e3:.1f} mJ per inference):")
    for label, c in (("fastest split", fastest), ("most frugal split", frugal)):
        console.print(f"  {label:18s} {describe_params(c.plan):14s} {describe_stages(c.plan)}: "
                      f"{c.speedup:.2f}x throughput, {c.energy_ratio:.2f}x total energy, "
                      f"{c.energy_per_device_ratio:.2f}x energy per participating device")
    out = output_dir(args.out)
    if out is not None:
        from hetsplit.report.plots import pareto_plot  # matplotlib only when a plot is asked for

        save_plans(plans, out / "plans.json", model=problem.graph.name, cluster=problem.cluster.name)
        pareto_plot(plans, out / "pareto.png", f"{problem.graph.name} on {problem.cluster.name}")
        console.print(f"wrote {out / 'plans.json'} and {out / 'pareto.png'}")
    return 0
