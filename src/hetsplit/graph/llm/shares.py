"""One device's share of a tensor-parallel stage of a Llama-family decoder.

A stage whose blocks are computed by several devices at once gives each a ``TensorShare``: a run of
KV-head groups (with the query heads that read them, their K/V cache and their columns of the attention's
output projection), a run of FFN columns (rows of the gate and up projections, columns of the down
projection) and, on the stage that ends with the LM head, a run of vocabulary rows of the head. Each
member computes its partial sums of the attention's and the FFN's outputs, and the stage adds them up
(two syncs per block) before the residual; the norms and the residual adds are computed by every member.
A member may hold no KV-head group or no FFN columns (its partial is then 0): shares are uneven by
design, in proportion to each device's speed. The shares of one stage cover each range once, in order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hetsplit.errors import PlanError
from hetsplit.graph.llm.config import LlmConfig

PARTS = ("kv_heads", "ffn", "vocab")


@dataclass(frozen=True)
class TensorShare:
    """KV-head groups ``kv_heads``, FFN columns ``ffn`` and LM-head rows ``vocab``, each ``(start, stop)``."""

    kv_heads: tuple[int, int]
    ffn: tuple[int, int]
    vocab: tuple[int, int]

    def size(self, part: str) -> int:
        a, b = getattr(self, part)
        return int(b - a)

    def to_dict(self) -> dict[str, list[int]]:
        return {p: list(getattr(self, p)) for p in PARTS}

    @classmethod
    def from_dict(cls, doc: Any, where: str) -> "TensorShare":
        if not isinstance(doc, dict) or set(doc) != set(PARTS):
            raise PlanError(f"{where}: a share is {{\"kv_heads\": [A, B], \"ffn\": [A, B], \"vocab\": [A, B]}}")
        ranges = []
        for p in PARTS:
            r = doc[p]
            if not (isinstance(r, list) and len(r) == 2 and all(type(x) is int and x >= 0 for x in r) and r[0] <= r[1]):
                raise PlanError(f"{where}.{p} must be [START, STOP] with 0 <= START <= STOP, got {r!r}")
            ranges.append((r[0], r[1]))
        return cls(*ranges)


def totals(cfg: LlmConfig) -> dict[str, int]:
    """What the shares of a stage divide: KV-head groups, FFN columns, vocabulary rows."""
    return {"kv_heads": cfg.kv_heads, "ffn": cfg.ffn, "vocab": cfg.vocab}


def check_shares(shares: list[TensorShare], cfg: LlmConfig, where: str) -> None:
    """PlanError unless ``shares`` (two or more) cover each part of ``cfg`` once, in order."""
    if len(shares) < 2:
        raise PlanError(f"{where}: a tensor-parallel stage has two or more shares, got {len(shares)}")
    for part, total in totals(cfg).items():
        edges = [getattr(s, part) for s in shares]
        if edges[0][0] != 0 or edges[-1][1] != total or any(a[1] != b[0] for a, b in zip(edges, edges[1:])):
            raise PlanError(f"{where}: the shares' {part} {[list(e) for e in edges]} do not cover 0..{total} in order")
    idle = [i for i, s in enumerate(shares) if s.size("ffn") == 0 and s.size("kv_heads") == 0]
    if idle:
        raise PlanError(f"{where}: shares {idle} hold no KV-head group and no FFN column")


def unit_edges(total: int, units: int) -> list[int]:
    """``units + 1`` edges cutting ``total`` into ``units`` runs of about equal size (the planner's grain)."""
    return [round(total * u / units) for u in range(units + 1)]


def shares_of(counts: list[tuple[int, int, int]], grains: dict[str, list[int]]) -> list[TensorShare]:
    """Consecutive shares from per-member counts (KV-head groups, FFN units, vocabulary units), the units cut at
    ``grains[part]`` (``unit_edges``; KV-head groups are their own unit)."""
    out, at = [], {p: 0 for p in PARTS}
    for kv, ffn, vocab in counts:
        ranges = []
        for part, n in zip(PARTS, (kv, ffn, vocab)):
            edges = grains[part]
            ranges.append((edges[at[part]], edges[at[part] + n]))
            at[part] += n
        out.append(TensorShare(*ranges))
    return out
