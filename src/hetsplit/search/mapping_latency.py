"""The least one-input latency of a node-to-unit mapping, as a scheduling model solved by CP-SAT.

The model (time in integer units of ``incumbent / RESOLUTION``, every duration rounded down):

- ``x[i, d]``: layer i on device d (only where it can run there); an optional interval of layer i's
  time on d; one device runs one layer at a time (``NoOverlap``);
- precedence with transfers: a layer starts after each layer it reads ends, plus, across devices u
  != v, the message's time (``cluster.links.message_time``); the model input leaves the
  cluster's source at 0, the outputs reach its sink (as the estimator's one-input schedule);
- ``links=True`` also queues messages: one message per (payload, destination device), as the
  estimator sends them, an optional interval on its directed link (or on both devices' ports with
  ``ports: shared``), one message at a time per link or port;
- memory, when it can bind: each device's layers' memory within its capacity (the bytes it sends and
  receives are left out: a relaxation);
- cut costs (``costs.segment``): a layer's interval grows by its segment's call where it starts one
  and by its unfused extra where it is cut off from the layer before it, both bounded below by the
  runtime's rule (``_segments``; boundary bytes left out: a relaxation);
- objective: the makespan.

Where the model and the estimator differ: the estimator runs each device's layers in the plan's run
order (the model's start order, written into the plan) as soon as they are ready, and each link's
ready messages lowest index first, never idling; the model may order messages otherwise (or, with
``links=False``, lets them overlap), and rounds durations down. Every schedule the estimator can
produce is a schedule of the model, so the model's bound is a lower bound on the estimator's latency
of every mapping and run order; the plans are judged by the estimator's own figure.

Two phases within the time limit: the model without link queueing (small; proves a bound fast), then,
when its plans' estimator latency is above that bound and time is left, the model with queueing,
seeded with the best plan and told the bound. Every improving solution of either is a candidate.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from hetsplit.cluster.links import wires
from hetsplit.errors import HetsplitError
from hetsplit.plan.tasks import SOURCE
from hetsplit.search.mapping_milp import Payload, payloads_of
from hetsplit.search.node_mapping import NodeMapping

if TYPE_CHECKING:
    from ortools.sat.python.cp_model import IntVar, LinearExprT

RESOLUTION = 100_000          # time units in the incumbent's latency
MAX_MESSAGES = 20_000         # message intervals above which link queueing is not modelled
FIRST_PHASE_SHARE = 0.5       # of the time limit, for the model without queueing


def cp_sat() -> ModuleType:
    """OR-Tools' CP-SAT, or an error naming the package to install."""
    try:
        from ortools.sat.python import cp_model
    except ImportError:  # pragma: no cover - ortools is a dependency
        raise HetsplitError("the latency solver needs OR-Tools' CP-SAT: pip install ortools") from None
    return cp_model


@dataclass
class Candidate:
    """A solution of the model: a device per layer and the layers in start order."""

    devices: np.ndarray
    order: np.ndarray
    start_s: np.ndarray


@dataclass
class LatencyBound:
    """What the model established: its bound, whether it proved its optimum, its solutions."""

    lower_bound_s: float
    proven: bool
    links_modelled: bool
    status: str
    seconds: float
    slack_s: float                 # the most the rounding can hide: a unit per job on a chain
    candidates: list[Candidate] = field(default_factory=list)


