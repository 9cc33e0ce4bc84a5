"""One rank of a tensor-parallel decode: ``python -m hetsplit.runtime.tensor_parallel_worker RUN_DIR RANK``.

The rank loads only its own slices (``rank<R>.pt``, written by ``runtime.tensor_parallel``), joins
the run's gloo group (``wire.connect``) and runs the job's steps: the prompt in one pass, then one
token per step. Per block it takes part in the two all-reduces whose trees name it: the normed
tensor comes down the tree from the root (``broadcast``), the rank computes its partial sum (its
heads' attention with its own KV cache and their ``wo`` columns, or its F slice of the SwiGLU FFN),
and the partials go up the tree (``reduce``); the root adds the skip connection and runs the next
norm. After the blocks the final normed tensor goes down once more and each rank's slice of the
logits straight to the root (``gather``). A phase posts its receives before it computes (gloo sends
a message once its receive is posted). Every transfer is a gloo point-to-point message through
``Wire`` (timeouts, errors naming the peer). Reports and failures go through ``process.main`` like
every other process of a run.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import torch
from torch.nn import functional as F

from hetsplit.errors import RuntimeFailure
from hetsplit.graph.zoo.transformer import LlamaBlock, RMSNorm, scaled_attention, split_heads
from hetsplit.plan.types import Collective
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.tensor_parallel import (LOGITS_FILE, BlockLayout, Phase, TensorParallelJob, tree_children,
                                              tree_parent)
from hetsplit.runtime.wire import Wire

TAG_BASE = 1 << 10     # point-to-point tags of this runtime: TAG_BASE + 4 x block + phase
HEAD_TAG, GATHER_TAG = TAG_BASE - 2, TAG_BASE - 1
Posted = tuple  # (Edge, gloo works, numpy buffer) of a receive posted ahead


class BlockShard:
    """This rank's slices of one block: its heads (with their KV cache) and its F range."""

    def __init__(self, w: dict[str, torch.Tensor], layout: BlockLayout, rank: int, job: TensorParallelJob):
        p = f"layers.{layout.index}."
        heads = layout.heads[rank]
        self.heads, self.head_dim = (0 if heads is None else heads[1] - heads[0]), job.head_dim
        self.w = {k[len(p):]: v for k, v in w.items() if k.startswith(p) and not k.endswith("norm")}
        if self.heads:
            self.cos, self.sin = w["cos"], w["sin"]
            self.k = torch.zeros(1, self.heads, job.seq, job.head_dim)
            self.v = torch.zeros_like(self.k)

    def attention(self, h: torch.Tensor, pos: int) -> torch.Tensor:
        """This rank's heads over positions ``pos .. pos + T`` (cached), projected by their wo columns."""
        w, t = self.w, h.shape[1]
        cos, sin = self.cos[pos:pos + t], self.sin[pos:pos + t]
        q = LlamaBlock.rope(split_heads(F.linear(h, w["wq"]), self.head_dim), cos, sin)
        self.k[:, :, pos:pos + t] = LlamaBlock.rope(split_heads(F.linear(h, w["wk"]), self.head_dim), cos, sin)
        self.v[:, :, pos:pos + t] = split_heads(F.linear(h, w["wv"]), self.head_dim)
        mask = None if t == 1 else torch.full((t, pos + t), float("-inf")).triu(pos + 1)
        return F.linear(scaled_attention(q, self.k[:, :, :pos + t], self.v[:, :, :pos + t], mask), w["wo"])

    def feed_forward(self, h: torch.Tensor) -> torch.Tensor:
        """This rank's F slice of the SwiGLU FFN: a partial sum of the output."""
        w = self.w
        return F.linear(F.silu(F.linear(h, w["w1"])) * F.linear(h, w["w3"]), w["w2"])


class RootParts:
    """What only the root holds: the embedding and the norms."""

    def __init__(self, w: dict[str, torch.Tensor], job: TensorParallelJob):
        def norm(weight: torch.Tensor) -> RMSNorm:
            n = RMSNorm(job.dim, job.eps)
            n.weight.data = weight
            return n

        self.embedding = w["tok_embeddings"]
        self.attention_norm = [norm(w[f"layers.{b.index}.attention_norm"]) for b in job.blocks]
        self.ffn_norm = [norm(w[f"layers.{b.index}.ffn_norm"]) for b in job.blocks]
        self.norm = norm(w["norm"])


