"""Discrete-event simulation of a stream of inputs through a plan's TaskGraph.

The closed forms (estimate/pipeline.py, estimate/mapping.py) give throughput as the inverse of the
busiest resource and latency as one input's schedule (estimate/schedule.py, the same rules as here
for one input). This simulator runs the stream for real, event by event, so it also shows queueing,
utilization and the timeline (docs/architecture.md, "The estimator").

Work items, per input ``i`` (N inputs) of one TaskGraph ``tg``:

- a *compute job* per task ``t`` on device ``tg.tasks[t].device``, taking ``TaskCosts.time_s`` of
  that device's type, plus what its segment and its messages' ends add (``segments.charged``);
- a *transfer job* per message ``m`` of ``tg.messages()`` (one payload once from device ``src`` to
  ``dst``) on the wires ``cluster.links`` says it holds (its directed link, or with ``ports: shared``
  both devices' ports), for the time ``cluster.links.message_time`` gives;
- an *extra job* per ``ExtraJobs`` entry (an MCU's weight load) on its device's memory channel; on
  a cluster whose devices keep weights off chip the memory model (``memory.py``) gives these and
  the task costs, as it does for the closed form.

Rules (compute-and-forward units):

- a task of input i is *ready* when every payload it reads for input i is there: each message into
  its device that lists it among its consumers is delivered, and each same-device (or zero-byte)
  edge's producer task is done (a model input produced by ``SOURCE`` on the same device is there
  when input i arrives);
- a message of input i is ready when its producer task finished (``SOURCE`` messages: when input i
  arrives); messages whose consumers include ``SINK`` deliver the output; with a run order
  (``TaskGraph.chain``) a task also waits for the task before it in its device's order; an extra
  job waits for the task it follows and holds back the task it precedes;
- each device runs one task at a time and, among its ready tasks, starts the lowest
  ``(input, task index)``; each link carries one message at a time, FIFO by ready time, ties by
  ``(input, message index)`` (``link_order="input"``: lowest ``(input, message index)`` first, as
  on devices); both are work-conserving (never idle while something is ready); a message holding
  two ports starts, in the same order, when both are free;
- all events at one instant are applied before any idle resource picks its next job, so the choice
  does not depend on the order of simultaneous events;
- a device starts no task of input i+1 until all its tasks of input i are done when the runtime runs
  the plan so: a plan whose sum combines cross devices (``TaskGraph.sums_across_devices``,
  ``runtime.rounds``); ``SimOptions.inputs_in_order`` True or False overrides it;
- input i arrives at ``i * interval_s`` (``interval_s = 0``: all at t = 0, a saturated stream) and
  is *done* when all its tasks are done and all its messages delivered.

Reported (``SimResult``): steady-state throughput (``steady_throughput``), latency per input (done -
arrival) and its percentiles, the unloaded latency (one input alone in the system), busy time and
utilization (busy / makespan) of every device and link, energy per inference (compute energy of
every task + bytes x energy per byte of every message, charged to the sender), the timeline, and
the unloaded input's *critical path*: from its last job back, each job to the one that let it start
(the job whose end made it ready, or, when it was ready earlier, the one that held its resource
until then), so the path's jobs tile the latency from 0; ``SimResult.breakdown`` sums their time
by part (a task's as its device model splits it, "transfer" for messages, an extra job's part).

Implementation: a heap of completion events, a ready heap per resource, and per task a precomputed
count of the tokens (finished producers, delivered messages, the arrival) it waits for; an event
touches only the successors of the job that finished.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from heapq import heappop, heappush
from typing import Any, Callable, NamedTuple

import numpy as np

from hetsplit.cluster.links import wires
from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError, PlanError
from hetsplit.limits import check_memory
from hetsplit.plan.check import check_plan
from hetsplit.estimate.memory import MemoryEffects
from hetsplit.estimate.schedule import ExtraJobs
from hetsplit.estimate.segments import charged
from hetsplit.estimate.task_costs import TaskCosts, task_costs
from hetsplit.plan.tasks import SOURCE, Message, TaskGraph
from hetsplit.plan.types import Plan

_ARRIVAL = -1  # the token a task waits for when it reads the model input on its own device
LINK_ORDERS = ("fifo", "input")


@dataclass(frozen=True)
class SimOptions:
    """How to simulate: ``inputs`` streamed, one every ``interval_s`` (0: all at t = 0, a
    saturated stream); ``keep_timeline`` records every job (off: only the statistics);
    ``link_order``: "input" (the default: lowest input first, as the runtime's workers post their
    sends in input order) or "fifo" (by ready time); ``inputs_in_order``: whether a device starts no
    task of input i+1 until every one of its tasks of input i is done, where otherwise a device waiting
    on another may run a later input's ready tasks meanwhile; None (the default): as the runtime runs
    the plan, input by input exactly when a sum combine crosses devices (``runtime.rounds``,
    ``TaskGraph.sums_across_devices``).

    With every input waiting at t = 0, a FIFO link that carries the model input of every input
    (ready at once) makes the other payloads it carries wait for all of them; "input" order keeps
    the stream in step, so a saturated run shows the steady state the closed form bounds."""

    inputs: int = 100
    interval_s: float = 0.0
    keep_timeline: bool = True
    link_order: str = "input"
    inputs_in_order: bool | None = None   # each device ends input i's tasks before input i+1's (None: as the runtime)

    def __post_init__(self) -> None:
        if int(self.inputs) != self.inputs or self.inputs < 1:
            raise HetsplitError(f"the simulation needs at least 1 input, got inputs={self.inputs!r}")
        if not (math.isfinite(self.interval_s) and self.interval_s >= 0):
            raise HetsplitError(f"interval_s must be a finite number of seconds >= 0, got {self.interval_s!r}")
        if self.link_order not in LINK_ORDERS:
            raise HetsplitError(f"link_order is {self.link_order!r}; expected one of {', '.join(LINK_ORDERS)}")


class Span(NamedTuple):
    """One job of the timeline: ``label`` (task or payload) of ``input`` on ``resource``."""

    resource: str
    label: str
    input: int
    start: float
    end: float


class PathStep(NamedTuple):
    """One job of an input's critical path: what it is (``kind``: task, message or extra), where it
    ran, when, and its time in parts (a task's as its device model splits it, e.g. compute / l2 / l3;
    a message's "transfer"; an extra job's its ``ExtraJobs.part``)."""

    label: str
    kind: str
    resource: str
    start: float
    end: float
    parts: dict[str, float]


@dataclass
class SimResult:
    """What a simulation measured (SI units). Resources are the devices that run tasks (cluster
    order), then the links that carry messages, named ``"u->v"``."""

    inputs: int
    resources: list[str]
    resource_kinds: list[str]              # "device", "link", "port" or "memory", per resource
    arrival_s: np.ndarray                  # N
    done_s: np.ndarray                     # N
    throughput: float                      # in steady state: see steady_throughput
    makespan_s: float                      # last completion (from t = 0)
    unloaded_latency_s: float              # one input alone in the system
    busy_s: dict[str, float]               # per resource, over the whole run
    energy_j: float                        # per inference: compute + communication
    comm_energy_j: float                   # per inference
    energy_per_device_j: dict[str, float]  # per inference: compute + what the device sends
    events: int                            # events processed (arrivals + job completions)
    wall_s: float                          # seconds the event loop took
    timeline: list[Span] = field(default_factory=list)
    critical_path: list[PathStep] = field(default_factory=list)  # of the unloaded input, first job first

    def breakdown(self) -> dict[str, float]:
        """Seconds of the unloaded latency in each part along its critical path (they sum to it)."""
        out: dict[str, float] = {}
        for step in self.critical_path:
            for part, seconds in step.parts.items():
                out[part] = out.get(part, 0.0) + seconds
        return out

    @property
    def latency_s(self) -> np.ndarray:
        """Per input: done - arrival."""
        return np.asarray(self.done_s - self.arrival_s)

    def latency_percentile(self, q: float) -> float:
        return float(np.percentile(self.latency_s, q))

    @property
    def utilization(self) -> dict[str, float]:
        """Per resource: busy time / makespan."""
        span = self.makespan_s
        return {r: (b / span if span > 0 else 0.0) for r, b in self.busy_s.items()}

    def summary(self) -> dict[str, object]:
        """The scalar results and per-resource utilization, JSON-ready (no timeline)."""
        return {"inputs": self.inputs, "throughput": self.throughput, "makespan_s": self.makespan_s,
                "latency_p50_s": self.latency_percentile(50), "latency_p90_s": self.latency_percentile(90),
                "latency_p99_s": self.latency_percentile(99), "latency_max_s": float(self.latency_s.max()),
                "unloaded_latency_s": self.unloaded_latency_s, "energy_j": self.energy_j,
                "comm_energy_j": self.comm_energy_j, "energy_per_device_j": dict(self.energy_per_device_j),
                "utilization": self.utilization, "busy_s": dict(self.busy_s), "events": self.events,
                "wall_s": self.wall_s}


def steady_throughput(inputs: int, makespan_s: float, unloaded_latency_s: float, busiest_s: float = 0.0) -> float:
    """Inputs per second in steady state: ``(N - 1) / (makespan - L1)``, where ``L1`` is the unloaded
    latency (one input alone) and the makespan is the last completion, capped at ``N / busiest_s``
    (the busiest resource's time over the whole run: no stream outruns it).

    The first input costs the fill and drain of the system (``L1``); every further input adds the
    stream's period. A deterministic pipeline completes input i at exactly ``L1 + i * B`` (B: its
    bottleneck), so this is exactly ``1 / B``; inputs arriving every ``interval_s`` slower than the
    bottleneck give exactly ``1 / interval_s``. Unlike a completion rate over a window of the run, it
    never credits work done ahead of the window: with every input waiting at t = 0, a FIFO link can
    ship one payload of every input before another payload of any, and the last completions then
    follow each other faster than the busiest resource could sustain. The cap matters for DAGs: the
    last input of a saturated stream has had its first tasks done long before, so it finishes less
    than ``L1`` after the one before it, and the formula alone overshoots by up to ``L1 / (N B)``.
    One input, or a makespan not above ``L1``: ``N / makespan``.
    """
    if inputs > 1 and makespan_s > unloaded_latency_s:
        rate = (inputs - 1) / (makespan_s - unloaded_latency_s)
    else:
        rate = inputs / makespan_s if makespan_s > 0 else math.inf
    return min(rate, inputs / busiest_s) if busiest_s > 0 else rate


# ---- the compiled structure -----------------------------------------------------------------------

@dataclass
class _Jobs:
    """A TaskGraph as flat job lists: jobs 0..T-1 are tasks, T..T+M-1 messages (message order), then
    the plan's extra jobs (``ExtraJobs``)."""

    resource: list[tuple[int, ...]]   # per job: the resources it holds (a message over shared ports: two)
    duration: list[float]         # per job: seconds
    label: list[str]              # per job: task name, payload or extra job
    unlocks: list[list[int]]      # per job: tasks whose token count drops when it finishes
    releases: list[list[int]]     # per job: messages and extra jobs that become ready when it finishes
    counts: list[int]             # per task: tokens still awaited once its input has arrived
    start_tasks: list[int]        # tasks ready when an input arrives
    start_others: list[int]       # messages (model inputs from the source) and extra jobs ready then
    resources: list[str]
    resource_kinds: list[str]
    tasks: int                    # jobs 0 .. tasks - 1 are tasks, then ``messages`` messages, then extra jobs
    messages: int

    @property
    def num_jobs(self) -> int:
        return len(self.duration)

    def kind(self, j: int) -> str:
        return "task" if j < self.tasks else "message" if j < self.tasks + self.messages else "extra"


