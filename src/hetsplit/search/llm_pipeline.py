"""The exact planner of LLM decode: which devices (each alone included), in which order, which whole
blocks each stage takes and, with ``tensor_parallel``, which stages several devices compute together
and each one's share, minimizing one stream's time per token (``decode``) or its time to first token
(``ttft``) as ``estimate.llm`` predicts them, every device within its memory.

A stage is a *group*: one device, or (tensor-parallel) two or more with their shares
(``estimate.llm_shares.balanced_shares``: each half of a block and the head balanced over the members
for the objective's phase; the leader is the member fastest on a whole block). Shares are chosen for
speed alone; a group whose shares do not fit its members' memory for a run of blocks is not offered
those blocks (a memory-aware uneven share is not searched). Solver: dynamic
programming over (devices used, last group, blocks done), once per first group (the token's way back from
the last stage to the first depends on both). A stage's cost is a prefix sum of block costs plus the
embedding on the first and the head on the last, so a transition is a min over the previous boundary,
vectorized; states no cheaper than the best complete plan so far are not extended when even the
cheapest group for each remaining block and the head cannot make them better (a lower bound: every
cost is >= 0). The optimum is exact over the groups given (tested against enumeration of every ordered
sequence of disjoint groups and every cut). States: 2^D x G x (L + 1) per first group.

For B streams decoding at once (``plan_streams``) the objective is the period of the pipeline as a
cyclic event graph, the longer of one stream's cycle / B and its busiest stage or hop: exact by a
binary search over a cap on every station, one DP per cap (see ``plan_streams``); pipelines of single
devices only.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator
from dataclasses import dataclass

import numpy as np

from hetsplit.errors import InfeasibleError, UsageError
from hetsplit.estimate.llm import DECODE, PREFILL, TOKEN_BYTES, LlmCosts, Stage, StageShare, streams_period
from hetsplit.estimate.llm_shares import balanced_shares
from hetsplit.graph.llm.shares import TensorShare

OBJECTIVES = {"decode": DECODE, "ttft": PREFILL}
MAX_DEVICES = 10        # 2^D states per first device: beyond this the exact DP takes minutes
MAX_TP_DEVICES = 8      # tensor-parallel groups are searched over clusters of at most this many devices
MAX_TP_GROUP = 4        # and of at most this many members


@dataclass(frozen=True)
class Group:
    """What one stage may run on: device indices (the leader first) and, for two or more, their shares."""

    members: tuple[int, ...]
    shares: tuple[TensorShare, ...] = ()

    @property
    def mask(self) -> int:
        return sum(1 << d for d in self.members)

    def stage(self, costs: LlmCosts, first: int, stop: int) -> Stage:
        names = [costs.devices[d] for d in self.members]
        return Stage(names[0], first, stop, tuple(StageShare(n, sh) for n, sh in zip(names, self.shares)))


@dataclass
class PipelineChoice:
    """A plan and its objective value (seconds)."""

    stages: list[Stage]
    value: float


def _phase(objective: str) -> int:
    if objective not in OBJECTIVES:
        raise UsageError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    return OBJECTIVES[objective]


def singles(allowed: list[int]) -> list[Group]:
    return [Group((d,)) for d in allowed]


def tensor_parallel_groups(costs: LlmCosts, allowed: list[int], phase: int,
                           max_members: int = MAX_TP_GROUP) -> list[Group]:
    """Every subset of ``allowed`` of 2 .. ``max_members`` devices as a tensor-parallel group: the member
    fastest on a whole block leads (then cluster order), shares balanced for ``phase``; subsets where a
    member would hold nothing are left out (``balanced_shares``)."""
    speed = costs.block_s[phase][:, 0]
    out = []
    for k in range(2, min(max_members, len(allowed)) + 1):
        for subset in itertools.combinations(allowed, k):
            members = sorted(subset, key=lambda d: (speed[d], d))
            shares = balanced_shares(costs.shares, members, phase)
            if shares is not None:
                out.append(Group(tuple(members), tuple(shares)))
    return out


def _tables(costs: LlmCosts, phase: int, groups: list[Group]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per group: stage seconds [G, L+1, L+1] (inf where b >= j or it does not fit) by (group, first, stop),
    each block's seconds [G, L] and the head's [G] (for the planner's lower bound)."""
    L = costs.config.blocks
    table = np.full((len(groups), L + 1, L + 1), np.inf)
    blocks, heads = np.zeros((len(groups), L)), np.zeros(len(groups))
    upper = np.triu(np.ones((L + 1, L + 1), bool), 1)
    whole = np.full((L + 1, L + 1), np.inf)            # bytes of a stage of whole blocks b..j-1 on one device
    for b in range(L):
        for j in range(b + 1, L + 1):
            whole[b, j] = costs.stage_bytes(b, j)
    for g, group in enumerate(groups):
        if not group.shares:
            d = group.members[0]
            pre = np.concatenate([[0.0], np.cumsum(costs.block_s[phase][d])])
            cost = pre[None, :] - pre[:, None]
            cost[0, :] += costs.embed_s[phase][d]
            cost[:, L] += costs.head_s[phase][d]
            blocks[g], heads[g] = costs.block_s[phase][d], costs.head_s[phase][d]
        else:
            per, embed, head = costs.parallel_parts(phase, group.stage(costs, 0, L))
            n = np.arange(L + 1)
            cost = (n[None, :] - n[:, None]) * per
            cost[0, :] += embed
            cost[:, L] += head
            blocks[g], heads[g] = per, head
        table[g] = np.where(_fits(costs, group, whole) & upper, cost, np.inf)
    return table, blocks, heads


