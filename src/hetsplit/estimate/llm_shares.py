"""What a device's share of a tensor-parallel stage costs, and the shares that balance a stage.

A tensor-parallel stage (``graph.llm.shares``) syncs twice per block: its members' partial sums of the
attention's output and of the FFN's are added up before each residual. Per block, each member computes
``attn_s[k]`` (the first half: the FFN's residual add of the block before, the attention's norm and its
``k`` KV-head groups' projections, attention and output columns) and ``ffn_s[u]`` (the second half: the
attention's residual add, the FFN's norm and its ``u`` units of FFN columns); a half ends when its
slowest member's does. The last stage's members compute ``head_s[v]`` (the final norm and ``v`` units of
the head's vocabulary rows), then the leader picks the greedy token from each member's best logit.

Each figure is the member's own step graph (``step_graph`` with its ``TensorShare``: one block, the
member's matrices at their own shapes) costed by its device's model, not a fraction of the whole
block's time: a small slice still pays each kernel's fixed cost. Each half also charges the member what
it loses to the sync that ends it beyond the sync's message ends (the runtime's all-reduce: its receive
posted, its partial handed over, the sum taken back, its waits to be woken), whatever its share: its
device's ``sync_s`` parameter (``SYNC_PARAM``; 0 where the device gives none; ``workflow.generate`` sets
it on this machine's devices from ``runtime.llm_message_probe``).

A sync is a star all-reduce over the cluster's links (``cluster.links``): every member sends its partial
to the leader, which adds them up and sends the sum back to each, one message at a time (the runtime's
``runtime.llm_pipeline_worker``); its time is the slowest member's message in and out, plus the
leader's message ends for the other members.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from hetsplit.cluster.types import Cluster, Device
from hetsplit.costs.llm_probe import PROMPT_OVERHEAD
from hetsplit.costs.models.base import device_model
from hetsplit.errors import PlanError
from hetsplit.graph.llm.config import LlmConfig, StoredTensor
from hetsplit.graph.llm.shares import TensorShare, shares_of, unit_edges
from hetsplit.graph.llm.step_graph import Phase, step_graph

FFN_UNITS = 32          # the grain of FFN-column shares (at most the FFN's width)
VOCAB_UNITS = 32        # the grain of head-row shares
FIRST_HALF = ("attn_norm", "attn_q", "attn_k", "attn_v", "attention", "attn_output", "ffn_add")
SECOND_HALF = ("attn_add", "ffn_norm", "ffn_gate", "ffn_up", "ffn_gate_mul", "ffn_down")
SYNC_PARAM = "sync_s"   # what a tensor-parallel member of a device loses per sync, beyond its message ends


@dataclass
class ShareCosts:
    """Per phase and device: seconds per block of each half by share size (``attn_s`` [2, D, K+1] by KV-head
    groups, ``ffn_s`` [2, D, U+1] by FFN units; each with the device's ``sync_s``) and of the head by vocabulary units (``head_s`` [2, D, V+1]);
    the units' edges (``grains``); bytes per block of the replicated norms, of one KV-head group's weights
    and of one FFN unit's (``block_bytes``), and of one vocabulary unit's head rows."""

    attn_s: np.ndarray
    ffn_s: np.ndarray
    head_s: np.ndarray
    grains: dict[str, list[int]]
    norm_bytes: float
    kv_group_bytes: float
    ffn_unit_bytes: float
    vocab_unit_bytes: float

    @property
    def units(self) -> dict[str, int]:
        return {p: len(e) - 1 for p, e in self.grains.items()}


def grains_of(cfg: LlmConfig) -> dict[str, list[int]]:
    """The edges shares are cut at: every KV-head group; ``FFN_UNITS`` runs of FFN columns; ``VOCAB_UNITS`` of rows."""
    return {"kv_heads": list(range(cfg.kv_heads + 1)), "ffn": unit_edges(cfg.ffn, min(FFN_UNITS, cfg.ffn)),
            "vocab": unit_edges(cfg.vocab, min(VOCAB_UNITS, cfg.vocab))}


def phase_device(device: Device, phase: int) -> Device:
    """``device`` as it costs a step of ``phase`` (0: the prompt, 1: a decode step): in the prompt's, its
    fixed cost per layer is its ``PROMPT_OVERHEAD`` where it gives one (``costs.llm_probe`` measures both
    steps: the prompt's runs a mask and attention over its rows that a decode step does not)."""
    if phase != 0 or PROMPT_OVERHEAD not in device.params:
        return device
    return replace(device, params={**device.params, "overhead_s": device.params[PROMPT_OVERHEAD]})


def share_costs(cfg: LlmConfig, tensors: dict[str, StoredTensor], cluster: Cluster, phases: tuple[Phase, Phase],
                weight_bytes: str) -> ShareCosts:
    """Cost every share size on every device type for both phases (one device-model call per type, phase
    and size: the sizes of the three parts move together, ``max(K, U, V) + 1`` graphs)."""
    grains = grains_of(cfg)
    units = {p: len(e) - 1 for p, e in grains.items()}
    one = replace(cfg, blocks=1)
    D, n = cluster.num_devices, max(units.values()) + 1
    attn, ffn, head = (np.zeros((2, D, units[p] + 1)) for p in ("kv_heads", "ffn", "vocab"))
    by_type = {t: [d for d, dev in enumerate(cluster.devices) if dev.type == t] for t in cluster.types}
    parts = {"kv_heads": (attn, FIRST_HALF), "ffn": (ffn, SECOND_HALF)}
    for p, phase in enumerate(phases):
        for i in range(n):
            counts = {q: min(i, units[q]) for q in units}
            share = shares_of([(counts["kv_heads"], counts["ffn"], counts["vocab"])], grains)[0]
            g = step_graph(one, tensors, phase, weight_bytes, share)
            for t, devices in by_type.items():
                secs = dict(zip(g.names, device_model(phase_device(cluster.representative(t), p)).layer_costs(g).time_s))
                for q, (table, roles) in parts.items():
                    if i <= units[q]:
                        table[p, devices, i] = sum(secs.get(f"b0.{r}", 0.0) for r in roles)
                if i <= units["vocab"]:
                    head[p, devices, i] = secs.get("final_norm", 0.0) + secs.get("head", 0.0)
    for table in (attn, ffn, head):          # a larger share never costs less (a model's rounding aside)
        np.maximum.accumulate(table, axis=2, out=table)
    sync = np.array([sync_seconds(dev.params) for dev in cluster.devices])
    attn += sync[None, :, None]
    ffn += sync[None, :, None]
    full = step_graph(one, tensors, Phase(1, 1), weight_bytes)
    pb = dict(zip(full.names, full.param_bytes))
    norms = pb["b0.attn_norm"] + pb["b0.ffn_norm"]
    kv_w = sum(pb[f"b0.{r}"] for r in ("attn_q", "attn_k", "attn_v", "attn_output"))
    ffn_w = sum(pb[f"b0.{r}"] for r in ("ffn_gate", "ffn_up", "ffn_down"))
    return ShareCosts(attn, ffn, head, grains, float(norms), kv_w / cfg.kv_heads, ffn_w / units["ffn"],
                      pb["head"] / units["vocab"])


def sync_seconds(params: dict[str, Any]) -> float:
    """A device's ``sync_s`` parameter: seconds >= 0 (absent: 0)."""
    value = float(params.get(SYNC_PARAM, 0.0))
    if not value >= 0.0:
        raise PlanError(f"device parameter {SYNC_PARAM} is {value!r}; give seconds >= 0")
    return value


def balanced_counts(table: np.ndarray, total: int) -> tuple[list[int], float]:
    """Counts ``c_i >= 0`` summing to ``total`` that minimize ``max_i table[i, c_i]`` (each row nondecreasing),
    and that maximum. Exact: the least threshold whose largest affordable counts reach ``total`` (every
    threshold worth trying is an entry of ``table``); the counts are then trimmed to ``total`` from the
    slowest member's end."""
    candidates = np.unique(table)
    lo, hi = 0, len(candidates) - 1

    def reach(tau: float) -> np.ndarray:
        affords: np.ndarray = (table <= tau).sum(axis=1) - 1      # the largest count each member affords (-1: none)
        return affords

    while lo < hi:
        mid = (lo + hi) // 2
        r = reach(candidates[mid])
        if (r >= 0).all() and r.sum() >= total:
            hi = mid
        else:
            lo = mid + 1
    counts = np.minimum(reach(candidates[lo]), total).astype(int)
    extra = int(counts.sum()) - total
    for i in np.argsort(-table[np.arange(len(counts)), counts], kind="stable"):   # trim where it costs most
        cut = min(extra, int(counts[i]))
        counts[i] -= cut
        extra -= cut
    value = float(max(table[i, c] for i, c in enumerate(counts)))
    return [int(c) for c in counts], value


def balanced_shares(sc: ShareCosts, members: list[int], phase: int) -> list[TensorShare] | None:
    """The shares of ``members`` (device indices, leader first) that balance each half and the head for
    ``phase``; None when a member would hold neither a KV-head group nor an FFN column (the group without
    it is as fast, less its syncs)."""
    units = sc.units
    kv, _ = balanced_counts(sc.attn_s[phase, members], units["kv_heads"])
    ffn, _ = balanced_counts(sc.ffn_s[phase, members], units["ffn"])
    vocab, _ = balanced_counts(sc.head_s[phase, members], units["vocab"])
    if any(a == 0 and b == 0 for a, b in zip(kv, ffn)):
        return None
    return shares_of(list(zip(kv, ffn, vocab)), sc.grains)


def equal_shares(sc: ShareCosts, members: int) -> list[TensorShare]:
    """Each part cut as evenly as its units allow, in member order (distributed-llama's equal slices)."""
    def even(total: int) -> list[int]:
        return [total // members + (1 if i < total % members else 0) for i in range(members)]

    units = sc.units
    return shares_of(list(zip(even(units["kv_heads"]), even(units["ffn"]), even(units["vocab"]))), sc.grains)


def unit_counts(sc: ShareCosts, share: TensorShare, where: str) -> tuple[int, int, int]:
    """A share's sizes in units (KV-head groups, FFN units, vocabulary units); PlanError naming ``where``
    when an edge is not one of the grain's (``grains_of``: what the planner cuts at)."""
    out = []
    for part in ("kv_heads", "ffn", "vocab"):
        edges = sc.grains[part]
        a, b = getattr(share, part)
        if a not in edges or b not in edges:
            raise PlanError(f"{where}: {part} [{a}, {b}] is not cut at the planner's grain ({part} edges "
                            f"{edges[:4]}...{edges[-1:]})")
        out.append(edges.index(b) - edges.index(a))
    return out[0], out[1], out[2]
