"""Latency, energy and their breakdown of a plan on Siracusa chips (Bochem et al., seed 002).

Everything is read from the plan's TaskGraph (``plan/check.check_plan``): what each chip runs
(shard Layers carry their share of MACs and weights) and what moves between chips (``messages``).
Per chip, with the McuModel of its preset (int8 weights and activations):

- every task costs ``compute`` (MACs or elements at the kernel's rate, plus a fixed overhead per
  kernel) and ``L2`` (the part of the L2 <-> L1 traffic the cluster DMA cannot hide behind compute);
- the chip's **L3 regime** is judged on its own weights: its share of the whole model
  (``model_blocks`` blocks like the graph's; default: the graph is the whole model) and its largest
  share of one block:

  * resident   -- the model share fits the L2 weight budget: no L3 traffic at all;
  * prefetched -- twice the block share fits: the next block's weights load from L3 into the second
    L2 buffer while this block runs (a block's load starts when the chip starts the block before;
    the first block of the graph was loaded during the last one, whose load the chip must finish
    before it is done). Time goes to L3 only when a load is not hidden;
  * streamed   -- otherwise: each task's weights and activations pass L3 -> L2 -> L1 in tiles
    while it runs, at ``l3_bandwidth x l3_stream_efficiency``, and the task waits for them.

- messages go over the cluster's links (MIPI: 0.5 GB/s) in int8; each chip has one MIPI port, so a
  chip sends and takes its messages one after another (FIFO by the time they are ready); the tree of
  the plan (partials to group leaders, leaders to the root, results back down through the leaders)
  is in the TaskGraph and gives the steps.

A discrete-event schedule runs one input: each chip runs its tasks in TaskGraph order as soon as
their inputs are there. The latency is the last chip's completion, and the **breakdown** follows
the critical path back from it (each step started when the step before it ended), summing its
compute, L2, L3 and chip-to-chip time: the four parts add up to the latency, like the paper's
Fig. 4 bars. Energy is the paper's formula::

    E = N_c2c E_c2c + sum over chips (P T_comp + N_L3<->L2 E_L3 + N_L2<->L1 E_L2)

with T_comp the chip's compute time (not its waiting for memory or links). A pipeline plan's stages
are run layer by layer on their chip, so a stage holding k blocks holds k blocks of weights.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field, replace

from hetsplit.cluster.types import Cluster
from hetsplit.costs.models.layer_attrs import elements
from hetsplit.costs.models.mcu import PREFETCHED, RESIDENT, STREAMED, McuModel, McuParams
from hetsplit.errors import ClusterError, ModelError
from hetsplit.graph.transformer import find_blocks
from hetsplit.graph.types import Graph, Layer
from hetsplit.plan.check import check_plan
from hetsplit.plan.tasks import SOURCE, TaskGraph
from hetsplit.plan.types import Plan


@dataclass(frozen=True)
class JobCost:
    """One layer (or shard, or combine) on one chip: time parts and the bytes it moves."""

    compute_s: float = 0.0
    l2_s: float = 0.0          # L2 <-> L1 traffic not hidden behind compute
    l3_s: float = 0.0          # streamed: waiting for L3
    l2_bytes: float = 0.0      # N_L2<->L1
    l3_bytes: float = 0.0      # N_L3<->L2 (streamed only; prefetches are the chip's)
    weight_bytes: float = 0.0
    act_bytes: float = 0.0

    @property
    def time_s(self) -> float:
        return self.compute_s + self.l2_s + self.l3_s


def job_cost(model: McuModel, layer: Layer | None, regime: str) -> JobCost:
    """A layer on a chip in ``regime`` (None: a copy task that only forwards a message)."""
    if layer is None:
        return JobCost()
    p = model.p
    compute, moved = model.on_chip_parts(layer)
    weights, act = model.weights(layer), model.activations(layer)
    l3 = weights + act if regime == STREAMED else 0.0
    return JobCost(compute, max(0.0, moved / p.l2_l1_bandwidth - compute),
                   l3 / (p.l3_bandwidth * p.l3_stream_efficiency), moved, l3, weights, act)


@dataclass(frozen=True)
class ChipCost:
    """One chip's share of a plan: its regime, memory, time and energy per input."""

    name: str
    regime: str
    weight_bytes: float         # its weights in the graph
    block_weight_bytes: float   # its largest share of one block
    model_weight_bytes: float   # its share of the whole model
    l2_weight_bytes: float      # weights it keeps in L2 (resident: all; prefetched: two blocks)
    l3_weight_bytes: float      # weights it keeps off chip
    peak_activation_bytes: float
    compute_s: float            # T_comp
    busy_s: float               # compute + L2 + streamed L3 time of its tasks
    l3_load_s: float            # prefetch loads (its L3 channel)
    port_s: float               # time its MIPI port is busy
    finish_s: float
    l2_bytes: float
    l3_bytes: float
    energy_j: float             # P T_comp + N_L3 E_L3 + N_L2 E_L2

    @property
    def bottleneck_s(self) -> float:
        """Its busiest resource per input (the inverse of the rate it can sustain)."""
        return max(self.busy_s, self.l3_load_s, self.port_s)


