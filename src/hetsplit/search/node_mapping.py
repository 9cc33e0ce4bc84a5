"""What every node-to-unit mapper shares: the whole-layer TaskGraph, costs per (layer, device),
functional constraints, processing types, the parallel-branch relation and plan making.

A node-to-unit mapping puts every layer, whole, on one device (any device, no contiguity): an
L-vector of device indices. Layer i is task i of the mapping's TaskGraph, so whole populations of
mappings go through the batch evaluator (``estimate/mapping.py``) as N x L arrays.

Functional constraints come from the cost table: a layer whose time on a device is not finite
(an IMC unit cannot pool) may not go there. A layer's *processing type* is the device type that
runs it fastest (conv on an IMC unit, add on a DPU), as the IMC paper's algorithms use it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate.batch import BatchMetrics, metrics_at
from hetsplit.plan.check import check_plan
from hetsplit.estimate.evaluate import evaluate
from hetsplit.estimate.mapping import MappingEvaluator
from hetsplit.plan.tasks import TaskGraph
from hetsplit.plan.types import Plan
from hetsplit.search.base import Deadline

WEIGHT_STATIONARY_KINDS = ("imc", "cim")  # weights stay in the arrays: balance weights (WB)


class NodeMapping:
    """One problem's whole-layer mapping context (built once, shared by every mapper)."""

    def __init__(self, problem: SplitProblem, deadline: Deadline | None = None):
        self.problem = problem
        self.deadline = deadline or Deadline("node-mapping")   # the mapper's --time-budget (none: no limit)
        g, cl = problem.graph, problem.cluster
        self.tg: TaskGraph = check_plan(g, cl, Plan(g.name, cl.name, "node-mapping",
                                                    assign={name: cl.names[0] for name in g.names}))
        self.evaluator = MappingEvaluator(problem, self.tg)
        types = problem.device_type
        self.time = problem.costs.time_s[:, types]            # L x D seconds (inf: cannot run)
        self.feasible = np.isfinite(self.time)
        blocked = np.flatnonzero(~self.feasible.any(axis=1))
        if len(blocked):
            raise PlanError(f"no device of cluster {cl.name!r} can run layer {g.names[blocked[0]]!r} "
                            f"({g.layers[blocked[0]].op}); add a device type that supports it")

    # ---- sizes and costs ---------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        return self.problem.num_layers

    @property
    def num_devices(self) -> int:
        return self.problem.num_devices

    @cached_property
    def processing_type(self) -> np.ndarray:
        """Per layer, the cost-table type that runs it fastest (ties: the first type)."""
        t = self.problem.costs.time_s
        return np.argmin(np.where(np.isfinite(t), t, np.inf), axis=1)

    @cached_property
    def type_time(self) -> np.ndarray:
        """Per layer, its time on its processing type."""
        return self.problem.costs.time_s[np.arange(self.num_layers), self.processing_type]

    def units_of_type(self, type_index: int) -> np.ndarray:
        """Device indices of one cost-table type, in cluster order."""
        return np.flatnonzero(self.problem.device_type == type_index)

    def weight_stationary(self, type_index: int) -> bool:
        """Does this type keep weights in its arrays (an IMC or CIM unit)?"""
        dev = self.problem.cluster.devices[int(self.units_of_type(type_index)[0])]
        return dev.kind in WEIGHT_STATIONARY_KINDS

    # ---- graph structure ---------------------------------------------------------------------------
    @cached_property
    def successors(self) -> list[list[int]]:
        succ: list[list[int]] = [[] for _ in range(self.num_layers)]
        for i, preds in enumerate(self.problem.graph.predecessors):
            for p in preds:
                if p >= 0:
                    succ[p].append(i)
        return succ

    @cached_property
    def ancestors(self) -> list[int]:
        """Per layer, a bit set (Python int) of the layers it depends on, directly or not."""
        anc = [0] * self.num_layers
        for i, preds in enumerate(self.problem.graph.predecessors):
            for p in preds:
                if p >= 0:
                    anc[i] |= anc[p] | (1 << p)
        return anc

    def parallel(self, a: int, b: int) -> bool:
        """Are layers a and b on parallel branches (neither depends on the other)?"""
        return a != b and not (self.ancestors[a] >> b) & 1 and not (self.ancestors[b] >> a) & 1

    def longest_path(self, weight: np.ndarray) -> list[int]:
        """The layers of the heaviest path through the DAG (node weights; ties: lowest indices)."""
        n = self.num_layers
        best = np.zeros(n)
        back = np.full(n, -1)
        for i, preds in enumerate(self.problem.graph.predecessors):
            real = [p for p in preds if p >= 0]
            if real:
                p = max(real, key=lambda q: (best[q], -q))
                back[i] = p
                best[i] = best[p] + weight[i]
            else:
                best[i] = weight[i]
        i = int(np.argmax(best))
        path = []
        while i >= 0:
            path.append(i)
            i = int(back[i])
        return path[::-1]

    # ---- evaluation and plans ----------------------------------------------------------------------
    def check_assignment(self, devices: np.ndarray) -> np.ndarray:
        """An N x L int array of device indices, each layer on a device that can run it."""
        dev = np.atleast_2d(np.asarray(devices, dtype=np.int64))
        if dev.shape[1] != self.num_layers:
            raise PlanError(f"a mapping needs one device per layer ({self.num_layers}), got {dev.shape[1]}")
        bad = ~self.feasible[np.arange(self.num_layers)[None, :], dev]
        if bad.any():
            n, i = (int(x[0]) for x in np.nonzero(bad))
            raise PlanError(f"layer {self.problem.graph.names[i]!r} cannot run on device "
                            f"{self.problem.cluster.names[dev[n, i]]!r} (its cost there is not finite)")
        return dev

    def evaluate(self, devices: np.ndarray, latency: bool = True) -> BatchMetrics:
        """Metrics of N mappings (N x L device indices) in one call (``latency=False``: without one
        input's schedule, see ``MappingEvaluator.evaluate``)."""
        return self.evaluator.evaluate(self.check_assignment(devices), latency=latency)

    def devices_of(self, plan: Plan) -> np.ndarray:
        """The L-vector of device indices of a whole-layer mapping plan."""
        names = self.problem.cluster.names
        places = [plan.assign[layer] for layer in self.problem.graph.names]
        sharded = [layer for layer, place in zip(self.problem.graph.names, places) if not isinstance(place, str)]
        if sharded:
            raise PlanError(f"layers {sharded[:3]} are sharded; a device vector needs whole layers")
        return np.array([names.index(str(place)) for place in places], dtype=np.int64)

    def task_graph(self, devices: np.ndarray) -> TaskGraph:
        """The TaskGraph of one mapping (layer i on ``devices[i]``), for the simulator."""
        dev = self.check_assignment(devices)[0]
        return replace(self.tg, tasks=[replace(t, device=int(d)) for t, d in zip(self.tg.tasks, dev)])

    def plan(self, devices: np.ndarray, algorithm: str, params: dict | None = None,
             start_order: np.ndarray | None = None) -> Plan:
        """A plan/2 mapping with its metrics from one L-vector of device indices; ``start_order`` (the
        layers in the order a list scheduler starts them) becomes the plan's per-device run order."""
        if start_order is None:
            return self.plans(self.check_assignment(devices)[:1], algorithm, params)[0]
        dev = self.check_assignment(devices)[0]
        names, g = self.problem.cluster.names, self.problem.graph
        order: dict[str, list[str]] = {}
        for i in start_order:
            order.setdefault(names[int(dev[i])], []).append(g.names[int(i)])
        plan = Plan(g.name, self.problem.cluster.name, algorithm, params=dict(params or {}),
                    assign={layer: names[int(d)] for layer, d in zip(g.names, dev)}, order=order)
        plan.metrics = evaluate(self.problem, plan)
        return plan

    def plans(self, devices: np.ndarray, algorithm: str, params: dict | None = None) -> list[Plan]:
        """plan/2 mappings of N x L device indices, their metrics from one batch evaluation."""
        dev = self.check_assignment(devices)
        batch = self.evaluate(dev)
        names, g = self.problem.cluster.names, self.problem.graph
        return [Plan(g.name, self.problem.cluster.name, algorithm, params=dict(params or {}),
                     assign={layer: names[int(d)] for layer, d in zip(g.names, row)},
                     metrics=metrics_at(self.problem, batch, i))
                for i, row in enumerate(dev)]


