"""A Llama-family decoder in torch (CPU), run as a whole or as one pipeline stage: a contiguous range
of blocks, with the embedding on the first stage and the final norm and LM head on the last. Each
block keeps its KV cache (``capacity`` positions); ``forward`` feeds T tokens at position ``pos``
(the prompt in one pass, then one token per step). The same code computes the unsplit reference and
every stage of a split, so a split's logits equal the reference's up to float rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

from hetsplit.errors import ModelError
from hetsplit.graph.llm.config import BLOCK_TENSORS, LlmConfig, block_tensor
from hetsplit.graph.llm.load import LlmModel


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

    def __init__(self, head_dim: int, base: float, capacity: int):
        inv = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        ang = torch.arange(capacity, dtype=torch.float64)[:, None] * inv[None, :]
        self.cos, self.sin = ang.cos().float(), ang.sin().float()

    def apply(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """``x``: (heads, T, head_dim) at positions pos .. pos + T - 1."""
        t = x.shape[1]
        c, s = self.cos[pos:pos + t], self.sin[pos:pos + t]
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        x0, x1 = pairs[..., 0], pairs[..., 1]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).reshape(x.shape)


class Block:
    """One block's weights and KV cache."""

    def __init__(self, cfg: LlmConfig, w: dict[str, torch.Tensor], i: int, capacity: int, rope: RopeTables):
        self.cfg, self.rope = cfg, rope
        self.w = {r: w[block_tensor(i, r)] for r in BLOCK_TENSORS}
        self.k = torch.zeros(cfg.kv_heads, capacity, cfg.head_dim)
        self.v = torch.zeros_like(self.k)

    def __call__(self, x: torch.Tensor, pos: int) -> torch.Tensor:
        """``x``: (T, dim) at positions pos .. pos + T - 1; the block's output, K/V cached."""
        c, w, t = self.cfg, self.w, x.shape[0]
        if pos + t > self.k.shape[1]:
            raise ModelError(f"position {pos + t} is beyond the KV cache's {self.k.shape[1]} positions")
        h = rms_norm(x, w["attn_norm"], c.eps)
        q = F.linear(h, w["attn_q"]).view(t, c.heads, c.head_dim).transpose(0, 1)
        k = F.linear(h, w["attn_k"]).view(t, c.kv_heads, c.head_dim).transpose(0, 1)
        v = F.linear(h, w["attn_v"]).view(t, c.kv_heads, c.head_dim).transpose(0, 1)
        self.k[:, pos:pos + t] = self.rope.apply(k, pos)
        self.v[:, pos:pos + t] = v
        q = self.rope.apply(q, pos)
        group = c.heads // c.kv_heads
        keys = self.k[:, :pos + t].repeat_interleave(group, 0)
        values = self.v[:, :pos + t].repeat_interleave(group, 0)
        scores = q @ keys.transpose(1, 2) / math.sqrt(c.head_dim)
        if t > 1:
            scores = scores + torch.full((t, pos + t), float("-inf")).triu(pos + 1)
        att = (scores.softmax(-1) @ values).transpose(0, 1).reshape(t, c.dim)
        x = x + F.linear(att, w["attn_output"])
        h = rms_norm(x, w["ffn_norm"], c.eps)
        return x + F.linear(F.silu(F.linear(h, w["ffn_gate"])) * F.linear(h, w["ffn_up"]), w["ffn_down"])


class Decoder:
    """A stage (or the whole model) with its KV caches; ``forward(ids or hidden, pos)``."""

    def __init__(self, model: LlmModel, spec: StageSpec, capacity: int,
                 weights: dict[str, np.ndarray] | None = None):
        cfg = model.config
        if capacity > cfg.context:
            raise ModelError(f"{capacity} positions exceed the model's context of {cfg.context}")
        arrays = weights if weights is not None else model.load(stage_tensor_names(model, spec))
        w = {k: torch.from_numpy(v) for k, v in arrays.items()}
        self.cfg, self.spec = cfg, spec
        rope = RopeTables(cfg.head_dim, cfg.rope_base, capacity)
        self.blocks = [Block(cfg, w, i, capacity, rope) for i in range(spec.first, spec.stop)]
        self.embedding = w["token_embd.weight"] if spec.embed else None
        self.norm = w["output_norm.weight"] if spec.head else None
        self.output = w[model.head_name()] if spec.head else None

    def forward(self, x: torch.Tensor, pos: int, every_position: bool = False) -> torch.Tensor:
        """Token ids (T,) on an embedding stage, else the hidden state (T, dim); the hidden state out,
        or on the head stage the logits of the last position (1, vocab: the next token's, all a step
        uses), of all T positions with ``every_position``."""
        with torch.no_grad():
            if self.embedding is not None:
                x = F.embedding(x, self.embedding)
            for b in self.blocks:
                x = b(x, pos)
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
