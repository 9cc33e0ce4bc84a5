"""A split's segments timed one by one in this process, each through the executor call the runtime makes.

``time_segments(manifest, ...)`` loads every segment's sub-model into the executor a worker would give it
on this host's CPU (``executor.make_executor``, onnxruntime, the worker's thread count) and passes one
input through the whole split in one process: the driver's messages first, then each device's segments in
order, each run as soon as the messages it receives have been sent, its own sends delivered after it
(``Message.arrays``: what a worker puts on the wire). Every call on a device in ``measure`` is timed alone
(``Executor.call``, as ``worker.Segments.run`` times it), over ``warmup + repeats`` passes; a segment's
figure is its median. The passes hand real tensors from segment to segment, so every sub-model computes
what it would in a run, without processes, messages or other devices computing at the same time (a
caller that wants the load of the run's other workers keeps other cores busy, ``CoLoad``).
Used by ``hetsplit profile`` (a model cut into 1, 2, 4, 8 segments: what a segment costs a CPU beyond its
layers) and ``hetsplit plan --refine`` (the finalists' own segments).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hetsplit.errors import RuntimeFailure
from hetsplit.runtime.inputs import make_inputs
from hetsplit.runtime.executor import ORT_CPU, Executor, SegmentSpec, make_executor
from hetsplit.runtime.manifest import Manifest

STATISTICS: dict[str, Callable[[list[float]], float]] = {"median": lambda v: float(np.median(v)),
                                                        "min": lambda v: float(np.min(v))}


@dataclass(frozen=True)
class SegmentTime:
    """One segment's measured call: its device, its index there, its tasks, the bytes of its inputs and
    outputs (what crosses its boundary) and its median seconds per call (NaN: not measured)."""

    device: str
    index: int
    tasks: tuple[str, ...]
    boundary_bytes: float
    seconds: float
    calls: int


def load_segment_executors(manifest: Manifest, threads: int = 1) -> dict[tuple[int, int], Executor]:
    """Per (rank, segment) that computes something: its onnxruntime CPU executor, as a worker loads it."""
    exes: dict[tuple[int, int], Executor] = {}
    for w in manifest.stages:
        for s in w.segments:
            if s.submodel:
                exes[(w.rank, s.index)] = make_executor(ORT_CPU, manifest.submodel_path(w.rank, s.index),
                                                        SegmentSpec.of(w.device, s), threads)
    return exes


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.thread_time}


def one_pass(manifest: Manifest, exes: dict[tuple[int, int], Executor], feeds: dict[str, np.ndarray],
             timed: Collection[str], clock: Callable[[], float] = time.perf_counter,
             driver: dict[str, Any] | None = None) -> dict[tuple[int, int], float]:
    """One input through every segment in a dataflow order; seconds of each call on a ``timed`` device
    (by ``clock``). ``driver``, when given, ends up holding the driver's tensors: the feeds and the model
    outputs sent back to it."""
    local: dict[int, dict[str, Any]] = {w.rank: {} for w in manifest.workers}
    if driver is not None:
        local[0] = driver
    local[0].update(feeds)
    sent: set[int] = set()

    def deliver(mid: int) -> None:
        m = manifest.message(mid)
        local[m.dst_rank].update(zip((t.spec.name for t in m.tensors), m.arrays(local[m.src_rank])))
        sent.add(mid)

    for m in manifest.sent_by(0):
        deliver(m.id)
    nxt = {w.rank: 0 for w in manifest.stages}
    took: dict[tuple[int, int], float] = {}
    left = sum(len(w.segments) for w in manifest.stages)
    while left:
        progressed = False
        for w in manifest.stages:
            while nxt[w.rank] < len(w.segments) and set(w.segments[nxt[w.rank]].recv) <= sent:
                s = w.segments[nxt[w.rank]]
                exe = exes.get((w.rank, s.index))
                t0 = clock()
                if exe is not None:
                    exe.call(local[w.rank])
                if w.device in timed:                  # a segment with nothing to compute makes no call: 0
                    took[(w.rank, s.index)] = clock() - t0 if exe is not None else 0.0
                for mid in s.send:
                    deliver(mid)
                nxt[w.rank] += 1
                left -= 1
                progressed = True
        if not progressed:
            stuck = [f"{w.device} segment {nxt[w.rank]}" for w in manifest.stages if nxt[w.rank] < len(w.segments)]
            raise RuntimeFailure(f"timing the split's segments: no segment can run ({', '.join(stuck)} wait for "
                                 "messages no segment sends)")
    return took


@dataclass(frozen=True)
class Timing:
    """How calls are timed: ``threads`` per executor, the ``clock`` ("wall", or "cpu" with one thread:
    onnxruntime then computes in the calling thread, and this thread's CPU time leaves out the time other
    processes held the core), the ``statistic`` over ``repeats`` passes (median or min) after ``warmup``."""

    threads: int = 1
    clock: str = "wall"
    statistic: str = "median"
    repeats: int = 5
    warmup: int = 1

    def __post_init__(self) -> None:
        if self.repeats < 1 or self.warmup < 0:
            raise RuntimeFailure(f"timing segments needs repeats >= 1 and warmup >= 0, got {self.repeats} and "
                                 f"{self.warmup}")
        if self.clock not in CLOCKS or (self.clock == "cpu" and self.threads != 1):
            raise RuntimeFailure(f"timing segments by clock {self.clock!r} with {self.threads} thread(s): the clock "
                                 "is wall, or cpu with one thread")
        if self.statistic not in STATISTICS:
            raise RuntimeFailure(f"timing segments: statistic {self.statistic!r}; choose one of "
                                 f"{', '.join(STATISTICS)}")

    def describe(self) -> str:
        return f"{self.threads} thread(s), {self.statistic} of {self.repeats} by the {self.clock} clock"


DEFAULT_TIMING = Timing()


def time_splits(manifests: Sequence[Manifest], measure: Sequence[Collection[str] | None] | None = None,
                timing: Timing = DEFAULT_TIMING, seed: int = 0) -> list[list[SegmentTime]]:
    """``time_segments`` of several splits at once, their passes interleaved (each round passes one input
    through every split in turn), so that a machine whose load drifts slows them alike rather than whichever
    was timed last. ``measure[i]``: the devices timed in split i (None: all)."""
    measure = list(measure) if measure is not None else [None] * len(manifests)
    timed = [{w.device for w in m.stages} if want is None else set(want) for m, want in zip(manifests, measure)]
    exes = [load_segment_executors(m, timing.threads) for m in manifests]
    feeds = [make_inputs(m.inputs, 1, seed)[0] for m in manifests]
    runs: list[dict[tuple[int, int], list[float]]] = [{} for _ in manifests]
    for k in range(timing.warmup + timing.repeats):
        for i, m in enumerate(manifests):
            took = one_pass(m, exes[i], feeds[i], timed[i], CLOCKS[timing.clock])
            if k >= timing.warmup:
                for key, seconds in took.items():
                    runs[i].setdefault(key, []).append(seconds)
    out: list[list[SegmentTime]] = []
    for m, got_by in zip(manifests, runs):
        rows = []
        for w in m.stages:
            for s in w.segments:
                got = got_by.get((w.rank, s.index), [])
                nbytes = float(sum(t.nbytes for t in s.inputs) + sum(t.nbytes for t in s.outputs))
                rows.append(SegmentTime(w.device, s.index, tuple(s.tasks), nbytes,
                                        float(STATISTICS[timing.statistic](got)) if got else float("nan"), len(got)))
        out.append(rows)
    return out


def time_segments(manifest: Manifest, measure: Collection[str] | None = None, threads: int = 1,
                  repeats: int = 5, warmup: int = 1, seed: int = 0, clock: str = "wall",
                  statistic: str = "median") -> list[SegmentTime]:
    """Every segment of ``manifest`` (worker order, then segment order) with its call time over ``repeats``
    passes after ``warmup`` (``statistic``: median or min, ``clock``: see ``Timing``) when its device is in
    ``measure`` (default: every device), else NaN."""
    return time_splits([manifest], [measure], Timing(threads, clock, statistic, repeats, warmup), seed)[0]
