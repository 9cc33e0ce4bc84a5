"""Compiling a plan into every rank's program: what each device holds and exchanges, read off the plan's
TaskGraph (``check_plan``; no ONNX here).

``layout(graph, plan, taskgraph)`` gives, per task, the *local names* of the tensors it reads and
makes on its device, every message (a TaskGraph message, or the driver's: model inputs out, model
outputs back) with the tensors it carries and the gather or scatter of a sum combine it belongs to,
if any (every message moves point to point), and each device's segments. A pipeline's TaskGraph has
one ``stage`` task per device and one payload per cut: its message carries every tensor live across
the cut (``live_tensors``, exactly what ``Graph.cut_bytes`` counts), so a skip connection is relayed
by every stage it crosses.

Local names (one name means one tensor content wherever it is held):

- ``T``: a whole graph tensor (made by a whole layer or a stage, a concat, the top of a sum, or received);
- ``T[k]``: shard ``k`` of an out-sharded layer's output ``T`` (and every tensor the shard makes);
- ``T[in a:b/size]``: an ``in`` shard's slice of its input ``T`` (the payload name of check.py);
- ``L.partial[k]`` / ``L.group[g]``: partial sums of layer ``L`` (the payload names of check.py).

Segments: a device's tasks cut where the TaskGraph says (``TaskGraph.segments``: wherever a task reads a
remote tensor made by a task at or after the current segment's first task), which makes the run
deadlock-free whatever each device does; the estimate charges each segment's call by the same rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import math
from dataclasses import replace

from hetsplit.cluster.types import Cluster, Device, Medium, uniform_links
from hetsplit.errors import RuntimeFailure
from hetsplit.graph.types import INPUT, Graph, Tensor
from hetsplit.plan.tasks import SINK, SOURCE, Task, TaskGraph
from hetsplit.plan.types import Plan
from hetsplit.runtime.manifest import GATHER, SCATTER

DRIVER_DEV = -1   # the driver, as a device index of the layout


@dataclass(frozen=True)
class Carried:
    """One tensor of a message: its local name at the receiver and at the sender; ``slice_of``
    names the layer whose ``in`` shard reads a slice (the sender cuts it)."""

    name: str
    source: str
    slice_of: int = -1          # layer index of the in-sharded consumer (-1: sent whole)
    start: int = 0
    stop: int = 0
    size: int = 0


@dataclass
class LaidMessage:
    payload: str
    src: int                    # device index (DRIVER_DEV for the driver)
    dst: int
    producer: int               # task index (SOURCE for model inputs)
    consumers: list[int]        # task indices (SINK for model outputs)
    tensors: list[Carried]
    plan_nbytes: float          # the TaskGraph's bytes for it
    collective: int | None = None


@dataclass
class LaidCollective:
    kind: str                   # gather | scatter
    layer: int
    task: int                   # the sum task it feeds (gather) or the task whose result it spreads
    root: int                   # device index
    members: list[int]          # device indices, root first
    messages: list[int]


@dataclass
class Layout:
    tasks: list[Task]
    reads: list[list[str]]               # per task: local names of its remote or earlier inputs
    makes: list[list[str]]               # per task: local names it makes
    shard_index: list[int]               # per shard task: its position among its layer's shards
    messages: list[LaidMessage]
    collectives: list[LaidCollective]
    segments: dict[int, list[list[int]]]  # device -> segments (task indices)
    recv_at: dict[int, int] = field(default_factory=dict)   # message -> task whose segment waits for it


def plan_cluster(plan: Plan, cluster: Cluster | None = None) -> Cluster:
    """The cluster the runtime checks a plan against (``check_plan``): ``cluster`` without its source and
    sink (the driver feeds the inputs and collects the outputs), or, when none is given, one CPU per
    device the plan names, in the plan's first-use order."""
    if cluster is not None:
        return replace(cluster, source=None, sink=None)
    names = list(dict.fromkeys(plan.devices))   # once each: check_plan names a device given two stages
    bw, lat, en, media = uniform_links(len(names), Medium("runtime", 1e9))
    devices = [Device(n, "cpu", "cpu", math.inf) for n in names]
    return Cluster(plan.cluster or "runtime", devices, bw, lat, en, media)


