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

A stage may be tensor-parallel (``Stage.shares``: several devices, each with a ``TensorShare``): per block
its slowest member's half, a sync, its slowest member's other half, a sync (``estimate.llm_shares``);
the stage before sends its hidden state to every member, the leader (the stage's first device) sends it
on; the last stage's leader gathers each member's best logit and sends the token to every member of the
first stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from hetsplit.cluster.types import Cluster
from hetsplit.costs.models.base import device_model
from hetsplit.errors import PlanError
from hetsplit.estimate.llm_shares import ShareCosts, phase_device, share_costs, unit_counts
from hetsplit.graph.llm.config import LlmConfig, StoredTensor
from hetsplit.graph.llm.shares import TensorShare, check_shares
from hetsplit.graph.llm.step_graph import F32, STORED, Phase, block_of, step_graph

PREFILL, DECODE = 0, 1
TOKEN_BYTES = 8
PICK_BYTES = 16          # a member's best logit and its index, sent to the last stage's leader


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


@dataclass(frozen=True)
class StageShare:
    """A member of a tensor-parallel stage: its device and its share."""

    device: str
    share: TensorShare


@dataclass(frozen=True)
class Stage:
    """Blocks ``first .. stop - 1`` on ``device``; tensor-parallel when ``shares`` is given (every member's
    share, the leader, ``device``, first)."""

    device: str
    first: int
    stop: int
    shares: tuple[StageShare, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(m.device for m in self.shares) if self.shares else (self.device,)


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
    shares: ShareCosts
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return self.cluster.names

    def fan_out_s(self, src: int, dsts: list[int], nbytes: float) -> float:
        """One message of ``nbytes`` from ``src`` to each of ``dsts`` in turn: the sender's ends one after the
        other, the slowest wire and receiving end after them (a single destination: ``hop_seconds``)."""
        return float(self.fan_out_table([dsts], nbytes)[src, 0])

    def fan_out_table(self, receivers: list[list[int]] | list[tuple[int, ...]], nbytes: float) -> np.ndarray:
        """[D, G]: ``fan_out_s`` from each device to each list of ``receivers`` (the sender itself left out;
        0 where none is left), for every sender and list at once."""
        links, idx = self.cluster.links, np.arange(self.cluster.num_devices)
        end = np.asarray(links.end(idx, nbytes), dtype=float)
        reach = np.asarray(links.time(idx[:, None], idx[None, :], nbytes), dtype=float) + end[None, :]
        out = np.zeros((len(idx), len(receivers)))
        for g, members in enumerate(receivers):
            to = np.array(members, dtype=int)
            itself = idx[:, None] == to[None, :]
            count = len(to) - itself.sum(axis=1)
            slowest = np.where(itself, -np.inf, reach[:, to]).max(axis=1) if len(to) else np.zeros(len(idx))
            out[:, g] = np.where(count > 0, count * end + slowest, 0.0)
        return out

    def fan_in_s(self, srcs: list[int], dst: int, nbytes: float) -> float:
        """One message of ``nbytes`` from each of ``srcs`` to ``dst``: the slowest sender's wire, then the
        receiver's ends one after the other."""
        links = self.cluster.links
        others = [d for d in srcs if d != dst]
        if not others:
            return 0.0
        return float(max(links.end(d, nbytes) + links.time(d, dst, nbytes) for d in others)
                     + len(others) * links.end(dst, nbytes))

    def hidden_bytes(self, phase: int) -> float:
        return float((self.options.prompt_tokens if phase == PREFILL else 1) * self.config.dim * F32)

    def sync_s(self, phase: int, members: list[int]) -> float:
        """One star all-reduce of the hidden state over ``members`` (leader first)."""
        nbytes = self.hidden_bytes(phase)
        return self.fan_in_s(members[1:], members[0], nbytes) + self.fan_out_s(members[0], members[1:], nbytes)

    def member_counts(self, stage: Stage) -> list[tuple[int, tuple[int, int, int]]]:
        """Per member of a tensor-parallel stage: its device index and its share in units."""
        return [(self.cluster.index(m.device), unit_counts(self.shares, m.share, f"stage {stage.first}..{stage.stop}"))
                for m in stage.shares]

    def member_s(self, phase: int, stage: Stage) -> dict[str, float]:
        """Each device's own compute per step in ``stage`` (its share's, without waiting for the others)."""
        if not stage.shares:
            return {stage.device: self.stage_s(phase, self.cluster.index(stage.device), stage.first, stage.stop)}
        sc, n, out = self.shares, stage.stop - stage.first, {}
        for d, (kv, ffn, vocab) in self.member_counts(stage):
            t = n * (sc.attn_s[phase, d, kv] + sc.ffn_s[phase, d, ffn])
            t += self.embed_s[phase, d] if stage.first == 0 else 0.0
            t += sc.head_s[phase, d, vocab] if stage.stop == self.config.blocks else 0.0
            out[self.devices[d]] = float(t)
        return out

    def sync_total_s(self, phase: int, stage: Stage) -> float:
        """What a tensor-parallel stage spends per step in its syncs (two per block; the head's pick)."""
        if not stage.shares:
            return 0.0
        idx = [self.cluster.index(m.device) for m in stage.shares]
        t = 2 * (stage.stop - stage.first) * self.sync_s(phase, idx)
        return t + (self.fan_in_s(idx[1:], idx[0], PICK_BYTES) if stage.stop == self.config.blocks else 0.0)

    def parallel_parts(self, phase: int, stage: Stage) -> tuple[float, float, float]:
        """A tensor-parallel stage's seconds per block (its slowest member per half, two syncs), for the
        embedding (its slowest member) and for the head (its slowest member's rows, then the pick), whatever
        its blocks."""
        sc, counts = self.shares, self.member_counts(stage)
        idx = [d for d, _ in counts]
        block = max(sc.attn_s[phase, d, c[0]] for d, c in counts) + max(sc.ffn_s[phase, d, c[1]] for d, c in counts)
        embed = max(self.embed_s[phase, d] for d in idx)
        head = max(sc.head_s[phase, d, c[2]] for d, c in counts) + self.fan_in_s(idx[1:], idx[0], PICK_BYTES)
        return float(block + 2 * self.sync_s(phase, idx)), float(embed), float(head)

    def stage_time(self, phase: int, stage: Stage) -> float:
        """A stage's seconds per step: its device's, or a tensor-parallel stage's (``parallel_parts``)."""
        if not stage.shares:
            return self.stage_s(phase, self.cluster.index(stage.device), stage.first, stage.stop)
        block, embed, head = self.parallel_parts(phase, stage)
        return (stage.stop - stage.first) * block + (embed if stage.first == 0 else 0.0) + \
            (head if stage.stop == self.config.blocks else 0.0)

    def hop_between_s(self, phase: int, a: Stage, b: Stage) -> float:
        """The hidden state from stage ``a``'s leader to every member of ``b``."""
        return self.fan_out_s(self.cluster.index(a.device), [self.cluster.index(d) for d in b.devices],
                              self.hidden_bytes(phase))

    def back_between_s(self, last: Stage, first: Stage) -> float:
        """The token from the last stage's leader to every member of the first."""
        return self.fan_out_s(self.cluster.index(last.device), [self.cluster.index(d) for d in first.devices],
                              TOKEN_BYTES)

    def stage_memory(self, stage: Stage) -> dict[str, float]:
        """Bytes each device of ``stage`` holds: its weights and its KV cache at the target context."""
        if not stage.shares:
            return {stage.device: self.stage_bytes(stage.first, stage.stop)}
        return {self.devices[d]: float(held[stage.first, stage.stop])
                for d, held in self.member_bytes_table(stage).items()}

    def member_bytes_table(self, stage: Stage) -> dict[int, np.ndarray]:
        """Per member of a tensor-parallel stage (device index), [L+1, L+1]: the bytes it would hold were the
        stage's blocks b..j-1, its shares as they are: per block its norms, its KV-head groups' weights and
        cache and its FFN columns; the whole embedding on the first stage; its head rows on the last (none
        beside a tied embedding it holds whole)."""
        sc, L = self.shares, self.config.blocks
        kv_group = self.config.kv_bytes_per_position(1, F32) / self.config.kv_heads * self.options.context * \
            self.options.streams
        n = np.arange(L + 1)
        count = np.maximum(n[None, :] - n[:, None], 0)
        first, last = (n == 0)[:, None], (n == L)[None, :]
        return {d: count * (sc.norm_bytes + kv * (sc.kv_group_bytes + kv_group) + ffn * sc.ffn_unit_bytes)
                + first * float(self.embed_bytes) + last * ~(first & self.config.tied) * (vocab * sc.vocab_unit_bytes)
                for d, (kv, ffn, vocab) in self.member_counts(stage)}

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
            costs = device_model(phase_device(cluster.representative(t), p)).layer_costs(g)
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
    shares = share_costs(cfg, tensors, cluster, options.phases(), options.weight_bytes)
    return LlmCosts(cfg, cluster, options, block_s, embed_s, head_s, hop_s, back_s, weights + kv, embed_bytes,
                    int(head_w), cluster.memory_bytes.astype(float), shares, sources)


def hop_seconds(cluster: Cluster, nbytes: float) -> np.ndarray:
    """D x D: a message of ``nbytes`` from each device to each other, its wire and both its ends
    (``cluster.links``); 0 from a device to itself."""
    links = cluster.links
    d = np.arange(cluster.num_devices)
    out = links.time(d[:, None], d[None, :], nbytes) + links.end(d[:, None], nbytes) + links.end(d[None, :], nbytes)
    return np.where(np.eye(len(d), dtype=bool), 0.0, out)




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

    @property
    def stream_s_per_token(self) -> float:
        """Each stream's seconds per token while ``streams`` decode at once (``s_per_token`` for one)."""
        return self.s_per_token if self.streams == 1 else self.streams / self.streams_tokens_per_s

    def to_dict(self) -> dict[str, Any]:
        return {"ttft_s": self.ttft_s, "s_per_token": self.s_per_token, "tokens_per_s": self.tokens_per_s,
                "compute_s": self.compute_s, "hops_s": self.hops_s, "memory_bytes": self.memory_bytes,
                "fits": self.fits, "streams": self.streams, "streams_tokens_per_s": self.streams_tokens_per_s}


def check_stages(costs: LlmCosts, stages: list[Stage]) -> None:
    names = costs.devices
    devices = [d for s in stages for d in s.devices]
    bad = [d for d in devices if d not in names]
    if bad:
        raise PlanError(f"stage devices {bad} are not in cluster {costs.cluster.name!r} (devices: {names})")
    if len(set(devices)) != len(devices):
        raise PlanError(f"a device runs two stages or shares: {devices}")
    edges = [0] + [s.stop for s in stages]
    if [s.first for s in stages] != edges[:-1] or edges[-1] != costs.config.blocks or \
            any(s.first >= s.stop for s in stages):
        raise PlanError(f"stages {[(s.first, s.stop) for s in stages]} do not cover blocks 0..{costs.config.blocks - 1}")
    for s in stages:
        if s.shares:
            where = f"stage of blocks {s.first}..{s.stop - 1}"
            if s.shares[0].device != s.device:
                raise PlanError(f"{where}: its leader {s.device!r} must hold the first share")
            check_shares([m.share for m in s.shares], costs.config, where)
            costs.member_counts(s)          # every edge on the planner's grain


def predict_pipeline(costs: LlmCosts, stages: list[Stage]) -> PipelinePrediction:
    """TTFT and time per token of one stream through ``stages`` (each stage waits for the one before)."""
    check_stages(costs, stages)
    compute: dict[str, list[float]] = {}
    for s in stages:
        per = [costs.member_s(p, s) for p in (PREFILL, DECODE)]
        compute.update({d: [per[0][d], per[1][d]] for d in s.devices})
    hops = {}
    for a, b in zip(stages, stages[1:]):
        hops[f"{a.device}->{'+'.join(b.devices)}"] = [costs.hop_between_s(p, a, b) for p in (PREFILL, DECODE)]
    for s in stages:
        if s.shares:
            hops[f"{'+'.join(s.devices)} syncs"] = [costs.sync_total_s(p, s) for p in (PREFILL, DECODE)]
    if len(stages) > 1 or stages[0].shares:
        back = costs.back_between_s(stages[-1], stages[0])
        hops[f"{stages[-1].device}->{'+'.join(stages[0].devices)}"] = [back, back]
    stage_t = [[costs.stage_time(p, s) for s in stages] for p in (PREFILL, DECODE)]
    between = [[costs.hop_between_s(p, a, b) for a, b in zip(stages, stages[1:])] for p in (PREFILL, DECODE)]
    back = costs.back_between_s(stages[-1], stages[0]) if len(stages) > 1 or stages[0].shares else 0.0
    total = [sum(stage_t[p]) + sum(between[p]) + back for p in (PREFILL, DECODE)]
    memory = {d: b for s in stages for d, b in costs.stage_memory(s).items()}
    fits = all(memory[d] <= costs.capacity[costs.cluster.index(d)] for d in memory)
    busiest = max(stage_t[DECODE] + between[DECODE] + [back])
    period = streams_period(total[1], busiest, costs.options.streams)
    return PipelinePrediction(total[0], total[1], compute, hops, memory, fits, costs.options.streams, 1.0 / period)


def streams_period(cycle_s: float, busiest_s: float, streams: int) -> float:
    """Seconds between tokens of ``streams`` generations decoding at once through a pipeline: each stream's
    token goes round every stage and hop (``cycle_s``: one stream's time per token), each stage and each
    link serving one token at a time (``busiest_s``: the longest of them). The period of this cyclic
    event graph is its slowest circuit: the loop, holding ``streams`` tokens, or one station, holding one
    (exact for fixed times; no batching: each stream's step is its own)."""
    return max(cycle_s / streams, busiest_s)