@dataclass(frozen=True)
class ParallelCost:
    """A plan's latency with its critical-path breakdown, energy and per-chip costs (one input)."""

    latency_s: float
    compute_s: float
    c2c_s: float
    l2_s: float
    l3_s: float
    energy_j: float
    c2c_bytes: float
    c2c_energy_j: float
    messages: int
    chips: tuple[ChipCost, ...] = field(repr=False)

    @property
    def edp(self) -> float:
        return self.energy_j * self.latency_s

    @property
    def bottleneck_s(self) -> float:
        """Time per input with inputs streaming through (the busiest chip resource)."""
        return max(c.bottleneck_s for c in self.chips)

    @property
    def throughput(self) -> float:
        """Inputs per second with enough independent inputs in flight (a pipeline's rate)."""
        return 1.0 / self.bottleneck_s if self.bottleneck_s > 0 else float("inf")

    @property
    def regime(self) -> str:
        """The chips' L3 regime ("mixed: ..." when they differ)."""
        kinds = list(dict.fromkeys(c.regime for c in self.chips))
        return kinds[0] if len(kinds) == 1 else "mixed: " + ", ".join(kinds)

    def breakdown(self) -> dict[str, float]:
        """Seconds of the latency in each part (they sum to ``latency_s``)."""
        return {"compute": self.compute_s, "c2c": self.c2c_s, "l2": self.l2_s, "l3": self.l3_s}

    def to_dict(self) -> dict:
        return {"latency_s": self.latency_s, "breakdown_s": self.breakdown(), "energy_j": self.energy_j,
                "edp_js": self.edp, "throughput": self.throughput, "regime": self.regime,
                "c2c_bytes": self.c2c_bytes, "c2c_energy_j": self.c2c_energy_j, "messages": self.messages,
                "per_chip": [c.__dict__ for c in self.chips]}


def chip_params(cluster: Cluster, index: int) -> McuParams:
    """The MCU parameters of a cluster device, holding whole layers (shards carry their share)."""
    dev = cluster.devices[index]
    if dev.model != "mcu":
        raise ClusterError(f"device {dev.name!r} of cluster {cluster.name!r} uses the {dev.model!r} model; the "
                           "MCU cost of a plan needs every device on the 'mcu' model (preset siracusa)")
    return replace(McuParams.from_params(dev.params, f"device {dev.name!r}"), weight_fraction=1.0)


def block_starts(graph: Graph) -> list[int]:
    """Index of the first layer of every Transformer block (the first is 0): its attention's first
    projection, moved back over the weightless layers right before it that only it reads (a pre-norm
    block's norm; a post-norm block's input norm, i.e. the previous block's last norm). Empty for a
    graph without attention."""
    try:
        blocks = find_blocks(graph)
    except ModelError:
        return []
    readers: list[set[int]] = [set() for _ in graph.layers]
    for t in graph.tensors:
        if t.producer >= 0:
            readers[t.producer].update(t.consumers)
    starts = [0]
    for b in blocks[1:]:
        first = start = min(b.attention.projections)
        while start - 1 > starts[-1] and graph.layers[start - 1].param_bytes == 0 and readers[start - 1] and \
                min(readers[start - 1]) >= first:
            start -= 1
        starts.append(start)
    return starts


def layer_blocks(graph: Graph) -> list[int]:
    """The block of every layer (``block_starts``); -1 for every layer of a graph without attention."""
    starts = block_starts(graph)
    if not starts:
        return [-1] * graph.num_layers
    out, b = [], 0
    for i in range(graph.num_layers):
        while b + 1 < len(starts) and i >= starts[b + 1]:
            b += 1
        out.append(b)
    return out


