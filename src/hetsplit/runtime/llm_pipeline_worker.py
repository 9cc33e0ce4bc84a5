"""One rank of a pipeline decode: ``python -m hetsplit.runtime.llm_pipeline_worker RUN_DIR RANK``.

The rank reads its blocks from the GGUF file (``graph.llm``: only its tensors, dequantized; in a
tensor-parallel stage only its share's slices), joins the run's gloo group (``wire.connect``) and runs
the job's steps: it receives the hidden state from the stage before's leader (stage 0: the tokens), runs
its blocks with their KV cache (with the job's executor: torch, or onnxruntime on a CPU,
``runtime.llm_ort``) and, if it leads its stage, sends the result to every rank of the next;
in a tensor-parallel stage every block's two partial sums go through the stage's leader, which adds them
up and sends the sum back (``all_reduce``). The last stage applies the LM head (each member its rows),
keeps the step's logits, and its leader picks the greedy token from each member's best logit and sends
it to every rank of stage 0; rank 0 appends it to ``tokens.txt``, and every rank of stage 0 feeds it to
the next step. Each step's receives are posted before the rank computes. Under link emulation a sender sleeps the link's latency
where netem cannot add it (``cfg.delays_s``, as ``runtime.worker``); under device emulation the rank
paces its work to its device's share before each send (``runtime.pacing``). Failures and reports go
through ``process.main``.
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
from hetsplit.errors import RuntimeFailure
from hetsplit.graph.llm.shares import check_shares
from hetsplit.runtime.llm_ort import OrtDecoder
from hetsplit.runtime.llm_pipeline import TOKENS_FILE, PipelineJob, logits_file
from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.pacing import Pacer, read_pace
from hetsplit.runtime.wire import Wire

HIDDEN_TAG, TOKEN_TAG, REDUCE_UP_TAG, REDUCE_DOWN_TAG, PICK_TAG = ((1 << 11) + k for k in range(5))


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

    def take(self, posted: tuple, hop: bool = True) -> np.ndarray:
        """The posted receive's buffer once it arrived; ``hop``: a stage-to-stage hop (its arrival time kept)."""
        e, works, buf = posted
        t0 = time.perf_counter()
        self.wire.wait(works, e, sending=False)
        self.wait_s += time.perf_counter() - t0
        if hop:
            self.arrived_at = time.time()          # the host clock, shared by every stage here
        return buf

    def send(self, peer: int, x: torch.Tensor, tag: int, hop: bool = True) -> None:
        """Send ``x`` to ``peer``; ``hop``: this send begins a stage-to-stage hop (its time kept)."""
        delay = self.cfg.delay(self.rank, peer)
        t0 = time.perf_counter()
        if hop:
            self.sent_at = time.time()
        if delay > 0:
            time.sleep(delay)
        e = self.edge(peer, tag)
        self.wire.wait(self.wire.post(e, [x.contiguous()], sending=True), e, sending=True)
        self.wait_s += time.perf_counter() - t0
        self.sent_bytes += x.numel() * x.element_size()


def warm_up(dec: Decoder | OrtDecoder, embeds: bool, dim: int, lengths: list[int]) -> None:
    """Run each prompt length's shape and one decode step through the stage once, untimed and at full
    speed, as a warm process has: the first calls (allocations, kernels chosen per shape, the weights'
    pages) are not the device's per-step cost, and the prompt's step paid them all (TTFT 0.65-1.7x its
    prediction here). Each warm-up step writes stream 0's KV cache positions the real step at the same
    position writes before it reads them, so nothing of it is ever read."""
    for pos, n in [(0, k) for k in sorted(set(lengths))] + [(max(lengths), 1)]:
        x = torch.zeros(n, dtype=torch.int64) if embeds else torch.zeros(n, dim)
        dec.forward(x, pos).cpu()          # .cpu(): a GPU's queued kernels done before the timed steps


