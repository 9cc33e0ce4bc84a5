"""Tensor-parallel Transformer plans: Bochem et al.'s partition (seed 002) as a plan/2 mapping.

Per block (``graph/transformer.find_blocks``), over chips ``d0 .. dN-1``:

- Q, K and V projections: column shards on head boundaries (chip j holds heads ``h_j``), the
  attention (scores, softmax, context, the views and RoPE between) on the same heads, never combined;
- output projection: row shards on the same heads, partial sums all-reduced (``sum`` combine on
  ``d0``, in groups of ``tree``: reduce to the group leaders, then to ``d0``);
- each feed-forward: its up projections by columns of F, the elementwise layers between on the same
  slices, the down projection by rows of F, all-reduced the same way;
- fully connected layers after the last block (the LM head) by columns, concatenated on ``d0``;
- everything else (embedding, norms, residual adds) runs whole on ``d0``: the skip
  connection is added where the reduction ends (``d0`` holds the block input), the norm runs once,
  and its output goes back down the same tree (``broadcast`` combine) to the chips that read it.

No weight is held twice; each block needs two synchronizations (attention, FFN; one per FFN when a
block has several, as MobileBERT's stacked FFNs). When N does not divide the heads or F, the slices
differ by at most one unit (the larger ones first); chips beyond the number of heads take part in
the FFNs only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import PlanError
from hetsplit.graph.transformer import TransformerBlock, find_blocks
from hetsplit.graph.types import GEMM, INPUT, MATMUL, Graph
from hetsplit.estimate.evaluate import evaluate
from hetsplit.plan.types import Combine, Placement, Plan, Shard
from hetsplit.search.base import Deadline, register_partitioner

ALGORITHM = "tensor-parallel"


def even_slices(total: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` of ``min(parts, total)`` slices of ``total`` units, sizes differing by at most
    one (the larger first)."""
    if total < 1 or parts < 1:
        raise PlanError(f"cannot slice {total} units over {parts} chips")
    n = min(parts, total)
    base, extra = divmod(total, n)
    out, pos = [], 0
    for j in range(n):
        size = base + (1 if j < extra else 0)
        out.append((pos, pos + size))
        pos += size
    return out


def _shards(devices: Sequence[str], axis: str, slices: list[tuple[int, int]], unit: int) -> tuple[Shard, ...]:
    return tuple(Shard(d, axis, a * unit, b * unit) for d, (a, b) in zip(devices, slices))


@dataclass(frozen=True)
class BlockSlices:
    """How one block is sliced: heads and FFN columns per chip (chip order = device order)."""

    heads: list[tuple[int, int]]
    ffn: list[list[tuple[int, int]]]


def block_slices(block: TransformerBlock, chips: int) -> BlockSlices:
    return BlockSlices(even_slices(block.attention.heads, chips),
                       [even_slices(f.width, chips) for f in block.ffns])


def tensor_parallel_plan(graph: Graph, devices: Sequence[str], tree: int = 4,
                         blocks: list[TransformerBlock] | None = None) -> Plan:
    """The tensor-parallel mapping of ``graph`` over ``devices`` (the first is the root)."""
    if not devices:
        raise PlanError("tensor-parallel: no devices to split over")
    if len(set(devices)) != len(devices):
        raise PlanError(f"tensor-parallel: devices {list(devices)} name one device twice")
    if tree < 0 or tree == 1:
        raise PlanError(f"tensor-parallel: tree must be 0 (flat) or a group size >= 2, got {tree}")
    blocks = find_blocks(graph) if blocks is None else blocks
    root = devices[0]
    names = graph.names
    assign: dict[str, Placement] = {name: root for name in names}
    combine: dict[str, Combine] = {}
    if len(devices) > 1:
        for block in blocks:
            _slice_block(graph, block, list(devices), tree, assign, combine)
        _slice_head(graph, blocks, list(devices), assign, combine)
        _broadcasts(graph, assign, combine, root, tree)
    first = block_slices(blocks[0], len(devices)) if blocks else BlockSlices([], [])
    params = {"chips": len(devices), "tree": tree, "blocks": len(blocks),
              "heads_per_chip": [b - a for a, b in first.heads],
              "ffn_per_chip": [[b - a for a, b in f] for f in first.ffn]}
    return Plan(graph.name, "", ALGORITHM, params=params, assign=assign, combine=combine)