def _compile(problem: SplitProblem, tg: TaskGraph, costs: TaskCosts, messages: list[Message],
             extras: ExtraJobs) -> _Jobs:
    cl = tg.cluster
    n_tasks, n_msgs = tg.num_tasks, len(messages)
    n_jobs = n_tasks + n_msgs + len(extras)
    if costs.time_s.shape[0] != n_tasks:
        raise PlanError(f"the task costs have {costs.time_s.shape[0]} rows; the task graph has {n_tasks} tasks")
    time_s = costs.on(tg.device[None, :], problem.device_type)[0][0]
    bad = np.flatnonzero(~np.isfinite(time_s) | (time_s < 0))
    if len(bad):
        t = tg.tasks[int(bad[0])]
        raise PlanError(f"task {t.name!r} cannot run on device {cl.names[t.device]!r} (its time is "
                        f"{time_s[bad[0]]}); place it on a device that can")
    resource, names, kinds = _resources(tg, messages, extras)
    duration = [float(x) for x in time_s] + \
        [float(cl.links.time(m.src, m.dst, m.nbytes)) for m in messages] + \
        [float(x) for x in extras.duration_s]
    tokens = _tokens(tg, messages)
    for x, before in enumerate(extras.before):
        if before >= 0:
            tokens[int(before)].add(n_tasks + n_msgs + x)
    unlocks: list[list[int]] = [[] for _ in range(n_jobs)]
    counts = [0] * n_tasks
    for ti, toks in enumerate(tokens):
        for tok in sorted(toks):
            if tok != _ARRIVAL:
                unlocks[tok].append(ti)
                counts[ti] += 1
    releases: list[list[int]] = [[] for _ in range(n_jobs)]
    start_others: list[int] = []
    for k, m in enumerate(messages):
        (start_others if m.producer == SOURCE else releases[m.producer]).append(n_tasks + k)
    for x, after in enumerate(extras.after):
        (start_others if after < 0 else releases[int(after)]).append(n_tasks + n_msgs + x)
    labels = [t.name for t in tg.tasks] + [m.payload for m in messages] + \
        (list(extras.labels) or [f"extra{x}" for x in range(len(extras))])
    return _Jobs(resource, duration, labels, unlocks, releases, counts, [t for t in range(n_tasks) if counts[t] == 0],
                 start_others, names, kinds, n_tasks, n_msgs)


