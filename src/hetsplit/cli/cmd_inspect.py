"""hetsplit inspect MODEL: layers, MACs, parameters and sizes."""

from __future__ import annotations

import json
import sys

from rich.table import Table

from hetsplit.cli.common import add_command, add_input_shape_option, input_shapes, int_range, progress
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity
from hetsplit.workflow import load_model_or_profile


def register(sub) -> None:
    p = add_command(sub, "inspect", "show a model's layers, MACs, parameters and tensor sizes",
                    ["hetsplit inspect resnet50", "hetsplit inspect model.onnx --json",
                     "hetsplit inspect profile.json --layers 20",
                     "hetsplit inspect detector.onnx --input-shape images:1,3,640,640"])
    p.add_argument("model", help="zoo name, .onnx file or hetsplit.profile/1 .json file")
    p.add_argument("--json", action="store_true", help="print the layers as JSON")
    p.add_argument("--layers", type=int_range(0), default=None, metavar="N", help="show only the first N layers")
    add_input_shape_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    with progress(f"loading {args.model}"):
        graph, _ = load_model_or_profile(args.model, input_shapes(args))
    layers = graph.layers if args.layers is None else graph.layers[: args.layers]
    cut = graph.cut_bytes
    if args.json:
        doc = {"summary": graph.summary(), "layers": [
            {"index": i, "name": l.name, "op": l.op, "onnx_ops": list(l.onnx_ops), "macs": l.macs,
             "param_bytes": l.param_bytes, "out_bytes": l.out_bytes, "cut_bytes_after": float(cut[i + 1]),
             "inputs": list(graph.predecessors[i]), "attrs": {k: v for k, v in l.attrs.items()}}
            for i, l in enumerate(layers)]}
        json.dump(doc, sys.stdout, indent=1, default=str)
        print()
        return 0
    console = wide_console()
    table = Table(title=f"{graph.name}: {graph.num_layers} layers", header_style="bold")
    for col in ("#", "layer", "op", "fused ONNX ops", "MACs", "params", "output", "live after"):
        table.add_column(col, justify="right" if col in ("#", "MACs", "params", "output", "live after") else "left")
    for i, l in enumerate(layers):
        table.add_row(str(i), l.name, l.op, "+".join(l.onnx_ops)[:32], format_quantity(l.macs, "MAC"),
                      format_quantity(l.param_bytes, "B"), format_quantity(l.out_bytes, "B"),
                      format_quantity(float(cut[i + 1]), "B"))
    console.print(table)
    s = graph.summary()
    console.print(f"total: {format_quantity(s['macs'], 'MAC')}, {format_quantity(s['param_bytes'], 'B')} of "
                  f"parameters, input {format_quantity(s['input_bytes'], 'B')}, "
                  f"output {format_quantity(s['output_bytes'], 'B')}")
    return 0
