"""hetsplit plan MODEL|PROFILE --cluster CLUSTER: find, evaluate and compare split plans."""

from __future__ import annotations

import json
import sys

from hetsplit.cli.cmd_generate import add_executor_option
from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, int_range, progress
from hetsplit.errors import UsageError
from hetsplit.report.console import wide_console
from hetsplit.report.files import write_plan_outputs
from hetsplit.report.tables import here_table, print_plans, refine_table
from hetsplit.search import PipelineConstraints, partitioner_names
from hetsplit.search.map_opt import OBJECTIVES as MAPPING_OBJECTIVES
from hetsplit.workflow import (PlanRequest, costs_notes, load_problem, output_dir, predict_plans_here,
                               recommendation_objective, report_details, search_plans)
from hetsplit.workflow.refine import RefineOptions, refine_search


def register(sub) -> None:
    p = add_command(sub, "plan", "find the splits of a model over a cluster worth having",
                    ["hetsplit plan resnet152 --cluster donna-2cpu-1gpu-1cim-hb-wcc",
                     "hetsplit plan vgg19 --cluster my-cluster.yaml --algo donna --alpha 0 0.5 1 --out out/",
                     "hetsplit plan profile.json --cluster donna-2cpu-2gpu-pcie5 --json > plans.json",
                     "hetsplit plan resnet18 --cluster imce-12 --algo lblp wb rr rd heft map-opt --time-budget 30",
                     "hetsplit plan yolov8n --cluster jetson-xavier-nx-4 --algo heft peft map-opt --objective latency",
                     "hetsplit plan yolov8n --cluster jetson-xavier-nx-4 --algo map-pareto --time-budget 20",
                     "hetsplit plan tinyllama-42m --cluster siracusa-8 --algo tensor-parallel exact --decode 128",
                     "hetsplit plan resnet50 --cluster local --algo exact map-opt --refine 3"])
    p.add_argument("model", help="zoo name, .onnx file, hetsplit.profile/1 .json file, or an LLM checkpoint (.gguf "
                                 "file or Hugging Face Llama folder)")
    p.add_argument("--cluster", "-c", required=True, help="built-in cluster name (see `hetsplit clusters`) or YAML")
    p.add_argument("--algo", "-a", nargs="+", default=["donna"], metavar="ALGO",
                   help=f"one or more of: {', '.join(partitioner_names())} (default: donna)")
    p.add_argument("--alpha", type=float, nargs="+", default=None, metavar="A",
                   help="DONNA's weights (1 = throughput, 0 = energy); default 0 0.2 ... 1")
    p.add_argument("--first-device", nargs="+", default=None, metavar="DEVICE",
                   help="devices allowed to run the first stage (e.g. the edge devices)")
    p.add_argument("--last-device", nargs="+", default=None, metavar="DEVICE",
                   help="devices allowed to run the last stage")
    p.add_argument("--ignore-memory", action="store_true", help="do not drop stages that overflow memory")
    p.add_argument("--no-baselines", action="store_true", help="leave out the single-device plans")
    p.add_argument("--seed", type=int, default=0, help="seed for stochastic algorithms")
    p.add_argument("--time-budget", type=float, default=None, metavar="S",
                   help="seconds each algorithm may take (map-opt, map-pareto: default 10; others: none). Once "
                        "spent, donna, pareto and bruteforce return their best plans so far, marked as cut (not "
                        "proven optimal); the other DPs and heuristics stop with an error naming the algorithm")
    p.add_argument("--objective", choices=MAPPING_OBJECTIVES, default=None,
                   help="what map-opt optimizes: throughput (default), latency (one input) or energy; memory is "
                        "always respected (map-pareto: the front over all three)")
    p.add_argument("--decode", type=int, default=None, metavar="S",
                   help="Transformers: plan one autoregressive step with a KV cache of S positions "
                        "(default: the exported pass over all its tokens, prompt mode)")
    p.add_argument("--chips", type=int, default=None, metavar="N",
                   help="tensor-parallel: split over the first N devices (default: all)")
    p.add_argument("--tree", type=int, default=None, metavar="K",
                   help="tensor-parallel: all-reduce in groups of K, 0 = flat (default 4, as Bochem et al.)")
    p.add_argument("--recalibrate", action="store_true",
                   help="measure this machine's local devices anew (else their calibration is cached per machine)")
    p.add_argument("--refine", type=int_range(1), default=None, metavar="K",
                   help="measure the K best plans (and the single-device ones) here: their sub-models run segment "
                        "by segment on this machine's cores (the local cluster's devices; other devices keep their "
                        "modelled figures), re-estimated with the measured segments and re-ranked")
    p.add_argument("--streams", type=int_range(1, 4096), default=1, metavar="B",
                   help="an LLM checkpoint: plan for B generations decoding at once (their tokens/s together; "
                        "each stream's KV cache on every stage)")
    p.add_argument("--prompt-tokens", type=int_range(1), default=None, metavar="S",
                   help="an LLM checkpoint: plan for a prompt of S tokens (default 32)")
    p.add_argument("--tokens", type=int_range(1), default=None, metavar="N",
                   help="an LLM checkpoint: plan for N new tokens (default 96; every stage's KV cache holds S + N "
                        "positions)")
    add_executor_option(p)
    p.add_argument("--out", "-o", default=None, metavar="DIR", help="write DIR/plans.json, DIR/pareto.png and DIR/report.html")
    p.add_argument("--json", action="store_true", help="print the plan set as JSON")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.graph.llm.load import is_checkpoint

    if is_checkpoint(args.model):       # an LLM checkpoint (GGUF, Hugging Face folder): cli.cmd_generate plans it
        from hetsplit.cli.cmd_generate import PLAN_PROMPT, PLAN_TOKENS, LlmPlanRequest, plan_gguf

        return plan_gguf(args.model, args.cluster, "ttft" if args.objective == "latency" else "decode", args.json,
                         args.out, LlmPlanRequest(args.streams, args.prompt_tokens or PLAN_PROMPT,
                                                  args.tokens or PLAN_TOKENS, args.executor))
    if args.executor != "torch":
        raise UsageError("--executor: only for an LLM checkpoint (a model's sub-models run on onnxruntime, a GPU's "
                         "on its CUDA provider or torch)")
    if args.streams != 1:
        raise UsageError("--streams: only for an LLM checkpoint, a .gguf file or a Hugging Face folder (the "
                         "generations of an LLM decoding at once)")
    if args.prompt_tokens is not None or args.tokens is not None:
        raise UsageError("--prompt-tokens and --tokens: only for an LLM checkpoint, a .gguf file or a Hugging Face "
                         "folder (an LLM's prompt and new tokens)")
    console = wide_console(stderr=args.json)
    constraints = PipelineConstraints(
        first_stage_devices=tuple(args.first_device) if args.first_device else None,
        last_stage_devices=tuple(args.last_device) if args.last_device else None,
        enforce_memory=not args.ignore_memory)
    request = PlanRequest(algorithms=args.algo, alphas=args.alpha, constraints=constraints,
                          baselines=not args.no_baselines, seed=args.seed,
                          time_budget_s=args.time_budget, chips=args.chips, tree=args.tree, objective=args.objective)
    out = output_dir(args.out)
    with progress(f"loading {args.model} and {args.cluster}"):
        problem = load_problem(args.model, args.cluster, args.decode, args.recalibrate, input_shapes(args))
    with progress(f"searching ({', '.join(args.algo)})"):
        found = search_plans(problem, request)
    plans = found.plans
    refined = None
    if args.refine:
        with progress(f"measuring the {args.refine} best plan(s) here, segment by segment (--refine)"):
            refined = refine_search(problem, found, RefineOptions(args.refine,
                                                                  objective=recommendation_objective(request)))
    figures = refined.labels(len(plans)) if refined is not None else {i: "modelled" for i in range(len(plans))}
    if args.json:
        refused = [{"algorithm": a, "reason": why} for a, why in found.refusals.items()]
        rec = {"recommendation": found.recommendation.to_dict()} if found.recommendation is not None else {}
        json.dump({"format": "hetsplit.planset/1", "plans": [p.to_dict() for p in plans],
                   **({"refused": refused} if refused else {}), **rec,
                   **({"refine": refined.to_dict()} if refined is not None else {})}, sys.stdout, indent=1)
        print()
    else:
        print_plans(plans, f"{problem.graph.name} on {problem.cluster.name} "
                           f"({problem.num_layers} layers, {problem.num_devices} devices)", console, found.front,
                    found.recommendation, figures)
        if refined is not None and refined.plans:
            console.print(refine_table(refined, plans, "refined: the best plans measured here, segment by segment"))
    if refined is None:
        console.print("note: segment figures are modelled (each segment's call, boundary bytes and unfused layers "
                      "charged by the cost table); --refine K measures the K best plans' segments here",
                      markup=False, highlight=False)
    for note in refined.notes if refined is not None else []:
        console.print(f"note: {note}", markup=False, highlight=False)
    for note in costs_notes(problem):
        console.print(f"note: {note}", markup=False, highlight=False)
    for note in found.notes:
        console.print(f"note: {note}", markup=False, highlight=False)
    for algorithm, why in found.refusals.items():
        console.print(f"note: {algorithm} refused, its plans are missing: {why}", markup=False, highlight=False)
    here = None
    if refined is not None and refined.plans:
        console.print("note: the run-here table is left out with --refine: the refined plans' figures are "
                      "measured here already", markup=False, highlight=False)
    else:
        with progress("costing the plans for this machine's processes (the runtime's own costs: measured on first "
                      "use, ~20 s)"):
            here = predict_plans_here(problem, plans, recalibrate=args.recalibrate)
    if here is not None:
        if here.predictions:
            console.print(here_table(here, plans, f"run here: the workers and the driver share "
                                                  f"{here.predictions[0][1].cores} core(s), each message costs "
                                                  "the runtime CPU"))
        for note in here.notes(args.model):
            console.print(f"note: {note}", markup=False, highlight=False)
    if out is not None:
        written = write_plan_outputs(plans, out, problem.graph.name, problem.cluster.name,
                                     report_details(problem, plans, recommendation=found.recommendation),
                                     found.front)
        console.print("wrote " + ", ".join(str(p) for p in written))
    return 0