def outputs_of(graph: Graph, i: int) -> list[str]:
    """Names of the tensors layer ``i`` sends to other layers or to the model outputs."""
    return [t.name for t in graph.tensors if t.producer == i]


def live_tensors(graph: Graph, cut: int) -> list[Tensor]:
    """Tensors live across the cut before layer ``cut`` (exactly those ``Graph.cut_bytes`` counts)."""
    n = graph.num_layers
    out = []
    for t in graph.tensors:
        last = n if t.is_output else (max(t.consumers) if t.consumers else t.producer)
        if t.producer < cut <= last:
            out.append(t)
    return sorted(out, key=lambda t: (t.producer, t.name))


def layout(graph: Graph, plan: Plan, tg: TaskGraph) -> Layout:
    tasks = tg.tasks
    kinds = [t.kind for t in tasks]
    consumers = {t.name: set(t.consumers) for t in graph.tensors}

    def kind(task: int) -> str:
        return kinds[task] if task >= 0 else ""
    shard_index = [-1] * len(tasks)
    for n, t in enumerate(tasks):
        if t.kind == "shard":
            place = plan.assign[graph.layers[t.layers[0]].name]
            assert not isinstance(place, str)       # a shard task's layer is sharded
            shard_index[n] = next(k for k, s in enumerate(place) if s.start == t.start and s.stop == t.stop)
    sums: dict[int, list[int]] = {}   # layer -> its sum tasks in order (groups first, the top last)
    for n, t in enumerate(tasks):
        if t.kind == "sum":
            sums.setdefault(t.layers[0], []).append(n)

    def group_of(n: int) -> int:  # a group sum's index, -1 for the top
        order = sums[tasks[n].layers[0]]
        return -1 if n == order[-1] else order.index(n)

    def carried(e: int) -> list[Carried]:
        p, q = int(tg.edge_src[e]), int(tg.edge_dst[e])
        payload = tg.payloads[int(tg.edge_payload[e])]
        if "stage" in (kind(p), kind(q)):   # a pipeline's cut: every tensor live across it
            cut = graph.num_layers if q == SINK else tasks[q].layers[0]
            return [Carried(t.name, t.name) for t in live_tensors(graph, cut)]
        if q == SINK:
            return [Carried(payload, payload)]
        dst = tasks[q]
        i = dst.layers[0]
        name = graph.layers[i].name
        if dst.kind == "sum":
            src = tasks[p]
            local = f"{name}.partial[{shard_index[p]}]" if src.kind == "shard" else f"{name}.group[{group_of(p)}]"
            return [Carried(local, local)]
        if dst.kind == "concat":
            k = shard_index[p]
            return [Carried(f"{t}[{k}]", f"{t}[{k}]") for t in outputs_of(graph, i)]
        if dst.kind == "copy":
            if payload.endswith("@bcast"):      # a broadcast relays each tensor as its own payload
                return [Carried(payload[:-len("@bcast")], payload[:-len("@bcast")])]
            return [Carried(t, t) for t in outputs_of(graph, i)]
        k = shard_index[q]
        for t in graph.tensors:
            if i not in t.consumers:
                continue
            if payload == f"{t.name}[{k}]" and t.producer != INPUT and tasks[p].kind == "shard":
                return [Carried(payload, payload)]
            if dst.kind == "shard" and dst.axis == "in" and \
                    payload == f"{t.name}[in {dst.start}:{dst.stop}/{dst.size}]":
                return [Carried(payload, t.name, i, dst.start, dst.stop, dst.size)]
            if payload in (t.name, f"{t.name}@sum", f"{t.name}@bcast"):
                return [Carried(t.name, t.name)]
        raise RuntimeFailure(f"task {dst.name!r}: cannot tell which tensor payload {payload!r} carries")

    def device(task: int) -> int:
        return DRIVER_DEV if task in (SOURCE, SINK) else tasks[task].device

    reads: list[list[str]] = [[] for _ in tasks]
    makes: list[list[str]] = [[] for _ in tasks]
    found: dict[tuple[str, int], int] = {}
    messages: list[LaidMessage] = []
    for e in range(len(tg.edge_src)):
        p, q = int(tg.edge_src[e]), int(tg.edge_dst[e])
        items = carried(e)
        u, v = device(p), device(q)
        if q != SINK:   # a slice cut on the device itself is read whole (the shard cuts it)
            local = [c.source if u == v and c.slice_of >= 0 else c.name for c in items]
            if kinds[q] == "stage":   # what the stage computes with; the rest it relays
                local = [x for x in local if consumers[x] & set(tasks[q].layers)]
            reads[q] += [x for x in local if x not in reads[q]]
        if u == v:
            continue
        payload = tg.payloads[int(tg.edge_payload[e])]
        key = (payload, v)
        if key in found:
            m = messages[found[key]]
            if m.src != u or [c.name for c in m.tensors] != [c.name for c in items]:
                raise RuntimeFailure(f"payload {payload!r} reaches one device from two places; the plan's "
                                     "task graph is inconsistent")
            m.consumers.append(q)
            continue
        found[key] = len(messages)
        messages.append(LaidMessage(payload, u, v, p, [q], items, float(tg.edge_bytes[e])))
    for n, t in enumerate(tasks):
        i = t.layers[0]
        name = graph.layers[i].name
        if t.kind == "shard":
            k = shard_index[n]
            makes[n] = [f"{name}.partial[{k}]"] if t.axis == "in" else [f"{x}[{k}]" for x in outputs_of(graph, i)]
        elif t.kind == "sum" and group_of(n) >= 0:
            makes[n] = [f"{name}.group[{group_of(n)}]"]
        elif t.kind == "copy":
            makes[n] = []   # it forwards what it received
        elif t.kind == "stage":
            makes[n] = [x for j in t.layers for x in outputs_of(graph, j)]
        else:
            makes[n] = outputs_of(graph, i)
    collectives = _collectives(tasks, kinds, sums, messages)
    segments = tg.segments
    lay = Layout(tasks, reads, makes, shard_index, messages, collectives, segments)
    seg_of = {n: (d, s) for d, segs in segments.items() for s, seg in enumerate(segs) for n in seg}
    for mid, m in enumerate(messages):
        if m.dst != DRIVER_DEV:
            lay.recv_at[mid] = min((c for c in m.consumers), key=lambda c: seg_of[c][1])
    return lay


