"""The splits other LLM tools choose, so that hetsplit's plan can be run and predicted beside them.

``memory_proportional`` is exo's default (its ring-memory-weighted partitioning) and what llama.cpp's RPC
backend does unless ``--tensor-split`` is tuned by hand: every device takes a run of whole blocks in
proportion to its memory, the devices in order of memory, largest first. It uses every device, whatever
its speed or link, so a slow device with much memory slows every token.

``equal_slices`` is distributed-llama's: one tensor-parallel stage of every device, each holding an equal
slice of every block's KV-head groups, FFN columns and head rows, whatever its speed (distributed-llama
also requires the KV heads to divide evenly by the devices; here a part that does not divide is cut as
evenly as its units allow, the first devices taking one more, so the rule applies to any count).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from hetsplit.errors import UsageError
from hetsplit.estimate.llm import LlmCosts, Stage, StageShare
from hetsplit.estimate.llm_shares import equal_shares


def memory_proportional(costs: LlmCosts, devices: list[str] | None = None) -> list[Stage]:
    """exo's rule over ``devices`` (default: all of the cluster's): sorted by memory (largest first, then
    name), device i's run of blocks ends at floor(L x its cumulative share of the memory), the last at L;
    a device whose run is empty is left out, as exo leaves out an empty shard. The stages may not fit:
    the rule does not look (``predict_pipeline`` says whether they do)."""
    names = devices or costs.devices
    memory = {n: float(costs.capacity[costs.cluster.index(n)]) for n in names}
    unbounded = sorted(n for n, b in memory.items() if not math.isfinite(b))
    if unbounded:
        raise UsageError(f"memory-proportional split: devices {unbounded} have no memory size in the cluster; "
                         "the rule divides the blocks by memory")
    order = sorted(names, key=lambda n: (-memory[n], n))
    total, blocks = sum(memory.values()), costs.config.blocks
    stages, start, share = [], 0, 0.0
    for i, name in enumerate(order):
        share += memory[name] / total
        stop = blocks if i == len(order) - 1 else min(blocks, math.floor(blocks * share + 1e-9))
        if stop > start:
            stages.append(Stage(name, start, stop))
            start = stop
    return stages


def equal_slices(costs: LlmCosts, devices: list[str] | None = None) -> list[Stage]:
    """distributed-llama's rule over ``devices`` (default: all of the cluster's, in its order; the first
    leads, as its root node does): one stage of every block, each device an equal slice of each part."""
    names = devices or costs.devices
    if len(names) < 2:
        raise UsageError(f"equal tensor-parallel slices need two or more devices, got {names}")
    shares = equal_shares(costs.shares, len(names))
    return [Stage(names[0], 0, costs.config.blocks, tuple(StageShare(n, sh) for n, sh in zip(names, shares)))]


RULES: dict[str, Callable[[LlmCosts, list[str] | None], list[Stage]]] = {"memory-proportional": memory_proportional,
                                                                         "equal-slices": equal_slices}


def rule_stages(costs: LlmCosts, rule: str, devices: list[str] | None = None) -> list[Stage]:
    """The stages ``rule`` (one of ``RULES``) gives over ``devices``."""
    if rule not in RULES:
        raise UsageError(f"split rule {rule!r}: choose one of {', '.join(RULES)}")
    return RULES[rule](costs, devices)
