"""The one worker program (rank >= 1) of every plan: ``run_worker(cfg, manifest, rank, run_dir)``.

The worker runs its (input, segment) steps round by round (``runtime.rounds``: the first inputs one
round each, then each segment on an input as many rounds behind as it lies device crossings behind,
so devices that hand an input back and forth work on different inputs at once). A step waits for
the segment's incoming messages, runs its sub-model on the device's executor (``runtime.executor``)
and posts its outgoing messages. A pipeline stage is one segment; a mapping's device has as many as
its place in the TaskGraph needs. The compute thread (the caller's) posts the receives of round
``r + ahead`` once it has taken round ``r``'s first step's (``rounds.lookahead``: ``depth`` rounds,
plus how far a message's consumer lags its producer), runs the steps and posts the sends as soon as
their tensors exist (gloo sends are asynchronous). Receives go before the round's sends: gloo writes a
posted send from the posting thread and finishes it on its own loop under the peer pair's lock, which
a receive posted just after waits for (a relay's hop, +15% at 1 MB). Who waits for each posted transfer and
timestamps it is ``runtime.inflight``'s: the compute thread itself when it is idle and nothing else
is in flight (one wake-up per message, as raw send/recv), else a receiver and a sender thread it
lends them to, so transfers overlap the sub-models and each end is timestamped when it happens; with
an emulated link latency and no netem (``cfg.delays_s``) the sender sleeps the latency and posts the
send itself.

Steps follow one global order (round, then the segments' topological order) and each thread keeps
it, so this never deadlocks (``runtime.rounds``). Every message, those of a sum combine's gathers and
scatters included, is a point-to-point send over the run's gloo group (``Wire``; NCCL between two GPU
ends).
"""

from __future__ import annotations

import collections
import functools
import gc
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

import numpy as np
import torch

from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.executor import (ORT_CPU, TORCH_CUDA, Executor, Host, SegmentSpec, Staged, as_numpy,
                                       choose_backend, make_executor)
from hetsplit.runtime.inflight import InFlight, MessageLog, Shared, Stop
from hetsplit.runtime.manifest import Edge, Manifest, TensorSpec
from hetsplit.runtime.rounds import frees_after, lookahead, rounds, segment_lags
from hetsplit.runtime.wire import HostViews, Wire, connect, host_tensor


class HostView(Mapping[str, Any]):
    """A rank's tensors, each brought to host memory when read (for a GPU rank's gloo messages)."""

    def __init__(self, local: Mapping[str, Any]):
        self.local = local

    def __getitem__(self, name: str) -> np.ndarray:
        return as_numpy(self.local[name])

    def __iter__(self) -> Iterator[str]:
        return iter(self.local)

    def __len__(self) -> int:
        return len(self.local)


class DeviceView(Mapping[str, Any]):
    """A GPU rank's tensors as NCCL sends them: a ``Staged`` output's device tensor (its host copy if it
    kept none)."""

    def __init__(self, local: Mapping[str, Any]):
        self.local = local

    def __getitem__(self, name: str) -> Any:
        x = self.local[name]
        return (x.device if x.device is not None else x.host) if isinstance(x, Staged) else x

    def __iter__(self) -> Iterator[str]:
        return iter(self.local)

    def __len__(self) -> int:
        return len(self.local)


Entry = tuple[np.ndarray, list, list]   # a pooled buffer, as made once: (the array, the one-tensor list a
#                                         gloo post takes, the free stack it goes back to)


MAX_RETIRED_FRAMES = 8    # inputs' buffers waiting for their sends before the compute thread waits for them


