"""The worker of one device in a mapping run (``hetsplit.manifest/2``), and its collectives.

Per input the worker runs its segments in order: wait for the segment's incoming messages, run its
sub-model, post its outgoing messages (asynchronously; a waiter thread records when each is done).
Receives for the next ``depth`` inputs are posted ahead, so transfers land while earlier work
computes. Segments follow one global topological order, so this never deadlocks.

Point-to-point messages use the run's gloo group (``Wire``, one tag range per message). The
messages of a sum combine move in collectives over gloo subgroups, one per collective of the
manifest, created by every member in collective order (a group's creation waits for all its
members, so one order everywhere cannot deadlock):

- ``gather``: the members' partial (or group) sums go straight to the root (gloo's gather sends
  each member's tensor to the root, as the TaskGraph's messages do; the root's own partial stays
  local and its slot is a dummy). The Sum itself runs in the root's sum segment, so a fused
  epilogue (bias, activation) comes after it;
- ``scatter``: the root sends the reduced result to each member that reads it (gloo's scatter
  sends one tensor per member straight from the root); a leader's copy task scatters it on to its
  group the same way.

gloo's own ``reduce`` (a ring reduce-scatter, then a gather) and ``broadcast`` (a binomial tree)
would move other bytes over other links than the plan's messages, and would sum outside the
segment that must apply the epilogue after the sum; gather and scatter move exactly the messages.

Timeouts: a wait for a message fails after ``timeout_s``; a collective counts its timeout from when
gloo starts it, which for a receive posted ahead is up to ``depth`` inputs early, so ``timeout_s``
must exceed the time of a few inputs (as for pipelines, whose sends wait for preposted receives).
"""

from __future__ import annotations

import datetime
import queue
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.mapping_manifest import GATHER, P2P, Collective, MappingManifest, Segment
from hetsplit.runtime.pipe import EdgeLog, Shared, Stop
from hetsplit.runtime.wire import Wire


@dataclass
class SegmentSpec:
    """What ``OrtExecutor`` checks a segment's sub-model against (its inputs and outputs)."""

    device: str
    inputs: list[str]
    outputs: list[str]
    recv: list[Edge] = field(default_factory=list)
    send: list[Edge] = field(default_factory=list)

    @classmethod
    def of(cls, device: str, seg: Segment) -> "SegmentSpec":
        return cls(device, [t.name for t in seg.inputs], [t.name for t in seg.outputs],
                   [Edge("in", -1, tuple(seg.inputs))], [Edge("out", -1, tuple(seg.outputs))])


def open_groups(manifest: MappingManifest, rank: int, wire: Wire, cfg: RunConfig) -> dict[int, dist.ProcessGroup]:
    """A gloo subgroup for every collective this rank joins, created in collective order."""
    from hetsplit.runtime.wire import open_group

    me = manifest.worker(rank).device
    groups = {}
    for c in manifest.collectives:
        if rank not in c.ranks:
            continue
        store = dist.PrefixStore(f"hetsplit-collective-{c.id}/", wire._store)
        try:
            groups[c.id] = open_group(store, c.ranks.index(rank), len(c.ranks), cfg.addr(rank), cfg.startup_timeout_s)
        except RuntimeError as exc:
            raise RuntimeFailure(f"device {me}: could not form the {c.kind} group of layer {c.layer!r} with "
                                 f"{', '.join(m for m in c.members if m != me)} within {cfg.startup_timeout_s:g} s "
                                 f"({str(exc).splitlines()[0]})") from None
    return groups


