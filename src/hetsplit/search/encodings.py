"""Chromosome encodings for the NSGA-II exploration: integer arrays in, metrics and plans out.

Every encoding takes an N x n_var integer population (gene g in ``0..upper[g]``), evaluates all N in
one call of a batch evaluator and decodes any row to a ``hetsplit.plan/2`` plan. Decoding is total:
every chromosome is a valid plan (no repair needed).

- ``naive`` (thesis 4.2.1): one gene per non-splittable layer (its device), n genes per splittable
  layer (n = devices): the distinct devices among them split it by output channels, a device named
  k times taking k/n of them. Length sp * n + L - sp.
- ``advanced`` (thesis 4.2.2): a p x n matrix of split points over the re-indexed splittable
  layers (0 = not used). In row r, devices ordered by value take split r of the splittable layers
  after the previous value up to their own (ties: the lower device index; the others get none);
  in row 1 the largest value reaches the last splittable layer (an all-zero row 1 gives device 0
  everything), so every layer has a first split. Restriction 1: at most p splits per layer;
  restriction 2: the non-splittable layers after a splittable one (and those before the first) run
  on the device of its first split, which also concatenates. Length p * n.
- ``spe`` (Guo et al., split point encoding; vertical only): n - 1 cut points in ``0..L``, sorted;
  device i (cluster order) runs the layers between cuts i - 1 and i, consecutive layers in
  topological order, so a plan is a pipeline (its first split point, always 0, is not a gene).
- ``ne`` (Guo et al.'s naive encoding): one device gene per whole layer, any device, no contiguity:
  a node-to-device mapping (``search.node_mapping``). Length L.

``spe`` and ``ne`` may be limited to the first ``devices`` devices of the cluster (the stages of the
hierarchical exploration search 2, 4, ... of them); a chromosome of a smaller limit is one of a
larger limit too (``widen``), so a stage's plans seed the next.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numba import njit

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.estimate.batch import BatchMetrics, metrics_at
from hetsplit.estimate import evaluate, evaluate_pipelines, make_plan
from hetsplit.plan.types import Plan, Stage
from hetsplit.search.hybrid_template import HybridAssignment, SlotTemplate

ENCODINGS = ("naive", "advanced", "spe", "ne")


class Encoding(Protocol):
    """What the explorer needs of an encoding."""

    name: str
    n_var: int
    upper: np.ndarray  # inclusive upper bound of every gene (lower bounds are 0)

    def evaluate(self, x: np.ndarray, latency: bool = True) -> BatchMetrics: ...

    def plan(self, x: np.ndarray, params: dict | None = None) -> Plan: ...

    def plans(self, x: np.ndarray, params: dict | None = None) -> list[Plan]: ...


def make_encoding(problem: SplitProblem, name: str, splits: int = 2, devices: int | None = None) -> Encoding:
    """The encoding ``name`` (naive, advanced, spe, ne) of ``problem``; ``splits`` is p of ``advanced``;
    ``devices`` limits ``spe`` and ``ne`` to the cluster's first devices (default: all)."""
    if devices is not None and name not in ("spe", "ne"):
        raise HetsplitError(f"encoding {name!r} uses every device; only spe and ne take a device limit")
    if name == "naive":
        return NaiveEncoding(problem)
    if name == "advanced":
        return AdvancedEncoding(problem, splits)
    if name == "spe":
        return SplitPointEncoding(problem, devices)
    if name == "ne":
        return LayerEncoding(problem, devices)
    raise HetsplitError(f"unknown encoding {name!r}; choose one of {', '.join(ENCODINGS)}")


def _population(x: np.ndarray, n_var: int, upper: np.ndarray, name: str) -> np.ndarray:
    pop = np.atleast_2d(np.asarray(x)).astype(np.int64)
    if pop.shape[1] != n_var:
        raise HetsplitError(f"a {name} chromosome has {n_var} genes, not {pop.shape[1]}")
    if pop.size and ((pop < 0) | (pop > upper[None, :])).any():
        raise HetsplitError(f"{name} genes must lie in 0..upper (see the encoding's upper bounds)")
    return pop


class _HybridEncoding:
    """Shared by naive and advanced: decode to a HybridAssignment, evaluate on a slot template."""

    name = ""
    template: SlotTemplate
    n_var: int
    upper: np.ndarray

    def decode(self, pop: np.ndarray) -> HybridAssignment:
        raise NotImplementedError

    def assignment(self, x: np.ndarray) -> HybridAssignment:
        return self.decode(_population(x, self.n_var, self.upper, self.name))

    def evaluate(self, x: np.ndarray, latency: bool = True) -> BatchMetrics:
        """Metrics of a population (``latency=False``: without one input's schedule)."""
        return self.template.evaluate(self.assignment(x), latency=latency)

    def plan(self, x: np.ndarray, params: dict | None = None) -> Plan:
        """One chromosome's plan, its metrics from the plan itself (``check_plan`` + the evaluator)."""
        plan = self.template.to_plan(self.assignment(x), 0, f"nsga2-{self.name}",
                                     {"encoding": self.name, **(params or {})})
        plan.metrics = evaluate(self.template.problem, plan)
        return plan

    def plans(self, x: np.ndarray, params: dict | None = None) -> list[Plan]:
        """Many chromosomes' plans, their metrics from one batch evaluation (equal to ``plan``'s)."""
        a = self.assignment(x)
        batch = self.template.evaluate(a)
        out = []
        for row in range(len(a)):
            plan = self.template.to_plan(a, row, f"nsga2-{self.name}", {"encoding": self.name, **(params or {})})
            plan.metrics = metrics_at(self.template.problem, batch, row)
            out.append(plan)
        return out