class BufferPool:
    """Host receive buffers reused across inputs (fresh ones cost page faults on every message), the
    most recently freed first: the fewer distinct buffers a stream cycles through, the warmer the caches
    its copies land in (raw gloo cycling 5 buffers instead of 2 is ~9% slower per 1 MB hop here). The
    compute thread takes them and, once an input is computed, ``retire``s its frame (the buffers it
    received into); a frame comes back for reuse once the sender has finished every send submitted up to
    then (``recycle``), since a send may relay a received buffer. Each shape and dtype has one free stack,
    made once (``stack``): a message's receive keeps its stacks, so taking a buffer looks nothing up. A
    buffer is an ``Entry`` made once: with its torch view for the transport (``HostViews``) and its stack,
    so neither taking nor giving it back makes anything."""

    def __init__(self, views: HostViews, allocate: Callable[[TensorSpec], np.ndarray] = TensorSpec.empty) -> None:
        self.views = views                  # each buffer's tensor for the transport, made once
        self.allocate = allocate            # a GPU rank's are page-locked (``runtime.gpu.pinned_empty``)
        self.free: dict[tuple, list[Entry]] = {}    # (shape, dtype) -> its free buffers
        self.taken: list[Entry] = []                # the current frame
        self.retired: collections.deque[tuple[int, list[Entry], Callable[[], bool] | None]] = collections.deque()
        self.fence: Callable[[], Callable[[], bool]] | None = None   # a GPU rank's: whether the device has
        #   done the work queued up to now (its asynchronous copies from these buffers included)

    def stack(self, spec: TensorSpec) -> list[Entry]:
        """The free buffers of ``spec``'s shape and dtype: one list, made once."""
        key = (spec.shape, spec.dtype)
        stack = self.free.get(key)
        if stack is None:
            stack = self.free[key] = []
        return stack

    def new(self, spec: TensorSpec, stack: list[Entry]) -> Entry:
        """A buffer allocated for ``spec`` (``stack``: its free stack), registered with its view."""
        a = self.views.add(self.allocate(spec))
        return a, self.views.listed(a), stack

    def empty(self, spec: TensorSpec) -> np.ndarray:
        """A buffer for ``spec`` (only the compute thread takes them), recorded in the current frame."""
        stack = self.stack(spec)
        entry = stack.pop() if stack else self.new(spec, stack)
        self.taken.append(entry)
        return entry[0]

    def frame(self) -> list[Entry]:
        """Start recording the buffers taken from now on (one input's); the list they go into."""
        self.taken = []
        return self.taken

    def retire(self, frame: list[Entry], sends_submitted: int) -> None:
        """``frame`` is computed on; it is free once the first ``sends_submitted`` sends are done (and,
        with a ``fence``, once the device has read it)."""
        self.retired.append((sends_submitted, frame, self.fence() if self.fence is not None else None))

    def recycle(self, sends_done: int) -> None:
        """Take back every retired frame whose sends are done (``sends_done`` completed so far) and whose
        fence, if any, has passed; never waits (a buffer still in use makes the pool allocate another; past
        ``MAX_RETIRED_FRAMES`` frames waiting, the step loop waits for the sender instead)."""
        retired = self.retired
        while retired and retired[0][0] <= sends_done:
            fence = retired[0][2]
            if fence is not None and not fence():
                break
            for entry in retired.popleft()[1]:
                entry[2].append(entry)


class Inbox:
    """One message as this rank receives it, worked out once: its edge, log, the names its tensors get
    here (``name``: the one name of a one-tensor message) and, over gloo into host buffers, per tensor
    its pool stack, spec and tag (``one``: those of a one-tensor message), so ``post`` takes its buffers
    and posts its receives looking nothing up."""

    __slots__ = ("mid", "edge", "log", "names", "name", "slots", "one", "rank", "recv", "pool", "io")

    def __init__(self, io: "Transfers", mid: int, log: MessageLog):
        edge = io.peer(mid, True)
        self.mid, self.edge, self.log, self.io, self.pool = mid, edge, log, io, io.pool
        self.names = [t.spec.name for t in io.m.message(mid).tensors]
        self.name = self.names[0] if len(self.names) == 1 else None
        self.rank, self.recv = edge.rank, io.wire.pg.recv
        self.slots = None if io.wire.on_gpu(edge) else \
            [(io.pool.stack(t), t, edge.tag + k) for k, t in enumerate(edge.tensors)]
        self.one = self.slots[0] if self.slots is not None and len(self.slots) == 1 else None

    def post(self) -> tuple[list, Any]:
        """Post this message's receive: its works, and what they fill (the buffer of a one-tensor message,
        else the list of its buffers)."""
        if self.one is not None:                  # the common case, in line
            stack, spec, tag = self.one
            entry = stack.pop() if stack else self.pool.new(spec, stack)
            self.pool.taken.append(entry)
            try:
                return [self.recv(entry[1], self.rank, tag)], entry[0]
            except RuntimeError as exc:
                raise self.io.wire.failure(self.edge.peer, False, exc) from None
        if self.slots is None:
            works, got = self.io.post_recv(self.mid)
            return works, got[self.mid][0] if self.name is not None else got[self.mid]
        pool, recv, rank = self.pool, self.recv, self.rank
        taken = pool.taken
        bufs, works = [], []
        try:
            for stack, spec, tag in self.slots:
                entry = stack.pop() if stack else pool.new(spec, stack)
                taken.append(entry)
                bufs.append(entry[0])
                works.append(recv(entry[1], rank, tag))
        except RuntimeError as exc:
            raise self.io.wire.failure(self.edge.peer, False, exc) from None
        return works, bufs