def _resources(tg: TaskGraph, messages: list[Message], extras: ExtraJobs
               ) -> tuple[list[tuple[int, ...]], list[str], list[str]]:
    """Per job the resources it holds; the resources' names and kinds: devices that run tasks, the
    links that carry messages (or with ``ports="shared"`` the devices' ports), then the devices'
    memory channels that extra jobs use (each group in index order)."""
    names = tg.cluster.names
    shared = tg.cluster.links.shared
    devices = sorted({int(d) for d in tg.device})
    held = sorted({w for m in messages for w in wires(shared, m.src, m.dst)})
    channels = sorted({int(d) for d in extras.device})
    keys = [("device", d) for d in devices] + held + [("memory", d) for d in channels]
    index = {k: r for r, k in enumerate(keys)}
    resource: list[tuple[int, ...]] = [(index[("device", int(d))],) for d in tg.device]
    resource += [tuple(index[w] for w in wires(shared, m.src, m.dst)) for m in messages]
    resource += [(index[("memory", int(d))],) for d in extras.device]
    label: dict[str, Callable[[tuple[Any, ...]], str]] = {"device": lambda k: names[k[1]], "link": lambda k: f"{names[k[1]]}->{names[k[2]]}",
             "port": lambda k: f"{names[k[1]]} port", "memory": lambda k: f"{names[k[1]]} memory"}
    return resource, [label[k[0]](k) for k in keys], [k[0] for k in keys]