# ---- the schedule of one input ----------------------------------------------------------------------

@dataclass
class _Node:
    """A job, a message or a prefetch load once scheduled: its span, its parts and what bound its start."""

    start: float
    end: float
    parts: tuple[float, float, float, float]   # compute, c2c, l2, l3
    pred: int                                  # node that ended when it started (-1: it started at 0)


@dataclass
class _Job:
    chip: int
    layer: Layer | None
    block: int
    cost: JobCost = field(default_factory=JobCost)
    local: list[int] = field(default_factory=list)      # jobs (same chip, or zero bytes) it waits for
    messages: list[int] = field(default_factory=list)   # messages it waits for
    node: int = -1


class _Schedule:
    """One input through the TaskGraph: chips run their jobs in order, messages share MIPI ports."""

    def __init__(self, tg: TaskGraph, models: list[McuModel], blocks: list[int], model_blocks: int | None):
        self.tg, self.cl, self.models = tg, tg.cluster, models
        self.nodes: list[_Node] = []
        self._jobs(blocks)
        self._regimes(model_blocks)
        self._messages()

    # -- structure ---------------------------------------------------------------------------------
    def _jobs(self, blocks: list[int]) -> None:
        g = self.tg.graph
        self.jobs: list[_Job] = []
        self.first: list[int] = []
        self.last: list[int] = []
        for t in self.tg.tasks:
            self.first.append(len(self.jobs))
            if t.kind == "stage":
                self.jobs += [_Job(t.device, g.layers[i], blocks[i]) for i in t.layers]
            else:
                layer = None if t.kind == "copy" else (t.work if t.work is not None else g.layers[t.layers[0]])
                self.jobs.append(_Job(t.device, layer, blocks[t.layers[0]]))
            self.last.append(len(self.jobs) - 1)
        self.graph_blocks = max(1, len({b for b in blocks if b >= 0}))

    def _regimes(self, model_blocks: int | None) -> None:
        n = self.cl.num_devices
        self.block_w: list[dict[int, float]] = [{} for _ in range(n)]   # chip -> block -> its weights
        for j in self.jobs:
            w = self.models[j.chip].weights(j.layer) if j.layer is not None else 0.0
            if w > 0:
                self.block_w[j.chip][j.block] = self.block_w[j.chip].get(j.block, 0.0) + w
        self.scale = (model_blocks or self.graph_blocks) / self.graph_blocks
        self.regime: list[str] = []
        for c in range(n):
            total, block = sum(self.block_w[c].values()), max(self.block_w[c].values(), default=0.0)
            budget = self.models[c].p.weight_budget
            self.regime.append(RESIDENT if total * self.scale <= budget else
                               PREFETCHED if 2 * block <= budget else STREAMED)
        for j in self.jobs:
            j.cost = job_cost(self.models[j.chip], j.layer, self.regime[j.chip])

    def _messages(self) -> None:
        tg = self.tg
        u, v = tg.endpoints(tg.device)
        self.local_readers: dict[int, set[int]] = {}
        for e in range(len(tg.edge_src)):
            src, dst = int(tg.edge_src[e]), int(tg.edge_dst[e])
            if dst >= 0 and src >= 0 and (u[e] == v[e] or tg.edge_bytes[e] <= 0):
                self.jobs[self.first[dst]].local.append(self.last[src])
                self.local_readers.setdefault(self.last[src], set()).add(tg.tasks[dst].device)
        self.msgs = tg.messages()
        self.msg_bytes: list[float] = []
        self.msg_time: list[float] = []
        self.out_msgs: dict[int, list[int]] = {}
        for k, m in enumerate(self.msgs):
            nbytes = elements(self._payload_layer(m.producer, m.consumers), m.nbytes) * self.models[m.src].p.act_bytes
            self.msg_bytes.append(nbytes)
            self.msg_time.append(float(self.cl.transfer_time(m.src, m.dst, nbytes)))
            for c in m.consumers:
                if c >= 0:
                    self.jobs[self.first[c]].messages.append(k)
            if m.producer >= 0:
                self.out_msgs.setdefault(self.last[m.producer], []).append(k)

    def _payload_layer(self, producer: int, consumers: tuple[int, ...]) -> Layer:
        """The layer whose element size a payload has: its producer's last, or a model input's reader."""
        tasks = self.tg.tasks
        if producer >= 0:
            return self.tg.graph.layers[tasks[producer].layers[-1]]
        return self.tg.graph.layers[tasks[next(c for c in consumers if c >= 0)].layers[0]]

    # -- the run ---------------------------------------------------------------------------------------
    def run(self) -> None:
        n = self.cl.num_devices
        self.order: list[list[int]] = [[] for _ in range(n)]
        for k, j in enumerate(self.jobs):
            self.order[j.chip].append(k)
        self.next = [0] * n
        self.chip_free, self.chip_last = [0.0] * n, [-1] * n
        self.block_start: list[dict[int, int]] = [{} for _ in range(n)]   # block -> node of its first weight job
        self.load_last = [-1] * n                                         # node of the chip's last load
        self.load_s = [0.0] * n
        self.msg_node = [-1] * len(self.msgs)
        self.port_free, self.port_last, self.port_busy = [0.0] * n, [-1] * n, [0.0] * n
        self.pending = [(0.0, k, -1) for k, m in enumerate(self.msgs) if m.producer == SOURCE]
        self.events: list[tuple[float, int, int]] = []       # (time, 0 job end | 1 message end, id)
        for c in range(n):
            self._start_jobs(c)
        self._dispatch(0.0)
        while self.events:
            now, kind, ident = heapq.heappop(self.events)
            if kind == 0:
                self.pending += [(now, k, self.jobs[ident].node) for k in self.out_msgs.get(ident, ())]
                for c in self.local_readers.get(ident, ()):
                    self._start_jobs(c)
            else:
                self._start_jobs(self.msgs[ident].dst)
            self._dispatch(now)
        stuck = [j for j in self.jobs if j.node < 0]
        if stuck:
            raise ModelError(f"the schedule stalled before {stuck[0].layer.name if stuck[0].layer else 'a copy'} "
                             f"on {self.cl.names[stuck[0].chip]}: the chips cannot run the TaskGraph in task order")
        self._finish()

    def _node(self, start: float, parts: tuple[float, float, float, float], pred: int) -> int:
        self.nodes.append(_Node(start, start + sum(parts), parts, pred))
        return len(self.nodes) - 1

    def _load(self, chip: int, weight: float, block_before: int) -> int:
        """The L3 -> L2 load of a block's ``weight`` on ``chip``: it fills the buffer of the block before
        the one the chip started at node ``block_before``, so it starts then, after the chip's last load."""
        first = self.nodes[block_before]
        start, pred = first.start, first.pred
        if self.load_last[chip] >= 0 and self.nodes[self.load_last[chip]].end > start:
            start, pred = self.nodes[self.load_last[chip]].end, self.load_last[chip]
        t = weight / self.models[chip].p.l3_bandwidth
        self.load_last[chip] = self._node(start, (0.0, 0.0, 0.0, t), pred)
        self.load_s[chip] += t
        return self.load_last[chip]

    def _start_jobs(self, chip: int) -> None:
        """Start the chip's next jobs, in order, as far as their inputs are known."""
        order = self.order[chip]
        while self.next[chip] < len(order):
            k = order[self.next[chip]]
            job = self.jobs[k]
            bound = [(self.chip_free[chip], self.chip_last[chip])]
            for d in job.local:
                if self.jobs[d].node < 0:
                    return
                bound.append((self.nodes[self.jobs[d].node].end, self.jobs[d].node))
            for m in job.messages:
                if self.msg_node[m] < 0:
                    return
                bound.append((self.nodes[self.msg_node[m]].end, self.msg_node[m]))
            starts_block = job.cost.weight_bytes > 0 and job.block not in self.block_start[chip]
            if starts_block and self.regime[chip] == PREFETCHED and self.block_start[chip]:
                before = self.block_start[chip][next(reversed(self.block_start[chip]))]
                load = self._load(chip, self.block_w[chip][job.block], before)
                bound.append((self.nodes[load].end, load))
            start, pred = max(bound, key=lambda x: x[0])
            c = job.cost
            job.node = self._node(start, (c.compute_s, 0.0, c.l2_s, c.l3_s), pred)
            if starts_block:
                self.block_start[chip][job.block] = job.node
            self.chip_free[chip], self.chip_last[chip] = self.nodes[job.node].end, job.node
            heapq.heappush(self.events, (self.nodes[job.node].end, 0, k))
            self.next[chip] += 1

    def _dispatch(self, now: float) -> None:
        """Start every waiting message whose two ports are free now, the longest waiting first."""
        self.pending.sort()
        waiting = []
        for ready, k, made_by in self.pending:
            m = self.msgs[k]
            if self.port_free[m.src] > now or self.port_free[m.dst] > now:
                waiting.append((ready, k, made_by))
                continue
            pred = made_by
            for port in (m.src, m.dst):
                if self.port_free[port] > ready:
                    ready, pred = self.port_free[port], self.port_last[port]
            node = self._node(now, (0.0, self.msg_time[k], 0.0, 0.0), pred)
            self.msg_node[k] = node
            for port in (m.src, m.dst):
                self.port_free[port], self.port_last[port] = self.nodes[node].end, node
                self.port_busy[port] += self.msg_time[k]
            heapq.heappush(self.events, (self.nodes[node].end, 1, k))
        self.pending = waiting

    def _finish(self) -> None:
        """A prefetched chip is done when the load of the block after its last one is done too: its
        first block again (the next input's, or the next of the model's identical blocks)."""
        self.completion = [(self.chip_free[c], self.chip_last[c]) for c in range(self.cl.num_devices)]
        for c, starts in enumerate(self.block_start):
            if self.regime[c] == PREFETCHED and starts:
                load = self._load(c, self.block_w[c][next(iter(starts))], starts[next(reversed(starts))])
                if self.nodes[load].end > self.completion[c][0]:
                    self.completion[c] = (self.nodes[load].end, load)

    def critical_parts(self) -> tuple[float, tuple[float, float, float, float]]:
        """The latency and the compute, c2c, L2 and L3 time of the critical path that ends it."""
        end, node = max(self.completion, key=lambda x: x[0])
        parts = [0.0, 0.0, 0.0, 0.0]
        while node >= 0:
            for i, x in enumerate(self.nodes[node].parts):
                parts[i] += x
            node = self.nodes[node].pred
        return end, (parts[0], parts[1], parts[2], parts[3])


