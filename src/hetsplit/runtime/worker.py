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
from typing import Any, Callable, Iterator

import numpy as np

from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.executor import (ORT_CPU, TORCH_CUDA, Executor, Host, SegmentSpec, Staged, as_numpy,
                                       choose_backend, make_executor)
from hetsplit.runtime.inflight import InFlight, MessageLog, Shared, Stop
from hetsplit.runtime.manifest import Edge, Manifest, TensorSpec
from hetsplit.runtime.rounds import frees_after, lookahead, rounds, segment_lags
from hetsplit.runtime.wire import HostViews, Wire, connect


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


class BufferPool:
    """Host receive buffers reused across inputs (fresh ones cost page faults on every message), the
    most recently freed first: the fewer distinct buffers a stream cycles through, the warmer the caches
    its copies land in (raw gloo cycling 5 buffers instead of 2 is ~9% slower per 1 MB hop here). The
    compute thread takes them and, once an input is computed, ``retire``s its frame (the buffers it
    received into); a frame comes back for reuse once the sender has finished every send submitted up to
    then (``recycle``), since a send may relay a received buffer."""

    def __init__(self, views: HostViews, allocate: Callable[[TensorSpec], np.ndarray] = TensorSpec.empty) -> None:
        self.views = views                  # each buffer's tensor for the transport, made once
        self.allocate = allocate            # a GPU rank's are page-locked (``runtime.gpu.pinned_empty``)
        self.free: dict[tuple, list[np.ndarray]] = {}
        self.taken: list[tuple[tuple, np.ndarray]] = []
        self.retired: collections.deque[tuple[int, list[tuple[tuple, np.ndarray]], Callable[[], bool] | None]] = \
            collections.deque()
        self.fence: Callable[[], Callable[[], bool]] | None = None   # a GPU rank's: whether the device has
        #   done the work queued up to now (its asynchronous copies from these buffers included)

    def empty(self, spec: TensorSpec) -> np.ndarray:
        """A buffer for ``spec`` (only the compute thread takes them), recorded in the current frame."""
        key = (spec.shape, spec.dtype)
        stack = self.free.get(key)
        a = stack.pop() if stack else self.views.add(self.allocate(spec))
        self.taken.append((key, a))
        return a

    def frame(self) -> list[tuple[tuple, np.ndarray]]:
        """Start recording the buffers taken from now on (one input's); the list they go into."""
        self.taken = []
        return self.taken

    def retire(self, frame: list[tuple[tuple, np.ndarray]], sends_submitted: int) -> None:
        """``frame`` is computed on; it is free once the first ``sends_submitted`` sends are done (and,
        with a ``fence``, once the device has read it)."""
        self.retired.append((sends_submitted, frame, self.fence() if self.fence is not None else None))

    def recycle(self, sends_done: int) -> None:
        """Take back every retired frame whose sends are done (``sends_done`` completed so far) and whose
        fence, if any, has passed; never waits (a buffer still in use makes the pool allocate another)."""
        while self.retired and self.retired[0][0] <= sends_done:
            fence = self.retired[0][2]
            if fence is not None and not fence():
                break
            for key, a in self.retired.popleft()[1]:
                self.free.setdefault(key, []).append(a)