def _fits(costs: LlmCosts, group: Group, whole: np.ndarray) -> np.ndarray:
    """[L+1, L+1]: whether each member holds what the group's stage of blocks b..j-1 puts on it
    (``LlmCosts.stage_memory``: ``stage_bytes``, or ``member_bytes_table``)."""
    if not group.shares:
        return whole <= costs.capacity[group.members[0]]
    fits = np.ones_like(whole, dtype=bool)
    for d, held in costs.member_bytes_table(group.stage(costs, 0, costs.config.blocks)).items():
        fits &= held <= costs.capacity[d]
    return fits


def _hops(costs: LlmCosts, phase: int, groups: list[Group]) -> tuple[np.ndarray, np.ndarray]:
    """[G, G]: the hidden state from each group's leader to every member of each other group; the token
    back the same way (from a tensor-parallel group alone to its own other members on the diagonal):
    ``LlmCosts.fan_out_table`` for every leader and group at once."""
    leaders = [g.members[0] for g in groups]
    members = [g.members for g in groups]
    hop = costs.fan_out_table(members, costs.hidden_bytes(phase))[leaders]
    np.fill_diagonal(hop, 0.0)
    return hop, costs.fan_out_table(members, TOKEN_BYTES)[leaders]


def stage_value(costs: LlmCosts, stages: list[Stage], phase: int) -> float:
    """The objective of ``stages`` as the planner counts it (equal to ``predict_pipeline``'s figure)."""
    v = sum(costs.stage_time(phase, s) for s in stages)
    v += sum(costs.hop_between_s(phase, a, b) for a, b in zip(stages, stages[1:]))
    return float(v + (costs.back_between_s(stages[-1], stages[0]) if len(stages) > 1 or stages[0].shares else 0.0))


def candidate_groups(costs: LlmCosts, allowed: list[int], phase: int, tensor_parallel: bool) -> list[Group]:
    """The groups a stage may run on: every allowed device alone and, with ``tensor_parallel`` on a cluster
    of at most ``MAX_TP_DEVICES`` devices, every tensor-parallel group of them."""
    groups = singles(allowed)
    if tensor_parallel and len(allowed) <= MAX_TP_DEVICES:
        groups += tensor_parallel_groups(costs, allowed, phase)
    return groups


