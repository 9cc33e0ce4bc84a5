"""hetsplit explore MODEL --cluster C --encoding naive|advanced|spe: NSGA-II over hybrid mappings."""

from __future__ import annotations

from hetsplit.cli.common import add_command, progress
from hetsplit.report.console import wide_console
from hetsplit.report.files import write_explore_outputs
from hetsplit.report.tables import print_plans
from hetsplit.search.encodings import ENCODINGS
from hetsplit.search.explore import OBJECTIVES, THESIS_OBJECTIVES, ExploreOptions, explore
from hetsplit.workflow import load_problem, output_dir


def register(sub) -> None:
    p = add_command(sub, "explore", "search hybrid (vertical + LOP) splits with NSGA-II and show the Pareto set",
                    ["hetsplit explore alexnet --cluster jetson-xavier-nx-8-cpu --encoding advanced --splits 2",
                     "hetsplit explore densenet121 --cluster jetson-xavier-nx-8 --encoding naive --pop 1000 --gens 100",
                     "hetsplit explore vgg16 -c jetson-xavier-nx-8 --encoding spe --objectives throughput energy "
                     "--out out/vgg-spe"])
    p.add_argument("model", help="zoo name or .onnx file")
    p.add_argument("--cluster", "-c", required=True, help="built-in cluster name (see `hetsplit clusters`) or YAML")
    p.add_argument("--encoding", "-e", choices=ENCODINGS, default="advanced",
                   help="naive (thesis 4.2.1), advanced (p x n split points, thesis 4.2.2), spe (vertical only)")
    p.add_argument("--splits", "-p", type=int, default=2, metavar="P", help="most LOP splits per layer (advanced)")
    p.add_argument("--objectives", nargs="+", default=list(THESIS_OBJECTIVES), choices=list(OBJECTIVES),
                   metavar="OBJ", help=f"any of {', '.join(OBJECTIVES)} (default: the thesis's three)")
    p.add_argument("--pop", type=int, default=100, help="population size (the thesis: 1000)")
    p.add_argument("--gens", type=int, default=100, help="generations (the thesis: 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", "-o", default=None, metavar="DIR",
                   help="write DIR/plans.json, convergence.png, hypervolume.png and report.html")
    p.set_defaults(func=run)


def run(args) -> int:
    from rich.progress import Progress

    console = wide_console()
    options = ExploreOptions(encoding=args.encoding, splits=args.splits, objectives=tuple(args.objectives),
                             pop_size=args.pop, generations=args.gens, seed=args.seed)
    out = output_dir(args.out)
    with progress(f"loading {args.model} and {args.cluster}"):
        problem = load_problem(args.model, args.cluster)
    with Progress(console=wide_console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"NSGA-II {args.encoding}", total=args.gens)
        result = explore(problem, options, lambda done, total: bar.update(task, completed=done))
    label = f"{args.encoding}" + (f" p={args.splits}" if args.encoding == "advanced" else "")
    hv = result.hypervolumes()
    print_plans(result.plans, f"{problem.graph.name} on {problem.cluster.name}: NSGA-II {label}, "
                              f"{len(result.plans)} Pareto plans", console)
    console.print(f"{result.evaluations} evaluations in {result.seconds:.1f} s ({result.evaluations_per_s:,.0f} "
                  f"evaluations/s in the batch evaluator; {result.genes} genes); hypervolume {hv[0]:.4f} -> {hv[-1]:.4f}")
    console.print("objectives minimized: " + ", ".join(options.objectives) + " (Pareto over these, not the ★ pair)")
    if out is not None:
        written = write_explore_outputs(result.plans, result.best, hv, options.objectives, out, problem.graph.name,
                                        problem.cluster.name, label, encoding=args.encoding, seed=args.seed)
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0
