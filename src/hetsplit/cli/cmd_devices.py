"""hetsplit devices [PRESET]: list device and medium presets with their key figures, or one with sources."""

from __future__ import annotations

import json
import sys

from rich.table import Table

from hetsplit.cli.common import add_command
from hetsplit.cluster import load_preset, preset_names
from hetsplit.cluster.describe import preset_key_figures, preset_to_dict
from hetsplit.report.console import wide_console
from hetsplit.units import format_bytes, format_quantity


def register(sub) -> None:
    p = add_command(sub, "devices", "list device and medium presets with key figures, or one preset with sources",
                    ["hetsplit devices", "hetsplit devices --json", "hetsplit devices rtx3070ti",
                     "hetsplit devices gbe --json", "hetsplit devices ./calibrated-cpu.yaml"])
    p.add_argument("preset", nargs="?", help="preset name or preset YAML file: show every figure and its source")
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.preset is not None:
        doc = preset_to_dict(load_preset(args.preset))
        if args.json:
            json.dump(doc, sys.stdout, indent=1, default=str)
            print()
        else:
            _show(doc)
        return 0
    rows = [preset_key_figures(load_preset(n)) for n in preset_names()]
    if args.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    console = wide_console()
    devices = Table(title="device presets (hetsplit devices NAME shows sources)", header_style="bold")
    for col in ("name", "kind", "model", "peak", "memory", "mem BW", "power"):
        devices.add_column(col, justify="left" if col in ("name", "kind", "model") else "right", no_wrap=True)
    media = Table(title="media", header_style="bold")
    for col in ("name", "bandwidth", "latency", "energy", "description"):
        media.add_column(col, justify="left" if col in ("name", "description") else "right",
                         no_wrap=col != "description")
    for r in rows:
        if r["kind"] == "medium":
            media.add_row(r["name"], format_quantity(r["bandwidth"], "B/s"), format_quantity(r["latency_s"], "s"),
                          format_quantity(r["energy_per_byte"], "J/B"), r["description"])
        else:
            devices.add_row(r["name"], r["kind"], r["model"], _q(r["peak_macs"], "MAC/s"),
                            format_bytes(r["memory_bytes"]), _q(r["mem_bandwidth"], "B/s"), _q(r["power_active"], "W"))
    console.print(devices)
    console.print(media)
    return 0


def _q(value, unit: str) -> str:
    return "-" if not isinstance(value, (int, float)) else format_quantity(float(value), unit)


def _show(doc: dict) -> None:
    console = wide_console()
    console.print(f"[bold]{doc['name']}[/bold] ({doc['kind']}{', model ' + doc['model'] if doc.get('model') else ''})"
                  f" — {doc['path']}")
    if doc["description"]:
        console.print(doc["description"])
    table = Table(header_style="bold")
    for col in ("figure", "as written", "source"):
        table.add_column(col, overflow="fold")
    for f in doc["figures"]:
        table.add_row(f["key"], str(f["written"]), f["source"])
    console.print(table)
    for ref in doc["references"]:
        console.print(f"  - {ref}")
    if doc["notes"]:
        console.print(doc["notes"])