class Place:
    """A rank's place in the job: its stage's ranks (the leader first), the ranks it hands on to, where its
    input and its tokens come from."""

    def __init__(self, job: PipelineJob, rank: int):
        stage = job.stage_of[rank] if job.stage_of is not None else rank
        self.rank, self.ranks = rank, job.ranks_of(stage)
        self.leader = self.ranks[0]
        self.prev_leader = job.ranks_of(stage - 1)[0] if stage > 0 else None
        self.next_ranks = job.ranks_of(stage + 1) if stage + 1 < job.stages else []
        self.first_ranks = job.ranks_of(0)
        self.last_leader = job.ranks_of(job.stages - 1)[0]
        self.embeds, self.heads = stage == 0, stage == job.stages - 1

    @property
    def leads(self) -> bool:
        return self.rank == self.leader

    @property
    def waits_for_token(self) -> bool:
        """A rank of stage 0 that the token comes to from the last stage's leader."""
        return self.embeds and self.rank != self.last_leader


def all_reduce(hops: Hops, place: Place, partial: torch.Tensor) -> torch.Tensor:
    """The sum of the stage's partials (the leader's, then each member's in rank order), on every member."""
    if len(place.ranks) == 1:
        return partial
    shape = tuple(partial.shape)
    if place.leads:
        posted = [hops.post_recv(r, shape, np.float32, REDUCE_UP_TAG) for r in place.ranks[1:]]
        total = partial.clone()
        for p in posted:
            total += torch.from_numpy(hops.take(p, hop=False))
        for r in place.ranks[1:]:
            hops.send(r, total, REDUCE_DOWN_TAG, hop=False)
        return total
    down = hops.post_recv(place.leader, shape, np.float32, REDUCE_DOWN_TAG)
    hops.send(place.leader, partial, REDUCE_UP_TAG, hop=False)
    return torch.from_numpy(hops.take(down, hop=False))


def paced_all_reduce(pacer: Pacer, hops: Hops, place: Place, partial: torch.Tensor,
                     where: torch.device) -> torch.Tensor:
    """``all_reduce`` of a partial sum on ``where``, once this rank's work so far took its device's time; a
    rank alone in its stage tells nobody anything here, so it goes on without pausing (paused before each
    of its 60 reduces per SmolLM2 step, a stage at a prompt share of 0.4 slept after almost every half
    block and its step took ~1.5x the CPU it takes in one go)."""
    if len(place.ranks) == 1:
        return partial
    pacer.pause()
    return all_reduce(hops, place, partial.cpu()).to(where)


def pick_token(hops: Hops, place: Place, row: torch.Tensor, offset: int, picks: list) -> int | None:
    """The greedy token over the last stage's members: each sends its best logit and its index to the
    leader, which takes the largest (the lowest index among equals, as argmax over the whole row does);
    None on a member."""
    best = int(row.argmax())
    mine = torch.tensor([float(row[best]), float(best + offset)], dtype=torch.float64)
    if not place.leads:
        hops.send(place.leader, mine, PICK_TAG, hop=False)
        return None
    value, token = float(mine[0]), int(mine[1])
    for p in picks:
        v, t = hops.take(p, hop=False)
        if v > value or (v == value and int(t) < token):
            value, token = float(v), int(t)
    return token


def stage_device(cfg: RunConfig, device: str, rank: int, cuda: bool | None = None) -> torch.device:
    """Where a rank computes: a ``gpu`` device's on its host's GPU where the host has CUDA (unless
    ``cfg.cpu_only``; the rule of ``executor.choose_backend``), ranks of one host spread over its GPUs;
    anything else on the CPU."""
    from hetsplit.runtime.executor import ORT_CPU, Host, choose_backend

    cuda = torch.cuda.is_available() if cuda is None else cuda
    if choose_backend(cfg.kinds.get(device, "cpu"), Host(cuda), cfg.cpu_only) == ORT_CPU:
        return torch.device("cpu")
    return torch.device("cuda", rank % max(1, torch.cuda.device_count()))


