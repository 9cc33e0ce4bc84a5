"""A Llama-family decoder in torch (CPU), run as a whole or as one pipeline stage: a contiguous range
of blocks, with the embedding on the first stage and the final norm and LM head on the last. Each
block keeps its KV cache (``capacity`` positions); ``forward`` feeds T tokens at position ``pos``
(the prompt in one pass, then one token per step). The same code computes the unsplit reference and
every stage of a split, so a split's logits equal the reference's up to float rounding.

A member of a tensor-parallel stage (``share``: ``graph.llm.shares.TensorShare``) holds its KV-head groups'
query, key and value rows, their K/V cache and their columns of the output projection, its FFN columns'
gate and up rows and down columns, its rows of the LM head; each block hands its partial attention and
FFN outputs to ``reduce`` (the stage's all-reduce: the members' partials summed) before the residual."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from hetsplit.errors import ModelError
from hetsplit.graph.llm.config import BLOCK_TENSORS, LlmConfig, block_tensor
from hetsplit.graph.llm.load import LlmModel
from hetsplit.graph.llm.shares import TensorShare

Reduce = Callable[[torch.Tensor], torch.Tensor]
CPU = torch.device("cpu")


def no_reduce(partial: torch.Tensor) -> torch.Tensor:
    """A stage of one device's 'all-reduce': its partial is the sum."""
    return partial


@dataclass(frozen=True)
class StageSpec:
    """Blocks ``first .. stop - 1``; ``embed``: this stage embeds the tokens; ``head``: it ends with the LM head."""

    first: int
    stop: int
    embed: bool
    head: bool

    @classmethod
    def whole(cls, config: LlmConfig) -> "StageSpec":
        return cls(0, config.blocks, True, True)


def stage_tensor_names(model: LlmModel, spec: StageSpec) -> list[str]:
    """The tensors a stage holds."""
    names = [n for i in range(spec.first, spec.stop) for n in model.block_names(i)]
    if spec.embed:
        names.append("token_embd.weight")
    if spec.head:
        names += ["output_norm.weight", model.head_name()]
    return list(dict.fromkeys(names))


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