class Collectives:
    """Posts the gathers and scatters of one rank (asynchronous ops on its subgroups)."""

    def __init__(self, manifest: MappingManifest, rank: int, groups: dict[int, dist.ProcessGroup], timeout_s: float):
        self.m, self.rank, self.groups = manifest, rank, groups
        self.timeout = datetime.timedelta(seconds=timeout_s)

    def peers(self, c: Collective) -> Edge:
        """A pseudo edge naming the other members (for the errors of Wire.wait)."""
        me = self.m.worker(self.rank).device
        return Edge(", ".join(x for x in c.members if x != me) if me == c.root else c.root, -1, ())

    def _opts(self, c: Collective, kind):
        o = kind()
        o.rootRank, o.timeout = c.members.index(c.root), self.timeout
        return o

    def post_recv(self, c: Collective) -> tuple[list, dict[int, list[np.ndarray]]]:
        """Post this rank's receiving side: the root of a gather, or a member of a scatter."""
        pg = self.groups[c.id]
        msgs = [self.m.message(mid) for mid in c.messages]
        if c.kind == GATHER:
            got: dict[int, list[np.ndarray]] = {m.id: [] for m in msgs}
            works = []
            for slot, spec in enumerate(t.spec for t in msgs[0].tensors):
                outs = [torch.from_numpy(spec.empty()) for _ in c.members]
                works.append(pg.gather([outs], [torch.zeros(spec.shape, dtype=outs[0].dtype)], self._opts(
                    c, dist.GatherOptions)))
                for m in msgs:
                    got[m.id].append(outs[c.members.index(m.src)].numpy())
            return works, got
        mine = next(m for m in msgs if m.dst_rank == self.rank)
        bufs = [t.spec.empty() for t in mine.tensors]
        works = [pg.scatter([torch.from_numpy(b)], [], self._opts(c, dist.ScatterOptions)) for b in bufs]
        return works, {mine.id: bufs}

    def post_send(self, c: Collective, arrays: dict[int, list[np.ndarray]]) -> list:
        """Post this rank's sending side (a gather's member, a scatter's root); ``arrays`` per message id."""
        pg = self.groups[c.id]
        msgs = [self.m.message(mid) for mid in c.messages]
        works = []
        if c.kind == GATHER:
            mine = next(m for m in msgs if m.src_rank == self.rank)
            for a in arrays[mine.id]:
                works.append(pg.gather([], [_tensor(a)], self._opts(c, dist.GatherOptions)))
            return works
        for slot, spec in enumerate(t.spec for t in msgs[0].tensors):
            by_member = {m.dst: _tensor(arrays[m.id][slot]) for m in msgs}
            dummy = torch.zeros(spec.shape, dtype=next(iter(by_member.values())).dtype)
            ins = [by_member.get(x, dummy) for x in c.members]
            works.append(pg.scatter([torch.zeros_like(dummy)], [ins], self._opts(c, dist.ScatterOptions)))
        return works


def _tensor(a: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a))


class Waiter(threading.Thread):
    """Waits for posted sends (in posting order) and records when each is done."""

    def __init__(self, wire: Wire, shared: Shared):
        super().__init__(daemon=True, name="send-waiter")
        self.wire, self.shared = wire, shared
        self.inbox: queue.Queue = queue.Queue()

    def submit(self, works: list, edge: Edge, logs: list[EdgeLog], keep) -> None:
        self.inbox.put((works, edge, logs, keep))

    def finish(self) -> None:
        self.inbox.put(None)

    def run(self) -> None:
        try:
            while True:
                item = self.shared.get(self.inbox)
                if item is None:
                    return
                works, edge, logs, _ = item
                self.wire.wait(works, edge, sending=True)
                now = time.time()
                for log in logs:
                    log.done.append(now)
        except Stop:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.shared.fail(exc)


class Inbox:
    """The receives of one input: posted ahead, waited for segment by segment."""

    def __init__(self):
        self.p2p: dict[int, tuple[list, list[np.ndarray]]] = {}
        self.coll: dict[int, tuple[list, dict[int, list[np.ndarray]]]] = {}
        self.waited: set[int] = set()