class Outbox:
    """One message as this rank sends it, worked out once: its edge, log, emulated latency and, over gloo
    from host arrays with no cut to make, the names of the tensors it sends and their tags (``one``: those
    of a one-tensor message)."""

    __slots__ = ("mid", "edge", "log", "delay_s", "sources", "one", "rank", "send", "known", "io")

    def __init__(self, io: "Transfers", mid: int, log: MessageLog, delay_s: float):
        edge = io.peer(mid, False)
        self.mid, self.edge, self.log, self.delay_s, self.io = mid, edge, log, delay_s, io
        tensors = io.m.message(mid).tensors
        plain = not io.wire.on_gpu(edge) and io.host_only() and all(t.take is None for t in tensors)
        self.sources = [(t.source, edge.tag + k) for k, t in enumerate(tensors)] if plain else None
        self.one = self.sources[0] if self.sources is not None and len(self.sources) == 1 else None
        self.rank, self.send, self.known = edge.rank, io.wire.pg.send, io.wire.views.known

    def post(self, local: Mapping[str, Any]) -> tuple[list, Any]:
        """Post this message from the tensors in ``local``: its works, and what they read (kept alive)."""
        if self.one is not None:                  # the common case, in line (``HostViews.listed``)
            name, tag = self.one
            a = local[name]
            view = self.known.get(id(a))
            try:
                return [self.send(view[2] if view is not None and view[0] is a else [host_tensor(a)], self.rank,
                                  tag)], a
            except RuntimeError as exc:
                raise self.io.wire.failure(self.edge.peer, True, exc) from None
        if self.sources is None:
            return self.io.post_send(self.mid, local)
        send, listed, rank = self.send, self.io.wire.views.listed, self.rank
        arrays, works = [], []
        try:
            for name, tag in self.sources:
                a = local[name]
                arrays.append(a)
                works.append(send(listed(a), rank, tag))
        except RuntimeError as exc:
            raise self.io.wire.failure(self.edge.peer, True, exc) from None
        return works, arrays


