"""Prefill and decode of a Llama-family model, costed per device and link from the cluster's device
models, for pipelines of whole blocks (``LlmCosts``, ``predict_pipeline``).

Each device type costs one prefill step (S prompt tokens) and one decode step (one token against
the mean context of the generation) through its device model (``costs.models``) on the step's graph
(``graph.llm.step_graph``): per block, the embedding and the LM head. A pipeline's TTFT is its
stages' prefill times plus one hop per boundary with S hidden vectors and the first token's way
back; its time per token the same with one vector. A hop is costed by the link rule
(``cluster.links``): its wire (latency + bytes over bandwidth) and the CPU of its two message ends (the
links' ``message`` figures: what the runtime's calibration measured, on a cluster that runs here; 0
where the cluster gives none). Nothing else is charged per step: the runtime has no measured
per-step cost of the pipeline's own loop. Memory per device: its weights (stored bytes, or float32
where the executor dequantizes) and its blocks' KV cache at the target context.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsplit.cluster.types import Cluster
from hetsplit.costs.models.base import device_model
from hetsplit.errors import PlanError
from hetsplit.graph.llm.config import LlmConfig, StoredTensor
from hetsplit.graph.llm.step_graph import F32, STORED, Phase, block_of, step_graph

PREFILL, DECODE = 0, 1
TOKEN_BYTES = 8


@dataclass(frozen=True)
class LlmCostOptions:
    """The generation costed: ``prompt_tokens`` in one prefill, ``new_tokens`` decoded; weights at
    ``weight_bytes`` (``stored`` | ``float32``); ``streams`` generations at once, each with its own KV
    cache on every stage."""

    prompt_tokens: int
    new_tokens: int
    weight_bytes: str = STORED
    streams: int = 1

    @property
    def context(self) -> int:
        """The positions the KV cache holds at the end."""
        return self.prompt_tokens + self.new_tokens

    def phases(self) -> tuple[Phase, Phase]:
        """Prefill of the prompt; decode at the mean context of the generated tokens."""
        mean = self.prompt_tokens + max(self.new_tokens - 1, 0) / 2
        return Phase(self.prompt_tokens, self.prompt_tokens), Phase(1, max(1, int(round(mean))))


@dataclass
class LlmCosts:
    """Per phase (PREFILL, DECODE) and device: each block's seconds (``block_s`` [2, D, L]), the embedding's
    and the head's (``embed_s``, ``head_s`` [2, D]); hop seconds between devices per phase
    (``hop_s`` [2, D, D]) and the token's way back (``back_s`` [D, D]); memory (``block_bytes`` [L],
    ``embed_bytes``, ``head_bytes``, ``capacity`` [D])."""

    config: LlmConfig
    cluster: Cluster
    options: LlmCostOptions
    block_s: np.ndarray
    embed_s: np.ndarray
    head_s: np.ndarray
    hop_s: np.ndarray
    back_s: np.ndarray
    block_bytes: np.ndarray
    embed_bytes: int
    head_bytes: int
    capacity: np.ndarray
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return self.cluster.names

    def stage_s(self, phase: int, d: int, first: int, stop: int) -> float:
        s = float(self.block_s[phase, d, first:stop].sum())
        return s + (self.embed_s[phase, d] if first == 0 else 0.0) + \
            (self.head_s[phase, d] if stop == self.config.blocks else 0.0)

    def stage_bytes(self, first: int, stop: int) -> float:
        b = float(self.block_bytes[first:stop].sum())
        embed, head = first == 0, stop == self.config.blocks
        if self.config.tied and embed and head:
            return b + self.embed_bytes
        return b + (self.embed_bytes if embed else 0) + (self.head_bytes if head else 0)


def _by_part(cfg: LlmConfig, names: list[str], values: np.ndarray) -> tuple[np.ndarray, float, float]:
    blocks, embed, head = np.zeros(cfg.blocks), 0.0, 0.0
    for n, v in zip(names, values):
        b = block_of(n)
        if b is not None:
            blocks[b] += v
        elif n == "embed":
            embed += v
        else:
            head += v
    return blocks, embed, head


def llm_costs(cfg: LlmConfig, tensors: dict[str, StoredTensor], cluster: Cluster,
              options: LlmCostOptions) -> LlmCosts:
    """Cost both phases on every device of ``cluster`` (one device model call per type and phase)."""
    if options.prompt_tokens < 1 or options.new_tokens < 1:
        raise PlanError("a generation needs at least one prompt token and one new token")
    if options.streams < 1:
        raise PlanError(f"streams {options.streams}: cost at least one stream")
    D, L = cluster.num_devices, cfg.blocks
    block_s, embed_s, head_s = np.zeros((2, D, L)), np.zeros((2, D)), np.zeros((2, D))
    sources = {}
    for p, phase in enumerate(options.phases()):
        g = step_graph(cfg, tensors, phase, options.weight_bytes)
        for t in cluster.types:
            costs = device_model(cluster.representative(t)).layer_costs(g)
            sources[t] = costs.source
            blocks, embed, head = _by_part(cfg, g.names, costs.time_s)
            for d, dev in enumerate(cluster.devices):
                if dev.type == t:
                    block_s[p, d], embed_s[p, d], head_s[p, d] = blocks, embed, head
    hidden = [options.prompt_tokens * cfg.dim * F32, cfg.dim * F32]
    hop_s = np.stack([hop_seconds(cluster, b) for b in hidden])
    back_s = hop_seconds(cluster, TOKEN_BYTES)
    g = step_graph(cfg, tensors, Phase(1, 1), options.weight_bytes)
    weights, embed_w, head_w = _by_part(cfg, g.names, g.param_bytes)
    kv = cfg.kv_bytes_per_position(1, F32) * options.context * options.streams
    embed_t = tensors["token_embd.weight"]
    embed_bytes = embed_t.stored_bytes if options.weight_bytes == STORED else embed_t.elements * F32
    return LlmCosts(cfg, cluster, options, block_s, embed_s, head_s, hop_s, back_s, weights + kv, embed_bytes,
                    int(head_w), cluster.memory_bytes.astype(float), sources)


def hop_seconds(cluster: Cluster, nbytes: float) -> np.ndarray:
    """D x D: a message of ``nbytes`` from each device to each other, its wire and both its ends
    (``cluster.links``); 0 from a device to itself."""
    links = cluster.links
    d = np.arange(cluster.num_devices)
    out = links.time(d[:, None], d[None, :], nbytes) + links.end(d[:, None], nbytes) + links.end(d[None, :], nbytes)
    return np.where(np.eye(len(d), dtype=bool), 0.0, out)


@dataclass(frozen=True)
class Stage:
    device: str
    first: int
    stop: int


@dataclass
class PipelinePrediction:
    """What a pipeline of whole blocks is predicted to give for one stream."""

    ttft_s: float
    s_per_token: float
    compute_s: dict[str, list[float]]        # device -> [prefill, decode] seconds of its stage per step
    hops_s: dict[str, list[float]]           # "a->b" -> [prefill, decode] seconds per step
    memory_bytes: dict[str, float]
    fits: bool
    streams: int = 1
    streams_tokens_per_s: float = 0.0        # all ``streams`` together (``streams_period``)

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.s_per_token

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_s": self.ttft_s, "s_per_token": self.s_per_token, "tokens_per_s": self.tokens_per_s,
                "compute_s": self.compute_s, "hops_s": self.hops_s, "memory_bytes": self.memory_bytes,
                "fits": self.fits, "streams": self.streams, "streams_tokens_per_s": self.streams_tokens_per_s}


def check_stages(costs: LlmCosts, stages: list[Stage]) -> None:
    names = costs.devices
    bad = [s.device for s in stages if s.device not in names]
    if bad:
        raise PlanError(f"stage devices {bad} are not in cluster {costs.cluster.name!r} (devices: {names})")
    if len({s.device for s in stages}) != len(stages):
        raise PlanError(f"a device runs two stages: {[s.device for s in stages]}")
    edges = [0] + [s.stop for s in stages]
    if [s.first for s in stages] != edges[:-1] or edges[-1] != costs.config.blocks or \
            any(s.first >= s.stop for s in stages):
        raise PlanError(f"stages {[(s.first, s.stop) for s in stages]} do not cover blocks 0..{costs.config.blocks - 1}")


def predict_pipeline(costs: LlmCosts, stages: list[Stage]) -> PipelinePrediction:
    """TTFT and time per token of one stream through ``stages`` (each stage waits for the one before)."""
    check_stages(costs, stages)
    idx = [costs.cluster.index(s.device) for s in stages]
    compute = {s.device: [costs.stage_s(p, d, s.first, s.stop) for p in (PREFILL, DECODE)] for s, d in zip(stages, idx)}
    hops = {}
    for a, b in zip(idx, idx[1:]):
        hops[f"{costs.devices[a]}->{costs.devices[b]}"] = [float(costs.hop_s[p, a, b]) for p in (PREFILL, DECODE)]
    if len(idx) > 1:
        back = float(costs.back_s[idx[-1], idx[0]])
        hops[f"{costs.devices[idx[-1]]}->{costs.devices[idx[0]]}"] = [back, back]
    total = [sum(v[p] for v in compute.values()) + sum(v[p] for v in hops.values()) for p in (PREFILL, DECODE)]
    memory = {s.device: costs.stage_bytes(s.first, s.stop) for s in stages}
    fits = all(memory[s.device] <= costs.capacity[d] for s, d in zip(stages, idx))
    busiest = max([v[DECODE] for v in compute.values()] + [v[DECODE] for v in hops.values()])
    period = streams_period(total[1], busiest, costs.options.streams)
    return PipelinePrediction(total[0], total[1], compute, hops, memory, fits, costs.options.streams, 1.0 / period)


def streams_period(cycle_s: float, busiest_s: float, streams: int) -> float:
    """Seconds between tokens of ``streams`` generations decoding at once through a pipeline: each stream's
    token goes round every stage and hop (``cycle_s``: one stream's time per token), each stage and each
    link serving one token at a time (``busiest_s``: the longest of them). The period of this cyclic
    event graph is its slowest circuit: the loop, holding ``streams`` tokens, or one station, holding one
    (exact for fixed times; no batching: each stream's step is its own)."""
    return max(cycle_s / streams, busiest_s)