class LatencyModel:
    """The CP-SAT model of one problem (module docstring)."""

    def __init__(self, nm: NodeMapping, horizon_s: float, links: bool, memory: bool):
        cp_model = cp_sat()
        self.nm, self.links = nm, links
        self.unit = horizon_s / RESOLUTION
        cl = nm.problem.cluster
        self.src, self.snk, self.ports = cl.source_index, cl.sink_index, cl.links.shared
        L, D = nm.num_layers, nm.num_devices
        self.m = m = cp_model.CpModel()
        h = RESOLUTION + L + 10
        self.start = [m.NewIntVar(0, h, f"s{i}") for i in range(L)]
        self.end = [m.NewIntVar(0, h, f"e{i}") for i in range(L)]
        self.makespan = m.NewIntVar(0, h, "makespan")
        self.x: dict[tuple[int, int], IntVar] = {}        # (layer, device) -> a CP-SAT bool var
        on: list[list] = [[] for _ in range(D)]
        for i in range(L):
            for d in np.flatnonzero(nm.feasible[i]).tolist():
                self.x[(i, int(d))] = m.NewBoolVar(f"x{i}_{d}")
        extra = self._segments() if nm.problem.costs.charges_cuts else {}
        for i in range(L):
            for d in np.flatnonzero(nm.feasible[i]).tolist():
                lit = self.x[(i, int(d))]
                size = self._units(nm.time[i, d]) + extra.get((i, int(d)), 0)
                on[d].append(m.NewOptionalIntervalVar(self.start[i], size, self.end[i], lit, ""))
            m.AddExactlyOne([self.x[(i, int(d))] for d in np.flatnonzero(nm.feasible[i]).tolist()])
            m.Add(self.makespan >= self.end[i])
        for d in range(D):
            m.AddNoOverlap(on[d])
        self.messages = 0
        self._queues: dict[tuple, list] = {}
        for p in payloads_of(nm, empty=True):
            self._delays(p)
            if links:
                self._messages(p)
        for queue in self._queues.values():
            m.AddNoOverlap(queue)
        if memory:
            self._memory()
        m.Minimize(self.makespan)

    def _segments(self) -> dict[tuple[int, int], LinearExprT]:
        """What layer i's segment adds to its time on d (units, rounded down), by the runtime's rule
        relaxed: ``y[i, d]`` (i starts a segment on d) at least where the rule must start one (d's first
        layer; a producer elsewhere with no start on d since it), paying d's call; ``u[i, d]`` (i cut off
        from layer i-1) at least where it is, paying i's unfused extra. The boundary bytes are left out.
        The rule's own starts satisfy these rows, so the bound stays a lower bound on the estimator."""
        nm, m, x = self.nm, self.m, self.x
        pr = nm.problem
        types = pr.device_type
        assert pr.costs.unfused_s is not None
        producers: list[set[int]] = [set() for _ in range(nm.num_layers)]
        for src, dst in zip(nm.tg.edge_src, nm.tg.edge_dst):
            if src >= 0 and dst >= 0:
                producers[int(dst)].add(int(src))
        extra: dict[tuple[int, int], LinearExprT] = {}
        for d in range(nm.num_devices):
            call = self._units(float(pr.costs.segment_call_s[types[d]]))
            y: dict[int, IntVar] = {}
            for i in range(nm.num_layers):
                if (i, d) not in x:
                    continue
                y[i] = m.NewBoolVar("")
                m.AddImplication(y[i], x[(i, d)])
                m.Add(sum(y.values()) >= x[(i, d)])                           # d's first layer starts one
                for p in producers[i]:
                    since = [y[k] for k in range(p + 1, i + 1) if k in y]
                    m.Add(sum(since) + (x[(p, d)] if (p, d) in x else 0) >= x[(i, d)])
                terms = call * y[i] if call else 0
                unfused = self._units(float(pr.costs.unfused_s[i, types[d]])) if i > 0 else 0
                if unfused:
                    u = m.NewBoolVar("")
                    m.AddImplication(y[i], u)
                    m.Add(u + (x[(i - 1, d)] if (i - 1, d) in x else 0) >= x[(i, d)])
                    terms = terms + unfused * u
                if call or unfused:
                    grow = extra[(i, d)] = m.NewIntVar(0, call + unfused, "")   # an interval's size is affine
                    m.Add(grow == terms)
        return extra

    def _units(self, seconds: float) -> int:
        return int(np.floor(seconds / self.unit)) if np.isfinite(seconds) else 0

    def _cost(self, nbytes: float, a: int, b: int) -> int:
        """Units to move ``nbytes`` from device a to b (0 on one device or without bytes)."""
        return self._units(float(self.nm.problem.cluster.links.time(a, b, nbytes)))

    def _on(self, i: int) -> list[int]:
        return [d for d in range(self.nm.num_devices) if (i, d) in self.x]

    def _delays(self, p: Payload) -> None:
        """Each reader starts after the payload's transfer to its device (as if links never queued)."""
        m, x = self.m, self.x
        for j in p.consumers:
            if p.producer == SOURCE:
                if self.src is not None:
                    m.Add(self.start[j] >= sum(self._cost(p.nbytes, self.src, b) * x[(j, b)] for b in self._on(j)))
                continue
            m.Add(self.start[j] >= self.end[p.producer])
            for a in self._on(p.producer):
                terms = [self._cost(p.nbytes, a, b) * x[(j, b)] for b in self._on(j) if self._cost(p.nbytes, a, b)]
                if terms:
                    m.Add(self.start[j] >= self.end[p.producer] + sum(terms)).OnlyEnforceIf(x[(p.producer, a)])
        if p.to_sink and self.snk is not None and p.producer >= 0:
            i = p.producer
            m.Add(self.makespan >= self.end[i] + sum(self._cost(p.nbytes, a, self.snk) * x[(i, a)]
                                                     for a in self._on(i)))

    def _messages(self, p: Payload) -> None:
        """One message per (payload, destination device), on its link or ports, one at a time."""
        m, x = self.m, self.x
        if p.producer == SOURCE and self.src is None:
            return
        senders = [self.src] if self.src is not None and p.producer == SOURCE else self._on(p.producer)
        for b in range(self.nm.num_devices):
            readers = [x[(j, b)] for j in p.consumers if (j, b) in x]
            sink_reads = p.to_sink and b == self.snk
            if not readers and not sink_reads:
                continue
            need = None
            if not sink_reads:
                need = m.NewBoolVar("")
                m.AddMaxEquality(need, readers)
            for a in senders:
                cost = self._cost(p.nbytes, a, b)
                if cost == 0:
                    continue
                lits = [lit for lit in (need, None if p.producer == SOURCE else x[(p.producer, a)]) if lit is not None]
                present = lits[0] if len(lits) == 1 else m.NewBoolVar("")
                if len(lits) > 1:
                    m.AddBoolAnd(lits).OnlyEnforceIf(present)
                    m.AddBoolOr([lit.Not() for lit in lits] + [present])
                h = RESOLUTION + self.nm.num_layers + 10
                begin, end = m.NewIntVar(0, h, ""), m.NewIntVar(0, h, "")
                interval = m.NewOptionalIntervalVar(begin, cost, end, present, "")
                if p.producer >= 0:
                    m.Add(begin >= self.end[p.producer]).OnlyEnforceIf(present)
                for j in p.consumers:
                    if (j, b) in x:
                        m.Add(self.start[j] >= end).OnlyEnforceIf([present, x[(j, b)]])
                if sink_reads:
                    m.Add(self.makespan >= end).OnlyEnforceIf(present)
                for r in wires(self.ports, a, b):
                    self._queues.setdefault(r, []).append(interval)
                self.messages += 1

    def _memory(self) -> None:
        pr = self.nm.problem
        for d in range(self.nm.num_devices):
            terms = [int(pr.costs.mem_bytes[i, pr.device_type[d]]) * self.x[(i, d)]
                     for i in range(self.nm.num_layers) if (i, d) in self.x]
            if np.isfinite(pr.memory_bytes[d]) and terms:
                self.m.Add(sum(terms) <= int(pr.memory_bytes[d]))

    def hint(self, devices: np.ndarray, start_s: np.ndarray) -> None:
        for (i, d), lit in self.x.items():
            self.m.AddHint(lit, int(devices[i] == d))
        for i, s in enumerate(start_s):
            self.m.AddHint(self.start[i], self._units(float(s)))

    def solve(self, time_limit_s: float, at_least_s: float = 0.0, workers: int = 0) -> LatencyBound:
        """Solve within ``time_limit_s``; ``at_least_s``: a proven bound to start from."""
        cp_model = cp_sat()
        t0 = time.perf_counter()
        if at_least_s > 0:
            self.m.Add(self.makespan >= self._units(at_least_s))
        solver = cp_model.CpSolver()
        solver.parameters.max_time_in_seconds = max(0.05, time_limit_s)
        if workers:
            solver.parameters.num_workers = workers
        found: list[Candidate] = []
        model = self

        class Collect(cp_model.CpSolverSolutionCallback):  # type: ignore[name-defined]  # ortools imported lazily
            def on_solution_callback(self) -> None:
                found.append(model._candidate(self.Value))

        status = solver.Solve(self.m, Collect())
        name = solver.StatusName(status)
        bound = max(0.0, solver.BestObjectiveBound()) * self.unit if name in ("OPTIMAL", "FEASIBLE") else 0.0
        if name == "INFEASIBLE":
            bound = np.inf
        slack = (2 * self.nm.num_layers + 2) * self.unit     # a chain holds <= L layers and L + 1 messages
        return LatencyBound(bound, name == "OPTIMAL", self.links, name, time.perf_counter() - t0, slack, found)

    def _candidate(self, value) -> Candidate:
        L = self.nm.num_layers
        devices = np.array([next(d for d in self._on(i) if value(self.x[(i, d)])) for i in range(L)], dtype=np.int64)
        starts = np.array([value(self.start[i]) for i in range(L)])
        return Candidate(devices, np.lexsort((np.arange(L), starts)), starts * self.unit)


def message_count(nm: NodeMapping) -> int:
    """Message intervals the model with link queueing would have (an upper bound)."""
    return len(payloads_of(nm, empty=True)) * nm.num_devices * max(nm.num_devices - 1, 1)
