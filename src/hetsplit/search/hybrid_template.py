"""The slot template: one fixed task structure for every hybrid (vertical + LOP) mapping of a model.

A hybrid mapping places each non-splittable layer whole on a device and splits each splittable
layer (conv, fully connected) by output channels (LOP) over some devices, the slices meeting in a
concat. Encodings (search/encodings.py) differ in how a chromosome says this; they all decode to
one ``HybridAssignment``:

- ``layer_device`` (N x L): the device of every layer (for a split layer: its lead, slot 0's device);
- ``slot_device`` (N x S x P) and ``slot_used`` (N x S x P): each splittable layer has P slots;
  the used slots share its output channels equally, and a device holding k of the c used slots
  runs one shard of k/c of the channels (consecutive, in order of each device's first slot).

The template is the TaskGraph with P shard tasks and one concat task per splittable layer. Any
assignment is that structure plus per-plan task costs and edge bytes (``TaskOverrides``): a
device's merged shard is charged on its first slot, its other slots cost nothing and send nothing,
and a layer whose used slots sit on one device costs exactly the whole layer. So a population is
evaluated in one call of the batch evaluator, and the metrics are those of the decoded plan
(``to_plan``) evaluated on its own (a test checks they agree).

The concat goes where AutoDiCE puts it (thesis 4.2): on the lead device of the layer's first
consumer; a layer with no consumer concatenates on the lead device of the layer before it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.graph.shard import combine_layer, shard_layer
from hetsplit.graph.types import CONV, GEMM, INPUT, Layer
from hetsplit.estimate.batch import BatchMetrics, concat_metrics
from hetsplit.errors import PlanError
from hetsplit.estimate.mapping import MappingEvaluator, TaskOverrides, evaluate_mappings, kernel_outputs, pack_extras
from hetsplit.estimate.threads import parallel_chunks, run_in_ranges
from hetsplit.plan.check import check_plan
from hetsplit.estimate.task_costs import task_costs
from hetsplit.plan.tasks import SINK, SOURCE, Task, TaskGraphBuilder
from hetsplit.plan.types import DIRECT, Combine, Plan, Shard
from hetsplit.search.hybrid_kernel import evaluate_hybrid_range

SPLIT_KINDS = (CONV, GEMM)  # LOP splits convolutions and fully connected layers (thesis 4.1)


def splittable_layers(problem: SplitProblem, slots: int) -> np.ndarray:
    """Layers a LOP split may shard into up to ``slots`` slices: convs and fully connected layers
    with known output channels, at least one channel per slot."""
    out = []
    for i, layer in enumerate(problem.graph.layers):
        channels = _out_channels(layer)
        if layer.op in SPLIT_KINDS and channels is not None and channels >= slots:
            out.append(i)
    return np.array(out, dtype=np.int64)


def _out_channels(layer: Layer) -> int | None:
    key = "c_out" if layer.op == CONV else "n"
    return int(layer.attrs[key]) if key in layer.attrs else None


@dataclass
class HybridAssignment:
    """N decoded hybrid mappings (see the module docstring)."""

    layer_device: np.ndarray   # N x L
    slot_device: np.ndarray    # N x S x P
    slot_used: np.ndarray      # N x S x P bool; slot 0 is always used

    def __len__(self) -> int:
        return len(self.layer_device)


@dataclass
class _Shares:
    """How the used slots of every splittable layer merge into per-device shards (N x S x P)."""

    first: np.ndarray     # the slot that carries its device's shard
    count: np.ndarray     # slots its device holds (on first slots)
    before: np.ndarray    # used slots of devices that come earlier in the shard order
    used: np.ndarray      # used slots of the layer (N x S)
    distinct: np.ndarray  # devices the layer is split over (N x S)


def merge_slots(a: HybridAssignment, num_devices: int) -> _Shares:
    """Per slot: is it its device's first, how many slots that device holds, and how many used slots
    belong to devices whose first slot comes earlier (the shard's offset; 0 on other slots).

    One pass over the P slot columns, each an N x S array operation."""
    dev, used = a.slot_device, a.slot_used
    n, s, p = dev.shape
    cell = (np.arange(n * s) * num_devices).reshape(n, s, 1) + dev    # (row, layer, device) cells
    held = np.bincount(cell[used], minlength=n * s * num_devices)      # used slots per device
    count = np.where(used, held[cell], 0)
    seen = np.zeros(n * s * num_devices, dtype=bool)
    first = np.zeros(dev.shape, dtype=bool)
    before = np.zeros(dev.shape, dtype=np.int64)
    offset = np.zeros((n, s), dtype=np.int64)
    for j in range(p):
        c = cell[:, :, j]
        new = used[:, :, j] & ~seen[c]
        seen[c[new]] = True
        first[:, :, j] = new
        before[:, :, j] = np.where(new, offset, 0)
        offset += np.where(new, count[:, :, j], 0)
    return _Shares(first, count, before, used.sum(axis=2), first.sum(axis=2))


class SlotTemplate:
    """The fixed task structure and cost tables for hybrid mappings with ``slots`` slots per split layer."""

    def __init__(self, problem: SplitProblem, slots: int, split: np.ndarray | None = None):
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.problem, self.slots = problem, slots
        g = problem.graph
        self.split = splittable_layers(problem, slots) if split is None else np.asarray(split, dtype=np.int64)
        self.split_pos = np.full(g.num_layers, -1, dtype=np.int64)
        self.split_pos[self.split] = np.arange(len(self.split))
        self.channels = np.array([_out_channels(g.layers[i]) for i in self.split], dtype=np.int64)
        self._build_tasks()
        base = task_costs(problem, self.tg)
        self.evaluator = MappingEvaluator(problem, self.tg, base)
        # per (layer or split layer, device type), like the shard tables
        self._whole = tuple(a[self.layer_task] for a in (base.time_s, base.energy_j, base.mem_bytes))
        self._concat = tuple(a[self.concat_task] for a in (base.time_s, base.energy_j, base.mem_bytes))
        self._shard_tables()
        self._first_consumer()
        whole = self.layer_task >= 0
        whole[self.split] = False
        self._whole_layers = np.flatnonzero(whole)
        self._byte_per_channel = np.array([g.layers[int(i)].out_bytes for i in self.split], dtype=np.float64) \
            / np.maximum(self.channels, 1)
        self._kernel: tuple | None = None

    # ---- structure ---------------------------------------------------------------------------------
    def _build_tasks(self) -> None:
        g, cl, p = self.problem.graph, self.problem.cluster, self.slots
        b = TaskGraphBuilder(g, cl, DIRECT)
        provider: dict[int, int] = {}
        self.layer_task = np.full(g.num_layers, -1, dtype=np.int64)
        self.slot_task = np.zeros((len(self.split), p), dtype=np.int64)
        self.concat_task = np.zeros(len(self.split), dtype=np.int64)
        slot_edges: list[list[tuple[int, int]]] = []
        for i, layer in enumerate(g.layers):
            s = self.split_pos[i]
            if s < 0:
                t = b.task(Task(layer.name, "layer", (i,), 0))
                self._feed(b, provider, i, t)
                self.layer_task[i] = provider[i] = t
                continue
            c = int(self.channels[s])
            for j in range(p):
                lo, hi = j * c // p, (j + 1) * c // p
                t = b.task(Task(f"{layer.name}#slot{j}", "shard", (i,), 0, shard_layer(layer, "out", lo, hi, c),
                                "out", lo, hi, c))
                self._feed(b, provider, i, t)
                self.slot_task[s, j] = t
            t = b.task(Task(f"{layer.name}:concat", "concat", (i,), 0, combine_layer(layer, "concat", p)))
            slot_edges.append([])
            for j in range(p):
                slot_edges[-1].append((int(self.slot_task[s, j]), t))
                b.edge(int(self.slot_task[s, j]), t, f"{layer.name}.slot[{j}]", layer.out_bytes / p)
            self.concat_task[s] = provider[i] = self.layer_task[i] = t
        for tensor in g.tensors:
            if tensor.is_output and tensor.producer != INPUT:
                b.edge(provider[tensor.producer], SINK, tensor.name, tensor.nbytes)
        self.tg = b.build()
        pair_to_edge = {(int(u), int(v)): e for e, (u, v) in enumerate(zip(self.tg.edge_src, self.tg.edge_dst))}
        self.slot_edge = np.array([[pair_to_edge[uv] for uv in row] for row in slot_edges],
                                  dtype=np.int64).reshape(len(self.split), p)

    @staticmethod
    def _feed(b: TaskGraphBuilder, provider: dict[int, int], i: int, task: int) -> None:
        for t in b.graph.tensors:
            if i in t.consumers:
                b.edge(SOURCE if t.producer == INPUT else provider[t.producer], task, t.name, float(t.nbytes))

    def _first_consumer(self) -> None:
        """Per split layer, the layer whose lead device holds its concat (see the module docstring)."""
        g = self.problem.graph
        consumers: list[list[int]] = [[] for _ in g.layers]
        for t in g.tensors:
            if t.producer != INPUT:
                consumers[t.producer].extend(t.consumers)
        self.concat_at = np.array([min(consumers[i]) if consumers[i] else max(i - 1, 0) for i in self.split],
                                  dtype=np.int64)

    # ---- shard costs -------------------------------------------------------------------------------
    def _shard_tables(self) -> None:
        """Cost of every shard a decoding can produce: layer s, c used slots, offset a, k slots.

        Computed by the same ``task_costs`` the evaluator uses for a decoded plan, so they agree."""
        g, p = self.problem.graph, self.slots
        combos = [(c, a, k) for c in range(1, p + 1) for a in range(c) for k in range(1, c - a + 1)]
        self.combo_index = np.full((p + 1, p, p + 1), -1, dtype=np.int64)
        for idx, (c, a, k) in enumerate(combos):
            self.combo_index[c, a, k] = idx
        combo = np.array(combos, dtype=np.int64).reshape(-1, 3)
        b = TaskGraphBuilder(g, self.problem.cluster, DIRECT)
        self.shard_lo = np.zeros((len(self.split), len(combos)), dtype=np.int64)
        self.shard_hi = np.zeros_like(self.shard_lo)
        task_of = np.zeros_like(self.shard_lo)      # combos that give one slice share its task
        first_alike: dict[tuple, int] = {}
        for s, i in enumerate(self.split):
            ch = int(self.channels[s])
            self.shard_lo[s] = combo[:, 1] * ch // combo[:, 0]
            self.shard_hi[s] = (combo[:, 1] + combo[:, 2]) * ch // combo[:, 0]
            layer = g.layers[int(i)]
            alike = first_alike.setdefault(self._cost_key(int(i)), s)
            if alike != s:          # an earlier layer alike in all that its shards' costs read
                task_of[s] = task_of[alike]
                continue
            # a slice by output channels costs what its width costs, wherever it starts (shard_layer
            # scales the layer by the width only), so one task per width
            widths, inverse = np.unique(self.shard_hi[s] - self.shard_lo[s], return_inverse=True)
            ids = [b.task(Task(f"{layer.name}#{w}", "shard", (int(i),), 0, shard_layer(layer, "out", 0, int(w), ch),
                               "out", 0, int(w), ch))
                   for w in widths]
            task_of[s] = np.asarray(ids, dtype=np.int64)[inverse.ravel()]
        costs = task_costs(self.problem, b.build())
        self.shard_time, self.shard_energy, self.shard_mem = (a[task_of] for a in
                                                              (costs.time_s, costs.energy_j, costs.mem_bytes))
        # a shard covering the whole layer is the whole layer (the decoded plan places it whole)
        whole = (combo[:, 1] == 0) & (combo[:, 2] == combo[:, 0])
        rows = self.problem.costs
        for arr, full in ((self.shard_time, rows.time_s), (self.shard_energy, rows.energy_j),
                          (self.shard_mem, rows.mem_bytes)):
            arr[:, whole, :] = full[self.split][:, None, :]

    def _cost_key(self, i: int) -> tuple:
        """What the costs of layer ``i``'s shards depend on: the layer but for its name and ONNX node
        names, and its whole-layer costs on every device type (DenseNet-121's 121 split layers have
        67 keys)."""
        layer, rows = self.problem.graph.layers[i], self.problem.costs
        return (layer.op, layer.macs, layer.param_bytes, layer.out_bytes, layer.in_bytes, layer.onnx_ops,
                layer.splittable, repr(sorted(layer.attrs.items())),
                rows.time_s[i].tobytes(), rows.energy_j[i].tobytes(), rows.mem_bytes[i].tobytes())

    # ---- evaluation --------------------------------------------------------------------------------
    def arrays(self, a: HybridAssignment) -> tuple[np.ndarray, TaskOverrides]:
        """Device per task (N x T) and the per-plan costs of ``a`` on the template (task-major)."""
        n, tg, types = len(a), self.tg, self.problem.device_type
        n_split = len(self.split)
        sh = merge_slots(a, self.problem.num_devices)
        lead = a.slot_device[:, :, 0]
        layer_device = self.lead_devices(a)
        split_over = sh.distinct > 1                                   # N x S
        slot_dev = np.where(a.slot_used, a.slot_device, lead[:, :, None])
        concat_dev = np.where(split_over, layer_device[:, self.concat_at], lead)
        wl = self._whole_layers
        dev = np.empty((n, tg.num_tasks), dtype=np.int64)
        dev[:, self.layer_task[wl]] = layer_device[:, wl]
        dev[:, self.slot_task.ravel()] = slot_dev.reshape(n, -1)
        dev[:, self.concat_task] = concat_dev

        combo = self.combo_index[sh.used[:, :, None], np.minimum(sh.before, self.slots - 1), sh.count]
        combo = np.where(sh.first, combo, 0).transpose(1, 2, 0)        # S x P x N
        first = sh.first.transpose(1, 2, 0)
        s_idx = np.arange(n_split)[:, None, None]
        sty = types[slot_dev].transpose(1, 2, 0)
        wty = types[layer_device[:, wl]].T                             # W x N
        cty = types[concat_dev].T                                      # S x N
        over = split_over.T
        out = []
        for whole, shard, concat in zip(self._whole, (self.shard_time, self.shard_energy, self.shard_mem),
                                        self._concat):
            arr = np.empty((tg.num_tasks, n))
            arr[self.layer_task[wl]] = whole[wl[:, None], wty]
            arr[self.slot_task.ravel()] = np.where(first, shard[s_idx, combo, sty], 0.0).reshape(-1, n)
            arr[self.concat_task] = np.where(over, concat[np.arange(n_split)[:, None], cty], 0.0)
            out.append(arr)
        edge_bytes = np.empty((len(tg.edge_bytes), n))
        edge_bytes[:] = tg.edge_bytes[:, None]
        span = self.shard_hi[s_idx, combo] - self.shard_lo[s_idx, combo]
        share = np.where(first, span * self._byte_per_channel[:, None, None], 0.0)
        edge_bytes[self.slot_edge.ravel()] = share.reshape(-1, n)
        return dev, TaskOverrides(out[0], out[1], out[2], edge_bytes)

    def lead_devices(self, a: HybridAssignment) -> np.ndarray:
        """``layer_device`` with every split layer on its lead (slot 0's) device."""
        out = a.layer_device.copy()
        out[:, self.split] = a.slot_device[:, :, 0]
        return out

    def evaluate(self, a: HybridAssignment, latency: bool = True) -> BatchMetrics:
        """Metrics of every mapping of ``a``: decoded and evaluated plan by plan in compiled code
        (``hybrid_kernel``; the same figures as the batch evaluator on ``arrays``), the plans split over
        the threads; on a cluster whose devices keep weights off chip, each decoded plan alone (the
        memory model costs its shards from their layers)."""
        if self.evaluator.memory is not None:
            g, cl = self.problem.graph, self.problem.cluster
            return concat_metrics([evaluate_mappings(self.problem, check_plan(g, cl, self.to_plan(a, r, "hybrid")))
                                   for r in range(len(a))])
        ev, n = self.evaluator, len(a)
        n_dev = self.problem.num_devices
        layer_device = np.ascontiguousarray(a.layer_device, dtype=np.int64)
        slot_device = np.ascontiguousarray(a.slot_device, dtype=np.int64)
        slot_used = np.ascontiguousarray(a.slot_used, dtype=np.bool_)
        if n and (min(layer_device.min(), slot_device.min()) < 0 or max(layer_device.max(), slot_device.max()) >= n_dev):
            raise PlanError(f"device indices must be in 0..{n_dev - 1}")
        if n and not slot_used[:, :, 0].all():
            raise PlanError("slot 0 of every split layer must be used")
        out = kernel_outputs(n, n_dev)
        args = (layer_device, slot_device, slot_used, self.kernel_tables(), ev._tables, ev.kernel_structure(),
                ev.kernel_net(), pack_extras(None, n, n_dev), latency, out)
        run_in_ranges(evaluate_hybrid_range, n, parallel_chunks(n, self.tg.num_tasks + len(self.tg.edge_src)), *args)
        return ev.metrics(out)

    def kernel_tables(self) -> tuple:
        """The template's index arrays and cost tables as ``hybrid_kernel`` reads them (built once)."""
        if self._kernel is None:
            c = np.ascontiguousarray
            self._kernel = (c(self.problem.device_type, dtype=np.int64), c(self.split), c(self.split_pos),
                            c(self.concat_at), c(self._whole_layers), c(self.layer_task), c(self.slot_task),
                            c(self.concat_task), c(self.slot_edge), c(self.combo_index),
                            *(c(a, dtype=np.float64) for a in (self.shard_time, self.shard_energy, self.shard_mem)),
                            c(self.shard_lo), c(self.shard_hi), c(self._byte_per_channel, dtype=np.float64),
                            *(c(a, dtype=np.float64) for a in self._whole + self._concat),
                            c(self.tg.edge_bytes, dtype=np.float64), self.tg.num_tasks)
        return self._kernel

    def to_plan(self, a: HybridAssignment, row: int, algorithm: str, params: dict | None = None) -> Plan:
        """The plan/2 mapping of mapping ``row`` (shards merged per device, concat placed)."""
        g, cl = self.problem.graph, self.problem.cluster
        names = cl.names
        assign: dict[str, str | tuple[Shard, ...]] = {}
        combine: dict[str, Combine] = {}
        one = HybridAssignment(a.layer_device[row:row + 1], a.slot_device[row:row + 1], a.slot_used[row:row + 1])
        sh = merge_slots(one, self.problem.num_devices)
        lead = self.lead_devices(one)[0]
        for i, layer in enumerate(g.layers):
            s = self.split_pos[i]
            if s < 0:
                assign[layer.name] = names[int(lead[i])]
                continue
            if sh.distinct[0, s] == 1:
                assign[layer.name] = names[int(a.slot_device[row, s, 0])]
                continue
            c, ch = int(sh.used[0, s]), int(self.channels[s])
            firsts = sorted(np.flatnonzero(sh.first[0, s]), key=lambda j: sh.before[0, s, j])
            shards = []
            for j in firsts:
                lo, k = int(sh.before[0, s, j]), int(sh.count[0, s, j])
                shards.append(Shard(names[int(a.slot_device[row, s, j])], "out", lo * ch // c, (lo + k) * ch // c))
            assign[layer.name] = tuple(shards)
            combine[layer.name] = Combine("concat", names[int(lead[self.concat_at[s]])])
        return Plan(g.name, cl.name, algorithm, params=dict(params or {}), assign=assign, combine=combine)