def _slice_block(graph: Graph, block: TransformerBlock, devices: list[str], tree: int,
                 assign: dict[str, Placement], combine: dict[str, Combine]) -> None:
    a = block.attention
    sl = block_slices(block, len(devices))
    names = graph.names
    hdev = devices[:len(sl.heads)]
    unit: dict[int, int] = {}
    for p in a.projections:
        assign[names[p]] = _shards(hdev, "out", sl.heads, a.head_dim)
        unit[p] = a.head_dim
    for c in a.heads_chain:       # topological order: each follows its producer's unit
        if graph.layers[c].op == MATMUL:
            unit[c] = 1
        else:
            unit[c] = next(unit[p] for p in graph.predecessors[c] if p in unit)
        assign[names[c]] = _shards(hdev, "out", sl.heads, unit[c])
    assign[names[a.out]] = _shards(hdev, "in", sl.heads, a.head_dim)
    combine[names[a.out]] = Combine("sum", devices[0], tree)
    for f, slices in zip(block.ffns, sl.ffn):
        fdev = devices[:len(slices)]
        for i in (*f.up, *f.inner):
            assign[names[i]] = _shards(fdev, "out", slices, 1)
        assign[names[f.down]] = _shards(fdev, "in", slices, 1)
        combine[names[f.down]] = Combine("sum", devices[0], tree)


def _slice_head(graph: Graph, blocks: list[TransformerBlock], devices: list[str], assign: dict[str, Placement],
                combine: dict[str, Combine]) -> None:
    """Fully connected layers after the last block (the LM head): columns over every chip, concat on the root."""
    last = max((i for b in blocks for i in b.sliced_layers), default=-1)
    for i in range(last + 1, graph.num_layers):
        layer = graph.layers[i]
        if layer.op == GEMM and int(layer.attrs.get("n", 0) or 0) >= len(devices):
            slices = even_slices(int(layer.attrs["n"]), len(devices))
            assign[graph.names[i]] = _shards(devices, "out", slices, 1)
            combine[graph.names[i]] = Combine("concat", devices[0])


def _broadcasts(graph: Graph, assign: dict[str, Placement], combine: dict[str, Combine], root: str,
                tree: int) -> None:
    """Whole layers on the root whose outputs sharded layers elsewhere read go down the tree."""
    for t in graph.tensors:
        if t.producer == INPUT or assign[graph.names[t.producer]] != root:
            continue
        readers = {s.device for c in t.consumers for place in [assign[graph.names[c]]]
                   if not isinstance(place, str) for s in place}
        if readers - {root}:
            combine[graph.names[t.producer]] = Combine("broadcast", root, tree)


@register_partitioner(ALGORITHM)
@dataclass
class TensorParallel:
    """``--algo tensor-parallel``: heads and F sliced over the first ``chips`` devices (default all),
    all-reduced in groups of ``tree`` (None: groups of 4; one given must not exceed the chips)."""

    chips: int | None = None
    tree: int | None = None
    name: str = ALGORITHM
    time_budget_s: float | None = None    # past it (checked before and after the slicing), TimeBudgetSpent

    def solve(self, problem: SplitProblem) -> list[Plan]:
        names = problem.cluster.names
        n = len(names) if self.chips is None else self.chips
        if not 1 <= n <= len(names):
            raise PlanError(f"tensor-parallel: {n} chips asked for, cluster {problem.cluster.name!r} has "
                            f"{len(names)} devices")
        if self.tree is not None and self.tree > n:
            raise PlanError(f"tensor-parallel: groups of {self.tree} (--tree) over {n} chips would be one flat "
                            f"group; give --tree 2..{n} or 0 (flat)" if n >= 2 else
                            f"tensor-parallel: groups of {self.tree} (--tree) over 1 chip: nothing to reduce; "
                            "drop --tree or give more chips")
        deadline = Deadline(self.name, self.time_budget_s)
        deadline.check("its slicing")
        plan = tensor_parallel_plan(problem.graph, names[:n], 4 if self.tree is None else self.tree)
        deadline.check("its slicing")
        plan.cluster = problem.cluster.name
        plan.metrics = evaluate(problem, plan)
        return [plan]
