"""hetsplit split PLAN MODEL --out DIR: one ONNX sub-model per segment of each device (a pipeline's stage
is one segment; a mapping's device, with shards and combines, has as many as it needs) plus the manifest."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, progress
from hetsplit.plan.io import load_plan
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity


def register(sub) -> None:
    p = add_command(sub, "split", "write one ONNX sub-model per device of a plan and the manifest of what moves",
                    ["hetsplit split out/plans.json resnet50 --out split/",
                     "hetsplit split plan.json model.onnx --out split/ --index 2"])
    p.add_argument("plan", help="plan or plan-set JSON (hetsplit plan --out); a set gives its best Pareto plan")
    p.add_argument("model", help="zoo name or .onnx file the plan was made for")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help="directory for the sub-models and manifest.json")
    p.add_argument("--index", type=int, default=None, help="which plan of a plan set (default: best Pareto plan)")
    p.add_argument("--cluster", "-c", default=None,
                   help="check the plan's devices against this cluster (default: the plan's own, when found)")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from hetsplit.runtime import resolve_model, split_model
    from hetsplit.workflow import load_plan_cluster, output_dir, plan_input_shapes

    output_dir(args.out)
    plan = load_plan(args.plan, args.index)
    cluster = load_plan_cluster(plan, args.cluster)
    note_unchecked(plan, cluster)
    with progress(f"loading {args.model}"):
        graph, path = resolve_model(args.model, plan_input_shapes(plan, input_shapes(args)) or None)
    with progress("splitting"):
        manifest = split_model(plan, graph, path, args.out, cluster=cluster)
    print_manifest(manifest, wide_console())
    return 0


def note_unchecked(plan, cluster) -> None:
    """Say when the plan's devices cannot be checked: its cluster was not found and none was given."""
    from hetsplit.workflow.run import unchecked_note

    if (note := unchecked_note(plan, cluster)) is not None:
        print(f"note: {note}", file=sys.stderr)


def print_manifest(manifest, console: Console) -> None:
    """One row per device: its tasks, segments (sub-models), bytes in and out per input, relays, collectives."""
    segs = sum(1 for w in manifest.stages for s in w.segments if s.submodel)
    table = Table(title=f"{manifest.model}: {len(manifest.stages)} devices, {segs} sub-models in {manifest.directory}")
    for col in ("rank", "device", "tasks", "segments", "receives", "sends", "relays", "collectives"):
        table.add_column(col)
    for w in manifest.stages:
        got = sum(m.nbytes for m in manifest.received_by(w.rank))
        sent = sum(m.nbytes for m in manifest.sent_by(w.rank))
        kinds = [manifest.collectives[c] for c in w.collectives]
        coll = ", ".join(f"{c.kind} {c.layer}" + (" (root)" if c.root == w.device else "") for c in kinds)
        relays = manifest.relays(w.rank)
        table.add_row(str(w.rank), w.device, str(len(w.tasks)), str(len(w.segments)), format_quantity(got, "B"),
                      format_quantity(sent, "B"), str(len(relays)) if relays else "", coll)
    console.print(table)