def plan_pipeline(costs: LlmCosts, objective: str = "decode", devices: list[str] | None = None,
                  tensor_parallel: bool = False, leaders: Collection[str] | None = None) -> PipelineChoice:
    """The optimal plan over ``devices`` (default: all of the cluster's): pipelines of single devices, and
    with ``tensor_parallel`` tensor-parallel stages too; ``leaders``: the devices that may lead the first
    stage (default: any; the driver's host's, for a run across hosts); InfeasibleError when none fits."""
    phase = _phase(objective)
    allowed = _allowed(costs, devices)
    groups = candidate_groups(costs, allowed, phase, tensor_parallel)
    table, blocks, heads = _tables(costs, phase, groups)
    hop, back = _hops(costs, phase, groups)
    value, stages = _best_pipeline(costs, groups, table, blocks, heads, hop, back, _may_lead(costs, groups, leaders))
    if not stages:
        raise _infeasible(costs, allowed)
    return PipelineChoice(stages, value)


def plan_streams(costs: LlmCosts, devices: list[str] | None = None, tensor_parallel: bool = False,
                 leaders: Collection[str] | None = None) -> PipelineChoice:
    """The pipeline that decodes ``costs.options.streams`` generations at once fastest: least seconds per
    token over all of them (``estimate.llm.streams_period``: the longer of one stream's cycle / streams
    and the busiest stage or hop). Exact: for a cap on every stage and hop, the least cycle is the DP's
    (stations over the cap left out); that least cycle falls as the cap rises, so a binary search over
    the caps (the stage and hop times themselves) finds where cycle / streams meets the cap, and the
    optimum is the plan there or at the cap below (a dozen DPs). With ``tensor_parallel``, over the same
    groups as ``plan_pipeline`` (a tensor-parallel stage is one station, its syncs in it); ``leaders`` as
    there."""
    allowed = _allowed(costs, devices)
    streams = costs.options.streams
    groups = candidate_groups(costs, allowed, DECODE, tensor_parallel)
    lead = _may_lead(costs, groups, leaders)
    table, blocks, heads = _tables(costs, DECODE, groups)
    hop, back = _hops(costs, DECODE, groups)
    off = ~np.eye(len(hop), dtype=bool)
    caps = np.unique(np.concatenate([table[np.isfinite(table)], hop[off], back.ravel()]))

    def under(cap: float) -> tuple[float, list[Stage]]:
        """The least cycle with every stage and hop at most ``cap``, and its plan."""
        return _best_pipeline(costs, groups, np.where(table <= cap, table, np.inf), blocks, heads,
                              np.where(hop <= cap, hop, np.inf), np.where(back <= cap, back, np.inf), lead)

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
    times = [costs.stage_time(DECODE, s) for s in stages]
    times += [costs.hop_between_s(DECODE, a, b) for a, b in zip(stages, stages[1:])]
    times += [costs.back_between_s(stages[-1], stages[0])] if len(stages) > 1 or stages[0].shares else []
    return streams_period(stage_value(costs, stages, DECODE), max(times), costs.options.streams)


def every_pipeline(costs: LlmCosts, groups: list[Group] | None = None) -> Iterator[list[Stage]]:
    """Every plan that fits memory: each ordered sequence of disjoint ``groups`` (default: every device
    alone), each cut of the blocks into that many non-empty stages (the brute force the exact planners are
    checked against; exponential)."""
    L = costs.config.blocks
    groups = groups if groups is not None else singles(list(range(costs.cluster.num_devices)))
    for k in range(1, costs.cluster.num_devices + 1):
        for order in itertools.permutations(groups, k):
            if not _disjoint(order):
                continue
            for cuts in itertools.combinations(range(1, L), k - 1):
                edges = [0, *cuts, L]
                stages = [g.stage(costs, a, b) for g, a, b in zip(order, edges, edges[1:])]
                if all(costs.stage_memory(s)[d] <= costs.capacity[costs.cluster.index(d)]
                       for s in stages for d in s.devices):
                    yield stages


def _disjoint(groups: tuple[Group, ...]) -> bool:
    seen = 0
    for g in groups:
        if seen & g.mask:
            return False
        seen |= g.mask
    return True


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


