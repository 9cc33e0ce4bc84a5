"""hetsplit clusters [NAME|FILE]: list the built-in clusters, or show one cluster's devices and links."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from rich.table import Table

from hetsplit.cli.common import add_command
from hetsplit.cluster import builtin_names, builtin_spec, load_cluster
from hetsplit.cluster.describe import cluster_to_dict, spec_summary
from hetsplit.report.console import wide_console
from hetsplit.units import format_bytes, format_quantity


def register(sub) -> None:
    p = add_command(sub, "clusters", "list the built-in clusters, or show one cluster's devices and links",
                    ["hetsplit clusters", "hetsplit clusters --json",
                     "hetsplit clusters donna-edge-4cim-cloud-gpu",
                     "hetsplit clusters siracusa-8 --yaml > my-cluster.yaml   # a file to edit",
                     "hetsplit clusters my-cluster.yaml --json"])
    p.add_argument("cluster", nargs="?", help="built-in cluster name or cluster YAML file to show")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--yaml", action="store_true", help="print a built-in cluster as YAML (a start for your own file)")
    p.set_defaults(func=run)


def run(args) -> int:
    if args.yaml:
        if args.cluster is None:
            print("hetsplit clusters: --yaml needs a built-in cluster name", file=sys.stderr)
            return 2
        print(yaml.safe_dump(builtin_spec(args.cluster), sort_keys=False, width=120, default_flow_style=None), end="")
        return 0
    if args.cluster is None:
        return _list(args.json)
    doc = cluster_to_dict(load_cluster(args.cluster))
    if args.json:
        json.dump(doc, sys.stdout, indent=1)
        print()
        return 0
    _show(doc)
    return 0


def _list(as_json: bool) -> int:
    rows = [spec_summary(builtin_spec(n)) for n in builtin_names()]
    if as_json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return 0
    table = Table(title="built-in clusters (hetsplit clusters NAME shows one)", header_style="bold")
    for col in ("name", "devices", "kinds", "media", "groups", "source"):
        table.add_column(col, justify="right" if col in ("devices", "groups") else "left",
                         no_wrap=col not in ("kinds", "media"))
    for r in rows:
        mix = " + ".join(f"{n} {kind}" for kind, n in r["kinds"].items())
        table.add_row(r["name"], str(r["devices"]), mix, ", ".join(r["media"]) or "-", str(r["groups"] or "-"),
                      r["source"] or "-")
    wide_console().print(table)
    return 0


def _show(doc: dict) -> None:
    console = wide_console()
    console.print(f"[bold]{doc['name']}[/bold] ({doc['origin']})")
    if doc["description"]:
        console.print(doc["description"])
    table = Table(title="devices", header_style="bold")
    for col in ("name", "kind", "type", "preset", "model", "memory", "group"):
        table.add_column(col, justify="right" if col == "memory" else "left")
    for d in doc["devices"]:
        table.add_row(d["name"], d["kind"], d["type"], d["preset"] or "-",
                      f"profile {Path(d['profile']).name}" if d.get("profile") else d["model"],
                      format_bytes(d["memory_bytes"]), d["group"] or "-")
    console.print(table)
    links = Table(title="links", header_style="bold")
    for col in ("medium", "bandwidth", "latency", "energy", "directed pairs"):
        links.add_column(col, justify="left" if col == "medium" else "right")
    for link in doc["links"]:
        links.add_row(link["medium"], format_quantity(link["bandwidth"], "B/s"),
                      format_quantity(link["latency_s"], "s"), format_quantity(link["energy_per_byte"], "J/B"),
                      str(link["pairs"]))
    if doc["links"]:
        console.print(links)
    console.print(f"source: {doc['source'] or '-'}   sink: {doc['sink'] or '-'}   "
                  f"groups: {', '.join(doc['groups']) or '-'}")