class Transfers:
    """Posting one rank's messages on the Wire, each by its id; a transport error becomes a LinkFailure
    naming the peer. (The step loop posts through each message's ``Inbox`` or ``Outbox``, made once;
    these are their general case: NCCL, a GPU rank's tensors, a sender's cut.)"""

    def __init__(self, manifest: Manifest, rank: int, wire: Wire, pool: BufferPool, staged: bool = False):
        self.m, self.rank, self.wire, self.pool = manifest, rank, wire, pool
        self.staged = staged      # its tensors may be GPU tensors or ``Staged`` outputs, not host arrays
        self.edges: dict[tuple[int, bool], Edge] = {}   # made once per message, not per input

    def peer(self, mid: int, receiving: bool) -> Edge:
        """Message ``mid``'s edge as this end sees it (its failures name the peer)."""
        edge = self.edges.get((mid, receiving))
        if edge is None:
            edge = self.edges[mid, receiving] = self.m.message(mid).edge(not receiving)
        return edge

    def post_recv(self, mid: int) -> tuple[list, dict[int, list]]:
        """Post message ``mid``'s receive; its works and the buffers they fill, by message id."""
        edge = self.peer(mid, True)
        bufs = self.wire.empty(edge) if self.wire.on_gpu(edge) else [self.pool.empty(t) for t in edge.tensors]
        return self.wire.post(edge, bufs, sending=False), {mid: bufs}

    def post_send(self, mid: int, local: Mapping[str, Any]) -> tuple[list, Any]:
        """Post message ``mid`` from the tensors in ``local``; its works and the arrays they read."""
        edge = self.peer(mid, False)
        nccl = self.wire.on_gpu(edge)
        arrays = self.m.message(mid).arrays((DeviceView(local) if self.staged else local) if nccl else self.host(local))
        return self.wire.post(edge, arrays, sending=True), arrays

    def host_only(self) -> bool:
        """Whether this rank's tensors are host arrays as they are (no GPU tensors to bring over)."""
        return self.wire.nccl is None and not self.staged

    def host(self, local: Mapping[str, Any]) -> Mapping[str, Any]:
        return local if self.host_only() else HostView(local)

    def delay_s(self, cfg: RunConfig, mid: int) -> float:
        """The link latency this rank's sender sleeps before posting ``mid`` (emulation without netem)."""
        return cfg.delay(self.rank, self.m.message(mid).dst_rank)


def still_read(manifest: Manifest, rank: int) -> list[frozenset[str]]:
    """Per segment of rank ``rank``: the tensors a later segment of it reads or sends, all an input must
    still hold here once that segment has run (the rest is dropped: a worker that lags works on many
    inputs at once, and each would otherwise keep every tensor it made until its last segment)."""
    later: set[str] = set()
    out = []
    for seg in reversed(manifest.worker(rank).segments):
        out.append(frozenset(later))
        later |= {t.name for t in seg.inputs}
        later |= {t.source for mid in seg.send for t in manifest.message(mid).tensors}
    return out[::-1]


def output_routes(manifest: Manifest, rank: int, over_nccl: Callable[[Edge], bool]) -> tuple[set[str], set[str]]:
    """Where rank ``rank``'s outputs go (``Executor.route``): those that stay on its device (a segment
    here reads them, or a message over NCCL sends them whole) and those copied to host memory (a message
    over gloo, to another device or the driver, sends them, or NCCL sends a slice of them)."""
    device = {t.name for seg in manifest.worker(rank).segments for t in seg.inputs}
    host: set[str] = set()
    for m in manifest.sent_by(rank):
        nccl = over_nccl(m.edge(True))
        for t in m.tensors:
            (device if nccl and t.take is None else host).add(t.source)
    return device, host


def dropped_after(manifest: Manifest, rank: int) -> list[tuple[str, ...]]:
    """Per segment of rank ``rank``: the tensors an input holds here once that segment has run (those it
    received up to then and the segments' outputs) that no later segment reads or sends (``still_read``),
    worked out once at load so that a step drops them without looking at the others."""
    held: set[str] = set()
    out = []
    for seg, keep in zip(manifest.worker(rank).segments, still_read(manifest, rank)):
        held |= {t.spec.name for mid in seg.recv for t in manifest.message(mid).tensors}
        if seg.submodel:
            held |= {t.name for t in seg.outputs}
        drop = tuple(sorted(held - keep))
        held -= set(drop)
        out.append(drop)
    return out


class Segments:
    """The compute thread's segment calls, prepared at load: per segment its executor's ``call`` (None:
    nothing to compute) and the tensors an input drops after it (``dropped_after``); ``run`` makes and
    times one call, as the worker does for every step (``bench/segment_cost.py --per-call`` measures it
    against the executor alone)."""

    def __init__(self, exes: list[Executor | None], drops: list[tuple[str, ...]], inputs: int):
        self.calls = [exe.call if exe is not None else None for exe in exes]
        self.drops = drops
        self.compute = [0.0] * inputs                 # per input: wall time in its sub-models here
        self.per_segment: list[list[float]] = [[] for _ in range(inputs)]
        self.cpu = 0.0             # this thread's CPU inside the sub-models (all of it with one compute thread)
        self.ended = 0.0           # when the last call ended

    def run(self, i: int, s: int, local: dict[str, Any]) -> float:
        """Segment ``s`` on input ``i``'s tensors ``local`` (its outputs added there); when it started."""
        call = self.calls[s]
        t1, c1 = time.time(), time.thread_time()
        if call is not None:
            call(local)
        self.ended = t2 = time.time()
        self.cpu += time.thread_time() - c1
        self.compute[i] += t2 - t1
        self.per_segment[i].append(t2 - t1)
        return t1

    def drop(self, s: int, local: dict[str, Any]) -> None:
        """Drop what input ``local`` no longer needs here once segment ``s`` has run."""
        for name in self.drops[s]:
            del local[name]