class TreeLinks:
    """The all-reduce trees of one rank over ``Wire``: time spent and bytes sent are counted."""

    def __init__(self, wire: Wire, devices: list[str], rank: int):
        self.wire, self.devices, self.me = wire, devices, devices[rank]
        self.comm_s, self.sent_bytes = 0.0, 0

    def _edge(self, peer: str, tag: int) -> Edge:
        return Edge(peer, self.devices.index(peer), (), tag)

    def listen(self, peers: list[str], shape: tuple[int, ...], tag: int) -> list[Posted]:
        """Post receives from ``peers`` now (gloo sends the data once the receive is posted)."""
        t0 = time.perf_counter()
        out = []
        for p in peers:
            e, buf = self._edge(p, tag), np.empty(shape, np.float32)
            out.append((e, self.wire.post(e, [buf], sending=False), buf))
        self.comm_s += time.perf_counter() - t0
        return out

    def _take(self, posted: list[Posted]) -> list[torch.Tensor]:
        for e, works, _ in posted:
            self.wire.wait(works, e, sending=False)
        return [torch.from_numpy(buf) for _, _, buf in posted]

    def _send(self, peers: list[str], x: torch.Tensor, tag: int) -> None:
        posted = [(self._edge(p, tag), self.wire.post(self._edge(p, tag), [x], sending=True)) for p in peers]
        for e, w in posted:
            self.wire.wait(w, e, sending=True)
        self.sent_bytes += x.numel() * x.element_size() * len(peers)

    def listen_down(self, c: Collective, shape: tuple[int, ...], tag: int) -> list[Posted]:
        """The receive of the broadcast from this rank's parent (none on the root)."""
        parent = tree_parent(c, self.me)
        return self.listen([] if parent is None else [parent], shape, tag)

    def listen_up(self, c: Collective, shape: tuple[int, ...], tag: int) -> list[Posted]:
        """The receives of this rank's children's partial sums."""
        return self.listen(tree_children(c, self.me), shape, tag)

    def broadcast(self, c: Collective, x: torch.Tensor | None, posted: list[Posted], tag: int) -> torch.Tensor:
        """The root's ``x`` down the tree: from the parent (``posted``), on to the children."""
        t0 = time.perf_counter()
        if posted:
            (x,) = self._take(posted)
        x = given(x, "the broadcast's tensor")
        self._send(tree_children(c, self.me), x, tag)
        self.comm_s += time.perf_counter() - t0
        return x

    def reduce(self, c: Collective, x: torch.Tensor, posted: list[Posted], tag: int) -> torch.Tensor | None:
        """Partial sums up the tree: the children's (``posted``) added to ``x``, sent to the parent; the
        total on the root, None elsewhere."""
        t0 = time.perf_counter()
        for part in self._take(posted):
            x = x + part
        parent = tree_parent(c, self.me)
        if parent is not None:
            self._send([parent], x, tag)
        self.comm_s += time.perf_counter() - t0
        return x if parent is None else None

    def gather(self, devices: list[str], x: torch.Tensor | None, posted: list[Posted]) -> torch.Tensor | None:
        """Column slices straight to the root (``devices[0]``; ``posted``: its receives from the others,
        in device order), concatenated there; None elsewhere."""
        t0 = time.perf_counter()
        part = given(x, "this rank's slice of the logits")
        out: torch.Tensor | None = None
        if self.me != devices[0]:
            self._send([devices[0]], part, GATHER_TAG)
        else:
            out = torch.cat([part, *self._take(posted)], -1)
        self.comm_s += time.perf_counter() - t0
        return out


T = TypeVar("T")


def given(x: T | None, what: str) -> T:
    """``x``, which the plan's trees deliver at this point of a step; RuntimeFailure naming ``what`` if not."""
    if x is None:
        raise RuntimeFailure(f"tensor-parallel decode: {what} did not reach this rank (the plan's trees do not "
                             "deliver it here)")
    return x