class NaiveEncoding(_HybridEncoding):
    """Thesis 4.2.1: a device gene per non-splittable layer, n device genes per splittable layer."""

    name = "naive"

    def __init__(self, problem: SplitProblem):
        n = problem.num_devices
        self.template = SlotTemplate(problem, n)
        split = self.template.split_pos
        width = np.where(split >= 0, n, 1)
        self.layer_gene = np.concatenate([[0], np.cumsum(width)[:-1]])   # first gene of each layer
        self.slot_gene = self.layer_gene[self.template.split][:, None] + np.arange(n)[None, :]
        self.n_var = int(width.sum())
        self.upper = np.full(self.n_var, n - 1, dtype=np.int64)

    def decode(self, pop: np.ndarray) -> HybridAssignment:
        slot_device = pop[:, self.slot_gene]
        return HybridAssignment(pop[:, self.layer_gene], slot_device, np.ones(slot_device.shape, dtype=bool))


class AdvancedEncoding(_HybridEncoding):
    """Thesis 4.2.2: p x n split points over the splittable layers (see the module docstring)."""

    name = "advanced"

    def __init__(self, problem: SplitProblem, splits: int):
        n = problem.num_devices
        if not 1 <= splits <= n:
            raise HetsplitError(f"--splits p must be in 1..{n} (the number of devices), not {splits}")
        self.splits = splits
        self.template = SlotTemplate(problem, splits)
        s = len(self.template.split)
        if s == 0:
            raise HetsplitError(f"model {problem.graph.name!r} has no splittable layer (conv or fully connected "
                                f"with >= {splits} output channels); use --encoding spe")
        self.n_var = splits * n
        self.upper = np.full(self.n_var, s, dtype=np.int64)
        # restriction 2: every layer runs where the first split of the last splittable layer up to it runs
        pos = np.maximum.accumulate(np.where(self.template.split_pos >= 0, self.template.split_pos, -1))
        self.group = np.maximum(pos, 0)

    def decode(self, pop: np.ndarray) -> HybridAssignment:
        n_pop, n_dev, s = len(pop), self.template.problem.num_devices, len(self.template.split)
        vals = np.ascontiguousarray(pop.reshape(n_pop, self.splits, n_dev), dtype=np.int64).copy()
        row0 = vals[:, 0, :]
        top = np.argmax(row0, axis=1)
        row0[np.arange(n_pop), top] = s          # row 1 covers every splittable layer (all zero: device 0)
        slot_device, used = split_slots(vals, s)   # N x S x p
        layer_device = slot_device[:, self.group, 0]
        return HybridAssignment(layer_device, slot_device, used)


@njit(cache=True)
def split_slots(vals: np.ndarray, s: int) -> tuple[np.ndarray, np.ndarray]:
    """Slot k of splittable layer l (1-based) of plan i: the device whose value in row k of ``vals``
    (N x p x D) is the lowest >= l, ties to the lower device; unused (no value >= l): row 0's device
    for that layer. Returns devices and used flags, N x S x p."""
    n, p, d_count = vals.shape
    slot = np.empty((n, s, p), dtype=np.int64)
    used = np.empty((n, s, p), dtype=np.bool_)
    for i in range(n):
        for k in range(p):
            order = np.argsort(vals[i, k] * d_count + np.arange(d_count))   # by value, then device
            at = 0
            for layer in range(1, s + 1):
                while at < d_count and vals[i, k, order[at]] < layer:
                    at += 1
                used[i, layer - 1, k] = at < d_count
                slot[i, layer - 1, k] = order[at] if at < d_count else slot[i, layer - 1, 0]
    return slot, used


@dataclass
class _Pipelines:
    bounds: np.ndarray    # N x n+1
    devices: np.ndarray   # N x n (-1: unused stage)


def device_limit(problem: SplitProblem, devices: int | None) -> int:
    """``devices`` checked against the cluster (None: all of its devices)."""
    n = problem.num_devices
    if devices is None:
        return n
    if not 1 <= devices <= n:
        raise HetsplitError(f"a device limit of {devices}: cluster {problem.cluster.name!r} has {n} devices")
    return int(devices)


