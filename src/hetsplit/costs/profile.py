"""The ``hetsplit.profile/1`` format: per-layer measurements, enough to plan without the model.

Import and export. A profile carries a graph-lite (layer names, output and parameter bytes, which
layers read which) and a cost column per device type (time, energy, optional memory; optional
``segment``: what a segment costs on the type beyond its layers, ``{"call_s", "byte_s", "host_byte_s",
"source"}``, and ``unfused_s``: per layer, the extra seconds it pays when cut off from the layer before it;
``costs.segment``; ``energy_known``: false where nobody measured or estimated the type's energy, as for
every column of a profile whose ``energy`` status is ``unavailable``). Optional per-layer keys: ``op``, ``macs``, ``in_bytes`` and ``attrs`` (the shapes device models read), so
that a profile written by hetsplit can be re-costed or calibrated without its model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.costs.segment import SegmentCost, segment_cost_from_dict
from hetsplit.costs.table import CostTable
from hetsplit.errors import ProfileError
from hetsplit.graph.types import INPUT, LAYER_KINDS, OTHER, Graph, Layer, Tensor
from hetsplit.jsonfile import json_safe, read_json
from hetsplit.outpath import write_text

FORMAT = "hetsplit.profile/1"
NO_ENERGY = ("; energy: none measured or estimated (energy status 'unavailable'): a plan using this device type "
             "has no energy figure, and energy objectives refuse it")
INPUT_NAME = "input"


@dataclass
class Profile:
    """A graph and its measured or modelled costs per device type."""

    graph: Graph
    costs: CostTable
    meta: dict[str, Any] = field(default_factory=dict)  # source, device, repeats, whole-model times...

    def __post_init__(self) -> None:
        if energy_unavailable(self.meta.get("energy")):   # a profiler that could neither measure nor estimate
            self.costs.energy_known = np.zeros(len(self.costs.types), dtype=bool)


def _fail(path: str, msg: str) -> ProfileError:
    return ProfileError(f"{path}: {msg}")


def _number(value: Any, where: str, unit: str, null_ok: bool = False) -> float:
    """``value`` as a finite number >= 0 (null, if allowed, as inf: the device type cannot run the layer)."""
    if value is None and null_ok:
        return float("inf")
    number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and \
        abs(value) < 1e300 else float("nan")   # a bool, text or an int too large for a float is no figure
    if not np.isfinite(number) or number < 0:
        null = ", or null where the device type cannot run the layer" if null_ok else ""
        raise ProfileError(f"{where} is {value!r}; give a number >= 0 in {unit}{null}")
    return number


def _column(values: list, where: str, unit: str, names: list[str], null_ok: bool = True) -> list[float]:
    """One cost column in SI, each entry checked by ``_number`` (errors name the index and the layer)."""
    return [_number(v, f"{where}[{i}] (layer {names[i]!r})", unit, null_ok) for i, v in enumerate(values)]


MAX_COUNT = 2**53   # MACs and bytes stay exact as float64 below this


def _count(value: Any, where: str, unit: str) -> int:
    """``value`` as a whole count >= 0 (MACs, bytes) below ``MAX_COUNT``."""
    number = _number(value, where, unit)
    if number >= MAX_COUNT:
        raise ProfileError(f"{where} is {value!r}; give a count below 2^53 {unit}")
    return int(number)


def _graph_from_layers(model: str, input_bytes: int, layers: list[dict], where: str) -> Graph:
    for i, layer in enumerate(layers):
        if not isinstance(layer, dict) or not isinstance(layer.get("name"), str) or not layer["name"]:
            raise _fail(where, f"layers[{i}] must be an object with a 'name' (text), 'op', 'macs', 'out_bytes', ...")
        if not isinstance(layer.get("inputs", []), list) or not all(isinstance(s, str) for s in layer.get("inputs", [])):
            raise _fail(where, f"layers[{i}].inputs must be a list of layer names")
        if not isinstance(layer.get("attrs", {}), dict):
            raise _fail(where, f"layers[{i}].attrs must be an object")
    names = [layer["name"] for layer in layers]
    index: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in index or name == INPUT_NAME:
            raise _fail(where, f"layers[{i}]: duplicate or reserved layer name {name!r}")
        index[name] = i
    consumers: dict[int, list[int]] = {i: [] for i in range(INPUT, len(layers))}
    built: list[Layer] = []
    for i, entry in enumerate(layers):
        for key in ("out_bytes",):
            if key not in entry:
                raise _fail(where, f"layer {names[i]!r} has no {key!r}")
        inputs = entry.get("inputs", [names[i - 1]] if i > 0 else [INPUT_NAME])
        for src in inputs:
            if src == INPUT_NAME:
                consumers[INPUT].append(i)
            elif src not in index:
                raise _fail(where, f"layer {names[i]!r} reads {src!r}, which is not a layer; names: input or an earlier layer")
            elif index[src] >= i:
                raise _fail(where, f"layer {names[i]!r} reads {src!r}, which comes after it; list layers in topological order")
            else:
                consumers[index[src]].append(i)
        op = entry.get("op", OTHER)
        if op not in LAYER_KINDS:
            raise _fail(where, f"layer {names[i]!r}: unknown op {op!r}; expected one of {LAYER_KINDS}")
        at = f"{where}: layer {names[i]!r}"
        built.append(Layer(name=names[i], op=op, macs=_count(entry.get("macs", 0), f"{at} macs", "MACs"),
                           param_bytes=_count(entry.get("param_bytes", 0), f"{at} param_bytes", "bytes"),
                           out_bytes=_count(entry["out_bytes"], f"{at} out_bytes", "bytes"),
                           in_bytes=_count(entry.get("in_bytes", 0), f"{at} in_bytes", "bytes"),
                           attrs=dict(entry.get("attrs", {}))))
    tensors = [Tensor(INPUT_NAME, INPUT, int(input_bytes), tuple(consumers[INPUT]))]
    for i, made in enumerate(built):
        cons = tuple(sorted(set(consumers[i])))
        tensors.append(Tensor(made.name, i, made.out_bytes, cons, is_output=not cons))
    return Graph(name=model, layers=built, tensors=tensors, source=where, meta={"from_profile": True})


def profile_from_dict(data: dict, where: str = "<profile>") -> Profile:
    """Parse a profile document (already loaded JSON) with errors naming the key."""
    if not isinstance(data, dict):
        raise _fail(where, "a profile is a JSON object")
    if data.get("format") != FORMAT:
        raise _fail(where, f"'format' is {data.get('format')!r}; expected {FORMAT!r}")
    layers = data.get("layers")
    if not isinstance(layers, list) or not layers:
        raise _fail(where, "'layers' must be a non-empty list")
    input_bytes = _count(data.get("input_bytes", 0), f"{where}: input_bytes", "bytes")
    graph = _graph_from_layers(str(data.get("model", Path(where).stem)), input_bytes, layers, where)
    device_types = data.get("device_types")
    if not isinstance(device_types, dict) or not device_types:
        raise _fail(where, "'device_types' must map a device type to its per-layer time_s and energy_j")
    n = len(layers)
    types, times, energies, mems, unfused, known, sources = [], [], [], [], [], [], {}
    segment: dict[str, SegmentCost] = {}
    default_mem = np.array([_number(layer.get("mem_bytes", built.param_bytes + built.out_bytes),
                                    f"{where}: layer {graph.names[i]!r} mem_bytes", "bytes")
                            for i, (layer, built) in enumerate(zip(layers, graph.layers))])
    for tname, col in device_types.items():
        for key in ("time_s", "energy_j"):
            values = col.get(key) if isinstance(col, dict) else None
            if not isinstance(values, list) or len(values) != n:
                got = len(values) if isinstance(values, list) else type(values).__name__
                raise _fail(where, f"device_types.{tname}.{key} must list {n} numbers (one per layer), got {got}")
        types.append(tname)
        at = f"{where}: device_types.{tname}"
        times.append(_column(col["time_s"], f"{at}.time_s", "seconds", graph.names))
        finite = [t for t in times[-1] if np.isfinite(t)]
        if finite and not any(finite):
            raise _fail(where, f"device_types.{tname}.time_s: every layer takes 0 s, so a plan on {tname!r} would "
                               "run infinitely fast; give the seconds each layer takes (null where it cannot run)")
        energies.append(_column(col["energy_j"], f"{at}.energy_j", "joules", graph.names))
        mem = col.get("mem_bytes")
        if mem is not None and (not isinstance(mem, list) or len(mem) != n):
            raise _fail(where, f"device_types.{tname}.mem_bytes must list {n} numbers (one per layer) or be left out")
        mems.append(default_mem if mem is None else
                    np.array(_column(mem, f"{at}.mem_bytes", "bytes", graph.names, null_ok=False)))
        if isinstance(col, dict) and col.get("segment") is not None:
            segment[tname] = segment_cost_from_dict(col["segment"], f"{at}.segment")
        extra = col.get("unfused_s") if isinstance(col, dict) else None
        if extra is not None and (not isinstance(extra, list) or len(extra) != n):
            raise _fail(where, f"device_types.{tname}.unfused_s must list {n} numbers (one per layer) or be left out")
        unfused.append(np.zeros(n) if extra is None else
                       np.array(_column(extra, f"{at}.unfused_s", "seconds", graph.names, null_ok=False)))
        known.append(_energy_known(col.get("energy_known", True), f"{at}.energy_known")
                     and not energy_unavailable(data.get("energy")))
        sources[tname] = with_energy_caveat(str(col.get("source", data.get("source", where))), data.get("energy"),
                                            known[-1])
    table = CostTable(graph.names, types, np.array(times).T, np.array(energies).T, np.array(mems).T, sources,
                      segment, np.array(unfused).T, np.array(known, dtype=bool))
    meta = {k: v for k, v in data.items() if k not in ("layers", "device_types", "format")}
    shapes = meta.get("input_shapes")
    if shapes is not None and not (isinstance(shapes, dict) and all(
            isinstance(k, str) and isinstance(v, list) and v
            and all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in v) for k, v in shapes.items())):
        raise _fail(where, f"'input_shapes' must map each model input to its dims (positive integers), got {shapes!r}")
    return Profile(graph, table, meta)


def energy_unavailable(energy: Any) -> bool:
    """Whether a profile's ``energy`` record says nobody measured or estimated it (status ``unavailable``)."""
    return isinstance(energy, dict) and energy.get("status") == "unavailable"