class Decoder:
    """One rank's step: every block's two phases (broadcast in, partial sums out)."""

    def __init__(self, job: TensorParallelJob, rank: int, w: dict[str, torch.Tensor], links: TreeLinks):
        self.job, self.me, self.links = job, job.devices[rank], links
        self.shards = [BlockShard(w, b, rank, job) for b in job.blocks]
        self.root = RootParts(w, job) if rank == 0 else None
        self.output = w.get("output")

    def step(self, tokens: torch.Tensor | None, n: int, pos: int) -> torch.Tensor | None:
        """Feed ``n`` tokens at ``pos`` (the root gets them and returns their logits; others None)."""
        r = self.root
        x = F.embedding(given(tokens, "the root's tokens"), r.embedding) if r is not None else None
        for i, (b, s) in enumerate(zip(self.job.blocks, self.shards)):
            tag = TAG_BASE + 4 * i
            x = self.phase(b.attention, x, r.attention_norm[i] if r is not None else None,
                           lambda h: s.attention(h, pos), n, tag)
            x = self.phase(b.feed_forward, x, r.ffn_norm[i] if r is not None else None, s.feed_forward, n, tag + 2)
        return self.head(r.norm(x) if r is not None else None, n)

    def phase(self, ph: Phase, x: torch.Tensor | None, norm: RMSNorm | None,
              work: Callable[[torch.Tensor], torch.Tensor], n: int, tag: int) -> torch.Tensor | None:
        """The root's normed ``x`` down, this rank's partial sum up; the root's new ``x``."""
        if ph.up is None:                  # not split: all on the root
            return None if x is None else x + work(given(norm, "the root's norm")(x))
        if self.me not in ph.up.devices:
            return x
        shape = (1, n, self.job.dim)
        down = self.links.listen_down(ph.down, shape, tag) if ph.down is not None else []
        up = self.links.listen_up(ph.up, shape, tag + 1)
        h = norm(x) if norm is not None else None
        if ph.down is not None:
            h = self.links.broadcast(ph.down, h, down, tag)
        total = self.links.reduce(ph.up, work(given(h, "the block's normed input")), up, tag + 1)
        return None if x is None else x + given(total, "the root's all-reduced sum")

    def head(self, h: torch.Tensor | None, n: int) -> torch.Tensor | None:
        """The LM head over the vocabulary slices: the logits on the root."""
        head = self.job.head
        owners = [(d, r) for d, r in zip(self.job.devices, head.vocab) if r is not None]
        devices = [d for d, _ in owners]
        gathered = [] if self.me != devices[0] else \
            [self.links.listen([d], (1, n, b - a), GATHER_TAG)[0] for d, (a, b) in owners[1:]]
        if head.down is not None and self.me in head.down.devices:
            down = self.links.listen_down(head.down, (1, n, self.job.dim), HEAD_TAG)
            h = self.links.broadcast(head.down, h, down, HEAD_TAG)
        if self.output is None:
            return None
        part = F.linear(given(h, "the LM head's input"), self.output)
        return part if len(owners) == 1 else self.links.gather(devices, part, gathered)


def held(w: dict[str, torch.Tensor]) -> tuple[int, int]:
    """Parameters this rank holds: in blocks, elsewhere (embedding, final norm, LM head rows; the RoPE
    tables are buffers, not counted)."""
    blocks = sum(v.numel() for k, v in w.items() if k.startswith("layers."))
    other = sum(v.numel() for k, v in w.items() if not k.startswith("layers.") and k not in ("cos", "sin"))
    return blocks, other


def run_rank(cfg: RunConfig, job: TensorParallelJob, rank: int, run_dir: Path) -> dict:
    """Decode the job's steps on this rank; its measurements (and, on the root, the logits file)."""
    from hetsplit.runtime.process import inject
    from hetsplit.runtime.wire import connect

    w = torch.load(run_dir / f"rank{rank}.pt", weights_only=True)
    blocks, other = held(w)
    wire = connect(cfg, job.world_size, job.devices[rank], rank, run_dir)
    links = TreeLinks(wire, job.devices, rank)
    dec = Decoder(job, rank, w, links)
    fault = cfg.faults.get(str(rank))
    steps, logits, generated, tokens, pos = [], [], [], list(job.prompt), 0
    with torch.no_grad():
        for i, n in enumerate(job.steps()):
            if fault and i == int(fault.get("after", 0)):
                inject(fault["kind"])
            comm0, sent0, t0 = links.comm_s, links.sent_bytes, time.perf_counter()
            out = dec.step(torch.tensor([tokens]) if rank == 0 else None, n, pos)
            wall = time.perf_counter() - t0
            if out is not None:
                logits.append(out[0])
                tokens = [int(out[0, -1].argmax())]
                generated.append(tokens[0])
            pos += n
            comm = links.comm_s - comm0
            steps.append({"tokens": n, "wall_s": wall, "comm_s": comm, "compute_s": wall - comm,
                          "sent_bytes": links.sent_bytes - sent0})
    wire.pg.barrier().wait()           # nobody leaves while a peer may still read from it
    if rank == 0:
        torch.save(torch.cat(logits), run_dir / LOGITS_FILE)
    return {"steps": steps, "generated": generated, "block_params": blocks, "other_params": other}


def tensor_parallel_work(cfg: RunConfig, rank: int, run_dir: Path) -> tuple[str, Callable[[], dict]]:
    """``process.main``'s work for a rank of a tensor-parallel job (``cfg.manifest`` is the job file)."""
    job = TensorParallelJob.load(cfg.manifest)
    return job.devices[rank], lambda: run_rank(cfg, job, rank, run_dir)


if __name__ == "__main__":
    from hetsplit.runtime.process import main

    main(sys.argv[1:], work=tensor_parallel_work)