def run_stage(cfg: RunConfig, job: PipelineJob, rank: int, run_dir: Path) -> dict:
    """Run this rank's share of every step; its measurements (rank 0: the tokens; the last stage: its logits)."""
    from hetsplit.runtime.process import inject
    from hetsplit.runtime.wire import connect

    model = read_model(job.model)
    place = Place(job, rank)
    first, stop = job.bounds[rank]
    share = job.share_of(rank)
    if share is not None:
        members = [job.share_of(r) for r in place.ranks]
        check_shares([m for m in members if m is not None], model.config, f"stage of blocks {first}..{stop - 1}")
    capacity = job.positions
    where = stage_device(cfg, job.devices[rank], rank)
    spec = StageSpec(first, stop, place.embeds, place.heads)
    dec: Decoder | OrtDecoder
    if job.executor == "onnxruntime" and where.type == "cpu":
        dec = OrtDecoder(model, spec, capacity, share=share, streams=job.streams)
    else:
        dec = Decoder(model, spec, capacity, share=share, streams=job.streams, device=where)
    dim = model.config.dim
    warm_up(dec, place.embeds, dim, [len(p) for p in job.prompts])
    wire = connect(cfg, job.world_size, job.devices[rank], rank, run_dir)
    pacer = Pacer(read_pace(cfg.paces, rank))      # at the device's speed (--emulate-devices) from step 0 on
    hops = Hops(wire, job, rank, cfg)
    fault = cfg.faults.get(str(rank))
    tokens = Tokens(hops, place, job, run_dir) if place.embeds else None
    offset = share.vocab[0] if share is not None else 0
    steps: list[dict] = []
    logits = []
    pos = [0] * job.streams
    for i, fed in enumerate(job.steps()):
        for b, n in enumerate(fed):     # the streams in turn: each stage works on one while the next works on another
            if fault and i == int(fault.get("after", 0)) and b == 0:
                inject(fault["kind"])
            wait0, sent0, t0, c0 = hops.wait_s, hops.sent_bytes, time.perf_counter(), time.thread_time()
            started_at = time.time()
            feed = tokens.feed(b, i) if tokens is not None else None
            hidden = hops.post_recv(place.prev_leader, (n, dim), np.float32, HIDDEN_TAG) \
                if place.prev_leader is not None else None
            picks = [hops.post_recv(r, (2,), np.float64, PICK_TAG) for r in place.ranks[1:]] \
                if place.heads and place.leads else []
            x = torch.tensor(feed) if hidden is None else torch.from_numpy(hops.take(hidden))   # None: stage 0
            sync0 = hops.wait_s
            pacer.start(first_step=i == 0)
            out = dec.forward(x, pos[b], reduce=lambda partial: paced_all_reduce(pacer, hops, place, partial, where),
                              stream=b).cpu()       # gloo moves host tensors: a GPU's output is copied here once
            pacer.pause(settle=True)
            sync = hops.wait_s - sync0                 # the stage's all-reduces (0 for a rank alone)
            token = None
            if not place.heads:
                if place.leads:        # the hop begins with its first send (``sent_at``)
                    for k, r in enumerate(place.next_ranks):
                        hops.send(r, out, HIDDEN_TAG, hop=k == 0)
            else:
                row = out[-1]
                if job.keep_logits:
                    logits.append(row.clone())
                token = pick_token(hops, place, row, offset, picks)
                if token is not None:
                    for k, r in enumerate(r for r in place.first_ranks if r != rank):
                        hops.send(r, torch.tensor([token], dtype=torch.int64), TOKEN_TAG, hop=k == 0)
            steps.append({"stream": b, "tokens": n, "sync_s": sync, "sent_bytes": hops.sent_bytes - sent0,
                          "started_at": started_at, "sent_at": hops.sent_at, "arrived_at": hops.arrived_at})
            if tokens is not None:
                tokens.expect(b, len(steps) - 1, token)     # known now (this rank picked it) or posted
            pos[b] += n
            wall, cpu = time.perf_counter() - t0, time.thread_time() - c0
            wait = hops.wait_s - wait0
            steps[-1].update({"wall_s": wall, "wait_s": wait, "compute_s": wall - wait, "cpu_s": cpu})
    if tokens is not None:
        tokens.drain(steps)
    wire.pg.barrier().wait()            # nobody leaves while a peer may still read from it
    if place.heads and job.keep_logits:
        torch.save(torch.stack(logits), run_dir / logits_file(rank))
    return {"steps": steps, "generated": tokens.generated if tokens is not None and rank == 0 else [],
            "blocks": [first, stop], "share": share.to_dict() if share is not None else None}


