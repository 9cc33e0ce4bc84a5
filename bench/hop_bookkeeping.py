"""The worker's own Python work per hop: its message loop (``worker.StepLoop``, the one ``run_worker``
runs) on a transport that costs nothing, against raw torch.distributed-style posting on the same one.

A worker relays one message per input: it receives a tensor from the driver and sends it back (a
segment with nothing to compute), receives posted ``depth`` rounds ahead into its pooled buffers,
every end timestamped, exactly as in a run. The transport is a fake process group whose works are done
at once (``wait`` returns), so what is measured is the loop's own bookkeeping: posting, the in-flight
book, logs, buffer pool, rounds. The raw loop makes the same transport calls a program posting its
receives ``depth`` ahead makes (``recv`` posted ahead in a deque, ``wait``, ``send``, ``wait``): the
floor. Blocks of each alternate, in turn going first; per hop = one message received and sent on,
this process's CPU time (median over blocks, with the min and max). ``--computing`` gives the segment a
sub-model that does nothing, so every transfer is lent to the receiver and sender threads, as before a
real sub-model (their hand-offs included).

    python bench/hop_bookkeeping.py                  # 15 blocks of 20000 hops each way
    python bench/hop_bookkeeping.py --computing --blocks 7 --hops 5000
"""

from __future__ import annotations

import argparse
import collections
import gc
import statistics
import sys
import time

import numpy as np


class DoneWork:
    """A work that is done at once."""

    def wait(self, timeout=None) -> bool:
        return True


DONE = DoneWork()


class FreeGroup:
    """A process group whose transfers cost nothing (every post returns a work already done)."""

    def send(self, tensors, rank: int, tag: int) -> DoneWork:
        return DONE

    def recv(self, tensors, rank: int, tag: int) -> DoneWork:
        return DONE


class NoCall:
    """A segment's executor call that computes nothing (``--computing``)."""

    def call(self, local) -> None:
        return None


def relay_manifest(nbytes: int, computing: bool):
    """Driver -> worker ``d`` -> driver: one tensor of ``nbytes`` relayed by one segment."""
    from hetsplit.runtime.manifest import Manifest, Message, Segment, TensorSpec, WireTensor, Worker

    x = TensorSpec("x", (nbytes // 4,), "float32")
    y = TensorSpec("y", (nbytes // 4,), "float32")
    m0 = Message(0, "x", "driver", 0, "d", 1, (WireTensor(x, "x"),), tag=0)
    m1 = Message(1, "y", "d", 1, "driver", 0, (WireTensor(y, "x"),), tag=1)
    seg = Segment(0, ["relay"], "relay.onnx" if computing else None, inputs=[x], outputs=[], recv=[0], send=[1])
    return Manifest("relay", {}, [x], [y], [m0, m1], [], [Worker(0, "driver"), Worker(1, "d", segments=[seg])])


def worker_block(hops: int, nbytes: int, depth: int, computing: bool) -> float:
    """CPU seconds per hop of ``runtime.worker``'s loop relaying ``hops`` messages on a free transport."""
    from hetsplit.runtime.config import RunConfig
    from hetsplit.runtime.wire import Wire
    from hetsplit.runtime.worker import BufferPool, Segments, StepLoop, Transfers, dropped_after

    manifest = relay_manifest(nbytes, computing)
    wire = Wire(FreeGroup(), "d", 60)
    cfg = RunConfig("", inputs=hops, latency_inputs=0, depth=depth)
    io = Transfers(manifest, 1, wire, BufferPool(wire.views))
    steps = Segments([NoCall() if computing else None], dropped_after(manifest, 1), hops)
    loop = StepLoop(manifest, 1, io, steps, cfg)      # what a worker works out at load: not counted
    c0 = time.process_time()
    loop.run()
    cpu = time.process_time() - c0
    if loop.shared.error is not None:
        raise loop.shared.error
    assert len(loop.tx_logs[1].done) == hops
    return cpu / hops


def raw_block(hops: int, nbytes: int, depth: int) -> float:
    """CPU seconds per hop of raw posting on the same transport: receives ``depth`` ahead, each waited
    for, the buffer sent on and waited for."""
    import torch

    pg = FreeGroup()
    bufs = [torch.empty(nbytes // 4) for _ in range(depth + 1)]
    c0 = time.process_time()
    posted = collections.deque(pg.recv([bufs[k]], 0, 0) for k in range(depth))
    for k in range(hops):
        posted.popleft().wait(60)
        if k + depth < hops:
            posted.append(pg.recv([bufs[(k + depth) % len(bufs)]], 0, 0))
        pg.send([bufs[k % len(bufs)]], 0, 1).wait(60)
    return (time.process_time() - c0) / hops


def clock_reads(hops: int, nbytes: int, depth: int, computing: bool) -> tuple[float, float]:
    """The wall-clock reads (``time.time`` and ``time.thread_time``) the loop makes per hop, counted in one
    block, and what one read costs here (a virtual machine without a fast clock pays a system call each)."""
    import timeit

    counts = {"n": 0}
    real = {f: getattr(time, f) for f in ("time", "thread_time")}

    def counted(f):
        def read() -> float:
            counts["n"] += 1
            return f()
        return read

    for name, f in real.items():
        setattr(time, name, counted(f))
    try:
        worker_block(hops, nbytes, depth, computing)
    finally:
        for name, f in real.items():
            setattr(time, name, f)
    cost = min(timeit.repeat(time.time, number=20000, repeat=5)) / 20000
    return counts["n"] / hops, cost


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hops", type=int, default=20000, help="hops per block")
    ap.add_argument("--blocks", type=int, default=15, help="blocks of each way, alternating")
    ap.add_argument("--bytes", type=int, default=1 << 20, help="the relayed tensor's size (never touched)")
    ap.add_argument("--depth", type=int, default=2, help="receives posted ahead (RunConfig.depth)")
    ap.add_argument("--computing", action="store_true", help="lend every transfer as before a sub-model")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    runs = {"worker": lambda: worker_block(args.hops, args.bytes, args.depth, args.computing),
            "raw": lambda: raw_block(args.hops, args.bytes, args.depth)}
    for f in runs.values():   # warm-up
        f()
    gc.freeze()               # as run_worker does before its stream
    got: dict[str, list[float]] = {k: [] for k in runs}
    for b in range(args.blocks):
        for name in (list(runs) if b % 2 == 0 else list(runs)[::-1]):
            got[name].append(runs[name]())
    diff = [w - r for w, r in zip(got["worker"], got["raw"])]
    for name, v in (*got.items(), ("worker - raw", diff)):
        us = np.asarray(v) * 1e6
        print(f"{name:>13}: {statistics.median(us):6.2f} us per hop (min {us.min():.2f}, max {us.max():.2f}; "
              f"{args.blocks} blocks of {args.hops})")
    print(f"per-hop bookkeeping (worker - raw, median of the blocks' own differences): "
          f"{statistics.median(diff) * 1e6:.2f} us{' (computing: every transfer lent)' if args.computing else ''}")
    reads, cost = clock_reads(args.hops, args.bytes, args.depth, args.computing)
    print(f"of which clock reads: {reads:.2f} per hop at {cost * 1e6:.3f} us each here (time.time), "
          f"~{reads * cost * 1e6:.2f} us; the rest {(statistics.median(diff) - reads * cost) * 1e6:.2f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
