"""What the runtime's segments cost beyond their tasks: the one rule every mapping estimate charges.

The runtime runs each device's tasks as segments (``TaskGraph.segments``), one sub-model each, one
executor call per input. A profile's per-layer times come from one whole-model run and leave out what a
segment adds (``costs.segment``): its call and the bytes crossing its boundary, and, for a layer cut off
from the layer before it, what the whole model's executor had fused away. The rule, for a task graph on
its devices:

- each segment pays ``SegmentCost.seconds(boundary bytes)`` of its device's type
  (``CostTable.segment_cost``; ``TaskGraph.segment_boundary_bytes``), charged to its first task;
- a whole-layer task (``layer`` or ``stage``) whose first layer l > 0 pays ``unfused_s[l]`` of its device's
  type when the task of layer l - 1 (the last task computing it: the layer, or its shards' combine) is in
  another segment. Shards and combines never pay it.

``segment_charges`` applies it to one TaskGraph; the compiled closed form (``mapping.plan_figures``)
applies the same rule to every device assignment it evaluates, computing the segments itself. Both
also charge each message's two ends (``cluster.links``): the CPU its sender and its first reader at the
destination spend, on those two tasks (``message_end_charges``; the source and the sink run no task and
are charged nothing).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate.task_costs import TaskCosts
from hetsplit.plan.tasks import TaskGraph

WHOLE_KINDS = ("layer", "stage")   # tasks that compute whole layers (they pay a broken fusion)
SEGMENT_PART = "segment call"      # the part of a task's time its segment's call and boundary bytes add
UNFUSED_PART = "unfused"           # ... and what a layer cut off from the layer before it adds
MESSAGE_PART = "message ends"      # ... and the CPU of the ends of the messages it sends and first reads


@dataclass(frozen=True)
class SegmentCharges:
    """Per task (T): what its segment adds (on the segment's first task) and what a broken fusion adds."""

    segment_s: np.ndarray
    unfused_s: np.ndarray

    @property
    def total_s(self) -> np.ndarray:
        return np.asarray(self.segment_s + self.unfused_s)


def previous_layer_task(tg: TaskGraph, kinds: tuple[str, ...] = WHOLE_KINDS) -> np.ndarray:
    """Per task: for a task of ``kinds`` (default: whole-layer tasks) whose first layer l > 0, the last task
    before it computing layer l - 1 (-1 where none, and for every other task)."""
    last: dict[int, int] = {}
    out = np.full(tg.num_tasks, -1, dtype=np.int64)
    for n, task in enumerate(tg.tasks):
        if task.kind in kinds and task.layers[0] > 0:
            out[n] = last.get(task.layers[0] - 1, -1)
        for layer in task.layers:
            last[layer] = n
    return out


def unfused_table(problem: SplitProblem, tg: TaskGraph, kinds: tuple[str, ...] = WHOLE_KINDS) -> np.ndarray:
    """T x types: what each task (of ``kinds``) pays on each type when cut off from the task of its
    previous layer."""
    assert problem.costs.unfused_s is not None
    out = np.zeros((tg.num_tasks, len(problem.costs.types)))
    for n, task in enumerate(tg.tasks):
        if task.kind in kinds and task.layers[0] > 0:
            out[n] = problem.costs.unfused_s[task.layers[0]]
    return out


def segment_charges(problem: SplitProblem, tg: TaskGraph) -> SegmentCharges:
    """The rule (see the module docstring) on ``tg`` with its own devices."""
    seg_cost = problem.costs.segment_cost
    types, names = problem.device_type, problem.costs.types
    segment = np.zeros(tg.num_tasks)
    unfused = np.zeros(tg.num_tasks)
    if not problem.costs.charges_cuts:
        return SegmentCharges(segment, unfused)
    firsts = [seg[0] for segs in tg.segments.values() for seg in segs]
    for first, (d, nbytes) in zip(firsts, tg.segment_boundary_bytes()):
        segment[first] += seg_cost(names[types[d]]).seconds(nbytes)
    seg_of = np.empty(tg.num_tasks, dtype=np.int64)
    for segs in tg.segments.values():
        for seg in segs:
            seg_of[seg] = seg[0]
    prev = previous_layer_task(tg)
    table = unfused_table(problem, tg)
    for n in np.flatnonzero(prev >= 0):
        if seg_of[prev[n]] != seg_of[n]:
            unfused[n] = table[n, types[tg.tasks[n].device]]
    return SegmentCharges(segment, unfused)


def message_end_charges(tg: TaskGraph) -> np.ndarray:
    """Per task (T): the CPU of the message ends it handles (``cluster.links``): each message's sending
    end on its producer, its receiving end on its first reader at the destination."""
    links = tg.cluster.links
    out = np.zeros(tg.num_tasks)
    for m in tg.messages():
        if m.producer >= 0:
            out[m.producer] += links.end(m.src, m.nbytes)
        if m.consumers and m.consumers[0] >= 0:
            out[m.consumers[0]] += links.end(m.dst, m.nbytes)
    return out


def charged(problem: SplitProblem, tg: TaskGraph, costs: TaskCosts) -> TaskCosts:
    """``costs`` (of ``tg``'s tasks) with ``segment_charges`` and ``message_end_charges`` added to each
    task's time on its own device's type, as parts of their own (``SEGMENT_PART``, ``UNFUSED_PART``,
    ``MESSAGE_PART``). ``costs`` itself when nothing is charged."""
    cuts, ends = problem.costs.charges_cuts, tg.cluster.links.charges_ends
    if not (cuts or ends):
        return costs
    got = segment_charges(problem, tg)
    rows = np.arange(tg.num_tasks)
    cols = problem.device_type[tg.device]
    parts = {k: v.copy() for k, v in costs.parts.items()} or {"compute": costs.time_s.copy()}
    time = costs.time_s.copy()
    charges = [(SEGMENT_PART, got.segment_s), (UNFUSED_PART, got.unfused_s)] if cuts else []
    for name, extra in charges + ([(MESSAGE_PART, message_end_charges(tg))] if ends else []):
        add = np.zeros_like(time)
        add[rows, cols] = extra
        parts[name] = add
        time = time + add
    return TaskCosts(time, costs.energy_j, costs.mem_bytes, parts)
