"""What raw gloo itself pays, on this host, for posting receives ahead: the posting, or the buffers it cycles.

A worker posts its receives ahead (``RunConfig.depth``) so that transfers land while it computes; that
needs one buffer per posted receive, plus the one in use. ``runtime_overhead.py`` measures hetsplit against
blocking send/recv (each receive posted when needed, into one buffer) and splits the gap in two: raw gloo
posting ahead against blocking, and hetsplit against raw gloo posting the same way. This splits the first
factor again. Two processes ping-pong 1 MB and 10 MB tensors over raw gloo, in blocks that alternate:

- blocking into 1 buffer (the baseline), into 2 and into 3 received into in turn: the cost of cycling
  buffers alone (the caches their copies land in);
- receives posted 1 ahead (2 buffers) and 2 ahead (3 buffers, as the worker posts): cycling and posting.

Each is reported against the baseline as the median of each block's own ratio with a 95% bootstrap interval.

    python bench/gloo_posting.py [--blocks 41]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
from pathlib import Path

import numpy as np

from runtime_overhead import TARGET_ROUNDS, TARGETS, _pingpong_raw, paired_overhead

WAYS = {"blocking, 1 buffer": (0, 1), "blocking, 2 buffers": (0, 2), "blocking, 3 buffers": (0, 3),
        "1 ahead, 2 buffers": (1, 2), "2 ahead, 3 buffers": (2, 3)}   # name: (ahead, buffers cycled)
BASELINE = "blocking, 1 buffer"


def _peer(rank: int, port_q, result_q, blocks: int) -> None:
    """One side: for each target size, ``blocks`` blocks of every way, alternating (each goes first as often)."""
    import torch

    from hetsplit.runtime.wire import open_group, open_store

    torch.set_num_threads(1)
    store = open_store(rank, 2, "127.0.0.1", 0 if rank == 0 else port_q.get(), 60)
    if rank == 0:
        port_q.put(store.port)
    pg = open_group(store, rank, 2, "127.0.0.1", 60)
    out = {}
    for size in TARGETS:
        t = torch.ones(size // 4)
        bufs = [t.new_empty(t.shape) for _ in range(3)]
        rounds = TARGET_ROUNDS[size]
        hop: dict[str, list[float]] = {k: [] for k in WAYS}
        _pingpong_raw(pg, t, rank, 1 - rank, 2, bufs, ahead=0)   # warm-up
        for b in range(blocks):
            for name in (list(WAYS) if b % 2 == 0 else list(WAYS)[::-1]):
                ahead, cycle = WAYS[name]
                hop[name].append(_pingpong_raw(pg, t, rank, 1 - rank, rounds, bufs, ahead, cycle))
        out[size] = hop
    if rank == 0:
        result_q.put(out)


def measure(blocks: int) -> dict[int, dict[str, list[float]]]:
    ctx = mp.get_context("spawn")
    port_q, result_q = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=_peer, args=(r, port_q, result_q, blocks)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        return result_q.get(timeout=600)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=41, help="alternating blocks of each way per size")
    ap.add_argument("--json", default=None, help="write every block's seconds per hop here")
    args = ap.parse_args(argv)
    res = measure(args.blocks)
    for size, hop in res.items():
        base = hop[BASELINE]
        print(f"{size >> 20} MB ({args.blocks} blocks): {BASELINE} {np.median(base) * 1e6:.1f} us per hop")
        for name, v in hop.items():
            if name != BASELINE:
                mid, lo, hi = paired_overhead(v, base)
                print(f"  {name:<20} {np.median(v) * 1e6:8.1f} us  {mid:+6.1%} ({lo:+.1%} .. {hi:+.1%})")
    if args.json:
        Path(args.json).write_text(json.dumps({str(k): v for k, v in res.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