class SplitPointEncoding:
    """Guo et al.'s split point encoding: vertical partitions as n - 1 sorted cut points."""

    name = "spe"

    def __init__(self, problem: SplitProblem, devices: int | None = None):
        self.problem = problem
        self.devices = device_limit(problem, devices)
        self.n_var = max(1, self.devices - 1)
        self.upper = np.full(self.n_var, problem.num_layers, dtype=np.int64)

    def widen(self, x: np.ndarray, devices: int) -> np.ndarray:
        """Chromosomes of this encoding as chromosomes of the same plans on ``devices`` >= its own
        devices: the added devices' stages start at L (empty)."""
        pop = _population(x, self.n_var, self.upper, self.name)
        extra = max(1, devices - 1) - self.n_var
        if extra < 0:
            raise HetsplitError(f"cannot narrow {self.devices} devices to {devices}")
        return np.concatenate([pop, np.full((len(pop), extra), self.problem.num_layers, np.int64)], axis=1)

    def decode(self, x: np.ndarray) -> _Pipelines:
        pop = _population(x, self.n_var, self.upper, self.name)
        n_pop, n_layers, n_dev = len(pop), self.problem.num_layers, self.devices
        cuts = np.sort(pop, axis=1)[:, : n_dev - 1]
        full = np.concatenate([np.zeros((n_pop, 1), np.int64), cuts, np.full((n_pop, 1), n_layers)], axis=1)
        starts, length = full[:, :-1], np.diff(full, axis=1)
        order = np.argsort(length == 0, axis=1, kind="stable")   # non-empty stages first, in device order
        keep = np.take_along_axis(length > 0, order, axis=1)
        devices = np.where(keep, order, -1)
        bounds = np.concatenate([np.where(keep, np.take_along_axis(starts, order, axis=1), n_layers),
                                 np.full((n_pop, 1), n_layers)], axis=1)
        return _Pipelines(bounds, devices)

    def evaluate(self, x: np.ndarray, latency: bool = True) -> BatchMetrics:
        """Metrics of a population (pipelines: every figure, the latency is a sum)."""
        p = self.decode(x)
        return evaluate_pipelines(self.problem, p.bounds, p.devices)

    def plan(self, x: np.ndarray, params: dict | None = None) -> Plan:
        p = self.decode(x)
        return make_plan(self.problem, p.bounds[0], p.devices[0], "nsga2-spe", {"encoding": self.name, **(params or {})})

    def plans(self, x: np.ndarray, params: dict | None = None) -> list[Plan]:
        """Many chromosomes' pipeline plans, their metrics from one batch evaluation."""
        p = self.decode(x)
        batch = evaluate_pipelines(self.problem, p.bounds, p.devices)
        names, layers = self.problem.cluster.names, self.problem.graph.names
        out = []
        for row in range(len(p.devices)):
            b, d = p.bounds[row], p.devices[row]
            stages = [Stage(names[int(d[s])], layers[b[s]:b[s + 1]]) for s in range(len(d)) if d[s] >= 0]
            out.append(Plan(self.problem.graph.name, self.problem.cluster.name, "nsga2-spe",
                            stages, {"encoding": self.name, **(params or {})}, metrics_at(self.problem, batch, row)))
        return out


class LayerEncoding:
    """Guo et al.'s naive encoding (NE): the device of every whole layer, no contiguity."""

    name = "ne"

    def __init__(self, problem: SplitProblem, devices: int | None = None):
        from hetsplit.search.node_mapping import NodeMapping

        self.problem = problem
        self.devices = device_limit(problem, devices)
        self.mapping = NodeMapping(problem)
        self.n_var = problem.num_layers
        self.upper = np.full(self.n_var, self.devices - 1, dtype=np.int64)
        # a gene naming a device that cannot run its layer stands for the k-th device that can
        allowed = self.mapping.feasible[:, : self.devices]
        if not allowed.any(axis=1).all():
            layer = int(np.flatnonzero(~allowed.any(axis=1))[0])
            raise HetsplitError(f"no device among the first {self.devices} can run layer "
                                f"{problem.graph.names[layer]!r}")
        self._allowed = [np.flatnonzero(row) for row in allowed]

    def widen(self, x: np.ndarray, devices: int) -> np.ndarray:
        """The same mappings as chromosomes on ``devices`` >= this encoding's devices (unchanged)."""
        if devices < self.devices:
            raise HetsplitError(f"cannot narrow {self.devices} devices to {devices}")
        return self.decode(x)

    def decode(self, x: np.ndarray) -> np.ndarray:
        """N x L device indices (a gene a layer cannot run on is replaced as the class says)."""
        pop = _population(x, self.n_var, self.upper, self.name)
        out = pop.copy()
        for layer, ok in enumerate(self._allowed):
            if len(ok) < self.devices:
                col = pop[:, layer]
                out[:, layer] = np.where(np.isin(col, ok), col, ok[col % len(ok)])
        return out

    def evaluate(self, x: np.ndarray, latency: bool = True) -> BatchMetrics:
        """Metrics of a population (``latency=False``: without one input's schedule)."""
        return self.mapping.evaluate(self.decode(x), latency=latency)

    def plan(self, x: np.ndarray, params: dict | None = None) -> Plan:
        return self.plans(np.atleast_2d(x)[:1], params)[0]

    def plans(self, x: np.ndarray, params: dict | None = None) -> list[Plan]:
        """Many chromosomes' mapping plans, their metrics from one batch evaluation."""
        return self.mapping.plans(self.decode(x), "nsga2-ne", {"encoding": self.name, **(params or {})})