class StepLoop:
    """The compute thread's loop over its (input, segment) steps, round by round (see the module doc):
    receives posted ``ahead`` rounds ahead, each step's messages taken, its sub-model run, its sends
    posted, the round's receive buffers retired once its inputs are done here. Made from the manifest and
    the rank's ``Transfers`` (its Wire and BufferPool) alone, so a bench can run it on a free transport
    (``bench/hop_bookkeeping.py``). Everything a step needs is worked out here, once: per message its
    ``Inbox`` or ``Outbox`` (edge, log, buffers' stacks, tags, latency), per step its input, call,
    messages, drops and whether it is the input's first or last here, per round the receives it posts
    and the rounds whose buffers it retires (``schedule``); the loop itself looks nothing up by name or id."""

    def __init__(self, manifest: Manifest, rank: int, io: Transfers, steps: Segments, cfg: RunConfig):
        w = manifest.worker(rank)
        self.m, self.rank, self.io, self.steps, self.cfg = manifest, rank, io, steps, cfg
        msgs = manifest.messages
        self.rx_logs = {mid: MessageLog(mid, msgs[mid].src, msgs[mid].nbytes) for s in w.segments for mid in s.recv}
        self.tx_logs = {mid: MessageLog(mid, msgs[mid].dst, msgs[mid].nbytes) for s in w.segments for mid in s.send}
        self.shared = Shared()
        self.flight = InFlight(io.wire, self.shared, idle=io.pool.recycle)
        lags = segment_lags(manifest)
        self.plan = rounds([lags[rank, s.index] for s in w.segments], cfg.inputs, cfg.latency_inputs)
        self.ahead = lookahead(manifest, lags, max(1, cfg.depth))
        self.idle = [0.0] * cfg.inputs       # per input: time its steps waited for their messages here
        # the latency inputs come one round each, first (``rounds``): the stream starts at that round
        latency = min(cfg.latency_inputs, cfg.inputs)
        self.stream_round = latency if latency < len(self.plan) else -1
        self.stream_cpu0: float | None = None   # the process's CPU time when the stream started here
        self.stream_compute_cpu0 = 0.0          # ... and the compute thread's inside its sub-models
        inboxes = {mid: Inbox(io, mid, log) for mid, log in self.rx_logs.items()}
        outboxes = {mid: Outbox(io, mid, log, io.delay_s(cfg, mid)) for mid, log in self.tx_logs.items()}
        last = len(w.segments) - 1
        self.segments = [(steps.calls[s.index], tuple(inboxes[m] for m in s.recv), tuple(outboxes[m] for m in s.send),
                          steps.drops[s.index], s.index == last) for s in w.segments]
        shapes: dict[tuple[int, ...], tuple[Inbox, ...]] = {}   # rounds alike share one tuple
        self.posts = [shapes.setdefault(key, tuple(box for j in key for box in self.segments[j][1]))
                      for key in (tuple(j for _, j in steps_) for steps_ in self.plan)]
        self.schedule = self.make_schedule(frees_after(self.plan))

    def make_schedule(self, frees: list[int]) -> list[tuple[tuple, int, tuple[int, ...], bool]]:
        """Per round: its steps (input, segment, whether it computes, inboxes, outboxes, drops, the input's
        first step here, its last, the buffers it frees early: ``early_frees``), the round whose receives
        it posts once its first step has taken its messages (-1: none), the rounds whose buffers it retires
        once done (their inputs are done here), in order, and whether it then takes back the buffers whose
        sends are done: unless the next round's first step is an idle take (it has messages and nothing to
        compute), which does so anyway."""
        n, retire, k = len(self.plan), [], 0
        for r in range(n):           # a round's buffers are retired after the round that frees them, in order
            done = []
            while k <= r and frees[k] <= r:
                done.append(k)
                k += 1
            retire.append(tuple(done))
        steps = []
        for r, steps_ in enumerate(self.plan):    # a round retired at its own end frees nothing earlier
            early = self.early_frees(steps_) if frees[r] > r else [()] * len(steps_)
            steps.append(tuple((i, s, call is not None, inboxes, outboxes, drops, s == 0, last, free)
                               for (i, s), free in zip(steps_, early)
                               for call, inboxes, outboxes, drops, last in (self.segments[s],)))
        idle_next = [bool(st[0][3]) and not st[0][2] for st in steps[1:]] + [False]
        return [(steps[r], r + self.ahead if r + self.ahead < n else -1, retire[r], bool(retire[r]) and not idle_next[r])
                for r in range(n)]

    def early_frees(self, round_steps: list[tuple[int, int]]) -> list[tuple[int, ...]]:
        """Per step of a round: where in the round's frame (its pooled receive buffers, in the order the
        round posts them) lie the buffers the step received and its input no longer holds once it has run
        (dropped after it, or its last step here). A round whose inputs stay here for rounds to come
        (a mapping's lagging steps) frees these at its end, not with the round: else a worker that works on
        many inputs at once keeps every buffer it received for each of them (3.4 GB per worker for
        MobileBERT's 62-segment mapping over 60 inputs), and writes each message into fresh pages."""
        out, at = [], 0
        for _, s in round_steps:
            _, inboxes, _, drops, last = self.segments[s]
            mine = []
            for box in inboxes:
                if box.slots is None:        # over NCCL into device buffers: none pooled
                    continue
                mine += [at + k for k, name in enumerate(box.names) if last or name in drops]
                at += len(box.slots)
            out.append(tuple(mine))
        return out

    def run(self, inject: Callable[[str], None] | None = None) -> None:
        """Run every step (a failure is in ``shared.error``, the helpers ended); ``inject`` rehearses
        ``cfg.faults``' fault for this rank."""
        flight, shared, steps, pool, posts, idle = self.flight, self.shared, self.steps, self.io.pool, self.posts, \
            self.idle
        expect, take, sent, lend, settle = flight.expect, flight.take, flight.sent, flight.lend, flight.settle
        retire, recycle, run_segment = pool.retire, pool.recycle, steps.run
        clock = time.time
        per_segment = steps.per_segment
        frames: list[Any] = [None] * len(self.plan)   # per round, its frame while its buffers are taken

        def post_receives(r: int) -> float:
            """Post round ``r``'s receives (together: one stamp for all); when they were posted."""
            frames[r] = pool.taken = []           # the buffers they take: round ``r``'s frame
            now = clock()
            for box in posts[r]:
                works, bufs = box.post()
                box.log.start.append(now)
                expect(works, box.edge, bufs, box.log)
            return now

        flight.start()
        locals_: dict[int, dict[str, Any]] = {}   # each input's tensors here that a later segment still reads
        freed: list[Entry] = []     # this round's buffers its steps no longer hold (``early_frees``)
        partial: set[int] = set()   # rounds some of whose buffers went early (None in their frame)
        try:
            fault = self.cfg.faults.get(str(self.rank))
            after = int(fault.get("after", 0)) if fault and inject is not None else -1
            stream_round = self.stream_round
            for r in range(min(len(self.plan), self.ahead)):
                post_receives(r)
            for r, (round_steps, post_next, retired, recycling) in enumerate(self.schedule):
                if r == after and fault is not None and inject is not None:
                    inject(fault["kind"])
                if r == stream_round:
                    self.stream_cpu0, self.stream_compute_cpu0 = time.process_time(), steps.cpu
                for i, s, computing, inboxes, outboxes, drops, first, last, early in round_steps:
                    if first:
                        local: dict[str, Any] = {}
                        if not last:
                            locals_[i] = local
                    else:
                        local = locals_[i]
                    t0 = clock()
                    for box in inboxes:
                        if box.name is not None:
                            local[box.name] = take(computing)
                        else:
                            local.update(zip(box.names, take(computing)))
                    stamp = 0.0      # the last clock reading, when nothing was done since (0: none)
                    if post_next >= 0:          # the round's first step: post round r + ahead's receives
                        stamp = post_receives(post_next)
                        post_next = -1
                    if computing:
                        lend()     # what lands or leaves while the sub-model runs is timestamped when it does
                        t1 = run_segment(i, s, local)
                        stamp = steps.ended
                    else:
                        t1 = stamp = stamp or clock()
                        per_segment[i].append(0.0)
                    for out in outboxes:
                        out.log.start.append(stamp or clock())
                        stamp = 0.0
                        if out.delay_s > 0:
                            flight.send_later(functools.partial(out.post, dict(local)), out.delay_s,
                                              out.edge, out.log)
                        else:
                            works, keep = out.post(local)
                            sent(works, out.edge, out.log, keep)
                    if shared.error is not None:     # another thread failed (read, not called: per step)
                        raise Stop()
                    idle[i] += t1 - t0
                    if last:
                        if not first:
                            del locals_[i]
                    else:
                        for name in drops:
                            del local[name]
                    if early:
                        freed += release(frames[r], early, () if last else local.values())
                for k in retired:            # its inputs are done here: their buffers free once sent
                    retire([e for e in frames[k] if e is not None] if k in partial else frames[k], flight.posted_sends)
                    frames[k] = None
                if freed:                    # what this round's steps no longer hold: free once sent
                    partial.add(r)
                    retire(freed, flight.posted_sends)
                    freed = []
                if recycling:
                    recycle(settle())
                if len(pool.retired) > MAX_RETIRED_FRAMES:      # the sender fell behind: wait, not allocate
                    recycle(flight.drain_sends(pool.retired[0][0]))
            flight.finish()
        except Stop:
            pass
        except BaseException as exc:  # noqa: BLE001
            shared.fail(exc)
        flight.close()
        flight.join()           # at once after a failure, which is reported at once


