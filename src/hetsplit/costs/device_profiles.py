"""Measured costs named by a cluster: a device's ``profile: FILE`` gives its type's cost column.

The profile must be of the model being planned at the same input shapes: its layers are matched to
the graph's one by one (name, output bytes, MACs) and the first that differs is named.
"""

from __future__ import annotations

from pathlib import Path

from hetsplit.costs.profile import Profile, load_profile
from hetsplit.costs.table import CostTable
from hetsplit.errors import ProfileError
from hetsplit.graph.types import Graph


def check_same_model(graph: Graph, profile: Profile, where: str) -> None:
    """Fail unless ``profile`` was taken of ``graph``'s model at its shapes, naming the first layer that differs."""
    mine, theirs = graph.layers, profile.graph.layers
    for i in range(max(len(mine), len(theirs))):
        if i >= len(mine) or i >= len(theirs):
            extra = theirs[i].name if i < len(theirs) else mine[i].name
            raise ProfileError(f"{where}: a profile of another model: it has {len(theirs)} layers, {graph.name!r} has "
                               f"{len(mine)}; the first without a counterpart is layer {i} ({extra!r})")
        a, b = mine[i], theirs[i]
        what = None
        if a.name != b.name:
            what = f"is {b.name!r} in the profile, {a.name!r} in the model"
        elif a.out_bytes != b.out_bytes:
            what = (f"({a.name!r}) outputs {b.out_bytes} bytes in the profile, {a.out_bytes} in the model (another "
                    "input shape or element type?)")
        elif a.macs and b.macs and a.macs != b.macs:
            what = f"({a.name!r}) computes {b.macs} MACs in the profile, {a.macs} in the model"
        if what:
            shapes = profile.meta.get("input_shapes")
            taken = f"; the profile was taken at --input-shape {_shapes(shapes)}" if shapes else ""
            given = graph.meta.get("input_shapes")
            now = f", the model is loaded at {_shapes(given)}" if given else ""
            raise ProfileError(f"{where}: not a profile of {graph.name!r} at these shapes: layer {i} {what}"
                               f"{taken}{now}; profile this model (hetsplit profile MODEL --input-shape ... --out FILE)")


def _shapes(shapes: dict) -> str:
    return " ".join(f"{n}:{','.join(map(str, d))}" for n, d in shapes.items())


def profile_column(graph: Graph, path: str | Path, type_name: str) -> CostTable:
    """The cost column of device type ``type_name`` from the profile at ``path``: its column of that name,
    else its only column (a profile measured with ``--device local-cpu`` names its column local-cpu)."""
    prof = load_profile(path)
    check_same_model(graph, prof, str(path))
    types = prof.costs.types
    column = type_name if type_name in types else (types[0] if len(types) == 1 else None)
    if column is None:
        raise ProfileError(f"{path}: the profile has columns {types}; name the device type after one of them "
                           f"(type: ...), or give a profile with one column")
    t = prof.costs.select([column])
    source = f"measured: {path} ({prof.costs.sources.get(column, column)})"
    segment = {type_name: t.segment[column]} if column in t.segment else {}
    return CostTable(graph.names, [type_name], t.time_s, t.energy_j, t.mem_bytes, {type_name: source},
                     segment, t.unfused_s, t.energy_known)
