"""``check_plan``: the one validator of plans, used by the evaluators, the simulator and the runtime.

It checks a plan against a graph and a cluster and, in the same walk, expands it into its
TaskGraph (plan/tasks.py). Every message names the layer and the device at fault.

Shard rules (DESIGN.md, "General mappings"):
- the shards of a layer share one axis and cover it exactly, in order, without overlap;
- ``out`` shards either meet in a ``concat`` combine, or (no combine) form a *chain*: every
  consumer is sharded with the same devices and the same fractions of its axis (``in`` shards of
  a conv / fully connected layer, or ``out`` shards of layers that follow their input's slicing:
  activations, softmax, attention matmuls by heads, depthwise convolutions);
- ``in`` shards meet in a ``sum`` combine (flat, or a tree of groups of k: an all-reduce);
- a whole layer may ``broadcast`` its outputs down a tree of groups of k to the devices that read them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from hetsplit.cluster.types import Cluster
from hetsplit.errors import ModelError, PlanError
from hetsplit.graph.shard import CHAIN_KINDS, axis_size, combine_layer, shard_layer
from hetsplit.graph.types import CONV, DWCONV, GEMM, INPUT, MATMUL, Graph, Tensor
from hetsplit.plan.order import apply_order
from hetsplit.plan.types import DIRECT, RELAY, Collective, Combine, Plan, Shard
from hetsplit.plan.tasks import SINK, SOURCE, Task, TaskGraph, TaskGraphBuilder

# Pipeline algorithms that use each device for at most one stage: their plans may not repeat one.
ONE_STAGE_PER_DEVICE = frozenset({"donna", "exact", "pareto", "pipeedge", "bruteforce", "single"})

SLICE_FOLLOWERS = CHAIN_KINDS + (MATMUL, DWCONV)  # out-sharded layers that read sliced inputs


def check_plan(graph: Graph, cluster: Cluster, plan: Plan, one_worker_per_device: bool = False) -> TaskGraph:
    """Validate ``plan`` on ``graph`` and ``cluster`` (raises PlanError) and return its TaskGraph.

    ``one_worker_per_device``: a pipeline may not give a device two stages whatever its algorithm (the
    runtime starts one worker per device; without it only ``ONE_STAGE_PER_DEVICE`` algorithms are held to that)."""
    if plan.model and plan.model != graph.name:
        raise PlanError(f"the plan is for model {plan.model!r}, not {graph.name!r}")
    if plan.is_pipeline:
        tg = _pipeline(graph, cluster, plan, one_worker_per_device)
    else:
        tg = _Expander(graph, cluster, plan).run()
    return apply_order(tg, plan.order)


def collectives(graph: Graph, plan: Plan) -> list[Collective]:
    """The all-reduces of a plan: one per sum-combined layer, over its shard devices in shard order."""
    out = []
    for name, comb in plan.combine.items():
        place = plan.assign.get(name)
        if comb.kind == "sum" and not isinstance(place, str) and place:
            out.append(Collective(name, tuple(s.device for s in place), comb.on, comb.tree))
    return out


def _device(cluster: Cluster, name: str, where: str) -> int:
    if name not in cluster.names:
        raise PlanError(f"{where}: device {name!r} is not in cluster {cluster.name!r}; devices are "
                        f"{', '.join(cluster.names)}")
    return cluster.index(name)


# ---- pipelines ------------------------------------------------------------------------------------

def stage_bounds(graph: Graph, cluster: Cluster, plan: Plan, one_worker_per_device: bool = False
                 ) -> tuple[list[int], list[int]]:
    """Stage boundaries ``[0, b1, ..., L]`` and device indices of a pipeline plan, validated (see check_plan)."""
    if not plan.stages:
        raise PlanError("the plan has no stages")
    bounds, devs, pos = [0], [], 0
    for s, stage in enumerate(plan.stages):
        where = f"stage {s} ({stage.device})"
        devs.append(_device(cluster, stage.device, where))
        if not stage.layers:
            raise PlanError(f"{where} has no layers")
        for name in stage.layers:
            try:
                idx = graph.index(name)
            except ModelError as exc:
                raise PlanError(f"{where}: {exc}") from None
            if idx != pos:
                expected = graph.layers[pos].name if pos < graph.num_layers else "(none: all layers are placed)"
                raise PlanError(f"{where}: layer {name!r} is out of order; a pipeline plan lists every layer once "
                                f"in topological order, and the next layer is {expected!r}")
            pos += 1
        bounds.append(pos)
    if pos != graph.num_layers:
        raise PlanError(f"the plan places {pos} of {graph.num_layers} layers; missing from {graph.layers[pos].name!r} on")
    if one_worker_per_device or plan.algorithm in ONE_STAGE_PER_DEVICE:
        why = (f"algorithm {plan.algorithm!r} uses each device for at most one stage"
               if plan.algorithm in ONE_STAGE_PER_DEVICE
               else "the runtime starts one worker per device; give each stage its own device")
        seen: dict[int, int] = {}
        for s, d in enumerate(devs):
            if d in seen:
                raise PlanError(f"stages {seen[d]} and {s} both run on device {cluster.names[d]!r}, but {why}")
            seen[d] = s
    return bounds, devs


def _pipeline(graph: Graph, cluster: Cluster, plan: Plan, one_worker_per_device: bool) -> TaskGraph:
    bounds, devs = stage_bounds(graph, cluster, plan, one_worker_per_device)
    b = TaskGraphBuilder(graph, cluster, RELAY)
    cut = graph.cut_bytes
    for s, d in enumerate(devs):
        lo, hi = bounds[s], bounds[s + 1]
        t = b.task(Task(f"stage{s}:{graph.layers[lo].name}..{graph.layers[hi - 1].name}", "stage",
                        tuple(range(lo, hi)), d))
        b.edge(SOURCE if s == 0 else t - 1, t, f"cut{lo}", cut[lo])
    b.edge(len(devs) - 1, SINK, f"cut{graph.num_layers}", cut[graph.num_layers])
    return b.build()


# ---- mappings -------------------------------------------------------------------------------------

@dataclass
class _Sharded:
    """What the expansion remembers of a sharded layer for its consumers."""

    shards: tuple[Shard, ...]
    size: int
    tasks: list[int]

    def fractions(self) -> list[tuple[Fraction, Fraction]]:
        return [(Fraction(s.start, self.size), Fraction(s.stop, self.size)) for s in self.shards]


class _Expander:
    """One walk over the layers in topological order: validate each placement, emit its tasks and
    the edges that feed them."""

    def __init__(self, graph: Graph, cluster: Cluster, plan: Plan):
        self.g, self.cl, self.plan = graph, cluster, plan
        self.b = TaskGraphBuilder(graph, cluster, DIRECT)
        self.provider: dict[int, int] = {}            # layer -> task holding its whole outputs
        self.copies: dict[int, dict[int, int]] = {}   # layer -> device -> broadcast copy task
        self.copy_tag: dict[int, str] = {}            # layer -> payload suffix of what its copies relay
        self.chains: dict[int, _Sharded] = {}         # out-sharded layers without a combine
        self.sharded: dict[int, _Sharded] = {}

    def run(self) -> TaskGraph:
        self._check_names()
        for i, layer in enumerate(self.g.layers):
            place = self.plan.assign[layer.name]
            comb = self.plan.combine.get(layer.name)
            if isinstance(place, str):
                if comb is not None and comb.kind != "broadcast":
                    raise PlanError(f"layer {layer.name!r} runs whole on {place!r}, so it has nothing to combine; "
                                    f"remove combine[{layer.name!r}] (or make it a broadcast)")
                t = self.b.task(Task(layer.name, "layer", (i,), _device(self.cl, place, f"layer {layer.name!r}")))
                self._feed(i, t, None, 0)
                self.provider[i] = t
                if comb is not None:
                    self._broadcast(i, t, comb)
            else:
                self._sharded_layer(i, place, comb)
        for out in self.g.tensors:
            if out.is_output:
                if out.producer == INPUT:
                    continue
                if out.producer in self.chains:
                    raise PlanError(f"layer {self.g.layers[out.producer].name!r} makes a model output but its "
                                    "shards never meet; give it a concat combine")
                self.b.edge(self.provider[out.producer], SINK, out.name, out.nbytes)
        return self.b.build()

    def _check_names(self) -> None:
        names = set(self.g.names)
        unknown = [n for n in self.plan.assign if n not in names]
        if unknown:
            raise PlanError(f"assign names layers {unknown[:5]} that model {self.g.name!r} does not have")
        missing = [n for n in self.g.names if n not in self.plan.assign]
        if missing:
            raise PlanError(f"assign leaves {len(missing)} of {self.g.num_layers} layers unplaced: {missing[:5]}"
                            f"{' ...' if len(missing) > 5 else ''}; every layer needs a device or shards")
        stray = [n for n in self.plan.combine if n not in names]
        if stray:
            raise PlanError(f"combine names layers {stray[:5]} that model {self.g.name!r} does not have")

    # ---- shards -----------------------------------------------------------------------------------
    def _sharded_layer(self, i: int, shards: tuple[Shard, ...], comb: Combine | None) -> None:
        layer = self.g.layers[i]
        where = f"layer {layer.name!r}"
        if comb is not None and comb.kind == "broadcast":
            raise PlanError(f"{where}: a broadcast sends a whole layer's outputs; its shards meet in a concat or sum")
        axes = {s.axis for s in shards}
        if len(axes) > 1:
            raise PlanError(f"{where}: its shards mix axes {sorted(axes)}; a layer is split along one axis")
        axis = shards[0].axis
        try:
            size = axis_size(layer, axis)
        except ModelError as exc:
            raise PlanError(str(exc)) from None
        chain_from = self._chain_input(i, where) if axis == "out" and layer.op in SLICE_FOLLOWERS else None
        if size is None:
            if chain_from is None:
                raise PlanError(f"{where} ({layer.op}) has no weights to split; it can be sharded only behind a "
                                "producer whose out shards do not meet (a chain)")
            size = chain_from.size
        pos = 0
        for k, s in enumerate(shards):
            _device(self.cl, s.device, f"{where} shard {k}")
            if s.start != pos:
                raise PlanError(f"{where}: shard {k} on {s.device!r} starts at {s.start}, expected {pos}; the "
                                f"shards must cover its {axis} axis of {size} in order without gaps or overlap")
            pos = s.stop
        if pos != size:
            raise PlanError(f"{where}: the shards cover {axis} up to {pos}, but the axis has {size}")
        if len({s.device for s in shards}) != len(shards):
            raise PlanError(f"{where}: two shards on one device; give that device one larger slice")
        if chain_from is not None and not _same_slices(chain_from, shards, size):
            raise PlanError(f"{where} reads the shards of a layer whose out shards do not meet; it must be "
                            "sharded on the same devices with the same fractions of its axis")
        if axis == "in" and layer.op not in (CONV, GEMM):
            raise PlanError(f"{where}: only conv and fully connected layers sum partial products ('in' shards)")
        if axis == "in" and (comb is None or comb.kind != "sum"):
            raise PlanError(f"{where}: 'in' shards make partial sums; give combine[{layer.name!r}] = "
                            "{\"kind\": \"sum\", \"on\": DEVICE}")
        if axis == "out" and comb is not None and comb.kind != "concat":
            raise PlanError(f"{where}: 'out' shards meet in a concat, not a {comb.kind}")
        if axis == "out" and layer.op in (CONV, GEMM) and chain_from is not None:
            raise PlanError(f"{where}: an 'out' shard of a {layer.op} needs the whole input")
        tasks = []
        for k, s in enumerate(shards):
            work = shard_layer(layer, axis, s.start, s.stop, size, first=k == 0)
            t = self.b.task(Task(work.name, "shard", (i,), self.cl.index(s.device), work, axis, s.start, s.stop, size))
            self._feed(i, t, (s, size, k), len(shards))
            tasks.append(t)
        info = _Sharded(shards, size, tasks)
        self.sharded[i] = info
        if comb is None:
            self.chains[i] = info
        elif comb.kind == "concat":
            self._concat(i, info, comb)
        else:
            self._sum(i, info, comb)

    def _chain_input(self, i: int, where: str) -> _Sharded | None:
        """The chain producer an out-sharded follower reads, or None when it reads whole tensors."""
        preds = [p for p in self.g.predecessors[i] if p != INPUT]
        chained = [p for p in preds if p in self.chains]
        if not chained:
            return None
        if len(chained) != len(self.g.predecessors[i]):
            raise PlanError(f"{where} reads both sliced and whole tensors; shard all its producers alike or "
                            "combine them first")
        first = self.chains[chained[0]]
        for p in chained[1:]:
            if self.chains[p].fractions() != first.fractions() or \
                    [s.device for s in self.chains[p].shards] != [s.device for s in first.shards]:
                raise PlanError(f"{where} reads shards of {self.g.layers[chained[0]].name!r} and "
                                f"{self.g.layers[p].name!r} that are sliced differently")
        return first

    def _concat(self, i: int, info: _Sharded, comb: Combine) -> None:
        layer = self.g.layers[i]
        on = _device(self.cl, comb.on, f"combine of layer {layer.name!r}")
        t = self.b.task(Task(f"{layer.name}:concat", "concat", (i,), on, combine_layer(layer, "concat", len(info.tasks))))
        for s, st in zip(info.shards, info.tasks):
            self.b.edge(st, t, f"{layer.name}.out[{s.start}:{s.stop}]", layer.out_bytes * s.size / info.size)
        self.provider[i] = t

    def _sum(self, i: int, info: _Sharded, comb: Combine) -> None:
        """Flat: every partial to the root. Tree: partials to their group's leader, leaders to the root,
        and the result back down to the leaders of groups whose devices read it."""
        layer = self.g.layers[i]
        root = _device(self.cl, comb.on, f"combine of layer {layer.name!r}")
        nbytes = layer.out_bytes
        devs = [self.b.tasks[t].device for t in info.tasks]
        k = comb.tree if comb.tree > 1 else len(devs)
        groups = [list(range(j, min(j + k, len(devs)))) for j in range(0, len(devs), k)]
        partial = [f"{layer.name}.partial[{j}]" for j in range(len(devs))]
        if len(groups) == 1:
            top = self.b.task(Task(f"{layer.name}:sum", "sum", (i,), root,
                                   combine_layer(layer, "sum", len(devs))))
            for j in groups[0]:
                self.b.edge(info.tasks[j], top, partial[j], nbytes)
            self.provider[i] = top
            return
        leaders = [root if root in [devs[j] for j in grp] else devs[grp[0]] for grp in groups]
        group_tasks = []
        for g, grp in enumerate(groups):
            t = self.b.task(Task(f"{layer.name}:sum[g{g}]", "sum", (i,), leaders[g],
                                 combine_layer(layer, "sum", len(grp))))
            for j in grp:
                self.b.edge(info.tasks[j], t, partial[j], nbytes)
            group_tasks.append(t)
        top = self.b.task(Task(f"{layer.name}:sum", "sum", (i,), root, combine_layer(layer, "sum", len(groups))))
        for g, t in enumerate(group_tasks):
            self.b.edge(t, top, f"{layer.name}.group[{g}]", nbytes)
        self.provider[i] = top
        readers = self._reader_devices(i)
        copies: dict[int, int] = {}
        for g, grp in enumerate(groups):
            if leaders[g] != root and readers & {devs[j] for j in grp}:
                c = self.b.task(Task(f"{layer.name}:bcast[g{g}]", "copy", (i,), leaders[g]))
                self.b.edge(top, c, f"{layer.name}.sum", nbytes)
                for j in grp:
                    copies[devs[j]] = c
        self.copies[i] = copies
        self.copy_tag[i] = "@sum"

    def _broadcast(self, i: int, task: int, comb: Combine) -> None:
        """The outputs of whole layer ``i`` go from its device to the devices that read them: directly
        within the root's group of k (in cluster order), through the first reader of each other group."""
        layer = self.g.layers[i]
        root = self.b.tasks[task].device
        if _device(self.cl, comb.on, f"combine of layer {layer.name!r}") != root:
            raise PlanError(f"combine of layer {layer.name!r}: a broadcast starts where the layer runs "
                            f"({self.cl.names[root]!r}), not on {comb.on!r}")
        members = sorted(self._reader_devices(i) | {root})
        k = comb.tree if comb.tree > 1 else len(members)
        copies: dict[int, int] = {}
        for g, j in enumerate(range(0, len(members), k)):
            grp = members[j:j + k]
            if root in grp or len(grp) == 1:
                continue
            c = self.b.task(Task(f"{layer.name}:bcast[g{g}]", "copy", (i,), grp[0]))
            for t in self.g.tensors:
                if t.producer == i and self._devices_running(t.consumers) & set(grp):
                    self.b.edge(task, c, f"{t.name}@bcast", t.nbytes)
            copies.update({d: c for d in grp})
        self.copies[i] = copies
        self.copy_tag[i] = "@bcast"

    def _devices_running(self, layers: Iterable[int]) -> set[int]:
        """Devices that run any of ``layers`` (from the plan, before those tasks exist)."""
        out: set[int] = set()
        for c in layers:
            place = self.plan.assign[self.g.layers[c].name]
            names = [place] if isinstance(place, str) else [s.device for s in place]
            out |= {self.cl.index(n) for n in names if n in self.cl.names}
        return out

    def _reader_devices(self, i: int) -> set[int]:
        """Devices that run a consumer of layer ``i``."""
        return self._devices_running({c for t in self.g.tensors if t.producer == i for c in t.consumers})

    # ---- edges into a task ---------------------------------------------------------------------------
    def _feed(self, i: int, task: int, shard: tuple[Shard, int, int] | None, count: int) -> None:
        """Edges bringing layer ``i``'s input tensors to ``task`` (a whole layer, or shard k of count)."""
        layer = self.g.layers[i]
        dev = self.b.tasks[task].device
        for t in self.g.tensors:
            if i not in t.consumers:
                continue
            if t.producer in self.chains:
                self._feed_from_chain(t, task, shard, count, layer.name)
                continue
            src = SOURCE if t.producer == INPUT else self.copies.get(t.producer, {}).get(dev, self.provider[t.producer])
            payload, nbytes = t.name + self.copy_tag.get(t.producer, ""), float(t.nbytes)
            if shard is not None and shard[0].axis == "in":
                s, size, _ = shard
                payload, nbytes = f"{t.name}[in {s.start}:{s.stop}/{size}]", t.nbytes * s.size / size
            self.b.edge(src, task, payload, nbytes)

    def _feed_from_chain(self, t: Tensor, task: int, shard: tuple[Shard, int, int] | None, count: int,
                         consumer: str) -> None:
        prod = self.chains[t.producer]
        pname = self.g.layers[t.producer].name
        if shard is None or count != len(prod.tasks):
            raise PlanError(f"layer {consumer!r} reads {pname!r}, whose out shards never meet; shard {consumer!r} "
                            f"the same way ({len(prod.tasks)} shards on the same devices) or combine {pname!r}")
        s, size, k = shard
        ps = prod.shards[k]
        if Fraction(s.start, size) != Fraction(ps.start, prod.size) or Fraction(s.stop, size) != \
                Fraction(ps.stop, prod.size) or s.device != ps.device:
            raise PlanError(f"layer {consumer!r} shard {k} on {s.device!r} ({s.start}:{s.stop} of {size}) does not "
                            f"match shard {k} of {pname!r} on {ps.device!r} ({ps.start}:{ps.stop} of {prod.size})")
        self.b.edge(prod.tasks[k], task, f"{t.name}[{k}]", t.nbytes * ps.size / prod.size)


def _same_slices(chain: _Sharded, shards: tuple[Shard, ...], size: int) -> bool:
    if len(shards) != len(chain.shards):
        return False
    return all(Fraction(s.start, size) == Fraction(c.start, chain.size) and
               Fraction(s.stop, size) == Fraction(c.stop, chain.size) and s.device == c.device
               for s, c in zip(shards, chain.shards))