def release(frame: list, early: tuple[int, ...], held: Iterable[Any]) -> list[Entry]:
    """The buffers at ``early`` in ``frame`` that nothing of ``held`` (what the input still holds here)
    shares memory with (an output may view its input), each taken out of the frame (None in its place);
    none while ``held`` has a host tensor that cannot be looked at as an array."""
    arrays = host_arrays(held)
    if arrays is None:
        return []
    out = []
    for k in early:
        entry = frame[k]
        if not any(np.may_share_memory(entry[0], a) for a in arrays):
            frame[k] = None
            out.append(entry)
    return out


def host_arrays(held: Iterable[Any]) -> list[np.ndarray] | None:
    """The host memory of ``held``: its arrays, and its CPU torch tensors as arrays (None if one cannot be
    seen as one); GPU tensors and staged outputs hold no host buffer."""
    out = []
    for a in held:
        if isinstance(a, np.ndarray):
            out.append(a)
        elif isinstance(a, torch.Tensor) and a.device.type == "cpu":
            try:
                out.append(a.detach().numpy())
            except (TypeError, RuntimeError):
                return None
    return out


def load_executors(cfg: RunConfig, manifest: Manifest, rank: int, backend: str) -> list[Executor | None]:
    """An executor on ``backend`` per segment of rank ``rank`` (None: nothing to compute), each run once
    on zeros (first-run allocations are not measured)."""
    w = manifest.worker(rank)
    threads = int(cfg.threads.get(w.device, 1))
    exes: list[Executor | None] = []
    for s in w.segments:
        exe = make_executor(backend, manifest.submodel_path(rank, s.index), SegmentSpec.of(w.device, s), threads) \
            if s.submodel else None
        if exe is not None:
            exe.run({t.name: np.zeros(t.shape, t.dtype) for t in s.inputs})
        exes.append(exe)
    return exes