def _chip_cost(s: _Schedule, c: int) -> ChipCost:
    p = s.models[c].p
    mine = [j for j in s.jobs if j.chip == c]
    compute = sum(j.cost.compute_s for j in mine)
    l2b = sum(j.cost.l2_bytes for j in mine)
    total, block = sum(s.block_w[c].values()), max(s.block_w[c].values(), default=0.0)
    regime = s.regime[c]
    l3b = sum(j.cost.l3_bytes for j in mine) + (total if regime == PREFETCHED else 0.0)
    l2w = {RESIDENT: total * s.scale, PREFETCHED: 2 * block, STREAMED: 0.0}[regime]
    return ChipCost(s.cl.names[c], regime, total, block, total * s.scale, l2w,
                    0.0 if regime == RESIDENT else total * s.scale, max((j.cost.act_bytes for j in mine), default=0.0),
                    compute, sum(j.cost.time_s for j in mine), s.load_s[c], s.port_busy[c], s.completion[c][0],
                    l2b, l3b, p.power_active * compute + l3b * p.l3_energy_per_byte + l2b * p.l2_energy_per_byte)


def parallel_costs(graph: Graph, cluster: Cluster, plan: Plan, model_blocks: int | None = None) -> ParallelCost:
    """The cost of ``plan`` on ``cluster`` (every device it uses an MCU) for one input of ``graph``.

    ``model_blocks``: the graph stands for that many blocks of a model (a chip's L3 regime is judged
    on its share of the whole model); default: the graph is the whole model."""
    tg = check_plan(graph, cluster, plan)
    used = sorted(set(tg.device.tolist()))
    models = [McuModel(chip_params(cluster, c) if c in used else McuParams(), cluster.names[c])
              for c in range(cluster.num_devices)]
    s = _Schedule(tg, models, layer_blocks(graph), model_blocks)
    s.run()
    latency, (compute, c2c, l2, l3) = s.critical_parts()
    chips = tuple(_chip_cost(s, c) for c in used)
    c2c_e = sum(float(cluster.transfer_energy(m.src, m.dst, b)) for m, b in zip(s.msgs, s.msg_bytes))
    return ParallelCost(latency, compute, c2c, l2, l3, sum(c.energy_j for c in chips) + c2c_e, sum(s.msg_bytes),
                        c2c_e, len(s.msgs), chips)