def _collectives(tasks: list[Task], kinds: list[str], sums: dict[int, list[int]],
                 messages: list[LaidMessage]) -> list[LaidCollective]:
    """Gathers into every sum task with remote inputs; scatters of every top sum's and copy's result."""
    tops = {order[-1] for order in sums.values()}
    out: list[tuple[int, LaidCollective]] = []
    by_sum: dict[int, list[int]] = {}
    by_root: dict[tuple[int, str], list[int]] = {}
    for mid, m in enumerate(messages):
        if m.src == DRIVER_DEV or m.dst == DRIVER_DEV:
            continue
        if all(c >= 0 and kinds[c] == "sum" for c in m.consumers) and len(m.consumers) == 1:
            by_sum.setdefault(m.consumers[0], []).append(mid)
        elif m.producer in tops or kinds[m.producer] == "copy":
            by_root.setdefault((m.producer, m.payload), []).append(mid)
    for task, mids in by_sum.items():
        root = tasks[task].device
        members = [root] + [messages[mid].src for mid in mids]
        out.append((task, LaidCollective(GATHER, tasks[task].layers[0], task, root, members, mids)))
    for (task, _), mids in by_root.items():
        root = tasks[task].device
        members = [root] + [messages[mid].dst for mid in mids]
        out.append((task, LaidCollective(SCATTER, tasks[task].layers[0], task, root, members, mids)))
    out.sort(key=lambda x: (x[0], x[1].kind != GATHER, x[1].messages[0]))
    colls = [c for _, c in out]
    for cid, c in enumerate(colls):
        if len(set(c.members)) != len(c.members):
            raise RuntimeFailure(f"collective {c.kind} of task {tasks[c.task].name!r} lists a device twice")
        for mid in c.messages:
            messages[mid].collective = cid
    return colls