def _tokens(tg: TaskGraph, messages: list[Message]) -> list[set[int]]:
    """Per task, what it waits for: producer tasks (same device) and the task before it in its
    device's run order, message jobs (T + m), the arrival."""
    u, v = tg.endpoints(tg.device)
    msg_of = {(m.payload, m.dst): tg.num_tasks + k for k, m in enumerate(messages)}
    tokens: list[set[int]] = [set() for _ in range(tg.num_tasks)]
    for e in range(len(tg.edge_src)):
        dst = int(tg.edge_dst[e])
        if dst < 0:
            continue
        if u[e] != v[e] and tg.edge_bytes[e] > 0:  # the same rule as TaskGraph.messages
            tokens[dst].add(msg_of[(tg.payloads[tg.edge_payload[e]], int(v[e]))])
        else:
            src = int(tg.edge_src[e])
            tokens[dst].add(src if src >= 0 else _ARRIVAL)
    for before, after in tg.chain:
        tokens[int(after)].add(int(before))
    return tokens


# ---- the event loop -------------------------------------------------------------------------------

@dataclass
class _Run:
    arrival: list[float]
    done: list[float]
    busy: list[float]
    events: int
    timeline: list[tuple[int, int, int, float, float]]  # (resource, job, input, start, end)
    trace: dict[int, tuple[float, float, int]]          # job of input 0 -> (start, end, the job that let it start)