class RopeTables:
    """cos/sin of every position up to ``capacity`` for adjacent-pair rotation (llama.cpp's layout)."""

    def __init__(self, head_dim: int, base: float, capacity: int, device: torch.device = CPU):
        inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.arange(capacity, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().float().to(device), ang.sin().float().to(device)

    def apply(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """``x``: (heads, T, head_dim) at positions pos .. pos + T - 1."""
        t = x.shape[1]
        c, s = self.cos[pos:pos + t], self.sin[pos:pos + t]
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(x.shape)


def share_slices(cfg: LlmConfig, share: TensorShare) -> dict[str, tuple[int, slice]]:
    """Per block tensor role: the axis (0: rows, 1: columns) and the slice a member holds."""
    hd, group = cfg.head_dim, cfg.heads // cfg.kv_heads
    (a, b), (fa, fb) = share.kv_heads, share.ffn
    q, kv = slice(a * group * hd, b * group * hd), slice(a * hd, b * hd)
    return {"attn_q": (0, q), "attn_k": (0, kv), "attn_v": (0, kv), "attn_output": (1, q),
            "ffn_gate": (0, slice(fa, fb)), "ffn_up": (0, slice(fa, fb)), "ffn_down": (1, slice(fa, fb))}


def take(w: torch.Tensor, axis: int, part: slice) -> torch.Tensor:
    """A member's slice of a weight, in memory of its own (the whole tensor can then be freed)."""
    return (w[part] if axis == 0 else w[:, part]).contiguous().clone()


HEAD = "head"      # ``stage_weights``' name for the LM head's rows the stage holds


def stage_weights(model: LlmModel, spec: StageSpec, share: TensorShare | None = None,
                  weights: dict[str, np.ndarray] | None = None, device: torch.device = CPU) -> dict[str, torch.Tensor]:
    """A stage's float32 tensors on ``device`` by their checkpoint names (from ``weights`` where given, else
    read from the file one at a time), a member's slices only under ``share``; the LM head's rows (all, or
    the member's vocabulary rows) as ``HEAD`` on the head stage."""
    cfg = model.config
    slices = share_slices(cfg, share) if share is not None else {}
    w: dict[str, torch.Tensor] = {}
    for name in stage_tensor_names(model, spec):   # one at a time: a member keeps its slices, not every whole
        whole = torch.from_numpy(weights[name] if weights is not None else model.load([name])[name])
        role = name.split(".")[2] if name.startswith("blk.") else ""
        w[name] = (take(whole, *slices[role]) if role in slices else whole).to(device)
    if spec.head:
        w[HEAD] = take(w[model.head_name()], 0, slice(*share.vocab)) if share is not None else w[model.head_name()]
    return w


class Block:
    """One block's weights and KV cache (one per stream: ``use_stream`` picks the one ``k``/``v`` name);
    under ``share``, ``w`` holds a member's slices of the weights (``share_slices``) and the caches its
    KV-head groups."""

    def __init__(self, cfg: LlmConfig, w: dict[str, torch.Tensor], i: int, capacity: int, rope: RopeTables,
                 share: TensorShare | None = None, streams: int = 1, device: torch.device = CPU):
        self.cfg, self.rope = cfg, rope
        self.w = {r: w[block_tensor(i, r)] for r in BLOCK_TENSORS}
        self.kv_heads = share.size("kv_heads") if share is not None else cfg.kv_heads
        self.ffn = share.size("ffn") if share is not None else cfg.ffn
        self.caches = [(torch.zeros(self.kv_heads, capacity, cfg.head_dim, device=device),
                        torch.zeros(self.kv_heads, capacity, cfg.head_dim, device=device)) for _ in range(streams)]
        self.k, self.v = self.caches[0]

    def use_stream(self, stream: int) -> None:
        self.k, self.v = self.caches[stream]

    def __call__(self, x: torch.Tensor, pos: int, reduce: Reduce = no_reduce) -> torch.Tensor:
        """``x``: (T, dim) at positions pos .. pos + T - 1; the block's output, K/V cached; ``reduce`` sums
        the attention's and the FFN's partial outputs over a tensor-parallel stage's members."""
        c, w, t = self.cfg, self.w, x.shape[0]
        if pos + t > self.k.shape[1]:
            raise ModelError(f"position {pos + t} is beyond the KV cache's {self.k.shape[1]} positions")
        h = rms_norm(x, w["attn_norm"], c.eps)
        x = x + reduce(self.attention(h, pos) if self.kv_heads else torch.zeros_like(x))
        h = rms_norm(x, w["ffn_norm"], c.eps)
        ffn = F.linear(F.silu(F.linear(h, w["ffn_gate"])) * F.linear(h, w["ffn_up"]), w["ffn_down"]) if self.ffn \
            else torch.zeros_like(x)
        return x + reduce(ffn)

    def attention(self, h: torch.Tensor, pos: int) -> torch.Tensor:
        """The attention's output projection of this block's (or share's) heads."""
        c, w, t = self.cfg, self.w, h.shape[0]
        group = c.heads // c.kv_heads
        heads = self.kv_heads * group
        q = F.linear(h, w["attn_q"]).view(t, heads, c.head_dim).transpose(0, 1)
        k = F.linear(h, w["attn_k"]).view(t, self.kv_heads, c.head_dim).transpose(0, 1)
        v = F.linear(h, w["attn_v"]).view(t, self.kv_heads, c.head_dim).transpose(0, 1)
        self.k[:, pos:pos + t] = self.rope.apply(k, pos)
        self.v[:, pos:pos + t] = v
        q = self.rope.apply(q, pos)
        keys = self.k[:, :pos + t].repeat_interleave(group, 0)
        values = self.v[:, :pos + t].repeat_interleave(group, 0)
        scores = q @ keys.transpose(1, 2) / math.sqrt(c.head_dim)
        if t > 1:
            scores = scores + torch.full((t, pos + t), float("-inf"), device=h.device).triu(pos + 1)
        att = (scores.softmax(-1) @ values).transpose(0, 1).reshape(t, heads * c.head_dim)
        return F.linear(att, w["attn_output"])


class Decoder:
    """A stage (or the whole model) with its KV caches, its weights and caches on ``device`` (the CPU, or a
    GPU's memory); ``forward(ids or hidden, pos)``, its input moved there, its output left there."""

    def __init__(self, model: LlmModel, spec: StageSpec, capacity: int,
                 weights: dict[str, np.ndarray] | None = None, share: TensorShare | None = None, streams: int = 1,
                 device: torch.device = CPU):
        cfg = model.config
        if capacity > cfg.context:
            raise ModelError(f"{capacity} positions exceed the model's context of {cfg.context}")
        w = stage_weights(model, spec, share, weights, device)
        self.cfg, self.spec, self.share, self.device = cfg, spec, share, device
        rope = RopeTables(cfg.head_dim, cfg.rope_base, capacity, device)
        self.blocks = [Block(cfg, w, i, capacity, rope, share, streams, device) for i in range(spec.first, spec.stop)]
        self.embedding = w["token_embd.weight"] if spec.embed else None
        self.norm = w["output_norm.weight"] if spec.head else None
        self.output = w[HEAD] if spec.head else None

    def forward(self, x: torch.Tensor, pos: int, every_position: bool = False, reduce: Reduce = no_reduce,
                stream: int = 0) -> torch.Tensor:
        """Token ids (T,) on an embedding stage, else the hidden state (T, dim); the hidden state out,
        or on the head stage the logits of the last position (1, vocab: the next token's, all a step
        uses; a member's rows of them), of all T positions with ``every_position``. ``reduce``: the
        tensor-parallel stage's all-reduce; ``stream``: whose KV cache."""
        for b in self.blocks:
            b.use_stream(stream)
        x = x.to(self.device)
        with torch.no_grad():
            if self.embedding is not None:
                x = F.embedding(x, self.embedding)
            for b in self.blocks:
                x = b(x, pos, reduce)
            if self.output is not None and self.norm is not None:     # the head: both or neither
                x = F.linear(rms_norm(x if every_position else x[-1:], self.norm, self.cfg.eps), self.output)
        return x


def greedy(model: LlmModel, prompt: list[int], new_tokens: int) -> tuple[list[int], torch.Tensor]:
    """The unsplit model's greedy continuation of ``prompt`` and the logits of every step
    ((new_tokens, vocab): the prompt's last position, then each fed token's)."""
    if not prompt:
        raise ModelError("the prompt has no tokens")
    dec = Decoder(model, StageSpec.whole(model.config), len(prompt) + new_tokens)
    out, steps, pos, feed = [], [], 0, torch.tensor(prompt)
    for _ in range(new_tokens):
        logits = dec.forward(feed, pos)[-1]
        pos += feed.shape[0]
        steps.append(logits)
        out.append(int(logits.argmax()))
        feed = torch.tensor(out[-1:])
    return out, torch.stack(steps) if steps else torch.empty(0, model.config.vocab)
