"""The exact planner of pipeline decode: which devices (each alone included), in which order, and
which whole blocks each stage takes, minimizing one stream's time per token (``decode``) or its time
to first token (``ttft``) as ``estimate.llm`` predicts them, every device within its memory.

Solver: dynamic programming over (devices used, last device, blocks done), once per first device
(the token's way back from the last stage to the first depends on both). A stage's cost is a prefix
sum of block costs plus the embedding on the first and the head on the last, so a transition is a
min over the previous boundary, vectorized; states no cheaper than the best complete plan so far are
not extended when even the cheapest device for each remaining block and the head cannot make them
better (a lower bound: every cost is >= 0); the optimum is exact (tested against enumeration of
every ordered device subset and every cut). States: 2^D x D x (L + 1) per first device.

For B streams decoding at once (``plan_streams``) the objective is the period of the pipeline as a
cyclic event graph, the longer of one stream's cycle / B and its busiest stage or hop: exact by a
binary search over a cap on every station, one DP per cap (see ``plan_streams``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from hetsplit.errors import InfeasibleError, UsageError
from hetsplit.estimate.llm import DECODE, PREFILL, LlmCosts, Stage, streams_period

OBJECTIVES = {"decode": DECODE, "ttft": PREFILL}
MAX_DEVICES = 10        # 2^D states per first device: beyond this the exact DP takes minutes


@dataclass
class PipelineChoice:
    """A plan and its objective value (seconds)."""

    stages: list[Stage]
    value: float


def _phase(objective: str) -> int:
    if objective not in OBJECTIVES:
        raise UsageError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[objective]


def _tables(costs: LlmCosts, phase: int) -> tuple[np.ndarray, np.ndarray]:
    """Stage seconds [D, L+1, L+1] (inf where b >= j or it does not fit) by (device, first, stop)."""
    D, L = costs.cluster.num_devices, costs.config.blocks
    pre = np.concatenate([np.zeros((D, 1)), np.cumsum(costs.block_s[phase], axis=1)], axis=1)   # D x L+1
    cost = pre[:, None, :] - pre[:, :, None]                                                      # [d, b, j]
    cost[:, 0, :] += costs.embed_s[phase][:, None]
    cost[:, :, L] += costs.head_s[phase][:, None]
    mem = np.full((L + 1, L + 1), np.inf)
    for b in range(L):
        for j in range(b + 1, L + 1):
            mem[b, j] = costs.stage_bytes(b, j)
    fits = (mem[None] <= costs.capacity[:, None, None]) & np.triu(np.ones((L + 1, L + 1), bool), 1)[None]
    return np.where(fits, cost, np.inf), fits


def stage_value(costs: LlmCosts, stages: list[Stage], phase: int) -> float:
    """The objective of ``stages`` as the planner counts it (equal to ``predict_pipeline``'s figure)."""
    idx = [costs.cluster.index(s.device) for s in stages]
    v = sum(costs.stage_s(phase, d, s.first, s.stop) for s, d in zip(stages, idx))
    v += sum(costs.hop_s[phase, a, b] for a, b in zip(idx, idx[1:]))
    return float(v + (costs.back_s[idx[-1], idx[0]] if len(idx) > 1 else 0.0))


def plan_pipeline(costs: LlmCosts, objective: str = "decode", devices: list[str] | None = None) -> PipelineChoice:
    """The optimal pipeline over ``devices`` (default: all of the cluster's); InfeasibleError when none fits."""
    phase = _phase(objective)
    allowed = _allowed(costs, devices)
    table, _ = _tables(costs, phase)
    value, stages = _best_pipeline(costs, phase, allowed, table, costs.hop_s[phase], costs.back_s)
    if not stages:
        raise _infeasible(costs, allowed)
    return PipelineChoice(stages, value)


def plan_streams(costs: LlmCosts, devices: list[str] | None = None) -> PipelineChoice:
    """The pipeline that decodes ``costs.options.streams`` generations at once fastest: least seconds per
    token over all of them (``estimate.llm.streams_period``: the longer of one stream's cycle / streams
    and the busiest stage or hop). Exact: for a cap on every stage and hop, the least cycle is the DP's
    (stations over the cap left out); that least cycle falls as the cap rises, so a binary search over
    the caps (the stage and hop times themselves) finds where cycle / streams meets the cap, and the
    optimum is the plan there or at the cap below (a dozen DPs)."""
    allowed = _allowed(costs, devices)
    streams = costs.options.streams
    table, _ = _tables(costs, DECODE)
    hop, back = costs.hop_s[DECODE], costs.back_s
    off = ~np.eye(len(hop), dtype=bool)
    caps = np.unique(np.concatenate([table[np.isfinite(table)], hop[off], back[off]]))

    def under(cap: float) -> tuple[float, list[Stage]]:
        """The least cycle with every stage and hop at most ``cap``, and its plan."""
        return _best_pipeline(costs, DECODE, allowed, np.where(table <= cap, table, np.inf),
                              np.where(hop <= cap, hop, np.inf), np.where(back <= cap, back, np.inf))

    lo, hi = 0, len(caps) - 1          # the least cap whose least cycle / streams is at most the cap
    if under(caps[hi])[0] / streams > caps[hi]:
        lo = hi
    while lo < hi:
        mid = (lo + hi) // 2
        if under(caps[mid])[0] / streams <= caps[mid]:
            hi = mid
        else:
            lo = mid + 1
    found = [under(caps[k]) for k in {lo, max(lo - 1, 0)}]
    best = min((f for f in found if f[1]), key=lambda f: streams_value(costs, f[1]), default=None)
    if best is None:
        raise _infeasible(costs, allowed)
    return PipelineChoice(best[1], streams_value(costs, best[1]))


def streams_value(costs: LlmCosts, stages: list[Stage]) -> float:
    """Seconds per token over ``costs.options.streams`` streams through ``stages``, as the planner counts it."""
    idx = [costs.cluster.index(s.device) for s in stages]
    times = [costs.stage_s(DECODE, d, s.first, s.stop) for s, d in zip(stages, idx)]
    times += [float(costs.hop_s[DECODE, a, b]) for a, b in zip(idx, idx[1:])]
    times += [float(costs.back_s[idx[-1], idx[0]])] if len(idx) > 1 else []
    return streams_period(stage_value(costs, stages, DECODE), max(times), costs.options.streams)


def every_pipeline(costs: LlmCosts) -> Iterator[list[Stage]]:
    """Every pipeline that fits memory: each ordered subset of the devices, each cut of the blocks into that
    many non-empty stages (the brute force the exact planners are checked against; exponential)."""
    L = costs.config.blocks
    for k in range(1, costs.cluster.num_devices + 1):
        for order in itertools.permutations(costs.devices, k):
            for cuts in itertools.combinations(range(1, L), k - 1):
                edges = [0, *cuts, L]
                stages = [Stage(d, a, b) for d, a, b in zip(order, edges, edges[1:])]
                if all(costs.stage_bytes(s.first, s.stop) <= costs.capacity[costs.cluster.index(s.device)]
                       for s in stages):
                    yield stages


def _allowed(costs: LlmCosts, devices: list[str] | None) -> list[int]:
    allowed = [costs.cluster.index(n) for n in (devices or costs.devices)]
    if len(allowed) > MAX_DEVICES:
        raise UsageError(f"the exact pipeline planner takes at most {MAX_DEVICES} devices; cluster "
                         f"{costs.cluster.name!r} has {len(allowed)}: describe the devices you mean to use")
    return allowed


def _infeasible(costs: LlmCosts, allowed: list[int]) -> InfeasibleError:
    return InfeasibleError(f"no pipeline of {costs.config.name!r} fits the memory of cluster "
                           f"{costs.cluster.name!r}'s devices {[costs.devices[i] for i in allowed]} "
                           f"(KV cache at {costs.options.context} positions for {costs.options.streams} "
                           "stream(s) included)")


def _best_pipeline(costs: LlmCosts, phase: int, allowed: list[int], table: np.ndarray, hop: np.ndarray,
                   back: np.ndarray) -> tuple[float, list[Stage]]:
    """The least sum of stage (``table`` [D, L+1, L+1]) and hop seconds over ordered subsets of ``allowed``
    and their cuts, and its stages ((inf, []) when nothing is finite)."""
    L = costs.config.blocks
    best: tuple[float, list[Stage]] = (np.inf, [])
    blocks = costs.block_s[phase][allowed].min(axis=0)                        # cheapest device per block
    rest = np.append(np.cumsum(blocks[::-1])[::-1], 0.0) + costs.head_s[phase][allowed].min()
    rest[L] = 0.0                                       # rest[j]: a lower bound on what blocks j.. still cost
    for f in allowed:                                   # the devices alone first: a bound for the rest
        if table[f, 0, L] < best[0]:
            best = (float(table[f, 0, L]), [Stage(costs.devices[f], 0, L)])
    for f in allowed:
        # dp[(mask, d)] = (cost over boundary j [L+1], parent (prev mask, prev d, prev boundary) per j)
        dp: dict[tuple[int, int], tuple[np.ndarray, list]] = {(1 << f, f): (table[f, 0].copy(), [None] * (L + 1))}
        for size in range(1, len(allowed) + 1):
            layer = [(k, v) for k, v in dp.items() if bin(k[0]).count("1") == size]
            for (mask, d), (val, _) in layer:
                if val[L] < np.inf:
                    total = val[L] + (back[d, f] if d != f else 0.0)
                    if total < best[0]:
                        best = (total, _unwind(dp, costs, mask, d, L))
                if not (val[1:L] + rest[1:L] < best[0]).any():   # no extension can beat the best so far
                    continue
                for e in allowed:
                    if mask >> e & 1:
                        continue
                    cand = val[:, None] + hop[d, e] + table[e]          # [b, j]
                    cand[0, :] = np.inf                                 # only the first stage starts at 0
                    j_best = cand.min(axis=0)
                    if not (j_best + rest < best[0]).any():
                        continue
                    arg = cand.argmin(axis=0)
                    key = (mask | 1 << e, e)
                    old, parents = dp.get(key, (np.full(L + 1, np.inf), [None] * (L + 1)))
                    better = j_best < old
                    for j in np.nonzero(better)[0]:
                        parents[j] = (mask, d, int(arg[j]))
                    dp[key] = (np.where(better, j_best, old), parents)
    return best


def _unwind(dp: dict, costs: LlmCosts, mask: int, d: int, j: int) -> list[Stage]:
    stages = []
    while True:
        parent = dp[(mask, d)][1][j]
        b = 0 if parent is None else parent[2]
        stages.append(Stage(costs.devices[d], b, j))
        if parent is None:
            return stages[::-1]
        mask, d, j = parent


def best_single(costs: LlmCosts, objective: str = "decode", devices: list[str] | None = None) -> PipelineChoice | None:
    """The best device alone among ``devices`` (default: all of the cluster's; None when none holds the
    whole model)."""
    phase = _phase(objective)
    options = [PipelineChoice([Stage(n, 0, costs.config.blocks)], 0.0) for n in (devices or costs.devices)
               if costs.stage_bytes(0, costs.config.blocks) <= costs.capacity[costs.cluster.index(n)]]
    for o in options:
        o.value = stage_value(costs, o.stages, phase)
    return min(options, key=lambda o: o.value, default=None)