def _run(jobs: _Jobs, n: int, interval_s: float, keep: bool, fifo: bool, trace: bool = False,
         in_order: bool = False) -> _Run:
    """Simulate ``n`` inputs arriving every ``interval_s``; see the module docstring for the rules.
    ``in_order``: a device runs input i+1's tasks only once all its tasks of input i are done.

    Event: ``(time, -1, input, job)``, job -1 for an arrival. Ready heaps hold ``(key, input, job)``
    with key 0 on devices and memory channels (lowest input, then job) and on links the ready time
    (``fifo``) or 0 (lowest input, then message); messages that hold two ports wait in one heap of
    their own and start, in that order, when both ports are free.

    ``trace`` (one input): record for each job what let it start: the job whose end made it ready,
    or, when it was ready earlier, the job that held its resource until then (-1: the arrival). A
    job starts when both have happened, so each starts exactly when the one it records ended."""
    n_res, n_jobs = len(jobs.resources), jobs.num_jobs
    resource, duration, unlocks, releases = jobs.resource, jobs.duration, jobs.unlocks, jobs.releases
    start_tasks, start_others, counts = jobs.start_tasks, jobs.start_others, jobs.counts
    ready: list[list[tuple[float, int, int]]] = [[] for _ in range(n_res)]
    pairs: list[tuple[float, int, int]] = []          # ready jobs that hold two resources
    running = [False] * n_res
    busy = [0.0] * n_res
    pending: list[list[int] | None] = [None] * n
    left = [0] * n
    arrival = [i * interval_s for i in range(n)]
    done = [math.nan] * n
    timeline: list[tuple[int, int, int, float, float]] = []
    events: list[tuple[float, int, int, int]] = [(0.0, -1, 0, -1)]
    n_events = 0
    made_ready: dict[int, tuple[float, int]] = {}        # trace: job -> (when it became ready, by which job)
    held: list[tuple[float, int]] = [(0.0, -1)] * n_res  # trace: resource -> (end, job) of its last job
    traced: dict[int, tuple[float, float, int]] = {}
    tasks_on = [0] * n_res                 # in_order: per device, its tasks per input
    for j in range(jobs.tasks if in_order else 0):
        tasks_on[resource[j][0]] += 1
    front = [0] * n_res                    # in_order: per device, the input it works on
    front_left = tasks_on.copy()           # ... and how many of its tasks of that input are not done

    def make_ready(key: float, i: int, j: int, touched: list[int], by: int = -1) -> None:
        if trace:
            made_ready[j] = (now, by)
        res = resource[j]
        if len(res) == 1:
            heappush(ready[res[0]], (key, i, j))
            touched.append(res[0])
        else:
            heappush(pairs, (key, i, j))

    def start(now: float, i: int, j: int) -> None:
        d = duration[j]
        if trace:
            binder = max([made_ready[j]] + [held[r] for r in resource[j]], key=lambda x: x[0])[1]
            traced[j] = (now, now + d, binder)
            for r in resource[j]:
                held[r] = (now + d, j)
        for r in resource[j]:
            running[r] = True
            busy[r] += d
            if keep:
                timeline.append((r, j, i, now, now + d))
        heappush(events, (now + d, -1, i, j))

    while events:
        now = events[0][0]
        link_key = now if fifo else 0.0
        touched: list[int] = []
        while events and events[0][0] == now:
            _, _, i, j = heappop(events)
            n_events += 1
            if j < 0:  # input i arrives
                pending[i] = counts.copy()
                left[i] = n_jobs
                for t in start_tasks:
                    make_ready(0.0, i, t, touched)
                for k in start_others:
                    make_ready(link_key, i, k, touched)
                if i + 1 < n:
                    heappush(events, (arrival[i + 1], -1, i + 1, -1))
                continue
            for r in resource[j]:
                running[r] = False
                touched.append(r)
            if in_order and j < jobs.tasks:
                r = resource[j][0]
                front_left[r] -= 1
                if not front_left[r]:
                    front[r], front_left[r] = front[r] + 1, tasks_on[r]
            cnt = pending[i]
            assert cnt is not None                  # input i has arrived
            for t in unlocks[j]:
                c = cnt[t] - 1
                cnt[t] = c
                if c == 0:
                    make_ready(0.0, i, t, touched, j)
            for k in releases[j]:
                make_ready(link_key, i, k, touched, j)
            left[i] -= 1
            if not left[i]:
                done[i] = now
                pending[i] = None
        for r in touched:
            if not running[r] and ready[r] and not (in_order and tasks_on[r] and ready[r][0][1] > front[r]):
                _, i, j = heappop(ready[r])
                start(now, i, j)
        if pairs:
            waiting = []
            while pairs:
                item = heappop(pairs)
                if any(running[r] for r in resource[item[2]]):
                    waiting.append(item)
                else:
                    start(now, item[1], item[2])
            for item in waiting:
                heappush(pairs, item)
    stuck = [i for i in range(n) if left[i]]
    if stuck:
        raise PlanError(f"input {stuck[0]} never finished: the task graph has a dependency cycle")
    return _Run(arrival, done, busy, n_events, timeline, traced)


