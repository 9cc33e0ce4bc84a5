"""Per-task costs of a TaskGraph: time, energy and resident memory of each task on each device type.

- whole layers and stages: the cost table's rows (stages: O(1) range sums);
- shards: the layer's cost-table entry times the device model's ratio of shard to whole layer, so
  a profiled time keeps its measured level and the model supplies how it scales (fixed costs
  included); where the model cannot cost the layer (a graph read from a profile has no shapes),
  the ratio is the shard's share of the work; on a GPU-kind type whose launch part is known
  (``launch_part``), a shard launches as many kernels as the whole layer, so it costs the layer's launch
  part plus the ratio of the rest;
- combines (concat, sum): the element-wise work the device model gives for them; ``copy`` tasks
  only forward (their time is the link's) and hold the result.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from hetsplit.costs.models.base import LayerCosts, device_model
from hetsplit.costs.problem import SplitProblem
from hetsplit.graph.types import Graph, Layer
from hetsplit.errors import PlanError
from hetsplit.plan.tasks import Task, TaskGraph


@dataclass
class TaskCosts:
    """``time_s[t, k]``, ``energy_j[t, k]``, ``mem_bytes[t, k]`` of task t on device type k (inf: cannot run);
    ``parts``: where a device model splits the time (e.g. compute, l2, l3: arrays like ``time_s`` that sum
    to it), empty when all of it is compute."""

    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    parts: dict[str, np.ndarray] = field(default_factory=dict)

    def time_parts(self, t: int, k: int) -> dict[str, float]:
        """Task t's time on device type k, split into its parts."""
        if not self.parts:
            return {"compute": float(self.time_s[t, k])}
        return {name: float(a[t, k]) for name, a in self.parts.items()}

    def on(self, devices: np.ndarray, device_type: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Time, energy and memory of every task on its device (``devices``: N x T) as N x T arrays."""
        types = device_type[np.atleast_2d(devices)]
        cols = np.arange(types.shape[1])[None, :]
        return self.time_s[cols, types], self.energy_j[cols, types], self.mem_bytes[cols, types]


def task_costs(problem: SplitProblem, tg: TaskGraph) -> TaskCosts:
    """Costs of every task of ``tg`` on every device type of ``problem``."""
    table = problem.costs
    n_types = len(table.types)
    time = np.zeros((tg.num_tasks, n_types))
    energy = np.zeros((tg.num_tasks, n_types))
    mem = np.zeros((tg.num_tasks, n_types))
    modelled: list[int] = []
    for k, task in enumerate(tg.tasks):
        if task.kind in ("layer", "stage"):
            lo, hi = task.layers[0], task.layers[-1] + 1
            cols = np.arange(n_types)
            time[k] = table.range_time(lo, hi, cols)
            energy[k] = table.range_energy(lo, hi, cols)
            mem[k] = table.range_mem(lo, hi, cols)
        elif task.kind == "copy":
            mem[k] = problem.graph.layers[task.layers[0]].out_bytes
        else:
            modelled.append(k)
    if modelled:
        _model_tasks(problem, tg, modelled, time, energy, mem)
    return TaskCosts(time, energy, mem)


def _model_tasks(problem: SplitProblem, tg: TaskGraph, ks: list[int], time: np.ndarray, energy: np.ndarray,
                 mem: np.ndarray) -> None:
    table, graph = problem.costs, problem.graph
    work = [_renamed(_work(tg.tasks[k]), f"{k}:{tg.tasks[k].name}") for k in ks]  # unique: a Graph indexes by name
    parents = sorted({tg.tasks[k].layers[0] for k in ks if tg.tasks[k].kind == "shard"})
    parent_layers = [_renamed(graph.layers[p], f"{graph.layers[p].name}#whole") for p in parents]
    combine = np.array([k for k in ks if tg.tasks[k].kind != "shard"], dtype=np.int64)
    combine_j = np.array([j for j, k in enumerate(ks) if tg.tasks[k].kind != "shard"], dtype=np.int64)
    shard_j = np.array([j for j, k in enumerate(ks) if tg.tasks[k].kind == "shard"], dtype=np.int64)
    shard = np.asarray(ks, dtype=np.int64)[shard_j]
    shard_layer = np.array([tg.tasks[k].layers[0] for k in shard], dtype=np.int64)
    position = {layer: len(work) + i for i, layer in enumerate(parents)}
    whole = np.array([position[layer] for layer in shard_layer], dtype=np.int64)
    fraction = np.array([tg.tasks[k].fraction for k in shard], dtype=np.float64)
    for ti, type_name in enumerate(table.types):
        lc = _model_costs(problem, type_name, work + parent_layers)
        # a combine: the model's element-wise cost, or just its buffer
        if lc is None:
            mem[combine, ti] = [tg.tasks[k].work.out_bytes for k in combine]
        else:
            time[combine, ti], energy[combine, ti], mem[combine, ti] = (
                lc.time_s[combine_j], lc.energy_j[combine_j], lc.mem_bytes[combine_j])
        launch, _ = launch_part(problem, type_name)
        for arr, full, model in ((time, table.time_s, None if lc is None else lc.time_s),
                                 (energy, table.energy_j, None if lc is None else lc.energy_j),
                                 (mem, table.mem_bytes, None if lc is None else lc.mem_bytes)):
            ratio = _ratios(model, shard_j, whole, fraction)
            if arr is time and launch is not None:
                fixed = np.minimum(launch[shard_layer], full[shard_layer, ti])
                arr[shard, ti] = fixed + (full[shard_layer, ti] - fixed) * ratio
            else:
                arr[shard, ti] = full[shard_layer, ti] * ratio


def launch_part(problem: SplitProblem, type_name: str) -> tuple[np.ndarray | None, str]:
    """Per layer, the seconds of a GPU-kind type's time that are fixed per launch (a shard pays them whole),
    and where they come from; ``(None, why)`` where there is no such part (a CPU type: its shards cost
    their share, as before).

    From the device's ``launch_s`` parameter (seconds per layer, or ``{layer kind: seconds}`` with an
    optional ``default``) when given; else, for a measured profile, its per-layer floor: its fastest
    layer's time, which is no more than what launching a layer costs there. A modelled GPU without
    ``launch_s`` keeps its model's shard-to-whole ratio (its ``overhead_s`` already fixed per layer)."""
    device = problem.cluster.representative(type_name)
    if device.kind != "gpu":
        return None, f"{type_name}: a {device.kind}, its shards cost their share of the layer"
    ops = [layer.op for layer in problem.graph.layers]
    given = device.params.get("launch_s")
    if given is not None:
        if isinstance(given, dict):
            default = float(given.get("default", 0.0))
            return (np.array([float(given.get(op, default)) for op in ops]),
                    f"{type_name}: launch_s per layer kind {given} (device parameter)")
        return np.full(len(ops), float(given)), f"{type_name}: launch_s {float(given):g} s per layer (device parameter)"
    table = problem.costs
    t = table.time_s[:, table.types.index(type_name)]
    if table.sources.get(type_name, "").startswith("measured") and np.any(t > 0):
        floor = float(t[t > 0].min())
        return (np.full(len(ops), floor),
                f"{type_name}: the measured profile's per-layer floor (its fastest layer, {floor * 1e6:.1f} us)")
    return None, f"{type_name}: modelled, its model's shard-to-whole ratio (overhead_s fixed per layer)"


