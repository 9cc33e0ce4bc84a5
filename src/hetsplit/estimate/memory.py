"""Memory-hierarchy effects of a plan: the task costs and weight loads of chips that keep weights off chip.

A device model with a memory hierarchy (``costs/models/mcu.py``: an MCU with its weights in off-chip
L3) decides per chip where the weights of what the chip runs live: in L2 for good (resident), loaded
segment by segment while the segment before runs (prefetched: double-buffered), or streamed through
L2 as each layer runs. That depends on the plan: the layers, shards and combines the chip runs
(``graph/segments.py`` cuts the model into blocks and its head), and the chip's share of the whole
model (``SplitProblem.scope``: the graph may be one block of it). For one device assignment of a
TaskGraph this module turns the model's answer into what the engine runs:

- per-task costs of every task on such a chip (time split into compute / l2 / l3, energy with the
  L2 and L3 traffic, memory); tasks on other devices keep their table costs;
- ``ExtraJobs`` on each chip's memory channel, the prefetch loads: the weights of the k-th
  prefetched segment the chip runs (in task order) load task by task, at once for k = 1 and after
  the chip's last weight task of segment k - 2 otherwise (its buffer is free again), each before its
  task; the first segment's weights load again during the last ones (for the next input, or the
  model's next identical block) and nothing waits for them, but one input is done only when they
  are. A load's L3 energy is its task's.

The closed form (``mapping.py``) and the simulator (``simulate.py``) both cost such plans through
``MemoryEffects``, on the same tasks, costs and extra jobs; pipeline stages that span several
segments are first split into one task per segment (``MemoryEffects.split``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from hetsplit.costs.models.base import device_model
from hetsplit.costs.models.mcu import MODEL_NAME, PREFETCHED, RESIDENT, McuDeviceModel, McuModel, McuTaskCost, WeightShare
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import ModelError
from hetsplit.estimate.schedule import ExtraJobs
from hetsplit.estimate.task_costs import TaskCosts, task_costs
from hetsplit.graph.segments import segments
from hetsplit.graph.types import Layer
from hetsplit.plan.tasks import Task, TaskGraph, TaskGraphBuilder

PARTS = ("compute", "l2", "l3")
TABLE_OBJECTIVE = ("the per-layer cost table (one chip holding the whole graph); the plan's figures place each "
                   "chip's own share of the weights (estimate/memory.py)")


@dataclass(frozen=True)
class ChipMemory:
    """Where one chip keeps the weights of what it runs in a plan, and what that moves per input."""

    device: str
    regimes: tuple[str, ...]       # per segment it runs, in run order
    weight_bytes: float            # dense weights it holds in the graph
    segment_weight_bytes: float    # its largest share of one segment
    model_weight_bytes: float      # its share of the whole model
    l2_weight_bytes: float         # weights it keeps in L2 (resident: all; prefetched: two segments)
    lookup_bytes: float            # lookup tables it keeps in L3
    l3_bytes: float                # per input: prefetch loads, streamed bytes, looked-up rows
    load_s: float                  # per input: its memory channel's prefetch loads

    @property
    def regime(self) -> str:
        return regime_label(self.regimes)


@dataclass(frozen=True)
class PlanMemory:
    """One assignment's task costs (with parts), prefetch loads and per-chip placement."""

    costs: TaskCosts
    extras: ExtraJobs
    chips: tuple[ChipMemory, ...]

    @property
    def regime(self) -> str:
        return regime_label(tuple(r for c in self.chips for r in c.regimes))


def regime_label(regimes: tuple[str, ...]) -> str:
    """One regime, or "mixed: a, b" when they differ (no segment: resident)."""
    kinds = list(dict.fromkeys(regimes)) or [RESIDENT]
    return kinds[0] if len(kinds) == 1 else "mixed: " + ", ".join(kinds)