def _critical_path(jobs: _Jobs, run: _Run, costs: TaskCosts, device_type: np.ndarray, tg: TaskGraph,
                   extras: ExtraJobs) -> list[PathStep]:
    """The traced input's critical path: from its last job back along what let each job start."""
    if not run.trace:
        return []
    j = max(run.trace, key=lambda k: (run.trace[k][1], -k))
    steps = []
    while j >= 0:
        start, end, binder = run.trace[j]
        kind = jobs.kind(j)
        if kind == "task":
            parts = costs.time_parts(j, int(device_type[tg.device[j]]))
        else:
            parts = {"transfer" if kind == "message" else extras.part: end - start}
        steps.append(PathStep(jobs.label[j], kind, " + ".join(jobs.resources[r] for r in jobs.resource[j]), start,
                              end, parts))
        j = binder
    return steps[::-1]


# ---- entry points ---------------------------------------------------------------------------------

def simulate(problem: SplitProblem, tg: TaskGraph, options: SimOptions | None = None,
             costs: TaskCosts | None = None, extras: ExtraJobs | None = None) -> SimResult:
    """Simulate ``options.inputs`` inputs through ``tg`` (costs default: ``task_costs(problem, tg)``; each
    segment's cost charged on them by the one rule, ``segments.charged``; ``extras``: the plan's extra
    jobs). On a cluster whose devices keep weights off chip, the memory
    model (``memory.py``) gives the costs and extra jobs (its weight loads), as in the closed form,
    on ``tg`` with its stages split by segment (those pieces costed from the table)."""
    opts = options or SimOptions()
    in_order = tg.sums_across_devices() if opts.inputs_in_order is None else opts.inputs_in_order
    memory = MemoryEffects.of(problem)
    if memory is not None:
        if extras is not None:
            raise PlanError(f"the devices of cluster {problem.cluster.name!r} keep weights off chip: the memory "
                            "model gives their weight loads; extra jobs cannot be added to it")
        split, _ = memory.split(tg)
        base = costs if costs is not None and split is tg else task_costs(problem, split)
        own = memory.plan(split, split.device, base)
        tg, costs, extras = split, own.costs, own.extras
    costs = charged(problem, tg, costs if costs is not None else task_costs(problem, tg))
    extras = extras if extras is not None else ExtraJobs.none()
    messages = tg.messages()
    jobs = _compile(problem, tg, costs, messages, extras)
    lower = "simulate fewer inputs (simulate -n)" + (" or keep no timeline (simulate without --out)"
                                                     if opts.keep_timeline else "")
    check_memory(simulation_bytes(opts.inputs, jobs.num_jobs, opts.keep_timeline), f"simulating {opts.inputs:,} "
                 f"inputs of {jobs.num_jobs:,} jobs each", lower)
    fifo = opts.link_order == "fifo"
    t0 = time.perf_counter()
    run = _run(jobs, opts.inputs, opts.interval_s, opts.keep_timeline, fifo, in_order=in_order)
    wall = time.perf_counter() - t0
    one = _run(jobs, 1, 0.0, False, fifo, trace=True)
    unloaded = one.done[0]
    done, arrival = np.array(run.done), np.array(run.arrival)
    makespan = float(done.max())
    energy, comm, per_device = _energy(problem, tg, costs, messages)
    names, labels, make = jobs.resources, jobs.label, Span._make
    timeline = [make((names[r], labels[j], i, s, e)) for r, j, i, s, e in run.timeline]
    return SimResult(opts.inputs, jobs.resources, jobs.resource_kinds, arrival, done,
                     steady_throughput(opts.inputs, makespan, unloaded, max(run.busy, default=0.0)), makespan, unloaded,
                     dict(zip(jobs.resources, run.busy)), energy, comm, per_device, run.events, wall, timeline,
                     _critical_path(jobs, one, costs, problem.device_type, tg, extras))


