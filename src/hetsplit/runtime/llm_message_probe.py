"""What one message of the LLM worker program costs on this machine: a probe, not a fit to any run.

Two processes (one torch thread each, as the workers) join a gloo group over loopback and pass a
hidden-state-sized float32 tensor back and forth through the same ``runtime.wire.Wire`` calls the worker
makes (``runtime.llm_pipeline_worker.Hops``: the receive posted, then the send posted and waited for,
then the receive waited for). Each round trip is two messages; its median wall time over ``rounds``
round trips, halved, is one message from a send's post to its receiver holding the tensor, both ends
and the loopback between them (``hop_s``); each message end's share is half of it (``end_s``). This is
what ``workflow.generate`` charges every message end between two ``local-cpu`` ranks of this machine
(``estimate.llm``: the cluster's link rule, its ``message`` figures), in place of the mapping runtime's
calibration (``runtime.calibration``: its workers' threads and queues cost ~2x more per end). A
cluster's link latency and bandwidth are charged on top, as emulated links add them (``--emulate-links``).

The probe is run at two sizes (one hidden vector, and ``rows`` of them: the prompt's), which give the
fixed and per-byte parts of an end.

Then what a sync costs a member beyond its two message ends: both processes step through blocks of the
model's shapes (``member_blocks``: constant weights, each its half of the KV-head groups and FFN columns,
the runtime's own ``graph.llm.decoder.Block``), in runs with the worker's ``all_reduce`` after each half
and runs without it, alternating. The thread CPU per sync beyond the runs without, less the two ends'
own thread CPU (from the ping-pong), is ``sync_cpu_s``: the receive posted, the partial handed over, the
sum taken back into the block, and what the block's next work pays for the wait (measured ~0.1-0.3 ms
per sync on a 2-core VM, where a quiet ping-pong's end took ~0.03 ms). The wall per sync beyond the runs
without (``sync_wall_s``), less the four message ends a two-member sync's estimate charges (the partial up
and the sum down, each a sender's and a receiver's end), at least ``sync_cpu_s``, is ``sync_s``: all a
member loses per sync beyond those ends, its waits to be woken included, which its CPU does not show. On
the 2-core VM, eight runs of SmolLM2 in equal slices over two cores, each with a fresh probe, ran
1.05-1.47x their prediction when a sync charged its CPU alone (0.11-0.26 ms beyond its ends; median
error 24%, worst 47%) and 0.78-1.27x with ``sync_s`` (0.42-0.94 ms; median 11%, worst 27%).
``estimate.llm_shares`` charges ``sync_s`` to each half of a member's block on the device it was
measured for (the device's ``sync_s`` parameter).

Measured once per shape and process (``lru_cache``), a few seconds; the two processes are started as
the runtime starts its workers (``python -m``, one torch thread each), so nothing of the caller is re-imported.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from functools import lru_cache
from typing import Any

from hetsplit.errors import HetsplitError
from hetsplit.graph.llm.config import LlmConfig
from hetsplit.torch_threads import limit_threads

ROUNDS = 200            # round trips per size (after WARM_UP)
WARM_UP = 20
TIMEOUT_S = 60.0
TAG = 1 << 12
MODULE = "hetsplit.runtime.llm_message_probe"
SYNC_BLOCKS = 4         # blocks of the model's shapes each sync round steps through (two syncs each)
SYNC_RUNS = 4           # alternating runs of steps with the syncs and without them


@dataclass(frozen=True)
class LlmMessageProbe:
    """One message end's seconds, fixed (``end_s``) and per byte (``end_byte_s``); the median one-way
    message at each size probed (``hop_s``: bytes -> seconds); one end's thread CPU (``end_cpu_s``); the
    thread CPU each member of a sync pays beyond its two message ends (``sync_cpu_s``), what a round
    with the sync took beyond one without it (``sync_wall_s``, wall), and what a member loses per sync
    beyond the sync's four message ends (``sync_s``: see the module doc)."""

    end_s: float
    end_byte_s: float
    hop_s: dict[int, float]
    end_cpu_s: float
    sync_cpu_s: float
    sync_wall_s: float
    sync_s: float

    def end(self, nbytes: float) -> float:
        return self.end_s + self.end_byte_s * nbytes


