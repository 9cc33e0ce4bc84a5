"""The bottleneck of a node-to-unit mapping, minimized exactly as a MILP (HiGHS, via scipy).

Variables: ``x[i, d]`` = layer i on device d (binary, only where d can run i) and the bottleneck T.
Constraints mirror the mapping evaluator (``estimate/mapping.py``) term for term:

- compute: ``sum_i time[i, d] x[i, d] <= T`` for every device d, plus its segments' costs and, when the
  links charge them, the CPU of the message ends its tasks handle (``cluster.links``: each ``z`` below
  costs its sender's device and its reader's);
- links (when they can bind): ``y[p, b]`` = payload p is needed on device b (>= x[c, b] for every
  consumer c; the sink needs the model outputs), ``z[p, a, b]`` = p moves from a to b
  (>= x[producer, a] + y[p, b] - 1); ``sum_p z[p, a, b] time_ab(bytes_p) <= T`` (``cluster.links``)
  per directed link, or, with ``links: {ports: shared}``, the sum over every message in or out of a
  device per device port;
- memory (when it can bind): each device's tasks' memory + what it receives + what it sends (model
  inputs it is fed, outputs it delivers) within its memory.

Links or memory that cannot bind (their largest possible load is below a lower bound on T, or below
every device's memory) are left out: the optimum is the same, and the MILP stays small. When they
could bind but the MILP would be too large, they are left out too and the result is only a lower
bound (``exact`` False). Interchangeable devices (same type and memory, links preserved under
exchange) are labelled in the order of the first layer each runs (``Builder.symmetry``), which
removes their symmetric copies from the search: ResNet-18 on imce-12 (8 interchangeable IMC units,
4 DPUs) is proven in well under a second, where ordering the units' loads took ~30 s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from hetsplit.cluster.links import message_time
from hetsplit.plan.tasks import SINK, SOURCE
from hetsplit.search.node_mapping import NodeMapping
from hetsplit.search.units import Symmetry

if TYPE_CHECKING:
    from scipy.optimize import LinearConstraint

MAX_LINK_VARIABLES = 40_000   # z variables above which the link terms are relaxed away (bound only)
MIP_REL_GAP = 1e-7
PROOF_TOL = 1e-6     # a bottleneck within this relative distance of the lower bound is called optimal


@dataclass
class MilpResult:
    """What the MILP established within its time limit."""

    devices: np.ndarray | None   # best mapping found (None: none within the limit)
    lower_bound_s: float         # proven lower bound on the bottleneck of every mapping
    optimal: bool                # the search finished: ``devices`` is optimal for the modelled terms
    infeasible: bool             # the search finished: no mapping fits (memory)
    exact: bool                  # every term that can bind was modelled (else: a bound on a relaxation)
    links_modelled: bool
    memory_modelled: bool
    seconds: float
    status: str


@dataclass
class Payload:
    producer: int                 # task, or SOURCE
    consumers: list[int]          # tasks (the sink is ``to_sink``)
    to_sink: bool
    nbytes: float


def payloads_of(nm: NodeMapping, empty: bool = False) -> list[Payload]:
    """The whole-layer TaskGraph's payloads: producer, consumers, to the sink or not, bytes (those of
    no bytes only with ``empty``: they send no message, but their readers still wait)."""
    tg = nm.tg
    out: dict[int, Payload] = {}
    for src, dst, nbytes, pid in zip(tg.edge_src, tg.edge_dst, tg.edge_bytes, tg.edge_payload):
        p = out.setdefault(int(pid), Payload(int(src), [], False, float(nbytes)))
        if dst == SINK:
            p.to_sink = True
        else:
            p.consumers.append(int(dst))
    return [p for p in out.values() if empty or p.nbytes > 0]


def symmetric_classes(nm: NodeMapping) -> list[list[int]]:
    """Devices that can be exchanged without changing any cost (each class in cluster order)."""
    sym = Symmetry(nm.problem, set())
    classes: list[list[int]] = []
    for d in range(nm.num_devices):
        for cls in classes:
            if sym.exchange_ok([cls[0]], [d]):
                cls.append(d)
                break
        else:
            classes.append([d])
    return [c for c in classes if len(c) > 1]


class _Model:
    """Sparse MILP rows, built term by term."""

    def __init__(self) -> None:
        self.n = 0
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[dict[int, float], float, float]] = []

    def var(self, lo: float, hi: float, integer: bool) -> int:
        self.lb.append(lo)
        self.ub.append(hi)
        self.integer.append(int(integer))
        self.n += 1
        return self.n - 1

    def row(self, coef: dict[int, float], lo: float, hi: float) -> None:
        self.rows.append((coef, lo, hi))

    def constraint(self) -> LinearConstraint:
        from scipy.optimize import LinearConstraint    # on first solve: scipy.optimize is 0.5 s of a command's start
        from scipy.sparse import coo_matrix

        r, c, v = [], [], []
        for k, (coef, _, _) in enumerate(self.rows):
            for col, val in coef.items():
                r.append(k)
                c.append(col)
                v.append(val)
        a = coo_matrix((v, (r, c)), shape=(len(self.rows), self.n)).tocsr()
        return LinearConstraint(a, [lo for _, lo, _ in self.rows], [hi for _, _, hi in self.rows])


def compute_lower_bound(nm: NodeMapping) -> float:
    """A quick bound on every mapping's bottleneck: the slowest layer at its fastest, and the
    average load if every layer ran at its fastest on every device."""
    fastest = np.where(nm.feasible, nm.time, np.inf).min(axis=1)
    return max(float(fastest.max()), float(fastest.sum()) / nm.num_devices)


def _twins(nm: NodeMapping) -> list[list[int]]:
    """Layers with the same time on every device, grouped: when only compute is modelled they are
    interchangeable, so one integer count per (group, device) replaces their binaries (and the
    search no longer tells their permutations apart)."""
    groups: dict[bytes, list[int]] = {}
    for i in range(nm.num_layers):
        groups.setdefault(nm.time[i].tobytes(), []).append(i)
    return list(groups.values())


class Builder:
    """``x[(g, d)]``: how many layers of group g run on device d (a binary for one-layer groups; with
    links or memory modelled every group is one layer, g = the layer index)."""

    def __init__(self, nm: NodeMapping, groups: list[list[int]], time_unit: float, byte_unit: float):
        self.nm, self.groups = nm, groups
        self.time_unit, self.byte_unit = time_unit, byte_unit   # rows in units near 1 suit the solver's tolerances
        self.m = _Model()
        self.t = self.m.var(0.0, np.inf, False)
        self.sent: list[tuple[int, int, int, float]] = []   # (variable, from, to, bytes) of every message
        self.x: dict[tuple[int, int], int] = {}
        for g, members in enumerate(groups):
            for d in np.flatnonzero(nm.feasible[members[0]]):
                self.x[(g, int(d))] = self.m.var(0.0, float(len(members)), True)
            self.m.row({self.x[(g, int(d))]: 1.0 for d in np.flatnonzero(nm.feasible[members[0]])},
                       float(len(members)), float(len(members)))

    def load(self, d: int) -> dict[int, float]:
        return {self.x[(g, d)]: float(self.nm.time[members[0], d]) / self.time_unit
                for g, members in enumerate(self.groups) if (g, d) in self.x}

    def decode(self, values: np.ndarray) -> np.ndarray | None:
        """The device of every layer from a solution (members of a group dealt out by the counts)."""
        devices = np.full(self.nm.num_layers, -1, dtype=np.int64)
        for g, members in enumerate(self.groups):
            pending = list(members)
            for d in range(self.nm.num_devices):
                k = self.x.get((g, d))
                count = 0 if k is None else int(round(values[k]))
                for i in pending[:count]:
                    devices[i] = d
                pending = pending[count:]
        return None if (devices < 0).any() else devices

    def compute(self, extra: list[dict[int, float]] | None = None) -> None:
        """Each device's load within T: its layers' times, plus ``extra[d]`` (its segments' costs) if given."""
        for d in range(self.nm.num_devices):
            row = self.load(d)
            for var, value in (extra[d] if extra else {}).items():
                row[var] = row.get(var, 0.0) + value
            self.m.row({**row, self.t: -1.0}, -np.inf, 0.0)

    def segments(self) -> list[dict[int, float]]:
        """Per device, the terms its segments add to its load (``estimate.segments``' rule, exactly).

        Tasks are the layers (n = layer n, topological order). ``a[n, d]``: some layer before n runs on d;
        ``y[n, d]`` (binary): layer n starts a segment on d, equal to the runtime's rule: at least when n
        is d's first layer or a producer p of n runs elsewhere and no segment starts on d in (p, n); at
        most then (``w[n, d, p]`` <= 1 - x[p, d] and <= 1 - y[m, d] for p < m < n: the reason p). Each
        start costs d's call; ``u[n, d]`` >= x[n, d] - x[n-1, d] and >= y[n, d]: layer n is cut off from
        layer n-1 (its unfused extra). Boundary bytes: ``s(a, b, d)`` <= x[a, d], x[b, d], 1 - y[m, d]
        (a < m <= b): a and b in one segment on d; a payload leaves its producer's segment (``o``) when
        it goes to the sink or some reader is not in that segment, and enters a segment at each reader
        (``i``) that shares the segment of neither the producer nor an earlier reader. ``o``, ``i``, ``u``
        are bounded below only and cost d's time: at an optimum each is its true value; ``y``, ``s`` are
        exact or bounded above, so no assignment is charged less than the rule charges it."""
        nm, m = self.nm, self.m
        pr = nm.problem
        assert all(t.layers == (n,) and t.kind == "layer" for n, t in enumerate(nm.tg.tasks))
        n_layers, n_dev = nm.num_layers, nm.num_devices
        types = pr.device_type
        call, per_byte = pr.costs.segment_call_s[types], pr.costs.segment_byte_s[types]
        assert pr.costs.unfused_s is not None
        unfused = pr.costs.unfused_s[:, types]
        unit, xv = self.time_unit, (lambda n, d: self.x.get((n, d)))
        producers: list[set[int]] = [set() for _ in range(n_layers)]
        for src, dst in zip(nm.tg.edge_src, nm.tg.edge_dst):
            if src >= 0 and dst >= 0:
                producers[int(dst)].add(int(src))
        extra: list[dict[int, float]] = [dict() for _ in range(n_dev)]

        def add(d: int, var: int, value: float) -> None:
            if value:
                extra[d][var] = extra[d].get(var, 0.0) + value / unit

        for d in range(n_dev):
            y: dict[int, int] = {}
            before: int | None = None          # a[n, d] (None: 0)
            for n in range(n_layers):
                x = xv(n, d)
                if x is not None:
                    y[n] = m.var(0.0, 1.0, True)
                    m.row({y[n]: 1.0, x: -1.0}, -np.inf, 0.0)                              # y <= x
                    m.row({y[n]: 1.0, x: -1.0, **({before: 1.0} if before is not None else {})}, 0.0, np.inf)
                    reasons = {y[n]: 1.0, **({before: 1.0} if before is not None else {})}  # y + a - sum w <= 1
                    for p in sorted(producers[n]):
                        between = [y[k] for k in range(p + 1, n) if k in y]
                        xp = xv(p, d)
                        low = {y[n]: 1.0, x: -1.0, **{v: 1.0 for v in between}}
                        if xp is not None:
                            low[xp] = 1.0
                        m.row(low, 0.0, np.inf)                # a remote p: a start in (p, n]
                        w = m.var(0.0, 1.0, False)
                        reasons[w] = reasons.get(w, 0.0) - 1.0
                        if xp is not None:
                            m.row({w: 1.0, xp: 1.0}, -np.inf, 1.0)
                        for v in between:
                            m.row({w: 1.0, v: 1.0}, -np.inf, 1.0)
                    m.row(reasons, -np.inf, 1.0)
                    add(d, y[n], float(call[d]))
                    if n > 0 and unfused[n, d] > 0:
                        u = m.var(0.0, 1.0, False)
                        m.row({u: 1.0, y[n]: -1.0}, 0.0, np.inf)
                        prev = xv(n - 1, d)
                        m.row({u: 1.0, x: -1.0, **({prev: 1.0} if prev is not None else {})}, 0.0, np.inf)
                        add(d, u, float(unfused[n, d]))
                    after = m.var(0.0, 1.0, False)                                      # a[n + 1, d]
                    m.row({after: 1.0, x: -1.0}, 0.0, np.inf)
                    if before is not None:
                        m.row({after: 1.0, before: -1.0}, 0.0, np.inf)
                    m.row({after: 1.0, x: -1.0, **({before: -1.0} if before is not None else {})}, -np.inf, 0.0)
                    before = after
            if per_byte[d] > 0:
                self._boundary(d, y, float(per_byte[d]), add)
        return extra

    def _boundary(self, d: int, y: dict[int, int], per_byte: float, add) -> None:
        """Device d's boundary bytes at ``per_byte`` (see ``segments``)."""
        m, xv = self.m, (lambda n: self.x.get((n, d)))
        together: dict[tuple[int, int], int | None] = {}

        def same(a: int, b: int) -> int | None:
            """s(a, b, d) (None: a and b cannot both run on d)."""
            if (a, b) not in together:
                xa, xb = xv(a), xv(b)
                if xa is None or xb is None:
                    together[(a, b)] = None
                else:
                    v = m.var(0.0, 1.0, False)
                    m.row({v: 1.0, xa: -1.0}, -np.inf, 0.0)
                    m.row({v: 1.0, xb: -1.0}, -np.inf, 0.0)
                    for k in range(a + 1, b + 1):
                        if k in y:
                            m.row({v: 1.0, y[k]: 1.0}, -np.inf, 1.0)
                    together[(a, b)] = v
            return together[(a, b)]

        for p in payloads_of(self.nm):
            readers = sorted(set(p.consumers))
            xp = xv(p.producer) if p.producer >= 0 else None
            cost = p.nbytes * per_byte
            if xp is not None:
                if p.to_sink:
                    add(d, xp, cost)
                else:
                    o = m.var(0.0, 1.0, False)
                    for c in readers:
                        sc = same(p.producer, c)
                        m.row({o: 1.0, xp: -1.0, **({sc: 1.0} if sc is not None else {})}, 0.0, np.inf)
                    add(d, o, cost)
            for k, c in enumerate(readers):
                xc = xv(c)
                if xc is None:
                    continue
                i = m.var(0.0, 1.0, False)
                row = {i: 1.0, xc: -1.0}
                for a in ([p.producer] if xp is not None else []) + readers[:k]:
                    sa = same(a, c)
                    if sa is not None:
                        row[sa] = row.get(sa, 0.0) + 1.0
                m.row(row, 0.0, np.inf)
                add(d, i, cost)

    def symmetry(self) -> None:
        """Interchangeable devices (one class) are labelled in the order of the first layer each runs,
        groups taken longest first: device k of a class may run a member of group g only when device
        k - 1 runs a member of g or of a group before it. Every mapping has such a labelling (relabel
        the class's devices by their first layer), so one optimum stays; the copies that differ only
        by a permutation of the class go."""
        order = sorted(range(len(self.groups)), key=lambda g: (-float(np.nanmax(np.where(
            self.nm.feasible[self.groups[g][0]], self.nm.time[self.groups[g][0]], np.nan))), g))
        for cls in symmetric_classes(self.nm):
            runs = [g for g in order if (g, cls[0]) in self.x]
            for prev, dev in zip(cls, cls[1:]):
                for pos, g in enumerate(runs):
                    if pos == 0 and len(self.groups[g]) == 1:
                        self.m.ub[self.x[(g, dev)]] = 0.0     # the class's first layer goes to its first device
                        continue
                    size = float(len(self.groups[g]))
                    coef = {self.x[(h, prev)]: -size for h in runs[:pos + 1]}
                    coef[self.x[(g, dev)]] = coef.get(self.x[(g, dev)], 0.0) + 1.0
                    self.m.row(coef, -np.inf, 0.0)

    def traffic(self, payloads: list[Payload], links: bool, memory: bool,
                ends: list[dict[int, float]] | None = None) -> None:
        """y, z variables and the link-load and memory rows that read them; with ``ends`` (per device, terms
        of its load), each message's two ends (``cluster.links``) added to the loads of the devices
        whose tasks send and first read it (the source and the sink run no task: not charged).

        The TaskGraph lists a payload's edges to the sink after those to layers, so a device that
        runs a consumer receives (and holds) the payload, the sink receives it without holding it,
        and the producer holds every message it sends plus every output it delivers."""
        nm, m, cl = self.nm, self.m, self.nm.problem.cluster
        lk = cl.links
        n_dev = nm.num_devices
        src, snk = cl.source_index, cl.sink_index
        link_rows: dict[tuple[int, int], dict[int, float]] = {}
        mem_rows: list[dict[int, float]] = [dict() for _ in range(n_dev)]

        def add(row: dict[int, float], var: int, value: float) -> None:
            row[var] = row.get(var, 0.0) + value

        def end(d: int, var: int, nbytes: float) -> None:
            if ends is not None and (c := float(lk.end(d, nbytes))) > 0:
                add(ends[d], var, c / self.time_unit)

        for d in range(n_dev):
            for i in np.flatnonzero(nm.feasible[:, d]):
                mem_rows[d][self.x[(int(i), d)]] = (float(nm.problem.costs.mem_bytes[i, nm.problem.device_type[d]])
                                                    / self.byte_unit)
        for p in payloads:
            reads = [self._reads(p, b) for b in range(n_dev)]        # y[p, b]: a consumer runs on b
            for a in range(n_dev):
                if p.producer == SOURCE:
                    sender: int | None = None
                    if a != src:
                        continue
                else:
                    sender = self.x.get((p.producer, a))
                    if sender is None:
                        continue
                    if p.to_sink:
                        add(mem_rows[a], sender, p.nbytes / self.byte_unit)   # delivers a model output
                for b in range(n_dev):
                    if a == b:
                        continue
                    cost = float(cl.links.time(a, b, p.nbytes)) / self.time_unit
                    held = p.nbytes / self.byte_unit
                    y = reads[b]
                    to_sink = p.to_sink and b == snk and sender is not None
                    if to_sink and sender is not None:                                          # one message, read there or not
                        add(link_rows.setdefault((a, b), {}), sender, cost)
                        self.sent.append((sender, a, b, p.nbytes))
                        end(a, sender, p.nbytes)
                    if y is None:
                        continue
                    z = y if sender is None else self._both(sender, y)
                    end(b, z, p.nbytes)                                  # a task on b reads it
                    if not to_sink:
                        add(link_rows.setdefault((a, b), {}), z, cost)
                        self.sent.append((z, a, b, p.nbytes))
                        if sender is not None:
                            end(a, z, p.nbytes)
                    if sender is not None:                               # a layer's payload: both hold it
                        add(mem_rows[b], z, held)
                        add(mem_rows[a], z, held)
            if p.producer == SOURCE:                                     # the input is held where it is read
                for b, y in enumerate(reads):
                    if y is not None:
                        add(mem_rows[b], y, p.nbytes / self.byte_unit)
        if links:
            for coef in _resource_rows(link_rows, cl.links.shared):
                m.row({**coef, self.t: -1.0}, -np.inf, 0.0)
        if memory:
            for d, coef in enumerate(mem_rows):
                m.row(coef, -np.inf, float(nm.problem.memory_bytes[d]) / self.byte_unit)

    def _reads(self, p: Payload, b: int) -> int | None:
        """y[p, b] >= x[c, b] for every consumer c that may run on b (None: none may)."""
        readers = [self.x[(c, b)] for c in p.consumers if (c, b) in self.x]
        if not readers:
            return None
        y = self.m.var(0.0, 1.0, False)
        for r in readers:
            self.m.row({y: 1.0, r: -1.0}, 0.0, np.inf)
        return y

    def _both(self, a: int, b: int) -> int:
        """A variable that is 1 whenever both indicator variables are."""
        z = self.m.var(0.0, 1.0, False)
        self.m.row({z: 1.0, a: -1.0, b: -1.0}, -1.0, np.inf)
        return z


def _resource_rows(link_rows: dict[tuple[int, int], dict[int, float]], shared_ports: bool) -> list[dict[int, float]]:
    """The busy-time rows of the resources messages take: each directed link, or (``ports: shared``)
    each device's one port, which every message in or out of the device holds."""
    if not shared_ports:
        return list(link_rows.values())
    ports: dict[int, dict[int, float]] = {}
    for (a, b), coef in link_rows.items():
        for d in (a, b):
            row = ports.setdefault(d, {})
            for var, value in coef.items():
                row[var] = row.get(var, 0.0) + value
    return list(ports.values())


def memory_could_bind(nm: NodeMapping) -> bool:
    """Could some mapping overflow a device's memory?"""
    return could_bind(nm, payloads_of(nm), np.inf)[1]


def could_bind(nm: NodeMapping, payloads: list[Payload], bound: float) -> tuple[bool, bool]:
    """Can link loads reach ``bound``? Can any device's memory overflow?"""
    lk = nm.problem.cluster.links
    off = ~np.eye(nm.num_devices, dtype=bool)
    worst_link = 0.0
    if nm.num_devices > 1 and payloads:
        lat, per_byte = float(lk.latency_s[off].max()), float(lk.per_byte_s[off].max())
        worst_link = sum(float(message_time(lat, per_byte, p.nbytes)) for p in payloads)
        if lk.shared:      # a port may take a payload to every other device
            worst_link *= nm.num_devices - 1
    traffic = 2.0 * sum(p.nbytes for p in payloads)
    mem = nm.problem.costs.mem_bytes[:, nm.problem.device_type]
    worst_mem = np.where(nm.feasible, mem, 0.0).sum(axis=0) + traffic
    return worst_link >= bound, bool((worst_mem > nm.problem.memory_bytes).any())


def solve_bottleneck(nm: NodeMapping, time_limit_s: float, model_every_term: bool = False,
                     incumbent_s: float = np.inf) -> MilpResult:
    """The mapping of least bottleneck (compute, and links and memory where they can bind;
    ``model_every_term`` models them whether or not they can, as tests do). A known mapping whose
    bottleneck (``incumbent_s``) already meets the quick lower bound is optimal: no MILP is run."""
    t0 = time.perf_counter()
    if nm.evaluator.memory is not None:   # task costs depend on the whole assignment: not linear in x
        return MilpResult(None, 0.0, False, False, False, False, False, time.perf_counter() - t0,
                          "not run: the devices keep weights off chip (the memory model costs each plan)")
    quick = compute_lower_bound(nm)
    if incumbent_s <= quick * (1 + PROOF_TOL):
        return MilpResult(None, quick, False, False, True, False, False, time.perf_counter() - t0,
                          "not run: a known mapping meets the lower bound")
    payloads = payloads_of(nm)
    links, memory = (True, True) if model_every_term else could_bind(nm, payloads, compute_lower_bound(nm))
    ends = nm.problem.cluster.links.charges_ends     # message ends load the devices: always modelled
    n_z = len(payloads) * nm.num_devices * (nm.num_devices - 1)
    exact = True
    if (links or memory or ends) and n_z > MAX_LINK_VARIABLES:
        links = memory = ends = exact = False
    cuts = nm.problem.costs.charges_cuts
    groups = _twins(nm) if not (links or memory or cuts or ends) else [[i] for i in range(nm.num_layers)]
    memories = nm.problem.memory_bytes[np.isfinite(nm.problem.memory_bytes)]
    time_unit = compute_lower_bound(nm) or 1.0
    b = Builder(nm, groups, time_unit, float(memories.max()) if len(memories) else 1.0)
    extra = b.segments() if cuts else None
    if ends:               # the ends' terms join the devices' loads: traffic first
        extra = extra or [dict() for _ in range(nm.num_devices)]
        b.traffic(payloads, links, memory, extra)
    b.compute(extra)
    b.symmetry()
    if (links or memory) and not ends:
        b.traffic(payloads, links, memory)
    c = np.zeros(b.m.n)
    c[b.t] = 1.0
    res, devices, bound = solve_milp(b, c, time_limit_s)
    bound = max(bound * time_unit, compute_lower_bound(nm))
    return MilpResult(devices, float(bound), res.status == 0, res.status == 2, exact, links, memory,
                      time.perf_counter() - t0, str(res.message))


def solve_milp(b: Builder, objective: np.ndarray, time_limit_s: float):
    """HiGHS on the builder's model: (scipy's result, the decoded mapping or None, the proven bound on
    the objective in the model's units)."""
    from scipy.optimize import Bounds, milp

    m = b.m
    res = milp(objective, constraints=[m.constraint()], integrality=np.array(m.integer), bounds=Bounds(m.lb, m.ub),
               options={"time_limit": max(0.05, time_limit_s), "mip_rel_gap": MIP_REL_GAP, "disp": False})
    devices = None if res.x is None else b.decode(res.x)
    bound = getattr(res, "mip_dual_bound", None)
    if bound is None or not np.isfinite(bound):
        bound = res.fun if res.status == 0 else 0.0
    return res, devices, float(bound)
