"""Transformers of the zoo: a TinyLlama-42M decoder and a MobileBERT encoder.

Attention is written with explicit matmuls (Q K^T, softmax, x V) so the ONNX graph shows the
batched activation x activation matmuls the device models cost (kind "matmul", batch = heads).
Inputs are token ids (int64, shape (1, S)). Head views use -1 for the head count (``view(b, s, -1,
head_dim)``, ``reshape(b, s, -1)``), so a slice of the heads runs the same graph (tensor parallelism).
"""

from __future__ import annotations

import math

import torch
from torch import nn


ROPE_THETA = 10000.0     # TinyLlama's RoPE base


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps, self.weight = eps, nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def scaled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """q, k, v: (B, heads, S, head_dim) -> (B, S, heads * head_dim)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores + mask
    out = torch.matmul(scores.softmax(-1), v)
    b, _, s, _ = out.shape
    return out.transpose(1, 2).reshape(b, s, -1)


def split_heads(x: torch.Tensor, head_dim: int) -> torch.Tensor:
    """(B, S, heads * head_dim) -> (B, heads, S, head_dim)."""
    b, s, _ = x.shape
    return x.view(b, s, -1, head_dim).transpose(1, 2)


class LlamaBlock(nn.Module):
    """Pre-norm decoder block: RMSNorm, causal self-attention with RoPE, RMSNorm, SwiGLU MLP."""

    def __init__(self, dim: int, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, dim // heads
        self.attention_norm, self.ffn_norm = RMSNorm(dim), RMSNorm(dim)
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    @staticmethod
    def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), -1)
        return x * cos + rotated * sin

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.attention_norm(x)
        q = self.rope(split_heads(self.wq(h), self.head_dim), cos, sin)
        k = self.rope(split_heads(self.wk(h), self.head_dim), cos, sin)
        x = x + self.wo(scaled_attention(q, k, split_heads(self.wv(h), self.head_dim), mask))
        h = self.ffn_norm(x)
        return x + self.w2(nn.functional.silu(self.w1(h)) * self.w3(h))


class TinyLlama(nn.Module):
    """llama2.c-style decoder; the output projection shares the embedding matrix (tied)."""

    cos: torch.Tensor       # buffers (register_buffer), declared for the type checker
    sin: torch.Tensor
    mask: torch.Tensor

    def __init__(self, vocab: int, dim: int, hidden: int, heads: int, layers: int, seq: int) -> None:
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(LlamaBlock(dim, hidden, heads) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.output = nn.Linear(dim, vocab, bias=False)
        self.output.weight = self.tok_embeddings.weight
        hd = dim // heads
        freqs = 1.0 / (ROPE_THETA ** (torch.arange(0, hd // 2).float() / (hd // 2)))
        angles = torch.outer(torch.arange(seq).float(), freqs)
        self.register_buffer("cos", torch.cat((angles.cos(), angles.cos()), -1))
        self.register_buffer("sin", torch.cat((angles.sin(), angles.sin()), -1))
        self.register_buffer("mask", torch.full((seq, seq), float("-inf")).triu(1))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok_embeddings(tokens)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin, self.mask)
        return self.output(self.norm(x))


TINYLLAMA_VOCAB = 32000   # the Llama 2 SentencePiece vocabulary of llama2.c's models
TINYLLAMA_SEQ = 128       # Bochem et al.'s sequence length (autoregressive mode), here as one prompt pass


def tinyllama_42m() -> tuple[nn.Module, tuple[int, ...]]:
    """E 512, F 2048, 8 heads, 8 layers (Bochem et al., V-A), vocab 32000, S 128.

    Choices: the vocabulary is llama2.c's (Llama 2 tokenizer, 32000); the sequence is the paper's
    autoregressive context (128) run as one prompt pass, so every projection is a 128-row GEMM.
    Counts: 6.53 GMAC (4.43 in the blocks, 2.10 in the output projection); the ONNX file holds
    66.4 M parameters because the exporter stores the tied output matrix as its own transposed copy
    (33.6 M in the eight blocks, 16.4 M per embedding copy).
    """
    return TinyLlama(TINYLLAMA_VOCAB, 512, 2048, 8, 8, TINYLLAMA_SEQ), (1, TINYLLAMA_SEQ)


class NoNorm(nn.Module):
    """MobileBERT's NoNorm: an elementwise affine map instead of LayerNorm."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight, self.bias = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.zeros(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.weight + self.bias