def _renamed(layer: Layer, name: str) -> Layer:
    """``layer`` under another name (``dataclasses.replace`` without re-validating a valid layer: a
    hybrid template costs ~10^5 shards)."""
    out = copy.copy(layer)
    object.__setattr__(out, "name", name)
    return out


def _ratios(model: np.ndarray | None, shard: np.ndarray, whole: np.ndarray, fraction: np.ndarray) -> np.ndarray:
    """Per shard: the model's shard-to-whole ratio, or its share of the work where the model gives no
    finite positive whole or no finite shard."""
    if model is None:
        return fraction
    m_shard, m_whole = model[shard], model[whole]
    ok = np.isfinite(m_whole) & (m_whole > 0) & np.isfinite(m_shard)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(ok, m_shard / np.where(ok, m_whole, 1.0), fraction)


def _model_costs(problem: SplitProblem, type_name: str, layers: list[Layer]) -> LayerCosts | None:
    """The device model's costs of ``layers`` for one type, or None when it cannot cost them."""
    try:
        model = device_model(problem.cluster.representative(type_name))
        return model.layer_costs(Graph(f"{problem.graph.name}-tasks", layers, []))
    except Exception:  # noqa: BLE001 - any model that cannot read these layers falls back to work shares
        return None


def _work(task: Task) -> Layer:
    """The layer a device model costs for ``task`` (a modelled task always has one)."""
    if task.work is None:
        raise PlanError(f"task {task.name!r} has no layer for a device model to cost")
    return task.work
