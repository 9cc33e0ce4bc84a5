"""A model cut into segments of consecutive layers: its Transformer blocks, then its head.

Memory models double-buffer weights segment by segment (Bochem et al. load the next block's
weights while the current one runs), and reproductions cut pipelines at block boundaries. The
cut comes from the graph's structure (``find_blocks``):

- block b starts at its attention's first projection, moved back over the weightless layers right
  before it that only it reads (a pre-norm block's norm; a post-norm block's input norm, i.e. the
  previous block's last norm); the first block starts at layer 0 (the embedding joins it);
- the *head* starts at the first fully connected layer after the last block's last sliced layer
  (the LM head); the layers between (the last residual add, the final norm) stay in the last block;
- a graph without attention has a segment per layer (weights then double-buffer layer by layer).
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.errors import ModelError
from hetsplit.graph.transformer import find_blocks
from hetsplit.graph.types import GEMM, Graph


@dataclass(frozen=True)
class Segments:
    """``of_layer[i]``: the segment of layer i (0 .. ``count`` - 1, in layer order); segments
    ``0 .. blocks - 1`` are Transformer blocks, a segment ``blocks`` is the head (a graph without
    attention: no blocks, a segment per layer)."""

    of_layer: tuple[int, ...]
    blocks: int

    @property
    def count(self) -> int:
        return max(self.of_layer) + 1 if self.of_layer else 0

    def is_block(self, segment: int) -> bool:
        return segment < self.blocks


def block_starts(graph: Graph) -> list[int]:
    """Index of the first layer of every Transformer block (the first is 0; see the module
    docstring). Empty for a graph without attention."""
    try:
        blocks = find_blocks(graph)
    except ModelError:
        return []
    readers: list[set[int]] = [set() for _ in graph.layers]
    for t in graph.tensors:
        if t.producer >= 0:
            readers[t.producer].update(t.consumers)
    starts = [0]
    for b in blocks[1:]:
        first = start = min(b.attention.projections)
        while start - 1 > starts[-1] and graph.layers[start - 1].param_bytes == 0 and readers[start - 1] and \
                min(readers[start - 1]) >= first:
            start -= 1
        starts.append(start)
    return starts


def head_start(graph: Graph) -> int | None:
    """The first layer of the head (module docstring), None when the graph has none."""
    try:
        blocks = find_blocks(graph)
    except ModelError:
        return None
    last = max(blocks[-1].sliced_layers)
    return next((i for i in range(last + 1, graph.num_layers) if graph.layers[i].op == GEMM), None)


def segments(graph: Graph) -> Segments:
    """The segment of every layer of ``graph``."""
    starts = block_starts(graph)
    if not starts:
        return Segments(tuple(range(graph.num_layers)), 0)
    head = head_start(graph)
    bounds = starts + ([head] if head is not None else [])
    out, s = [], 0
    for i in range(graph.num_layers):
        while s + 1 < len(bounds) and i >= bounds[s + 1]:
            s += 1
        out.append(s)
    return Segments(tuple(out), len(starts))