class MobileBertLayer(nn.Module):
    """Bottleneck block: 512 -> 128 inside, 4-head attention, 4 stacked FFNs (128-512-128), 128 -> 512."""

    def __init__(self, hidden: int = 512, inner: int = 128, ffn: int = 512, heads: int = 4, stacks: int = 4) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, inner // heads
        self.bottleneck_input = nn.Sequential(nn.Linear(hidden, inner), NoNorm(inner))
        self.bottleneck_attention = nn.Sequential(nn.Linear(hidden, inner), NoNorm(inner))
        self.query, self.key = nn.Linear(inner, inner), nn.Linear(inner, inner)
        self.value = nn.Linear(hidden, inner)
        self.attn_out, self.attn_norm = nn.Linear(inner, inner), NoNorm(inner)
        self.ffn = nn.ModuleList(nn.ModuleDict({"up": nn.Linear(inner, ffn), "down": nn.Linear(ffn, inner),
                                                "norm": NoNorm(inner)}) for _ in range(stacks - 1))
        self.up, self.down, self.norm = nn.Linear(inner, ffn), nn.Linear(ffn, inner), NoNorm(inner)
        self.out, self.out_norm = nn.Linear(inner, hidden), NoNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        layer_in = self.bottleneck_input(x)
        shared = self.bottleneck_attention(x)
        q, k, v = (split_heads(self.query(shared), self.head_dim), split_heads(self.key(shared), self.head_dim),
                   split_heads(self.value(x), self.head_dim))
        h = self.attn_norm(self.attn_out(scaled_attention(q, k, v, None)) + layer_in)
        for f in self.ffn:
            assert isinstance(f, nn.ModuleDict)
            h = f["norm"](f["down"](torch.relu(f["up"](h))) + h)
        h = self.norm(self.down(torch.relu(self.up(h))) + h)
        return self.out_norm(self.out(h) + x)


class MobileBert(nn.Module):
    """MobileBERT (Sun et al. 2020): 24 bottleneck layers, trigram embedding 128 -> 512."""

    def __init__(self, vocab: int = 30522, seq: int = 268, hidden: int = 512, embed: int = 128,
                 layers: int = 24, max_positions: int = 512) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, embed)
        self.embed_proj = nn.Linear(3 * embed, hidden)
        self.seq = seq
        self.position = nn.Parameter(torch.zeros(1, max_positions, hidden))
        self.token_type = nn.Parameter(torch.zeros(1, 1, hidden))
        self.embed_norm = NoNorm(hidden)
        self.layers = nn.ModuleList(MobileBertLayer(hidden) for _ in range(layers))

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.word(tokens)
        pad = torch.zeros_like(e[:, :1])
        trigram = torch.cat((torch.cat((e[:, 1:], pad), 1), e, torch.cat((pad, e[:, :-1]), 1)), -1)
        x = self.embed_norm(self.embed_proj(trigram) + self.position[:, :self.seq] + self.token_type)
        for layer in self.layers:
            x = layer(x)
        return x


MOBILEBERT_SEQ = 268      # Bochem et al.'s sequence length


def mobilebert() -> tuple[nn.Module, tuple[int, ...]]:
    """E 512 (bottleneck 128), F 512, 4 heads, 24 layers, S 268 (Bochem et al., V-A).

    5.87 GMAC; 24.5 M parameters in the ONNX file, 3.3 % under MobileBERT's published 25.3 M,
    which also counts parts this encoder-only graph leaves out (the pooler, the 244 position
    embeddings beyond S, which the exporter drops).
    """
    return MobileBert(seq=MOBILEBERT_SEQ), (1, MOBILEBERT_SEQ)