class Transfers:
    """Posting one rank's messages on the Wire, each by its id; a transport error becomes a LinkFailure
    naming the peer."""

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

    def host(self, local: Mapping[str, Any]) -> Mapping[str, Any]:
        return local if self.wire.nccl is None and not self.staged else HostView(local)

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

    def run(self, i: int, s: int, local: dict[str, Any]) -> float:
        """Segment ``s`` on input ``i``'s tensors ``local`` (its outputs added there); when it started."""
        call = self.calls[s]
        t1, c1 = time.time(), time.thread_time()
        if call is not None:
            call(local)
        t2 = time.time()
        self.cpu += time.thread_time() - c1
        self.compute[i] += t2 - t1
        self.per_segment[i].append(t2 - t1)
        return t1

    def drop(self, s: int, local: dict[str, Any]) -> None:
        """Drop what input ``local`` no longer needs here once segment ``s`` has run."""
        for name in self.drops[s]:
            del local[name]


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
    from hetsplit.runtime.cpu_throttle import join_group
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
    recvs = [s.recv for s in w.segments]      # message ids, in the order they are posted and taken
    sends = [s.send for s in w.segments]
    msgs = manifest.messages
    names = {mid: [t.spec.name for t in msgs[mid].tensors] for mid in {m for s in w.segments for m in s.recv}}
    rx_logs = {mid: MessageLog(mid, msgs[mid].src, msgs[mid].nbytes) for s in w.segments for mid in s.recv}
    tx_logs = {mid: MessageLog(mid, msgs[mid].dst, msgs[mid].nbytes) for s in w.segments for mid in s.send}
    shared = Shared()
    flight = InFlight(wire, shared, idle=lambda: pool.recycle(flight.settle()))
    n = cfg.inputs
    lags = segment_lags(manifest)
    plan = rounds([lags[rank, s.index] for s in w.segments], n, cfg.latency_inputs)
    frees = frees_after(plan)
    ahead = lookahead(manifest, lags, max(1, cfg.depth))
    frames: dict[int, list] = {}

    def post_receives(r: int) -> None:
        frames[r] = io.pool.frame()
        for _, j in plan[r]:
            for mid in recvs[j]:
                now = time.time()
                works, got = io.post_recv(mid)
                rx_logs[mid].start.append(now)
                flight.expect(works, io.peer(mid, True), got, [rx_logs[mid]])

    def post_sends(mids: list[int], local: dict[str, Any]) -> None:
        for mid in mids:
            log = tx_logs[mid]
            log.start.append(time.time())
            delay = io.delay_s(cfg, mid)
            if delay > 0:
                view = dict(local)
                flight.send_later(functools.partial(io.post_send, mid, view), delay, io.peer(mid, False), [log])
            else:
                works, keep = io.post_send(mid, local)
                flight.sent(works, io.peer(mid, False), [log], keep)

    meter = energy_meter("gpu" if on_gpu else "cpu")
    meter.start()
    gc.freeze()   # the stream's garbage is young: a full collection would walk the ~180k start-up objects
    #               of torch and onnxruntime (~40 ms)
    flight.start()
    idle = [0.0] * n
    steps = Segments(exes, dropped_after(manifest, rank), n)
    locals_: dict[int, dict[str, Any]] = {}   # each input's tensors here that a later segment still reads
    cpu0 = time.process_time()
    last_segment, next_free = len(w.segments) - 1, 0
    try:
        fault = cfg.faults.get(str(rank))
        for r in range(min(len(plan), ahead)):
            post_receives(r)
        for r, round_steps in enumerate(plan):
            if fault and r == int(fault.get("after", 0)):
                inject(fault["kind"])
            for k, (i, s) in enumerate(round_steps):
                computing = exes[s] is not None
                local = locals_.get(i)
                if local is None:
                    local = locals_[i] = {}
                t0 = time.time()
                for _ in recvs[s]:
                    got = flight.take(computing=computing)
                    for mid, arrays in got.items():
                        local.update(zip(names[mid], arrays))
                if k == 0 and r + ahead < len(plan):
                    post_receives(r + ahead)
                if computing:
                    flight.lend()     # what lands or leaves while the sub-model runs is timestamped when it does
                t1 = steps.run(i, s, local)
                post_sends(sends[s], local)
                if shared.stop.is_set():
                    raise Stop()
                idle[i] += t1 - t0
                if s == last_segment:
                    del locals_[i]
                else:
                    steps.drop(s, local)
            while next_free <= r and frees[next_free] <= r:     # its inputs are done here: free once sent
                io.pool.retire(frames.pop(next_free), flight.posted_sends)
                next_free += 1
            io.pool.recycle(flight.settle())
        flight.finish()
    except Stop:
        pass
    except BaseException as exc:  # noqa: BLE001
        shared.fail(exc)
    flight.close()
    flight.join()           # at once after a failure, which is reported at once
    gc.unfreeze()           # a warm process collects what this run left before its next job
    if shared.error is not None:
        raise shared.error
    cpu = time.process_time() - cpu0
    energy = meter.stop()
    return {"compute_s": steps.compute, "idle_s": idle, "segment_compute_s": steps.per_segment,
            "threads": int(cfg.threads.get(w.device, 1)), "kind": "gpu" if on_gpu else "cpu", "executor": backend,
            "process_cpu_s": cpu, "compute_cpu_s": steps.cpu, "energy_j": energy,
            "energy_meter": meter.name if energy is not None else meter.reason,
            "recv": [log.to_dict() for log in rx_logs.values()], "send": [log.to_dict() for log in tx_logs.values()]}

