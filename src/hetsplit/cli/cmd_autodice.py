"""hetsplit autodice export|import: plans to and from AutoDiCE's mapping.json / horizontal.json."""

from __future__ import annotations

from pathlib import Path

from hetsplit.cli.common import add_command
from hetsplit.plan.autodice import parse_keys, suggested_keys

KEYS_HELP = ("AutoDiCE device keys: DEVICE=KEY,... (e.g. nx0-gpu=nx0_gpu), or 'auto' for <host>_<kind> keys "
             "from the cluster; default: the hetsplit device names")


def register(sub) -> None:
    p = add_command(sub, "autodice", "write a plan as AutoDiCE mapping files, or read AutoDiCE mapping files as a plan",
                    ["hetsplit autodice export out/plans.json --model resnet18 --out autodice/",
                     "hetsplit autodice export plan.json --model resnet18 --keys nx0-gpu=nx0_gpu,nx1-gpu=nx1_gpu "
                     "--out autodice/",
                     "hetsplit autodice import autodice/mapping.json --model resnet18 --cluster jetson-xavier-nx-4 "
                     "--horizontal autodice/horizontal.json --out plan.json"])
    verbs = p.add_subparsers(dest="verb", metavar="export|import")
    ex = verbs.add_parser("export", help="write mapping.json (and horizontal.json) for a plan")
    ex.add_argument("plan", help="plan or plan-set file (hetsplit plan --out / --json)")
    ex.add_argument("--model", "-m", required=True, help="the plan's model: zoo name or .onnx file")
    ex.add_argument("--index", type=int, default=None, metavar="I", help="plan #I of a plan set (default: the featured one)")
    ex.add_argument("--keys", default=None, metavar="DEV=KEY,...", help=KEYS_HELP)
    ex.add_argument("--out", "-o", required=True, metavar="DIR", help="folder for mapping.json and horizontal.json")
    ex.set_defaults(func=run_export)
    im = verbs.add_parser("import", help="read mapping.json (and horizontal.json) as a hetsplit plan")
    im.add_argument("mapping", help="AutoDiCE mapping.json")
    im.add_argument("--model", "-m", required=True, help="zoo name or .onnx file the mapping names nodes of")
    im.add_argument("--cluster", "-c", required=True, help="built-in cluster name or YAML")
    im.add_argument("--horizontal", default=None, metavar="FILE", help="AutoDiCE horizontal.json (layer splits)")
    im.add_argument("--keys", default=None, metavar="DEV=KEY,...", help=KEYS_HELP)
    im.add_argument("--out", "-o", required=True, metavar="FILE", help="plan-set file to write (plans.json)")
    im.set_defaults(func=run_import)
    def usage(args: object) -> int:
        p.print_help()
        return 0

    p.set_defaults(func=usage)


def _keys(text: str | None, cluster) -> dict[str, str]:
    if text is not None and text.strip() == "auto":
        return suggested_keys(cluster)
    return parse_keys(text)


def run_export(args) -> int:
    from hetsplit.graph import load_model
    from hetsplit.outpath import output_dir
    from hetsplit.plan import load_plan
    from hetsplit.plan.autodice import write_autodice
    from hetsplit.workflow import load_plan_cluster

    out = output_dir(args.out)
    plan = load_plan(args.plan, args.index)
    graph = load_model(args.model)
    cluster = load_plan_cluster(plan, required=True) if args.keys and args.keys.strip() == "auto" else None
    written = write_autodice(plan, graph, out, _keys(args.keys, cluster))
    print("wrote " + ", ".join(str(w) for w in written))
    return 0


def run_import(args) -> int:
    from hetsplit.outpath import output_file
    from hetsplit.plan import save_plans
    from hetsplit.plan.autodice import onnx_node_aliases
    from hetsplit.workflow import import_autodice, load_problem

    out = output_file(args.out)
    problem = load_problem(args.model, args.cluster)
    aliases = None
    if Path(args.model).suffix.lower() == ".onnx":
        from hetsplit.graph.onnx_prepare import prepare_model

        aliases = onnx_node_aliases(prepare_model(args.model))
    plan = import_autodice(args.mapping, problem, args.horizontal, _keys(args.keys, problem.cluster), aliases)
    plan.pareto = True
    save_plans([plan], out)
    m = plan.metrics
    kind = "pipeline" if plan.is_pipeline else "mapping"
    print(f"{problem.graph.name} on {problem.cluster.name}: a {kind} over {len(plan.devices)} devices")
    for st in plan.work_by_device():
        print(f"  {st.device}: {len(st.layers)} layer(s), {st.layers[0]} .. {st.layers[-1]}")
    if m is not None:
        print(f"  throughput {m.throughput:.4g}/s, latency {m.latency_s * 1e3:.4g} ms, energy {m.energy_j * 1e3:.4g} mJ, "
              f"fits {m.fits}")
    print(f"wrote {out}")
    return 0