def _energy_known(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProfileError(f"{where} is {value!r}; give true or false (false: the type's energy is unknown)")
    return value


def with_energy_caveat(source: str, energy: Any, known: bool = True) -> str:
    """A column's source, saying so when the profile has no energy (its zeros are not a measurement)."""
    unavailable = energy_unavailable(energy) or not known
    return source + NO_ENERGY if unavailable and NO_ENERGY not in source else source


def load_profile(path: str | Path) -> Profile:
    """Read a ``hetsplit.profile/1`` JSON file."""
    return profile_from_dict(read_json(path, ProfileError, "no such profile file"), str(path))


def profile_to_dict(profile: Profile) -> dict:
    """The JSON document of a profile (inf costs are written as null)."""
    g, c = profile.graph, profile.costs
    preds = g.predecessors
    layers = []
    for i, layer in enumerate(g.layers):
        entry: dict[str, Any] = {"name": layer.name, "op": layer.op, "macs": layer.macs,
                                 "out_bytes": layer.out_bytes, "in_bytes": layer.in_bytes,
                                 "param_bytes": layer.param_bytes, "mem_bytes": float(c.mem_bytes[i].max()),
                                 "inputs": [INPUT_NAME if p == INPUT else g.layers[p].name for p in preds[i]]}
        if layer.attrs:
            entry["attrs"] = json_safe(layer.attrs)
        layers.append(entry)

    def col(values: np.ndarray) -> list[float | None]:
        return [None if not np.isfinite(v) else float(v) for v in values]

    types: dict[str, dict[str, Any]] = {}
    for t, name in enumerate(c.types):
        types[name] = {"time_s": col(c.time_s[:, t]), "energy_j": col(c.energy_j[:, t]),
                       "mem_bytes": [float(v) for v in c.mem_bytes[:, t]], "source": c.sources.get(name, "")}
        if name in c.segment:
            types[name]["segment"] = c.segment[name].to_dict()
        if c.unfused_s is not None and c.unfused_s[:, t].any():
            types[name]["unfused_s"] = [float(v) for v in c.unfused_s[:, t]]
        if c.energy_known is not None and not c.energy_known[t]:
            types[name]["energy_known"] = False
    doc = {"format": FORMAT, "model": g.name, "input_bytes": g.input_bytes, "layers": layers, "device_types": types}
    doc.update({k: v for k, v in profile.meta.items() if k not in doc})
    return doc


def save_profile(profile: Profile, path: str | Path) -> Path:
    return write_text(path, json.dumps(profile_to_dict(profile), indent=1))