class MemoryEffects:
    """The memory models of a problem's devices, ready to cost assignments (``of`` gives None when no
    device has one)."""

    def __init__(self, problem: SplitProblem, models: dict[int, McuModel]) -> None:
        self.problem, self.models = problem, models
        self.segments = segments(problem.graph)
        blocks, whole = self.segments.blocks, problem.scope.model_blocks
        if whole is not None and not blocks:
            raise ModelError(f"model {problem.graph.name!r} has no Transformer blocks, so it cannot stand for "
                             f"{whole} blocks of a model (ModelScope); leave the scope out")
        self.block_scale = whole / blocks if whole is not None else 1.0

    @staticmethod
    def of(problem: SplitProblem) -> "MemoryEffects | None":
        cl = problem.cluster
        by_type: dict[str, McuModel] = {}
        for t in cl.types:
            dm = device_model(cl.representative(t)) if cl.representative(t).model == MODEL_NAME else None
            if isinstance(dm, McuDeviceModel) and isinstance(dm.model, McuModel):
                by_type[t] = dm.model
        models = {d: by_type[dev.type] for d, dev in enumerate(cl.devices) if dev.type in by_type}
        return MemoryEffects(problem, models) if models else None

    # ---- structure --------------------------------------------------------------------------------
    def split(self, tg: TaskGraph) -> tuple[TaskGraph, np.ndarray]:
        """``tg`` with every stage task that spans several segments split into one task per segment
        (chained on its device by zero-byte edges), and each new task's original task index."""
        seg = self.segments.of_layer
        runs: list[list[list[int]]] = []
        for t in tg.tasks:
            r: list[list[int]] = []
            for i in (t.layers if t.kind == "stage" else t.layers[:1]):
                if r and seg[r[-1][-1]] == seg[i]:
                    r[-1].append(i)
                else:
                    r.append([i])
            runs.append(r)
        if all(len(r) == 1 for r in runs):
            return tg, np.arange(tg.num_tasks)
        b = TaskGraphBuilder(tg.graph, tg.cluster, tg.routing)
        first, last, parent, links = [], [], [], []
        for k, (t, r) in enumerate(zip(tg.tasks, runs)):
            ids = [b.task(t if len(r) == 1 else replace(t, name=f"{t.name}#{j}", layers=tuple(piece)))
                   for j, piece in enumerate(r)]
            parent += [k] * len(ids)
            first.append(ids[0])
            last.append(ids[-1])
            links += list(zip(ids, ids[1:]))
        for e in range(len(tg.edge_src)):
            s, d = int(tg.edge_src[e]), int(tg.edge_dst[e])
            b.edge(last[s] if s >= 0 else s, first[d] if d >= 0 else d, tg.payloads[tg.edge_payload[e]],
                   float(tg.edge_bytes[e]))
        for a, c in links:
            b.edge(a, c, f"{b.tasks[a].name}->next", 0.0)
        out = b.build()
        chain = np.array([(last[a], first[c]) for a, c in tg.chain], dtype=np.int64).reshape(-1, 2)
        return replace(out, chain=chain), np.array(parent, dtype=np.int64)

    def _layers(self, task: Task) -> list[Layer]:
        if task.kind == "copy":
            return []
        if task.work is not None:
            return [task.work]
        return [self.problem.graph.layers[i] for i in task.layers]

    # ---- one assignment ---------------------------------------------------------------------------
    def plan(self, tg: TaskGraph, devices: np.ndarray, base: TaskCosts) -> PlanMemory:
        """Task costs, loads and placement of ``tg`` (already ``split``) under ``devices`` (T), the
        tasks of devices without a memory model at their ``base`` costs."""
        dev = np.asarray(devices, dtype=np.int64)
        time, energy, mem = base.time_s.copy(), base.energy_j.copy(), base.mem_bytes.copy()
        parts = {"compute": time.copy(), "l2": np.zeros_like(time), "l3": np.zeros_like(time)}
        by_chip: dict[int, dict[int, list[int]]] = {}
        for t, task in enumerate(tg.tasks):
            if int(dev[t]) in self.models:
                by_chip.setdefault(int(dev[t]), {}).setdefault(self.segments.of_layer[task.layers[0]], []).append(t)
        loads: list[tuple[float, int, int, int, str]] = []
        chips = []
        for d, segs in by_chip.items():
            chips.append(self._chip(tg, d, segs, (time, energy, mem, parts), loads))
        device, after, before = (np.array([x[i] for x in loads], dtype=np.int64) for i in (1, 2, 3))
        extras = ExtraJobs(np.array([x[0] for x in loads], dtype=np.float64), device, after, before,
                           labels=tuple(x[4] for x in loads), part="l3")
        return PlanMemory(TaskCosts(time, energy, mem, parts), extras, tuple(chips))

    def _chip(self, tg: TaskGraph, d: int, segs: dict[int, list[int]],
              out: tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, np.ndarray]],
              loads: list[tuple[float, int, int, int, str]]) -> ChipMemory:
        """Cost chip ``d``'s tasks (``segs``: segment -> its tasks, in run order) into ``out``, append its loads."""
        time, energy, mem, parts = out
        m, k = self.models[d], int(self.problem.device_type[d])
        layers = {t: self._layers(tg.tasks[t]) for ts in segs.values() for t in ts}
        dense = {t: sum(m.dense(layer) for layer in layers[t]) for t in layers}
        share = {s: sum(dense[t] for t in ts) for s, ts in segs.items()}
        model_bytes = sum(w * (self.block_scale if self.segments.is_block(s) else 1.0) for s, w in share.items())
        regimes = dict(zip(segs, m.placement(WeightShare(tuple(share.values()), model_bytes))))
        l3 = 0.0
        for s, ts in segs.items():
            for t in ts:
                c = sum((m.task_cost(layer, regimes[s]) for layer in layers[t]), McuTaskCost())
                time[t, k], energy[t, k] = c.time_s, c.energy_j
                parts["compute"][t, k], parts["l2"][t, k], parts["l3"][t, k] = c.compute_s, c.l2_s, c.l3_s
                if layers[t]:           # a copy task keeps its table memory: the result it holds
                    mem[t, k] = sum(m.memory(layer) for layer in layers[t])
                l3 += c.l3_bytes
        chain = [s for s in segs if regimes[s] == PREFETCHED and share[s] > 0]
        weight_tasks = {s: [t for t in segs[s] if dense[t] > 0] for s in chain}
        load_s = 0.0
        for j in range(1, len(chain) + 1):
            s = chain[j % len(chain)]
            after = weight_tasks[chain[j - 2]][-1] if j >= 2 else -1
            for t in weight_tasks[s]:
                seconds, joules = m.load(dense[t])
                energy[t, k] += joules
                loads.append((seconds, d, after, t if j < len(chain) else -1, f"load {tg.tasks[t].name}"))
                load_s += seconds
                l3 += dense[t]
        resident = all(r == RESIDENT for r in regimes.values())
        lookups = sum(m.held(layer) for ls in layers.values() for layer in ls if m.is_lookup(layer))
        return ChipMemory(self.problem.cluster.names[d], tuple(regimes.values()), sum(share.values()),
                          max(share.values(), default=0.0), model_bytes,
                          model_bytes if resident else 2 * max((share[s] for s in chain), default=0.0),
                          lookups, l3, load_s)


def table_objective(problem: SplitProblem) -> dict[str, str]:
    """What a solver that searches the per-layer table optimized, for its plans' params, on a problem
    whose figures the memory model gives (empty elsewhere: there the table is the figure)."""
    return {"optimized": TABLE_OBJECTIVE} if has_memory_model(problem) else {}


def has_memory_model(problem: SplitProblem) -> bool:
    """Whether some device of ``problem`` keeps weights off chip (its plans are costed through here)."""
    return any(d.model == MODEL_NAME for d in problem.cluster.devices)


def plan_memory(problem: SplitProblem, tg: TaskGraph) -> PlanMemory | None:
    """The memory effects of ``tg``'s own assignment (None: no device of ``problem`` has a memory model)."""
    effects = MemoryEffects.of(problem)
    if effects is None:
        return None
    split, _ = effects.split(tg)
    return effects.plan(split, split.device, task_costs(problem, split))
