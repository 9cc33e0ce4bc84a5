"""hetsplit calibrate --device NAME PROFILES...: fit a device model to measured profiles, report accuracy."""

from __future__ import annotations

import json
from pathlib import Path

from rich.table import Table

from hetsplit.cli.common import add_command, progress
from hetsplit.errors import HetsplitError
from hetsplit.report.console import wide_console
from hetsplit.units import format_quantity
from hetsplit.outpath import write_text


def register(sub) -> None:
    p = add_command(sub, "calibrate", "fit a device's per-layer cost model to measured profiles and test it on held-out ones",
                    ["hetsplit calibrate --device local-cpu resnet8.json vgg16.json --holdout resnet18.json "
                     "--out local-cpu-calibrated.yaml",
                     "hetsplit calibrate --device local-cpu profiles/*.json --report accuracy.json",
                     "python bench/calibration_accuracy.py   # measure 12 zoo CNNs here, fit 5, test the rest"])
    p.add_argument("profiles", nargs="+", help="hetsplit.profile/1 files measured with `hetsplit profile` (the fit set)")
    p.add_argument("--device", required=True, help="device type column of the profiles (e.g. local-cpu)")
    p.add_argument("--holdout", nargs="*", default=[], metavar="PROFILE", help="profiles kept out of the fit, to test it")
    p.add_argument("--name", default=None, help="name of the calibrated preset (default: DEVICE-calibrated)")
    p.add_argument("--out", default=None, metavar="FILE.yaml", help="write the calibrated device preset here")
    p.add_argument("--report", default=None, metavar="FILE.json", help="write the accuracy report as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import yaml

    from hetsplit.costs.calibration import evaluate, fit, load_measured, preset_document
    from hetsplit.costs.profiler import resolve_device
    from hetsplit.outpath import output_file

    output_file(args.out)
    output_file(args.report)
    with progress("loading profiles"):
        train = load_measured(args.profiles, args.device)
        held = load_measured(args.holdout, args.device)
    fitted = fit(train)
    rows = [("fit", evaluate(fitted, m)) for m in train] + [("held out", evaluate(fitted, m)) for m in held]
    show(rows)
    name = args.name or f"{args.device}-calibrated"
    if args.out:
        try:
            base = resolve_device(args.device)
            kind, memory = base.kind, base.memory_bytes
        except HetsplitError:  # a device type that is neither local nor a preset: a CPU of unknown memory
            kind, memory = "cpu", float(2**34)
        doc = preset_document(fitted, name, kind, memory, args.device)
        write_text(Path(args.out), yaml.safe_dump(doc, sort_keys=False, width=120))
        wide_console().print(f"wrote {args.out} (preset {name!r}; name it in a cluster as preset: {args.out})")
    if args.report:
        write_text(args.report, json.dumps({"device": args.device, "coefficients": fitted.coefficients,
                                           "terms": fitted.terms,
                                           "rows": [{"set": s, **a.row()} for s, a in rows]}, indent=1))
        wide_console().print(f"wrote {args.report}")
    return 0


def show(rows) -> None:
    table = Table(title="calibration accuracy (layer times scaled to the measured whole-model time)",
                  header_style="bold")
    for col in ("set", "model", "measured", "predicted", "whole error", "layer MAPE", "layers within ±10%",
                "time-weighted layer error"):
        table.add_column(col, justify="left" if col in ("set", "model") else "right")
    for label, a in rows:
        table.add_row(label, a.model, format_quantity(a.whole_measured_s, "s"), format_quantity(a.whole_predicted_s, "s"),
                      f"{a.whole_error * 100:+.1f}%", f"{a.layer_mape * 100:.1f}%",
                      f"{a.within_10 * 100:.0f}% of {a.layers - a.zero_layers}", f"{a.weighted_layer_error * 100:.1f}%")
    wide_console().print(table)