class Tokens:
    """Stage 0's side of the token loop, per stream: the token a step made (picked here, or received from
    the last stage's leader, its receive posted as the step begins) is taken only when that stream's next
    step needs it as its feed, so that stage 0 goes on with the other streams meanwhile; each step's
    record gets ``token_at``, when its token was known here. Rank 0 streams stream 0's tokens to
    ``tokens.txt`` and keeps every stream's."""

    def __init__(self, hops: Hops, place: Place, job: PipelineJob, run_dir: Path):
        self.hops, self.place, self.job = hops, place, job
        self.pending: list[tuple[int, object] | None] = [None] * job.streams   # (step record, posted or token)
        self.generated: list[list[int]] = [[] for _ in range(job.streams)]
        self.file = open(run_dir / TOKENS_FILE, "a") if place.rank == 0 else None
        self.records: list[dict] = []

    def expect(self, stream: int, record: int, token: int | None) -> None:
        """The step just done (its record's index) makes ``token`` here, or it comes from the last stage."""
        if token is None:
            if not self.place.waits_for_token:
                raise RuntimeFailure(f"rank {self.place.rank} of stage 0 has no token to feed back",
                                     self.job.devices[self.place.rank])
            posted: object = self.hops.post_recv(self.place.last_leader, (1,), np.int64, TOKEN_TAG)
            self.pending[stream] = (record, posted)
        else:
            self.pending[stream] = (record, token)
            self._known(stream, record, token, None)

    def feed(self, stream: int, step: int) -> list[int]:
        """What ``stream`` feeds at ``step``: its prompt, then the token of its step before."""
        if step == 0:
            return list(self.job.prompts[stream])
        return [self._take(stream)]

    def _take(self, stream: int) -> int:
        got = self.pending[stream]
        assert got is not None
        record, posted = got
        self.pending[stream] = None
        if isinstance(posted, int):
            return posted
        token = int(self.hops.take(posted, hop=False)[0])       # type: ignore[arg-type]
        self._known(stream, record, token, time.time())
        return token

    def _known(self, stream: int, record: int, token: int, at: float | None) -> None:
        self.records.append({"record": record, "token_at": at if at is not None else time.time()})
        self.generated[stream].append(token)
        if self.file is not None and stream == 0:
            self.file.write(f"{token}\n")
            self.file.flush()

    def drain(self, steps: list[dict]) -> None:
        """Take every stream's last token, and mark each step's record with when its token was known."""
        for stream in range(self.job.streams):
            if self.pending[stream] is not None:
                self._take(stream)
        for r in self.records:
            steps[r["record"]]["token_at"] = r["token_at"]
        if self.file is not None:
            self.file.close()


def stage_work(cfg: RunConfig, rank: int, run_dir: Path) -> tuple[str, Callable[[], dict]]:
    """``process.main``'s work for a stage (``cfg.manifest`` is the job file)."""
    job = PipelineJob.load(cfg.manifest)
    return job.devices[rank], lambda: run_stage(cfg, job, rank, run_dir)


if __name__ == "__main__":
    from hetsplit.runtime.process import main

    main(sys.argv[1:], work=stage_work)