def _peer(rank: int, folder: Path) -> None:
    """One side: the ping-pong at each size (rank 0 sends first and times each round trip), then the sync
    rounds (``_sync_rounds``); rank 0 serves the group (its port in ``port.txt``) and writes what it
    measured to ``result.json``, both in ``folder`` beside the job (``job.json``)."""
    from hetsplit.runtime.wire import Wire, open_group, open_store

    job = json.loads((folder / "job.json").read_text())
    config, sizes = LlmConfig(**job["config"]), tuple(job["sizes"])
    limit_threads()                 # as a stage's worker (``torch_threads``)
    store = open_store(rank, 2, "127.0.0.1", 0 if rank == 0 else _port(folder), TIMEOUT_S)
    if rank == 0:
        _write(folder / "port.txt", str(store.port))
    wire = Wire(open_group(store, rank, 2, "127.0.0.1", TIMEOUT_S), f"probe{rank}", TIMEOUT_S)
    hops, place = _worker_side(wire, rank)
    out: dict[str, Any] = {"hop_s": {}, "end_cpu_s": {}}
    for n in sizes:
        out["hop_s"][n], out["end_cpu_s"][n] = _ping_pong(hops, rank, n // 4, job["rounds"])
    out["sync"] = _sync_rounds(hops, place, config, job["context"], job["rounds"])
    wire.pg.barrier().wait()
    if rank == 0:
        _write(folder / "result.json", json.dumps(out))


def _write(path: Path, text: str) -> None:
    """``text`` into ``path`` whole (written aside, then renamed): a reader never sees part of it."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.rename(path)


def _port(folder: Path) -> int:
    """The port rank 0 serves the group at, once it wrote it."""
    deadline = time.monotonic() + TIMEOUT_S
    while not (folder / "port.txt").exists():
        if time.monotonic() > deadline:
            raise HetsplitError(f"LLM message probe: rank 0 served no group within {TIMEOUT_S:g} s")
        time.sleep(0.01)
    return int((folder / "port.txt").read_text())


def _worker_side(wire, rank: int):
    """The worker's own ``Hops`` and ``Place`` for two ranks of one tensor-parallel stage (rank 0 leads)."""
    from hetsplit.runtime.config import RunConfig
    from hetsplit.runtime.llm_pipeline import PipelineJob
    from hetsplit.runtime.llm_pipeline_worker import Hops, Place

    half = {"kv_heads": [0, 1], "ffn": [0, 1], "vocab": [0, 1]}
    job = PipelineJob("", ["probe0", "probe1"], [[0, 1], [0, 1]], 1, [[0]], 1, stage_of=[0, 0], shares=[half, half])
    return Hops(wire, job, rank, RunConfig("")), Place(job, rank)


def _ping_pong(hops, rank: int, floats: int, rounds: int) -> tuple[float, float]:
    """The median one-way message (half a round trip, wall) and the median thread CPU of one end, for
    ``floats`` float32 values sent as the worker sends its hidden state (``Hops.send``, ``Hops.take``)."""
    import numpy as np
    import torch

    x, peer = torch.ones(1, floats), 1 - rank
    trips, cpus = [], []
    for i in range(WARM_UP + rounds):
        t0, c0 = time.perf_counter(), time.thread_time()
        posted = hops.post_recv(peer, (1, floats), np.float32, TAG)
        if rank == 0:
            hops.send(peer, x, TAG, hop=False)
            hops.take(posted, hop=False)
        else:
            got = torch.from_numpy(hops.take(posted, hop=False))
            hops.send(peer, got, TAG, hop=False)
        if i >= WARM_UP:
            trips.append(time.perf_counter() - t0)
            cpus.append(time.thread_time() - c0)
    return statistics.median(trips) / 2, statistics.median(cpus) / 2


def member_blocks(config: LlmConfig, rank: int, context: int) -> list:
    """``SYNC_BLOCKS`` blocks of ``config``'s shapes with constant weights, each rank's half of them (the
    first or the second half of the KV-head groups and FFN columns), as a member of two holds them."""
    import torch

    from hetsplit.costs.llm_probe import block_shapes
    from hetsplit.graph.llm.config import block_tensor
    from hetsplit.graph.llm.decoder import Block, RopeTables, share_slices, take
    from hetsplit.graph.llm.shares import TensorShare

    kv, ffn = config.kv_heads // 2, config.ffn // 2
    share = TensorShare((0, kv), (0, ffn), (0, 1)) if rank == 0 else \
        TensorShare((kv, config.kv_heads), (ffn, config.ffn), (1, 2))
    cut = share_slices(config, share)
    rope = RopeTables(config.head_dim, config.rope_base, context)
    blocks = []
    for i in range(SYNC_BLOCKS):
        w = {}
        for role, shape in block_shapes(config).items():
            full = torch.full(shape, 0.02)
            w[block_tensor(i, role)] = take(full, *cut[role]) if role in cut else full
        blocks.append(Block(config, w, i, context, rope, share))
    return blocks


def _sync_rounds(hops, place, config: LlmConfig, context: int, rounds: int) -> dict[str, float]:
    """Decode steps through ``member_blocks`` with the worker's ``all_reduce`` after each half (two per
    block), in runs that alternate with the same steps whose partials are not sent: each rank's median
    thread CPU and wall per sync beyond the steps without."""
    import torch

    from hetsplit.runtime.llm_pipeline_worker import all_reduce

    blocks = member_blocks(config, place.rank, context)
    x = torch.full((1, config.dim), 0.1)

    def step(sync: bool) -> None:
        reduce = (lambda partial: all_reduce(hops, place, partial)) if sync else (lambda partial: partial)
        y = x
        with torch.no_grad():
            for b in blocks:
                y = b(y, context - 1, reduce) * 0.5      # kept small: constant weights, every block alike
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    steps = max(1, rounds // (2 * SYNC_BLOCKS * SYNC_RUNS))
    for run in range(SYNC_RUNS):
        for sync in ((True, False) if run % 2 == 0 else (False, True)):
            hops.wire.pg.barrier().wait()
            for i in range(1 + steps):
                t0, c0 = time.perf_counter(), time.thread_time()
                step(sync)
                if i:                                    # the first step of each run warms it up
                    times[sync].append((time.thread_time() - c0, time.perf_counter() - t0))
    med = {k: (statistics.median(c for c, _ in v), statistics.median(w for _, w in v)) for k, v in times.items()}
    syncs = 2 * SYNC_BLOCKS
    return {"cpu_s": (med[True][0] - med[False][0]) / syncs, "wall_s": (med[True][1] - med[False][1]) / syncs}


def measure(config: LlmConfig, sizes: tuple[int, ...], context: int, rounds: int = ROUNDS) -> dict[str, Any]:
    """Run both parts between two fresh processes (``python -m hetsplit.runtime.llm_message_probe --peer
    DIR RANK``, one torch thread each, as the runtime starts its workers); what rank 0 measured."""
    from hetsplit.runtime.launch import child_env
    from hetsplit.lifetime import die_with_parent

    with tempfile.TemporaryDirectory(prefix="hetsplit-llm-probe-") as tmp:
        folder = Path(tmp)
        _write(folder / "job.json", json.dumps({"config": asdict(config), "sizes": list(sizes), "context": context,
                                                 "rounds": rounds}))
        procs = []
        for rank in (0, 1):
            with open(folder / f"rank{rank}.log", "wb") as log:
                procs.append(subprocess.Popen([sys.executable, "-m", MODULE, "--peer",
                                               tmp, str(rank)], stdout=log, stderr=subprocess.STDOUT,
                                              stdin=subprocess.DEVNULL, env=child_env(1), start_new_session=True,
                                              preexec_fn=die_with_parent()))
        try:
            for rank, p in enumerate(procs):
                if p.wait(timeout=TIMEOUT_S * 2) != 0:
                    tail = (folder / f"rank{rank}.log").read_text(errors="replace").strip().splitlines()[-1:]
                    raise HetsplitError(f"the LLM message probe's rank {rank} failed (exit {p.returncode}): "
                                        f"{tail[0] if tail else 'no output'}")
        except subprocess.TimeoutExpired:
            raise HetsplitError(f"the LLM message probe's processes did not end within {TIMEOUT_S * 2:g} s") \
                from None
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        got = json.loads((folder / "result.json").read_text())
    return {"hop_s": {int(n): t for n, t in got["hop_s"].items()},
            "end_cpu_s": {int(n): t for n, t in got["end_cpu_s"].items()}, "sync": got["sync"]}


@lru_cache(maxsize=4)
def probe_llm_messages(config: LlmConfig, rows: int, context: int, rounds: int = ROUNDS) -> LlmMessageProbe:
    """Probe one message of a hidden vector of ``config`` and one of ``rows`` of them: each end's fixed
    part from the small message, its per-byte part from the difference (0 when the two sizes are the same
    or the larger came out no slower); then the sync rounds, a decode step at ``context`` positions."""
    small = config.dim * 4
    large = small * max(rows, 1)
    got = measure(config, (small,) if large == small else (small, large), max(2, min(context, config.context)),
                  rounds)
    hops = got["hop_s"]
    per_byte = max(hops[large] - hops[small], 0.0) / (large - small) / 2 if large > small else 0.0
    end = max(hops[small] / 2 - per_byte * small, 0.0)
    sync_cpu = max(got["sync"]["cpu_s"] - 2 * got["end_cpu_s"][small], 0.0)
    wall = got["sync"]["wall_s"]
    return LlmMessageProbe(end, per_byte, hops, got["end_cpu_s"][small], sync_cpu, wall,
                           sync_beyond_ends(wall, sync_cpu, end + per_byte * small))


def sync_beyond_ends(wall_s: float, cpu_s: float, end_s: float) -> float:
    """What a member loses per sync beyond the sync's four message ends of ``end_s`` (a two-member star:
    the partial up, the sum down), from the wall a sync added to the probe's rounds; at least its CPU."""
    return max(cpu_s, wall_s - 4 * end_s)


def main(argv: list[str]) -> int:
    """``--peer DIR RANK``: one side of the probe; ``MODEL ROWS CONTEXT``: probe here and print the figures."""
    if argv[:1] == ["--peer"]:
        _peer(int(argv[2]), Path(argv[1]))
        return 0
    from hetsplit.graph.llm.load import read_model

    cfg = read_model(argv[0]).config
    rows, context = (int(a) for a in argv[1:3])
    p = probe_llm_messages(cfg, rows, context)
    print(f"end {p.end_s * 1e6:.1f} us + {p.end_byte_s * 1e9:.3f} ns/B (thread CPU {p.end_cpu_s * 1e6:.1f} us); "
          f"hops " + ", ".join(f"{n} B {s * 1e6:.1f} us" for n, s in p.hop_s.items()) +
          f"; a sync: {p.sync_cpu_s * 1e6:.1f} us CPU beyond its ends, {p.sync_wall_s * 1e6:.1f} us wall, "
          f"{p.sync_s * 1e6:.1f} us lost beyond its ends")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
