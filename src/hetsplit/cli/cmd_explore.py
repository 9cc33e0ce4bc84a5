"""hetsplit explore MODEL --cluster C --encoding naive|advanced|spe|ne: NSGA-II over hybrid mappings;
``--hierarchical``: Guo et al.'s multi-stage two-level exploration with real measured runs."""

from __future__ import annotations

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, progress
from hetsplit.errors import InfeasibleError, UsageError
from hetsplit.report.console import wide_console
from hetsplit.report.files import write_explore_outputs, write_hierarchical_outputs
from hetsplit.report.tables import print_plans
from hetsplit.search.encodings import ENCODINGS
from hetsplit.search.explore import OBJECTIVES, THESIS_OBJECTIVES, ExploreOptions, explore
from hetsplit.units import parse_duration
from hetsplit.workflow import load_problem, output_dir, stamp_plans


def register(sub) -> None:
    p = add_command(sub, "explore", "search hybrid (vertical + LOP) splits with NSGA-II and show the Pareto set",
                    ["hetsplit explore alexnet --cluster jetson-xavier-nx-8-cpu --encoding advanced --splits 2",
                     "hetsplit explore densenet121 --cluster jetson-xavier-nx-8 --encoding naive --pop 1000 --gens 100",
                     "hetsplit explore vgg16 -c jetson-xavier-nx-8 --encoding spe --objectives throughput energy "
                     "--out out/vgg-spe",
                     "hetsplit explore resnet101 -c jetson-xavier-nx-4 --hierarchical --budget 10m --out out/hier"])
    p.add_argument("model", help="zoo name or .onnx file")
    p.add_argument("--cluster", "-c", required=True, help="built-in cluster name (see `hetsplit clusters`) or YAML")
    p.add_argument("--encoding", "-e", choices=ENCODINGS, default=None,
                   help="naive (thesis 4.2.1), advanced (p x n split points, thesis 4.2.2; the default), spe "
                        "(vertical only; the default with --hierarchical), ne (a device per whole layer)")
    p.add_argument("--splits", "-p", type=int, default=2, metavar="P", help="most LOP splits per layer (advanced)")
    p.add_argument("--objectives", nargs="+", default=list(THESIS_OBJECTIVES), choices=list(OBJECTIVES),
                   metavar="OBJ", help=f"any of {', '.join(OBJECTIVES)} (default: the thesis's three)")
    p.add_argument("--pop", type=int, default=100, help="population size (the thesis: 1000)")
    p.add_argument("--gens", type=int, default=100, help="generations (the thesis: 100)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", "-o", default=None, metavar="DIR",
                   help="write DIR/plans.json, convergence.png, hypervolume.png and report.html "
                        "(--hierarchical: search_time.png instead of the generation plots)")
    h = p.add_argument_group("hierarchical (Guo et al.): analytical NSGA-II, then NSGA-II on real runs")
    h.add_argument("--hierarchical", action="store_true",
                   help="K stages on 2, 4, ... devices, each an analytical level (--pop x --gens) and a measured "
                        "level (every plan run for real, workers throttled to their devices' speeds)")
    h.add_argument("--stages", type=int, default=None, metavar="K", help="stages (default ceil(log2 devices))")
    h.add_argument("--measured-pop", type=int, default=8, help="population of the measured level (default 8)")
    h.add_argument("--measured-only", action="store_true",
                   help="no analytical level (with --stages 1: the paper's one-stage baselines)")
    h.add_argument("--budget", default="10m", help="wall-clock budget of the search: 20m, 600s, 1h (default 10m)")
    h.add_argument("--inputs", "-n", type=int, default=4,
                   help="inputs streamed per measured run (default 4; the spread of their outputs' spacing is kept)")
    h.add_argument("--no-emulate", action="store_true",
                   help="run every worker at this machine's speed (no cgroup throttling to the devices' speeds)")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    if args.hierarchical:
        return run_hierarchical(args)
    from rich.progress import Progress

    console = wide_console()
    encoding = args.encoding or "advanced"
    options = ExploreOptions(encoding=encoding, splits=args.splits, objectives=tuple(args.objectives),
                             pop_size=args.pop, generations=args.gens, seed=args.seed)
    out = output_dir(args.out)
    with progress(f"loading {args.model} and {args.cluster}"):
        problem = load_problem(args.model, args.cluster, input_shapes=input_shapes(args))
    with Progress(console=wide_console(stderr=True), transient=True) as bar:
        task = bar.add_task(f"NSGA-II {encoding}", total=args.gens)
        result = explore(problem, options, lambda done, total: bar.update(task, completed=done))
    stamp_plans(problem, result.plans)
    label = f"{encoding}" + (f" p={args.splits}" if encoding == "advanced" else "")
    hv = result.hypervolumes()
    print_plans(result.plans, f"{problem.graph.name} on {problem.cluster.name}: NSGA-II {label}, "
                              f"{len(result.plans)} Pareto plans", console)
    console.print(f"{result.evaluations} evaluations in {result.seconds:.1f} s ({result.evaluations_per_s:,.0f} "
                  f"evaluations/s in the batch evaluator; {result.genes} genes); hypervolume {hv[0]:.4f} -> {hv[-1]:.4f}")
    console.print("objectives minimized: " + ", ".join(options.objectives) + " (Pareto over these, not the ★ pair)")
    if out is not None:
        written = write_explore_outputs(result.plans, result.best, hv, options.objectives, out, problem.graph.name,
                                        problem.cluster.name, label, encoding=encoding, seed=args.seed)
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0