def run_mapping_worker(cfg: RunConfig, manifest: MappingManifest, rank: int, run_dir: Path) -> dict:
    """Run device ``rank``'s segments for every input; its measurements for ``rank<R>.json``."""
    from hetsplit.runtime.executor import OrtExecutor
    from hetsplit.runtime.cpu_throttle import join_group
    from hetsplit.runtime.process import connect, energy_meter, inject, wait_threads

    spec = manifest.worker(rank)
    threads = int(cfg.threads.get(spec.device, 1))
    exes = [OrtExecutor(manifest.submodel_path(rank, s.index), SegmentSpec.of(spec.device, s), threads)
            if s.submodel else None for s in spec.segments]
    for s, exe in zip(spec.segments, exes):   # warm-up: first-run allocations
        if exe is not None:
            exe.run({t.name: np.zeros(t.shape, t.dtype) for t in s.inputs})
    wire = connect(cfg, manifest, rank, run_dir)
    wire.handshake(spec.recv, spec.send)
    join_group(cfg.cgroups.get(str(rank)))
    coll = Collectives(manifest, rank, open_groups(manifest, rank, wire, cfg), cfg.timeout_s)
    msgs = manifest.messages
    colls = manifest.collectives
    recv_ids = [mid for s in spec.segments for mid in s.recv]
    send_ids = [mid for s in spec.segments for mid in s.send]
    rx_logs = {mid: EdgeLog(msgs[mid].src, msgs[mid].nbytes) for mid in recv_ids}
    tx_logs = {mid: EdgeLog(msgs[mid].dst, msgs[mid].nbytes) for mid in send_ids}
    shared = Shared()
    waiter = Waiter(wire, shared)
    n, depth = cfg.inputs, max(1, cfg.depth)
    inboxes: dict[int, Inbox] = {}

    def post_receives(i: int) -> None:
        box = inboxes[i] = Inbox()
        for mid in recv_ids:
            m = msgs[mid]
            now = time.time()
            if m.via == P2P:
                bufs = [t.spec.empty() for t in m.tensors]
                box.p2p[mid] = (wire.post(m.edge(False), bufs, sending=False), bufs)
            elif m.collective not in box.coll:
                c = colls[m.collective]
                box.coll[c.id] = _posting(lambda: coll.post_recv(c), wire, coll.peers(c), False)
            rx_logs[mid].start.append(now)

    def take(i: int, seg: Segment, local: dict[str, np.ndarray]) -> None:
        box = inboxes[i]
        for mid in seg.recv:
            m = msgs[mid]
            if m.via == P2P:
                works, bufs = box.p2p.pop(mid)
                wire.wait(works, m.edge(False), sending=False)
            else:
                c = colls[m.collective]
                works, got = box.coll[c.id]
                if c.id not in box.waited:
                    wire.wait(works, coll.peers(c), sending=False)
                    box.waited.add(c.id)
                bufs = got[mid]
            rx_logs[mid].done.append(time.time())
            local.update((t.spec.name, b) for t, b in zip(m.tensors, bufs))

    def post_sends(seg: Segment, local: dict[str, np.ndarray]) -> None:
        done_colls: set[int] = set()
        for mid in seg.send:
            m = msgs[mid]
            if m.via == P2P:
                arrays = m.arrays(local)
                tx_logs[mid].start.append(time.time())
                works = wire.post(m.edge(True), arrays, sending=True)
                waiter.submit(works, m.edge(True), [tx_logs[mid]], arrays)
            elif m.collective not in done_colls:
                c = colls[m.collective]
                done_colls.add(c.id)
                mine = [x for x in c.messages if msgs[x].src_rank == rank]
                arrays = {x: msgs[x].arrays(local) for x in mine}
                now = time.time()
                for x in mine:
                    tx_logs[x].start.append(now)
                works = _posting(lambda: coll.post_send(c, arrays), wire, coll.peers(c), True)
                waiter.submit(works, coll.peers(c), [tx_logs[x] for x in mine], arrays)

    meter = energy_meter(cfg.kinds.get(spec.device, "cpu"))
    meter.start()
    waiter.start()
    compute: list[float] = []
    idle: list[float] = []
    per_segment: list[list[float]] = []
    compute_cpu = 0.0             # this thread's CPU inside the sub-models (all of it with one compute thread)
    cpu0 = time.process_time()
    try:
        fault = cfg.faults.get(str(rank))
        for i in range(min(n, depth)):
            post_receives(i)
        for i in range(n):
            if fault and i == int(fault.get("after", 0)):
                inject(fault["kind"])
            local: dict[str, np.ndarray] = {}
            busy, wait, segs = 0.0, 0.0, []
            for seg, exe in zip(spec.segments, exes):
                t0 = time.time()
                take(i, seg, local)
                t1, c1 = time.time(), time.thread_time()
                if exe is not None:
                    local.update(exe.run({t.name: local[t.name] for t in seg.inputs}))
                t2 = time.time()
                compute_cpu += time.thread_time() - c1
                post_sends(seg, local)
                if shared.stop.is_set():
                    raise Stop()
                wait, busy = wait + t1 - t0, busy + t2 - t1
                segs.append(t2 - t1)
            compute.append(busy)
            idle.append(wait)
            per_segment.append(segs)
            del inboxes[i]
            if i + depth < n:
                post_receives(i + depth)
    except Stop:
        pass
    except BaseException as exc:  # noqa: BLE001
        shared.fail(exc)
    waiter.finish()
    wait_threads(shared, waiter)
    cpu = time.process_time() - cpu0
    energy = meter.stop()
    return {"compute_s": compute, "idle_s": idle, "segment_compute_s": per_segment, "threads": threads,
            "kind": cfg.kinds.get(spec.device, "cpu"), "process_cpu_s": cpu, "compute_cpu_s": compute_cpu,
            "energy_j": energy,
            "energy_meter": meter.name if energy is not None else meter.reason,
            "recv": [{"id": mid, **log.to_dict()} for mid, log in rx_logs.items()],
            "send": [{"id": mid, **log.to_dict()} for mid, log in tx_logs.items()]}


def _posting(post, wire: Wire, edge: Edge, sending: bool):
    """Post a collective; a transport error becomes a LinkFailure naming the peers."""
    try:
        return post()
    except RuntimeError as exc:
        raise wire.failure(edge.peer, sending, exc) from None