def simulation_bytes(inputs: int, jobs: int, timeline: bool) -> float:
    """About the memory a simulation of ``inputs`` inputs of ``jobs`` jobs takes (measured with
    tracemalloc and rounded up): per input its bookkeeping, per job its counters and ready entries,
    with the timeline a span per job."""
    return inputs * (250.0 + 48.0 * jobs + (250.0 * jobs if timeline else 0.0))


def simulate_plan(problem: SplitProblem, plan: Plan, options: SimOptions | None = None) -> SimResult:
    """Validate and expand ``plan`` (``check_plan``), then simulate it."""
    return simulate(problem, check_plan(problem.graph, problem.cluster, plan), options)


def _energy(problem: SplitProblem, tg: TaskGraph, costs: TaskCosts,
            messages: list[Message]) -> tuple[float, float, dict[str, float]]:
    """Energy per inference: total, communication, and per device (compute + what it sends)."""
    cl = tg.cluster
    per = np.zeros(cl.num_devices)
    np.add.at(per, tg.device, costs.on(tg.device[None, :], problem.device_type)[1][0])
    comm = 0.0
    for m in messages:
        e = float(cl.links.energy(m.src, m.dst, m.nbytes))
        per[m.src] += e
        comm += e
    charged = set(int(d) for d in tg.device) | set(np.flatnonzero(per > 0).tolist())
    return float(per.sum()), comm, {cl.names[d]: float(per[d]) for d in sorted(charged)}
