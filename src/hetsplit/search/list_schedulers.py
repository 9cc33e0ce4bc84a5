"""The standard list schedulers beside HEFT, as node-to-unit mappers (one call shape: ``solve``).

Each schedules one input (the assumptions of ``list_scheduling.py``), and its plan carries the run
order of its schedule. Ties go to the lower layer index, then to the lower device index.

- ``cpop`` (Topcuoglu, Hariri, Wu 2002): priority = rank_u + rank_d; the layers whose priority equals
  the entry's are the critical path, all placed on the one device that runs them fastest in sum
  (among devices that can run all of them; none: they are placed like the others); ready layers go
  highest priority first, the others to their earliest-finish device (with insertion).
- ``peft`` (Arabnejad, Barbosa 2014): the optimistic cost table ``OCT(i, d)`` = max over successors j
  of min over devices w of ``OCT(j, w) + w(j, w) + c(i, j; d, w)`` (0 at exits), where c is the
  transfer over the actual link d -> w (0 when w = d; the paper's mean cost on uniform links); ready
  layers by the mean of their OCT row, highest first, each to the device of least finish + OCT.
- ``minmin`` / ``maxmin`` (Braun et al. 2001, on a DAG's ready set): every ready layer's earliest
  completion over the devices (appended after the device's last layer); place the layer whose
  completion is the least (minmin) or the largest (maxmin) there; repeat.
- ``etf`` (Hwang, Chow, Anger, Lee 1989): over every ready layer and device, the pair that can start
  first (appended); ties: the higher static level (mean times to an exit).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from hetsplit.errors import HetsplitError

from hetsplit.search.base import register_partitioner
from hetsplit.search.heft import heft
from hetsplit.search.list_scheduling import (ListSchedule, ListSchedulerMapper, PartialSchedule, comm_time,
                                             downward_ranks, static_levels, upward_ranks)
from hetsplit.search.node_mapping import NodeMapping

REL_TOL = 1e-9   # priorities this close are equal (CPOP's critical path)


def _ready(ps: PartialSchedule) -> list[int]:
    return [i for i in range(ps.nm.num_layers) if not ps.placed(i) and ps.ready(i)]


def _by_priority(ps: PartialSchedule, priority: np.ndarray, place) -> ListSchedule:
    """Place ready layers highest ``priority`` first (ties: lower index) with ``place(i)``."""
    for _ in range(ps.nm.num_layers):
        i = min(_ready(ps), key=lambda k: (-priority[k], k))
        place(i)
    return ps.result()


def critical_path_device(nm: NodeMapping, on_path: np.ndarray) -> int | None:
    """The device that runs every critical-path layer and does so fastest in sum (None: no device can)."""
    total = np.where(nm.feasible[on_path].all(axis=0), nm.time[on_path].sum(axis=0), np.inf)
    return int(np.argmin(total)) if np.isfinite(total).any() else None


def cpop(nm: NodeMapping) -> ListSchedule:
    ps = PartialSchedule(nm)
    priority = upward_ranks(nm, ps.edge_bytes) + downward_ranks(nm, ps.edge_bytes)
    entries = [i for i, preds in enumerate(nm.problem.graph.predecessors) if all(p < 0 for p in preds)]
    cp = max(priority[i] for i in entries)
    on_path = np.flatnonzero(np.abs(priority - cp) <= REL_TOL * cp)
    cp_device = critical_path_device(nm, on_path)
    critical = set(on_path.tolist()) if cp_device is not None else set()

    def place(i: int) -> None:
        if i in critical and cp_device is not None:
            ps.place(i, cp_device, *ps.earliest(i, cp_device))
        else:
            ps.place(i, *ps.best_device(i))

    return _by_priority(ps, priority, place)


def optimistic_cost_table(nm: NodeMapping, edge_bytes: dict[tuple[int, int], float]) -> np.ndarray:
    """PEFT's OCT, L x D (module docstring)."""
    n, d = nm.num_layers, nm.num_devices
    oct_ = np.zeros((n, d))
    for i in range(n - 1, -1, -1):
        for j in nm.successors[i]:
            ahead = oct_[j] + np.where(nm.feasible[j], nm.time[j], np.inf)   # per device w
            for k in range(d):
                via = ahead + np.array([comm_time(nm, edge_bytes[(i, j)], k, w) for w in range(d)])
                oct_[i, k] = max(oct_[i, k], float(via.min()))
    return oct_


def peft(nm: NodeMapping) -> ListSchedule:
    ps = PartialSchedule(nm)
    oct_ = optimistic_cost_table(nm, ps.edge_bytes)
    rank = np.array([oct_[i, nm.feasible[i]].mean() for i in range(nm.num_layers)])
    return _by_priority(ps, rank, lambda i: ps.place(i, *ps.best_device(i, extra=oct_[i])))


def _min_completion(nm: NodeMapping, largest: bool) -> ListSchedule:
    ps = PartialSchedule(nm, insertion=False)
    for _ in range(nm.num_layers):
        options = [(i, *ps.best_device(i)) for i in _ready(ps)]
        pick = max if largest else min
        i, d, start, end = pick(options, key=lambda o: (o[3], -o[0]) if largest else (o[3], o[0]))
        ps.place(i, d, start, end)
    return ps.result()


def minmin(nm: NodeMapping) -> ListSchedule:
    return _min_completion(nm, largest=False)


def maxmin(nm: NodeMapping) -> ListSchedule:
    return _min_completion(nm, largest=True)


def etf(nm: NodeMapping) -> ListSchedule:
    ps = PartialSchedule(nm, insertion=False)
    level = static_levels(nm)
    for _ in range(nm.num_layers):
        best = None
        for i in _ready(ps):
            for d in np.flatnonzero(nm.feasible[i]).tolist():
                start, end = ps.earliest(i, int(d))
                key = (start, -level[i], i, int(d))
                if best is None or key < best[0]:
                    best = (key, i, int(d), start, end)
        if best is None:
            raise HetsplitError("etf: no ready layer has a device it fits on")
        _, i, d, start, end = best
        ps.place(i, d, start, end)
    return ps.result()


LIST_SCHEDULERS = {"heft": heft, "cpop": cpop, "peft": peft, "minmin": minmin, "maxmin": maxmin, "etf": etf}


@dataclass
class ListMapper(ListSchedulerMapper):
    """The list scheduler ``LIST_SCHEDULERS[name]`` as a node-to-unit mapper (registered under its name)."""

    name: str = "cpop"

    def schedule(self, nm: NodeMapping) -> ListSchedule:
        return LIST_SCHEDULERS[self.name](nm)


for _name in ("cpop", "peft", "minmin", "maxmin", "etf"):
    register_partitioner(_name)(partial(ListMapper, name=_name))
