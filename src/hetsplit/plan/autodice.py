"""Plans to and from AutoDiCE's mapping files (Guo et al., "AutoDiCE": distributed CNN inference).

Pure: files in, plans out (no processes). The formats, as AutoDiCE's front end reads them:

``mapping.json``
    ``{"<device key>": ["<ONNX node name>", ...], ...}``. A device key is ``<host>_<resource>``
    (``nx01_gpu``, ``nx01_arm012345``, ``lenovo_cpu0``): AutoDiCE cuts it at the first ``_`` into the
    MPI host and the resource (``gpu``, or ``cpu``/``arm`` and the core ids). A node name is the ONNX
    node's name, or (nodes without one, or after AutoDiCE renames every node after its first output
    with ``/`` made ``_``) that output's name: ``onnx_node_aliases`` maps those to hetsplit's names.
    Every node of the model is listed once, except a horizontally split node, which is listed under
    every device that computes a part of it.

``horizontal.json``
    ``{"<ONNX node>": ["lop" | "lip" | "height" | "width", [split points], ["<device key>", ...]]}``.
    ``lop`` splits the output channels (conv) / columns (fully connected): the points are cumulative
    ends, the last one may exceed the channel count ("the rest", AutoDiCE writes 65535); the parts are
    concatenated. ``lip`` splits the input channels: the points are the sizes of the parts; the
    partial sums are added. ``height`` / ``width`` split feature maps, which hetsplit does not model
    (reading one is an error). AutoDiCE reads only those three entries; hetsplit writes a fourth,
    ``{"combine_on": KEY}``, the device that concatenates or adds the parts (AutoDiCE puts that step
    with the node that reads the split node, which is where the layer's other nodes go anyway).

How hetsplit maps onto it: a hetsplit layer groups ONNX nodes (``Layer.nodes``: Conv + Relu, ...);
they all go under the layer's device. A sharded layer (``out`` shards with a ``concat`` combine =
``lop``, ``in`` shards with a flat ``sum`` = ``lip``) lists its anchor node (the Conv / Gemm / MatMul
that names the layer) under every shard device and its other nodes under the combine device. (So
under AutoDiCE a split layer's epilogue, e.g. its Relu, runs once after the concat on that device,
where hetsplit's cost model runs it on each slice; the placement and the bytes moved are the same.)

What cannot be written: shards without a combine (a chain of sliced layers: AutoDiCE concatenates
right after each split node), tree-shaped sums and broadcasts in groups (AutoDiCE sends directly), a
graph without ONNX node names (read from a profile). What does not come back the same: a pipeline
that gives one device two stages (AutoDiCE has one list per device, so it reads back as a mapping
with the same placement and metrics, not as stages), and the plan's algorithm and params.

No ``platform.txt`` is written: AutoDiCE's is one ``host:address`` line per machine, for the MPI
hostfile, and hetsplit's plans know no addresses; the hosts are the prefixes of the device keys.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hetsplit.cluster.types import Cluster
from hetsplit.errors import ModelError, PlanError
from hetsplit.graph.onnx_import import compact_name
from hetsplit.graph.shard import axis_size
from hetsplit.graph.types import Graph, Layer
from hetsplit.jsonfile import read_json
from hetsplit.plan.types import Combine, Placement, Plan, Shard, Stage
from hetsplit.outpath import write_text

if TYPE_CHECKING:
    import onnx

MAPPING_FILE = "mapping.json"
HORIZONTAL_FILE = "horizontal.json"
LOP, LIP = "lop", "lip"
SPLIT_AXIS = {LOP: "out", LIP: "in"}
UNSUPPORTED_SPLITS = ("height", "width")
COMBINE_ON = "combine_on"  # hetsplit's fourth entry of a horizontal.json value (AutoDiCE ignores it)
ALGORITHM = "autodice"


class AutodiceError(PlanError):
    """A mapping.json / horizontal.json that does not describe a plan of this model on this cluster
    (names the file, the key and the node or layer), or a plan that AutoDiCE cannot express."""


# ---- names ------------------------------------------------------------------------------------------

def anchor_node(layer: Layer) -> str:
    """The ONNX node a horizontal split of ``layer`` splits: the Conv / Gemm / MatMul that named it."""
    if not layer.nodes:
        raise AutodiceError(f"layer {layer.name!r} has no ONNX node names (a graph read from a profile?); "
                            "give the model itself (zoo name or .onnx)")
    base = re.sub(r"_\d+$", "", layer.name)
    for want in (layer.name, base):
        for node in layer.nodes:
            if compact_name(node) == want:
                return node
    return layer.nodes[0]


def onnx_node_aliases(model: onnx.ModelProto) -> dict[str, str]:
    """Other names AutoDiCE may use for the nodes of a prepared ONNX model (``onnx.ModelProto``, as
    ``prepare_model`` returns it): each node's first output name, and that name with ``/`` made ``_``
    (AutoDiCE's ``format_onnx``). Names that are some node's own name are left out."""
    own = {n.name for n in model.graph.node}
    out: dict[str, str] = {}
    for n in model.graph.node:
        if not n.output or not n.output[0]:
            continue
        for alias in (n.output[0], n.output[0].replace("/", "_")):
            if alias not in own:
                out.setdefault(alias, n.name)
    return out


def suggested_keys(cluster: Cluster) -> dict[str, str]:
    """AutoDiCE-style keys ``<host>_<kind>`` for the devices of ``cluster`` (host: the device's group or
    host, else its name; ``_`` removed since AutoDiCE cuts the key there); a kind repeated on one host
    gets its number (``cpu0``, ``cpu1``)."""
    def clean(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9.-]", "", s) or "host"

    hosts = [clean(str(d.group or d.host or d.name)) for d in cluster.devices]
    kinds = [clean(str(d.kind or "cpu")) for d in cluster.devices]
    pairs = list(zip(hosts, kinds))
    keys: dict[str, str] = {}
    for d, (h, k) in zip(cluster.devices, pairs):
        same = [i for i, p in enumerate(pairs) if p == (h, k)]
        keys[d.name] = f"{h}_{k}" if len(same) == 1 else f"{h}_{k}{same.index(cluster.names.index(d.name))}"
    return keys


def parse_keys(text: str | None) -> dict[str, str]:
    """``DEV=KEY,DEV=KEY`` (the CLI's --keys) as a dict; UsageError-like AutodiceError on a bad pair."""
    out: dict[str, str] = {}
    if not text:
        return out
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        dev, sep, key = part.partition("=")
        if not sep or not dev.strip() or not key.strip():
            raise AutodiceError(f"--keys {text!r}: {part!r} is not DEVICE=KEY (e.g. nx0-gpu=nx0_gpu)")
        if dev.strip() in out:
            raise AutodiceError(f"--keys {text!r}: device {dev.strip()!r} is given two keys")
        out[dev.strip()] = key.strip()
    return out


def _key_of(device_keys: dict[str, str] | None) -> tuple[dict[str, str], dict[str, str]]:
    keys = dict(device_keys or {})
    seen: dict[str, str] = {}
    for dev, key in keys.items():
        if not isinstance(key, str) or not key:
            raise AutodiceError(f"device key of {dev!r} must be a non-empty string, got {key!r}")
        if key in seen:
            raise AutodiceError(f"devices {seen[key]!r} and {dev!r} are both given the key {key!r}")
        seen[key] = dev
    return keys, seen


# ---- write -----------------------------------------------------------------------------------------

def autodice_documents(plan: Plan, graph: Graph, device_keys: dict[str, str] | None = None
                       ) -> tuple[dict[str, list[str]], dict[str, list[Any]]]:
    """The mapping.json and horizontal.json documents of ``plan`` (the second empty without shards)."""
    keys, by_key = _key_of(device_keys)
    if plan.model and plan.model != graph.name:
        raise AutodiceError(f"the plan is for model {plan.model!r}, not {graph.name!r}")

    def key(dev: str) -> str:
        k = keys.get(dev, dev)
        if k in by_key and by_key[k] != dev:
            raise AutodiceError(f"device {dev!r} has the key of device {by_key[k]!r} ({k!r}); give it its own")
        return k

    places = plan.placements()
    unknown = [n for n in places if n not in set(graph.names)]
    if unknown:
        raise AutodiceError(f"the plan places layers {unknown[:5]} that model {graph.name!r} does not have")
    mapping: dict[str, list[str]] = {key(d): [] for d in plan.devices}
    horizontal: dict[str, list[Any]] = {}
    for layer in graph.layers:
        if layer.name not in places:
            raise AutodiceError(f"the plan does not place layer {layer.name!r}")
        if not layer.nodes:
            anchor_node(layer)  # raises: no node names
        place = places[layer.name]
        comb = plan.combine.get(layer.name)
        if isinstance(place, str):
            if comb is not None and comb.kind == "broadcast" and comb.tree > 1:
                raise AutodiceError(f"layer {layer.name!r} broadcasts in groups of {comb.tree}; AutoDiCE sends a "
                                    "layer's outputs directly to every reader, so it cannot express the tree")
            mapping[key(place)].extend(layer.nodes)
            continue
        where = f"layer {layer.name!r}"
        axis = place[0].axis
        if comb is None:
            raise AutodiceError(f"{where}: its {axis} shards never meet (a chain of sliced layers); AutoDiCE "
                                "concatenates the parts right after each split node, so it cannot express this")
        kind = {"concat": LOP, "sum": LIP}.get(comb.kind)
        if kind is None or SPLIT_AXIS[kind] != axis:
            raise AutodiceError(f"{where}: {axis} shards with a {comb.kind} combine have no AutoDiCE split type")
        if comb.tree > 1:
            raise AutodiceError(f"{where}: a sum in groups of {comb.tree} (tree all-reduce); AutoDiCE adds the "
                                "partial sums on one device (flat), so it cannot express the tree")
        anchor = anchor_node(layer)
        for sh in place:
            mapping.setdefault(key(sh.device), []).append(anchor)
        rest = [n for n in layer.nodes if n != anchor]
        mapping.setdefault(key(comb.on), []).extend(rest)
        points = [sh.stop for sh in place] if kind == LOP else [sh.size for sh in place]
        horizontal[anchor] = [kind, points, [key(sh.device) for sh in place], {COMBINE_ON: key(comb.on)}]
    return {k: v for k, v in mapping.items() if v}, horizontal


def write_autodice(plan: Plan, graph: Graph, out_dir: str | Path, device_keys: dict[str, str] | None = None
                   ) -> list[Path]:
    """Write ``out_dir/mapping.json`` (and ``horizontal.json`` when the plan shards layers); return the
    paths written. ``device_keys`` maps hetsplit device names to AutoDiCE keys (default: the names)."""
    mapping, horizontal = autodice_documents(plan, graph, device_keys)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [out / MAPPING_FILE]
    write_text(written[0], _one_key_per_line(mapping))
    if horizontal:
        written.append(out / HORIZONTAL_FILE)
        write_text(written[1], _one_key_per_line(horizontal))
    return written


def _one_key_per_line(doc: dict[str, Any]) -> str:
    """JSON with one key per line, as AutoDiCE's own files are laid out."""
    return "{" + ",\n ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()) + "}\n"


# ---- read ------------------------------------------------------------------------------------------

@dataclass
class _Split:
    node: str
    layer: int
    shards: tuple[Shard, ...]
    kind: str
    combine_on: str | None
    keys: list[str]


class _Reader:
    def __init__(self, graph: Graph, cluster: Cluster, device_keys: dict[str, str] | None,
                 aliases: dict[str, str] | None) -> None:
        self.g, self.cl = graph, cluster
        keys, by_key = _key_of(device_keys)
        stray = [d for d in keys if d not in cluster.names]
        if stray:
            raise AutodiceError(f"device keys are given for {stray}, which cluster {cluster.name!r} does not have; "
                                f"devices are {', '.join(cluster.names)}")
        self.by_key = by_key
        self.aliases = dict(aliases or {})
        self.node_layer = {n: i for i, layer in enumerate(graph.layers) for n in layer.nodes}
        if not self.node_layer:
            raise AutodiceError(f"model {graph.name!r} has no ONNX node names (a graph read from a profile?); "
                                "give the model itself (zoo name or .onnx)")
        self.layer_index = {name: i for i, name in enumerate(graph.names)}

    def device(self, key: Any, where: str) -> str:
        if not isinstance(key, str):
            raise AutodiceError(f"{where}: a device key must be a string, got {key!r}")
        dev = self.by_key.get(key, key)
        if dev not in self.cl.names:
            raise AutodiceError(f"{where}: device key {key!r} is not a device of cluster {self.cl.name!r} "
                                f"({', '.join(self.cl.names)}); map it to one with device_keys / --keys DEVICE={key}")
        return dev

    def nodes(self, name: Any, where: str) -> list[str]:
        """The hetsplit node names ``name`` stands for (a node, an alias, or a whole layer's name)."""
        if not isinstance(name, str):
            raise AutodiceError(f"{where}: a node name must be a string, got {name!r}")
        if name in self.node_layer:
            return [name]
        if name in self.aliases and self.aliases[name] in self.node_layer:
            return [self.aliases[name]]
        if name in self.layer_index:
            return list(self.g.layers[self.layer_index[name]].nodes)
        low = name.lower().replace("_", "/")
        close = [n for n in self.node_layer if low in n.lower().replace("_", "/")][:3]
        hint = f"; similar: {close}" if close else ""
        raise AutodiceError(f"{where}: {name!r} is not an ONNX node (nor a layer) of model {self.g.name!r}{hint}")

    def layer_label(self, node: str) -> str:
        return f"{node!r} (layer {self.g.layers[self.node_layer[node]].name!r})"

    # -- files -------------------------------------------------------------------------------------
    def mapping(self, path: Path) -> dict[str, list[tuple[str, str]]]:
        """node -> [(device, key)], in file order; checks the file's shape and each list."""
        doc = read_json(path, AutodiceError, "no such mapping file")
        if not isinstance(doc, dict) or not doc:
            raise AutodiceError(f"{path}: expected an object {{\"<device key>\": [\"<ONNX node>\", ...]}}, "
                                f"got {type(doc).__name__ if doc != {} else 'an empty object'}")
        placed: dict[str, list[tuple[str, str]]] = {}
        devices: dict[str, str] = {}
        for key, names in doc.items():
            where = f"{path}: key {key!r}"
            dev = self.device(key, f"{path}")
            if dev in devices:
                raise AutodiceError(f"{where}: device {dev!r} already has key {devices[dev]!r}; give each device one list")
            devices[dev] = key
            if not isinstance(names, list):
                raise AutodiceError(f"{where}: expected a list of ONNX node names, got {type(names).__name__}")
            mine: set[str] = set()
            for j, name in enumerate(names):
                for node in self.nodes(name, f"{where}[{j}]"):
                    if node in mine:
                        raise AutodiceError(f"{where}: node {self.layer_label(node)} is mapped twice in this list")
                    mine.add(node)
                    placed.setdefault(node, []).append((dev, key))
        return placed

    def horizontal(self, path: Path) -> dict[int, _Split]:
        doc = read_json(path, AutodiceError, "no such horizontal partitioning file")
        if not isinstance(doc, dict):
            raise AutodiceError(f"{path}: expected an object {{\"<ONNX node>\": [\"lop\", [points], [device keys]]}}, "
                                f"got {type(doc).__name__}")
        out: dict[int, _Split] = {}
        for name, entry in doc.items():
            where = f"{path}: key {name!r}"
            named = self.nodes(name, where)
            li = self.node_layer[named[0]]
            layer = self.g.layers[li]
            node = named[0] if len(named) == 1 else anchor_node(layer)
            if node != anchor_node(layer):
                raise AutodiceError(f"{where}: node {node!r} is part of layer {layer.name!r}, which hetsplit splits at "
                                    f"its node {anchor_node(layer)!r}; name that node")
            if li in out:
                raise AutodiceError(f"{where}: layer {layer.name!r} is split twice")
            if not (isinstance(entry, list) and len(entry) in (3, 4) and isinstance(entry[0], str)
                    and isinstance(entry[1], list) and isinstance(entry[2], list)):
                raise AutodiceError(f"{where}: expected [\"lop\" | \"lip\", [split points], [device keys]], got {entry!r}")
            kind, points, keys = entry[0], entry[1], entry[2]
            if kind in UNSUPPORTED_SPLITS:
                raise AutodiceError(f"{where}: a {kind!r} split slices feature maps, which hetsplit does not model; "
                                    "use lop (output channels) or lip (input channels)")
            if kind not in SPLIT_AXIS:
                raise AutodiceError(f"{where}: unknown partition type {kind!r}; expected lop, lip, height or width")
            if len(points) != len(keys) or not keys:
                raise AutodiceError(f"{where}: {len(points)} split points for {len(keys)} devices; give one per device")
            if not all(isinstance(p, int) and not isinstance(p, bool) and p > 0 for p in points):
                raise AutodiceError(f"{where}: split points must be positive integers, got {points!r}")
            devs = [self.device(k, where) for k in keys]
            if len(set(devs)) != len(devs):
                raise AutodiceError(f"{where}: a device appears twice in {keys!r}")
            axis = SPLIT_AXIS[kind]
            try:
                size = axis_size(layer, axis)
            except ModelError as exc:
                raise AutodiceError(f"{where}: {exc}") from None
            if size is None:
                raise AutodiceError(f"{where}: layer {layer.name!r} ({layer.op}) has no weights to split")
            ends = list(points) if kind == LOP else [sum(points[:j + 1]) for j in range(len(points))]
            if any(b <= a for a, b in zip(ends, ends[1:])):
                raise AutodiceError(f"{where}: lop split points are cumulative ends and must increase, got {points!r}")
            if any(e >= size for e in ends[:-1]):
                raise AutodiceError(f"{where}: the parts before the last already cover the {size} "
                                    f"{'output' if axis == 'out' else 'input'} channels of layer {layer.name!r}; "
                                    f"split points {points!r} leave a device nothing")
            if ends[-1] < size:
                raise AutodiceError(f"{where}: split points {points!r} cover {ends[-1]} of the {size} "
                                    f"{'output' if axis == 'out' else 'input'} channels of layer {layer.name!r}")
            ends[-1] = size  # AutoDiCE's "the rest" (65535)
            starts = [0] + ends[:-1]
            shards = tuple(Shard(d, axis, a, b) for d, a, b in zip(devs, starts, ends))
            on = None
            if len(entry) == 4:
                extra = entry[3]
                if not isinstance(extra, dict) or set(extra) - {COMBINE_ON}:
                    raise AutodiceError(f"{where}: the fourth entry must be {{\"{COMBINE_ON}\": KEY}}, got {extra!r}")
                if COMBINE_ON in extra:
                    on = self.device(extra[COMBINE_ON], f"{where}: {COMBINE_ON}")
            out[li] = _Split(node, li, shards, kind, on, list(keys))
        return out


def read_autodice(mapping_path: str | Path, graph: Graph, cluster: Cluster, horizontal_path: str | Path | None = None,
                  device_keys: dict[str, str] | None = None, aliases: dict[str, str] | None = None,
                  algorithm: str = ALGORITHM) -> Plan:
    """The hetsplit plan of an AutoDiCE ``mapping.json`` (and ``horizontal.json``) for ``graph`` on
    ``cluster``: a pipeline when every device runs one run of consecutive layers (in topological
    order) and nothing is split, else a mapping. ``device_keys`` maps hetsplit device names to the
    file's keys (keys not in it must be device names); ``aliases`` maps other node names to hetsplit's
    (``onnx_node_aliases``). The plan is checked (``check_plan``); it has no metrics (a plan is costed
    above this package: ``workflow.import_autodice``)."""
    from hetsplit.plan.check import check_plan

    mpath = Path(mapping_path)
    r = _Reader(graph, cluster, device_keys, aliases)
    placed = r.mapping(mpath)
    splits = r.horizontal(Path(horizontal_path)) if horizontal_path is not None else {}
    split_nodes = {s.node: s for s in splits.values()}

    missing = [n for layer in graph.layers for n in layer.nodes if n not in placed]
    if missing:
        raise AutodiceError(f"{mpath}: {len(missing)} ONNX node(s) are mapped to no device: "
                            + ", ".join(r.layer_label(n) for n in missing[:5]) + (" ..." if len(missing) > 5 else ""))
    for node, where in placed.items():
        if len(where) == 1:
            continue
        sp = split_nodes.get(node)
        keys = [k for _, k in where]
        if sp is None:
            hint = ("; a node split across devices needs its entry in horizontal.json" if horizontal_path is None
                    else f"; only the nodes split in {horizontal_path} may be listed under several devices")
            raise AutodiceError(f"{mpath}: node {r.layer_label(node)} is mapped twice, under {keys}{hint}")
    for sp in splits.values():
        listed = {d for d, _ in placed.get(sp.node, [])}
        want = {sh.device for sh in sp.shards}
        if listed != want:
            raise AutodiceError(f"{horizontal_path}: node {sp.node!r} is split over {sp.keys}, but {mpath} lists it "
                                f"under {[k for _, k in placed[sp.node]]}; list it under exactly the devices it is split over")

    assign: dict[str, Placement] = {}
    combine: dict[str, Combine] = {}
    for i, layer in enumerate(graph.layers):
        sp = splits.get(i)
        others = [n for n in layer.nodes if sp is None or n != sp.node]
        devs = {n: placed[n][0][0] for n in others}
        distinct = sorted(set(devs.values()), key=cluster.names.index)
        if len(distinct) > 1:
            by_dev = {d: [n for n, dd in devs.items() if dd == d] for d in distinct}
            parts = "; ".join(f"{', '.join(repr(n) for n in ns[:3])} on {d!r}" for d, ns in by_dev.items())
            raise AutodiceError(f"{mpath}: layer {layer.name!r} groups ONNX nodes that are mapped to different devices "
                                f"({parts}); hetsplit runs a layer's nodes together, so map them to one device")
        if sp is None:
            assign[layer.name] = distinct[0]
            continue
        on = distinct[0] if distinct else sp.combine_on
        if distinct and sp.combine_on is not None and sp.combine_on != distinct[0]:
            raise AutodiceError(f"{horizontal_path}: key {sp.node!r}: {COMBINE_ON} says {sp.combine_on!r}, but the "
                                f"other nodes of layer {layer.name!r} run on {distinct[0]!r}")
        if on is None:
            on = _reader_device(graph, i, assign, placed) or sp.shards[0].device
        assign[layer.name] = sp.shards
        combine[layer.name] = Combine("concat" if sp.kind == LOP else "sum", on)

    params: dict[str, Any] = {"source": "autodice", "mapping": str(mpath)}
    if horizontal_path is not None:
        params["horizontal"] = str(horizontal_path)
    stages = _as_pipeline(graph, assign) if not combine else None
    if stages is not None:
        plan = Plan(graph.name, cluster.name, algorithm, stages, params)
    else:
        plan = Plan(graph.name, cluster.name, algorithm, params=params, assign=assign, combine=combine)
    plan.cluster_file = cluster.file
    try:
        check_plan(graph, cluster, plan)
    except PlanError as exc:
        raise AutodiceError(f"{mpath}: {exc}") from None
    return plan


def _reader_device(graph: Graph, i: int, assign: dict[str, Placement],
                   placed: dict[str, list[tuple[str, str]]]) -> str | None:
    """Where AutoDiCE puts the concat / sum of split layer ``i``: with the first node that reads it."""
    readers = sorted({c for t in graph.tensors if t.producer == i for c in t.consumers})
    if not readers:
        return None
    layer = graph.layers[readers[0]]
    return placed[layer.nodes[0]][0][0] if layer.nodes else None


def _as_pipeline(graph: Graph, assign: dict[str, Placement]) -> list[Stage] | None:
    """Stages when the devices run consecutive runs of layers, one run each; else None."""
    stages: list[Stage] = []
    for name in graph.names:
        dev = assign[name]
        assert isinstance(dev, str)
        if stages and stages[-1].device == dev:
            stages[-1].layers.append(name)
        elif any(s.device == dev for s in stages):
            return None
        else:
            stages.append(Stage(dev, [name]))
    return stages