def run_worker(cfg: RunConfig, manifest: Manifest, rank: int, run_dir: Path, host: Host | None = None) -> dict:
    """Run device ``rank``'s segments for every input; its measurements for ``rank<R>.json``."""
    from hetsplit.runtime.cpu_throttle import join_group, release_group
    from hetsplit.runtime.nccl import NcclLinks, gpu_ranks, nccl_pairs, use_gpu_of
    from hetsplit.runtime.process import energy_meter, inject

    w = manifest.worker(rank)
    backend = choose_backend(cfg.kinds.get(w.device, "cpu"), host or Host.here(), cfg.cpu_only)
    on_gpu = backend != ORT_CPU
    if on_gpu:
        use_gpu_of(rank)
    exes = load_executors(cfg, manifest, rank, backend)
    wire = connect(cfg, manifest.world_size, w.device, rank, run_dir)
    gpus = gpu_ranks(wire.store, rank, manifest.world_size, on_gpu)
    # every GPU rank works out the same pairs, so all of them open the NCCL group or none does
    if rank in gpus and (pairs := nccl_pairs(manifest, gpus, cfg.inputs, cfg.latency_inputs)):
        wire.nccl = NcclLinks.open(wire.store, rank, gpus, cfg.timeout_s, w.device, pairs)
    wire.handshake(w.recv, w.send)
    join_group(cfg.cgroups.get(str(rank)))
    allocate: Callable[[TensorSpec], np.ndarray] = TensorSpec.empty
    if on_gpu:   # page-locked receive buffers where CUDA is: their copies to the GPU run at the bus's speed
        from hetsplit.runtime.gpu import host_allocator
        allocate = host_allocator()
    pool = BufferPool(wire.views, allocate)
    io = Transfers(manifest, rank, wire, pool, staged=backend == TORCH_CUDA)
    device_out, host_out = output_routes(manifest, rank, wire.on_gpu)
    for exe in exes:   # what a segment here reads or NCCL sends stays on the device; the rest goes to the host
        if exe is not None:
            exe.route(device_out, host_out)
            if backend == TORCH_CUDA:
                from hetsplit.runtime.gpu import TorchExecutor

                assert isinstance(exe, TorchExecutor)
                exe.host_tensor = wire.views.tensor   # a pooled receive buffer's tensor, made once
    if backend == TORCH_CUDA:   # its copies from the receive buffers are asynchronous
        from hetsplit.runtime.gpu import pool_fence
        pool.fence = pool_fence()
    steps = Segments(exes, dropped_after(manifest, rank), cfg.inputs)
    loop = StepLoop(manifest, rank, io, steps, cfg)
    meter = energy_meter("gpu" if on_gpu else "cpu")
    meter.start()
    gc.freeze()   # the stream's garbage is young: a full collection would walk the ~180k start-up objects
    #               of torch and onnxruntime (~40 ms)
    wire.ready(manifest.names)      # the driver sends the first input once every worker is here
    cpu0 = time.process_time()
    loop.run(inject)
    release_group(cfg.cgroups.get(str(rank)))     # the stream is done: what follows runs at full speed
    gc.unfreeze()           # a warm process collects what this run left before its next job
    if loop.shared.error is not None:
        raise loop.shared.error
    cpu_end = time.process_time()
    cpu = cpu_end - cpu0
    stream_cpu = cpu_end - loop.stream_cpu0 if loop.stream_cpu0 is not None else None
    stream_compute_cpu = steps.cpu - loop.stream_compute_cpu0 if loop.stream_cpu0 is not None else None
    energy = meter.stop()
    return {"compute_s": steps.compute, "idle_s": loop.idle, "segment_compute_s": steps.per_segment,
            "threads": int(cfg.threads.get(w.device, 1)), "kind": "gpu" if on_gpu else "cpu", "executor": backend,
            "process_cpu_s": cpu, "stream_cpu_s": stream_cpu, "stream_compute_cpu_s": stream_compute_cpu,
            "stream_inputs": cfg.inputs - min(cfg.latency_inputs, cfg.inputs), "compute_cpu_s": steps.cpu, "energy_j": energy,
            "energy_meter": meter.name if energy is not None else meter.reason,
            "recv": [log.to_dict() for log in loop.rx_logs.values()],
            "send": [log.to_dict() for log in loop.tx_logs.values()]}

