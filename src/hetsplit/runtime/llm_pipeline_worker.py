"""One stage of a pipeline decode: ``python -m hetsplit.runtime.llm_pipeline_worker RUN_DIR RANK``.

The rank reads its blocks from the GGUF file (``graph.llm``: only its tensors, dequantized), joins the
run's gloo group (``wire.connect``) and runs the job's steps: it receives the hidden state from the
stage before (stage 0: the tokens, from itself), runs its blocks with their KV cache and sends the
result on; the last stage applies the LM head, keeps the step's logits and sends the greedy token
back to stage 0, which appends it to ``tokens.txt`` and feeds it to the next step. Each step's
receive is posted before the stage computes. Under link emulation a sender sleeps the link's latency
where netem cannot add it (``cfg.delays_s``, as ``runtime.worker``); under device emulation the rank
joins its cgroup once connected. Failures and reports go through ``process.main``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from hetsplit.graph.llm.decoder import Decoder, StageSpec
from hetsplit.graph.llm.load import read_model
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.llm_pipeline import LOGITS_FILE, TOKENS_FILE, PipelineJob
from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.wire import Wire

HIDDEN_TAG, TOKEN_TAG = 1 << 11, (1 << 11) + 1


class Hops:
    """This stage's two links (from the stage before, to the stage after) over ``Wire``."""

    def __init__(self, wire: Wire, job: PipelineJob, rank: int, cfg: RunConfig):
        self.wire, self.job, self.rank, self.cfg = wire, job, rank, cfg
        self.wait_s, self.sent_bytes = 0.0, 0
        self.sent_at = self.arrived_at = float("nan")

    def edge(self, peer: int, tag: int) -> Edge:
        return Edge(self.job.devices[peer], peer, (), tag)

    def post_recv(self, peer: int, shape: tuple[int, ...], dtype: type, tag: int) -> tuple:
        buf: np.ndarray = np.empty(shape, dtype)
        e = self.edge(peer, tag)
        return e, self.wire.post(e, [buf], sending=False), buf

    def take(self, posted: tuple) -> np.ndarray:
        e, works, buf = posted
        t0 = time.perf_counter()
        self.wire.wait(works, e, sending=False)
        self.wait_s += time.perf_counter() - t0
        self.arrived_at = time.time()          # the host clock, shared by every stage here
        return buf

    def send(self, peer: int, x: torch.Tensor, tag: int) -> None:
        delay = self.cfg.delay(self.rank, peer)
        t0 = time.perf_counter()
        self.sent_at = time.time()
        if delay > 0:
            time.sleep(delay)
        e = self.edge(peer, tag)
        self.wire.wait(self.wire.post(e, [x.contiguous()], sending=True), e, sending=True)
        self.wait_s += time.perf_counter() - t0
        self.sent_bytes += x.numel() * x.element_size()


def warm_up(dec: Decoder, embeds: bool, dim: int, prompt: int) -> None:
    """Run the prompt's shape and one decode step through the stage once, untimed and at full speed, as
    a warm process has: the first calls (allocations, kernels chosen per shape, the weights' pages) are
    not the device's per-step cost, and the prompt's step paid them all (TTFT 0.65-1.7x its prediction
    here). Each warm-up step writes the KV cache positions the real step at the same position writes
    before it reads them, so nothing of it is ever read."""
    for pos, n in ((0, prompt), (prompt, 1)):
        x = torch.zeros(n, dtype=torch.int64) if embeds else torch.zeros(n, dim)
        dec.forward(x, pos)


def run_stage(cfg: RunConfig, job: PipelineJob, rank: int, run_dir: Path) -> dict:
    """Run this stage's share of every step; its measurements (stage 0: the tokens; the last: the logits file)."""
    from hetsplit.runtime.cpu_throttle import join_group, release_group
    from hetsplit.runtime.process import inject
    from hetsplit.runtime.wire import connect

    model = read_model(job.model)
    first, stop = job.bounds[rank]
    last = job.world_size - 1
    capacity = len(job.prompt) + job.new_tokens
    dec = Decoder(model, StageSpec(first, stop, rank == 0, rank == last), capacity)
    dim = model.config.dim
    warm_up(dec, rank == 0, dim, len(job.prompt))
    wire = connect(cfg, job.world_size, job.devices[rank], rank, run_dir)
    decode_group = cfg.cgroups.get(str(rank))
    prefill_group = cfg.first_cgroups.get(str(rank))
    join_group(prefill_group or decode_group)   # throttled (--emulate-devices) from step 0 on
    hops = Hops(wire, job, rank, cfg)
    fault = cfg.faults.get(str(rank))
    stream = open(run_dir / TOKENS_FILE, "a") if rank == 0 else None
    steps, logits, generated, feed, pos = [], [], [], list(job.prompt), 0
    for i, n in enumerate(job.steps()):
        if fault and i == int(fault.get("after", 0)):
            inject(fault["kind"])
        wait0, sent0, t0, c0 = hops.wait_s, hops.sent_bytes, time.perf_counter(), time.thread_time()
        hidden = hops.post_recv(rank - 1, (n, dim), np.float32, HIDDEN_TAG) if rank > 0 else None
        back = hops.post_recv(last, (1,), np.int64, TOKEN_TAG) if rank == 0 and last > 0 else None
        x = torch.tensor(feed) if hidden is None else torch.from_numpy(hops.take(hidden))   # None: rank 0
        out = dec.forward(x, pos)
        if rank < last:
            hops.send(rank + 1, out, HIDDEN_TAG)
        else:
            row = out[-1]
            if job.keep_logits:
                logits.append(row.clone())
            token = torch.tensor([int(row.argmax())], dtype=torch.int64)
            if last > 0:
                hops.send(0, token, TOKEN_TAG)
        if stream is not None:     # rank 0, which feeds the tokens back and streams them
            feed = [int(hops.take(back)[0])] if back is not None else [int(token[0])]
            generated.append(feed[0])
            stream.write(f"{feed[0]}\n")
            stream.flush()
        pos += n
        wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
        wait = hops.wait_s - wait0
        steps.append({"tokens": n, "wall_s": wall, "wait_s": wait, "compute_s": wall - wait, "cpu_s": cpu,
                      "sent_bytes": hops.sent_bytes - sent0, "sent_at": hops.sent_at, "arrived_at": hops.arrived_at})
        if i == 0 and prefill_group:
            if decode_group:
                join_group(decode_group)       # the prompt's share, then the decode steps'
            else:
                release_group(prefill_group)   # the decode steps at a whole core: no quota
    release_group(decode_group)         # the steps are done: what follows runs at full speed
    wire.pg.barrier().wait()            # nobody leaves while a peer may still read from it
    if rank == last and job.keep_logits:
        torch.save(torch.stack(logits), run_dir / LOGITS_FILE)
    if stream is not None:
        stream.close()
    return {"steps": steps, "generated": generated, "blocks": [first, stop]}


def stage_work(cfg: RunConfig, rank: int, run_dir: Path) -> tuple[str, Callable[[], dict]]:
    """``process.main``'s work for a stage (``cfg.manifest`` is the job file)."""
    job = PipelineJob.load(cfg.manifest)
    return job.devices[rank], lambda: run_stage(cfg, job, rank, run_dir)


if __name__ == "__main__":
    from hetsplit.runtime.process import main

    main(sys.argv[1:], work=stage_work)