@dataclass
class OneMappingPartitioner:
    """Base of the mappers that return one mapping: subclasses give ``assignment`` (and ``name``).

    A greedy pass has no plan until it ends: past ``time_budget_s`` it raises ``TimeBudgetSpent``
    (checked once the mapping context is built, per placed layer where the pass places through
    ``nm.deadline``, and before the plan is evaluated)."""

    name: str
    time_budget_s: float | None = None

    def assignment(self, nm: NodeMapping) -> tuple[np.ndarray, dict]:
        """Device per layer and the plan's params."""
        raise NotImplementedError

    def mapping_context(self, problem: SplitProblem) -> NodeMapping:
        """The problem's NodeMapping, carrying this search's deadline (checked once built)."""
        nm = NodeMapping(problem, Deadline(self.name, self.time_budget_s))
        nm.deadline.check("its mapping")
        return nm

    def solve(self, problem: SplitProblem) -> list[Plan]:
        nm = self.mapping_context(problem)
        devices, params = self.assignment(nm)
        nm.deadline.check("its mapping")
        return [nm.plan(devices, self.name, params)]


@dataclass
class LoadBook:
    """Running totals per device while a greedy mapper assigns layers."""

    load: np.ndarray            # D: the quantity being balanced (seconds or weight bytes)
    devices: np.ndarray         # L: assigned device (-1: not yet)

    @classmethod
    def empty(cls, layers: int, devices: int) -> "LoadBook":
        return cls(np.zeros(devices), np.full(layers, -1, dtype=np.int64))

    def least_loaded(self, candidates: np.ndarray) -> int:
        """The candidate with the smallest load (ties: the first in cluster order)."""
        return int(candidates[np.argmin(self.load[candidates])])

    def put(self, layer: int, device: int, amount: float) -> None:
        self.devices[layer] = device
        self.load[device] += amount
