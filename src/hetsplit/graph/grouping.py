"""Group ONNX nodes into deployable layers, the way inference frameworks fuse them.

Rules (nodes visited in topological order; each group grows right after it starts):

1. Constant-only nodes (every input an initializer or another constant-only node: Constant,
   Transpose of a weight, shape arithmetic after ``prepare_model`` folded ``Shape``) join the
   earliest layer that reads them.
2. Conv, ConvTranspose, Gemm and MatMul each start a layer ("anchor"). The anchor absorbs its
   epilogue: elementwise ops, views and data movement whose every activation input is produced
   inside the layer: bias Add, BatchNormalization, scaling, activations including the decomposed
   ones (Sigmoid+Mul = SiLU, x*HardSigmoid = HardSwish, the Erf form of GELU), Reshape,
   Transpose, Split, the RoPE rotation of a projection. A reduction never joins an anchor.
3. Pooling and Softmax start a layer and absorb views and elementwise ops fed only by it.
4. Any other node starts a layer (kind "eltwise", "norm" for normalisations and reductions). Such
   a layer also absorbs later elementwise ops, reductions and normalisations whose inputs come from
   it or from earlier layers: a decomposed LayerNorm / RMSNorm is one layer; a residual Add absorbs
   the ReLU or the normalisation that follows it.
   Design choice: a residual Add (two activation inputs from different layers) stays its own
   "eltwise" layer, as in the IMC paper's node counts (ResNet-8: 14 nodes, 3 of them Adds).
5. A layer made only of views (Reshape, Transpose...) merges into its single consumer layer, or
   into its single producer layer; otherwise it stays, with kind "reshape".

Every dependency runs from an earlier-created group to a later one, so creation order is a
topological order of the layer DAG.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import onnx

from hetsplit.graph.onnx_ops import ANCHOR, EW, NORM, POOL, REDUCE, SOFTMAX, STATIC, VIEW_OPS, role

MAX_GROUP_NODES = 64   # a runaway elementwise chain is split into several layers


@dataclass
class NodeGroup:
    """Node indices (topological order) of one layer and the role that started it."""

    start: str                       # role of the first node: anchor, pool, softmax, norm, reduce, ew
    nodes: list[int] = field(default_factory=list)
    has_norm: bool = False           # absorbed a normalisation or a reduction

    @property
    def kind(self) -> str:
        """Layer kind before the anchor refines it (conv vs dwconv, gemm vs matmul)."""
        if self.start == ANCHOR:
            return ANCHOR
        if self.start in (POOL, SOFTMAX):
            return {POOL: "pool", SOFTMAX: "softmax"}[self.start]
        if self.start in (NORM, REDUCE) or self.has_norm:
            return "norm"
        return "eltwise"


class _Grouper:
    def __init__(self, model: onnx.ModelProto) -> None:
        g = model.graph
        self.nodes = list(g.node)
        self.roles = [role(n) for n in self.nodes]
        self.static_tensors: set[str] = {i.name for i in g.initializer}
        self.producer: dict[str, int] = {}
        self.consumers: dict[str, list[int]] = {}
        for i, node in enumerate(self.nodes):
            for t in node.input:
                if t:
                    self.consumers.setdefault(t, []).append(i)
            for t in node.output:
                if t:
                    self.producer[t] = i
        self.static = [False] * len(self.nodes)
        for i, node in enumerate(self.nodes):
            if all((not t) or t in self.static_tensors for t in node.input):
                self.static[i] = True
                self.static_tensors.update(t for t in node.output if t)
        self.group_of = [-1] * len(self.nodes)
        self.groups: list[NodeGroup] = []

    # -- helpers ------------------------------------------------------------------------------------
    def act_inputs(self, i: int) -> list[str]:
        """Non-constant inputs of node i."""
        return [t for t in self.nodes[i].input if t and t not in self.static_tensors]

    def _role(self, i: int) -> str:
        r = self.roles[i]
        return EW if r == STATIC else r   # a generator fed by activations (RandomNormalLike...)

    def can_join(self, gid: int, i: int) -> bool:
        grp = self.groups[gid]
        r = self._role(i)
        op = self.nodes[i].op_type
        sources = [self.group_of[self.producer[t]] if t in self.producer else -1 for t in self.act_inputs(i)]
        if any(s == -1 and t in self.producer for s, t in zip(sources, self.act_inputs(i))):
            return False  # an input from a node not grouped yet
        if grp.start in (ANCHOR, POOL, SOFTMAX):
            allowed = r == EW or (grp.start == ANCHOR and op == "BatchNormalization")
            return allowed and all(s == gid for s in sources)
        # eltwise / norm layers: also read earlier layers (residual, decomposed norms)
        allowed = r in (EW, REDUCE) or (r == NORM and grp.start == EW)
        return allowed and all(s <= gid for s in sources) and gid in sources

    def absorb(self, gid: int) -> None:
        grp = self.groups[gid]
        frontier = list(grp.nodes)
        while frontier and len(grp.nodes) < MAX_GROUP_NODES:
            candidates = sorted({c for n in frontier for t in self.nodes[n].output if t
                                 for c in self.consumers.get(t, ()) if self.group_of[c] == -1 and not self.static[c]})
            frontier = []
            for c in candidates:
                if len(grp.nodes) >= MAX_GROUP_NODES:
                    break
                # a candidate's other inputs may come from nodes that join in this same sweep
                if self.group_of[c] == -1 and self.can_join(gid, c):
                    self.group_of[c] = gid
                    grp.nodes.append(c)
                    grp.has_norm |= self._role(c) in (NORM, REDUCE) and grp.start != ANCHOR
                    frontier.append(c)
            if not frontier:
                break
        grp.nodes.sort()

    # -- passes -------------------------------------------------------------------------------------
    def build(self) -> list[NodeGroup]:
        for i in range(len(self.nodes)):
            if self.static[i] or self.group_of[i] != -1:
                continue
            gid = len(self.groups)
            self.groups.append(NodeGroup(self._role(i), [i]))
            self.group_of[i] = gid
            self.absorb(gid)
        if not self.groups:
            return []
        self.place_static()
        self.merge_views()
        return [g for g in self.groups if g.nodes]

    def place_static(self) -> None:
        for i in reversed(range(len(self.nodes))):
            if not self.static[i]:
                continue
            users = [self.group_of[c] for t in self.nodes[i].output if t for c in self.consumers.get(t, ())]
            users = [u for u in users if u >= 0]
            gid = min(users) if users else len(self.groups) - 1
            self.group_of[i] = gid
            self.groups[gid].nodes.append(i)
        for grp in self.groups:
            grp.nodes.sort()

    def _neighbours(self, gid: int) -> tuple[set[int], set[int]]:
        grp = self.groups[gid]
        prod, cons = set(), set()
        for n in grp.nodes:
            for t in self.nodes[n].input:
                if t in self.producer and self.group_of[self.producer[t]] != gid:
                    prod.add(self.group_of[self.producer[t]])
            for t in self.nodes[n].output:
                for c in self.consumers.get(t, ()):
                    if self.group_of[c] != gid:
                        cons.add(self.group_of[c])
        return prod, cons

    def merge_views(self) -> None:
        for gid, grp in enumerate(self.groups):
            if grp.start != EW or not all(self.static[n] or self.nodes[n].op_type in VIEW_OPS for n in grp.nodes):
                continue
            prod, cons = self._neighbours(gid)
            if len(cons) == 1:
                target = next(iter(cons))
            elif len(prod) == 1:     # every reader is later than the producer: no cycle
                target = next(iter(prod))
            else:
                continue
            for n in grp.nodes:
                self.group_of[n] = target
            self.groups[target].nodes = sorted(self.groups[target].nodes + grp.nodes)
            grp.nodes = []


def group_nodes(model: onnx.ModelProto) -> list[NodeGroup]:
    """Layers of a prepared (canonical, shape-inferred) model, in topological order."""
    return _Grouper(model).build()


def view_only(nodes: list[onnx.NodeProto]) -> bool:
    """True when a layer only reshapes (its kind is then "reshape")."""
    return all(n.op_type in VIEW_OPS or role(n) == STATIC for n in nodes)