def run_hierarchical(args) -> int:
    from hetsplit.experiments.hierdse import MeasureOptions, explore_measured
    from hetsplit.search.hierarchical import HierarchicalOptions

    console = wide_console()
    encoding = args.encoding or "spe"
    if encoding not in ("spe", "ne"):
        raise UsageError(f"--hierarchical encodes with spe or ne, not {encoding!r}")
    options = HierarchicalOptions(encoding=encoding, stages=args.stages, analytic=not args.measured_only,
                                  analytic_pop=args.pop, analytic_gens=args.gens, measured_pop=args.measured_pop,
                                  budget_s=parse_duration(args.budget, "--budget"), seed=args.seed)
    measure = MeasureOptions(inputs=args.inputs, emulate_devices=not args.no_emulate)
    out = output_dir(args.out)
    err = wide_console(stderr=True)

    def on_point(p) -> None:
        f = p.objectives
        what = p.measurement.error or (f"{1 / f[0]:.4g}/s, {f[1] / 1e6:.0f} MB, {f[2]:.3g} J per device "
                                       f"(run took {p.measurement.seconds:.1f} s)")
        err.print(f"[{p.t_s:6.0f} s] stage {p.stage} ({p.devices} devices): {what}")

    problem, result = explore_measured(args.model, args.cluster, options, measure, on_point, input_shapes(args))
    if not result.plans:  # found nothing is no success
        raise InfeasibleError(f"no plan measured within --budget {args.budget} ({len(result.points)} runs measured, "
                              "none gave a plan); give a longer --budget")
    stamp_plans(problem, result.plans)
    label = f"hierarchical {encoding}, {len(result.stages)} stage(s)"
    print_plans(result.plans, f"{problem.graph.name} on {problem.cluster.name}: {label}, {len(result.plans)} "
                              "measured Pareto plans (metrics: the cost model; measured values in the plan JSON)",
                console)
    for s in result.stages:
        console.print(f"stage {s.stage}: {s.devices} devices, {s.analytic_front} analytical Pareto plans in "
                      f"{s.analytic_seconds:.1f} s, {s.measured} plans run in {s.generations} generations, "
                      f"{s.seconds:.0f} s")
    console.print(f"{len(result.points)} plans measured in {result.seconds:.0f} s (budget {options.budget_s:.0f} s)")
    if out is not None:
        written = write_hierarchical_outputs(result, out, problem.graph.name, problem.cluster.name, label)
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0