def _may_lead(costs: LlmCosts, groups: list[Group], leaders: Collection[str] | None) -> list[bool]:
    """Per group, whether it may be the first stage: its leader is one of ``leaders`` (None: every group)."""
    if leaders is None:
        return [True] * len(groups)
    unknown = sorted(set(leaders) - set(costs.devices))
    if unknown:
        raise UsageError(f"first-stage devices {unknown}: not devices of the cluster ({', '.join(costs.devices)})")
    return [costs.devices[g.members[0]] in leaders for g in groups]


def _best_pipeline(costs: LlmCosts, groups: list[Group], table: np.ndarray, blocks: np.ndarray, heads: np.ndarray,
                   hop: np.ndarray, back: np.ndarray, may_lead: list[bool]) -> tuple[float, list[Stage]]:
    """The least sum of stage (``table`` [G, L+1, L+1]) and hop (``hop``, ``back`` [G, G]) seconds over
    ordered sequences of disjoint ``groups`` and their cuts, the first one of those that ``may_lead``, and
    its stages ((inf, []) when nothing is finite)."""
    L = costs.config.blocks
    best: tuple[float, list[Stage]] = (np.inf, [])
    cheapest = blocks.min(axis=0)                                             # cheapest group per block
    rest = np.append(np.cumsum(cheapest[::-1])[::-1], 0.0) + heads.min()
    rest[L] = 0.0                                       # rest[j]: a lower bound on what blocks j.. still cost
    masks = [g.mask for g in groups]
    firsts = [f for f in range(len(groups)) if may_lead[f]]
    for f in firsts:                                    # every group alone first: a bound for the rest
        alone = table[f, 0, L] + back[f, f]
        if alone < best[0]:
            best = (float(alone), [groups[f].stage(costs, 0, L)])
    for f in firsts:
        # dp[(mask, g)] = (cost over boundary j [L+1], parent (prev mask, prev g, prev boundary) per j)
        dp: dict[tuple[int, int], tuple[np.ndarray, list]] = {(masks[f], f): (table[f, 0].copy(), [None] * (L + 1))}
        for size in range(bin(masks[f]).count("1"), costs.cluster.num_devices + 1):
            # every state of this many devices is final: transitions only add devices
            for key in [k for k in dp if bin(k[0]).count("1") == size]:
                mask, g = key
                val = dp[key][0]
                if val[L] < np.inf and key != (masks[f], f):
                    total = val[L] + back[g, f]
                    if total < best[0]:
                        best = (total, _unwind(dp, costs, groups, mask, g, L))
                if not (val[1:L] + rest[1:L] < best[0]).any():   # no extension can beat the best so far
                    continue
                for e, m in enumerate(masks):
                    if mask & m:
                        continue
                    cand = val[:, None] + hop[g, e] + table[e]          # [b, j]
                    cand[0, :] = np.inf                                 # only the first stage starts at 0
                    j_best = cand.min(axis=0)
                    if not (j_best + rest < best[0]).any():
                        continue
                    arg = cand.argmin(axis=0)
                    new = (mask | m, e)
                    old, parents = dp.get(new, (np.full(L + 1, np.inf), [None] * (L + 1)))
                    better = j_best < old
                    for j in np.nonzero(better)[0]:
                        parents[j] = (mask, g, int(arg[j]))
                    dp[new] = (np.where(better, j_best, old), parents)
    return best


def _unwind(dp: dict, costs: LlmCosts, groups: list[Group], mask: int, g: int, j: int) -> list[Stage]:
    stages = []
    while True:
        parent = dp[(mask, g)][1][j]
        b = 0 if parent is None else parent[2]
        stages.append(groups[g].stage(costs, b, j))
        if parent is None:
            return stages[::-1]
        mask, g, j = parent


def best_single(costs: LlmCosts, objective: str = "decode", devices: list[str] | None = None) -> PipelineChoice | None:
    """The best device alone among ``devices`` (default: all of the cluster's; None when none holds the
    whole model)."""
    phase = _phase(objective)
    options = [PipelineChoice([Stage(n, 0, costs.config.blocks)], 0.0) for n in (devices or costs.devices)
               if costs.stage_bytes(0, costs.config.blocks) <= costs.capacity[costs.cluster.index(n)]]
    for o in options:
        o.value = stage_value(costs, o.stages, phase)
    return min(options, key=lambda o: o.value, default=None)
