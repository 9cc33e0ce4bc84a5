"""Find the Transformer blocks of a graph: attention (Q/K/V, heads, output projection) and FFNs.

Works on any ``Graph`` (an imported ONNX file, a zoo model, a hand-built graph) from its structure
alone, so the tensor-parallel partitioner (search/tensor_parallel.py) can slice heads and F:

- an *attention* is a softmax between two activation x activation matmuls that carry heads
  (scores ``Q K^T`` before it, context ``P V`` after it); walking back from the scores matmul reaches
  the Q and K projections, from the context matmul the V projection, and walking forward from the
  context matmul reaches the output projection (layers in between only change views: they follow
  the heads slicing);
- a *feed-forward* is a fully connected ``down`` layer whose input comes, through elementwise layers
  only (the activation, SwiGLU's product), from one or more fully connected ``up`` layers that read
  one tensor and all have ``n = down.k = F``;
- a *block* is an attention and the feed-forwards after it, up to the next attention.

Layers of no block (embeddings, norms, residual adds, the LM head) are left to the partitioner.
"""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.errors import ModelError
from hetsplit.graph.types import ELTWISE, GEMM, INPUT, MATMUL, RESHAPE, SOFTMAX, Graph, Layer

# Layer kinds that can sit between a projection and the attention matmuls (views, RoPE, scaling,
# masks): they only follow the heads slicing of their producer.
VIEW_KINDS = (ELTWISE, RESHAPE)
ELEMENTWISE_ONNX = {"Add", "Sub", "Mul", "Div", "Relu", "Gelu", "Erf", "Sigmoid", "Tanh", "Pow", "Sqrt", "Exp",
                    "Neg", "Abs", "LeakyRelu", "HardSigmoid", "HardSwish", "Softplus", "Mish", "Clip", "Identity",
                    "Cast", "Where", "Max", "Min"}


@dataclass(frozen=True)
class Attention:
    """Multi-head self-attention: projections sliced by heads, the output projection by rows."""

    q: int
    k: int
    v: int
    heads_chain: tuple[int, ...]   # every layer between the projections and ``out`` (scores, softmax,
    #                                 context, views, RoPE): sliced by heads, never combined
    out: int
    heads: int
    head_dim: int

    @property
    def projections(self) -> tuple[int, int, int]:
        return self.q, self.k, self.v


@dataclass(frozen=True)
class FeedForward:
    """A feed-forward: ``up`` layers sliced by columns of F, ``inner`` elementwise layers on the
    slices, ``down`` sliced by rows of F (partial sums)."""

    up: tuple[int, ...]
    inner: tuple[int, ...]
    down: int
    width: int


@dataclass(frozen=True)
class TransformerBlock:
    """One attention and the feed-forwards after it."""

    index: int
    attention: Attention
    ffns: tuple[FeedForward, ...]

    @property
    def sliced_layers(self) -> tuple[int, ...]:
        """Every layer the block slices across chips."""
        a = self.attention
        out = [*a.projections, *a.heads_chain, a.out]
        for f in self.ffns:
            out += [*f.up, *f.inner, f.down]
        return tuple(sorted(out))


def find_blocks(graph: Graph) -> list[TransformerBlock]:
    """The Transformer blocks of ``graph`` in order (raises ModelError when it has no attention)."""
    consumers = _consumers(graph)
    found = [_attention(graph, s, consumers) for s, layer in enumerate(graph.layers) if layer.op == SOFTMAX]
    attentions = [a for a in found if a is not None]
    if not attentions:
        raise ModelError(f"model {graph.name!r} has no multi-head attention: no softmax between two attention "
                         "matmuls with heads (is it a Transformer? is its attention fused into one op?)")
    taken = {i for a in attentions for i in (*a.projections, *a.heads_chain, a.out)}
    ffns = [f for d in range(graph.num_layers) if d not in taken
            for f in [_feed_forward(graph, d, consumers, taken)] if f is not None]
    blocks = []
    for b, a in enumerate(attentions):
        end = attentions[b + 1].q if b + 1 < len(attentions) else graph.num_layers
        start = min(a.projections)
        mine = tuple(f for f in ffns if start < min(f.up) and f.down < end)
        blocks.append(TransformerBlock(b, a, mine))
    return blocks


def _consumers(graph: Graph) -> list[list[int]]:
    out: list[list[int]] = [[] for _ in graph.layers]
    for i, preds in enumerate(graph.predecessors):
        for p in preds:
            if p != INPUT:
                out[p].append(i)
    return out


def _heads_matmul(graph: Graph, i: int) -> bool:
    layer = graph.layers[i]
    return layer.op == MATMUL and int(layer.attrs.get("heads", 0) or 0) > 1


def _walk_back(graph: Graph, i: int, consumers: list[list[int]], path: list[int]) -> int | None:
    """From layer ``i`` back through single-input view layers to a fully connected layer."""
    while True:
        layer = graph.layers[i]
        if layer.op == GEMM:
            return i
        preds = [p for p in graph.predecessors[i] if p != INPUT]
        if layer.op not in VIEW_KINDS or len(preds) != 1 or len(graph.predecessors[i]) != 1:
            return None
        path.append(i)
        i = preds[0]


def _attention(graph: Graph, softmax: int, consumers: list[list[int]]) -> Attention | None:
    preds = [p for p in graph.predecessors[softmax] if p != INPUT]
    if len(preds) != 1 or not _heads_matmul(graph, preds[0]) or len(consumers[softmax]) != 1:
        return None
    scores, context = preds[0], consumers[softmax][0]
    if not _heads_matmul(graph, context):
        return None
    chain = [scores, softmax, context]
    qk = [p for p in graph.predecessors[scores] if p != INPUT]
    v_side = [p for p in graph.predecessors[context] if p not in (softmax, INPUT)]
    if len(qk) == 1 and v_side == qk and graph.layers[qk[0]].op == GEMM:
        raise ModelError(f"attention at {graph.layers[scores].name!r}: {graph.layers[qk[0]].name!r} computes Q, K and "
                         "V in one packed projection (nn.MultiheadAttention's in_proj); heads cannot be sliced as "
                         "one column range of it. Export the model with separate Q, K, V linear layers")
    if len(qk) != 2 or len(v_side) != 1:
        return None
    q = _walk_back(graph, qk[0], consumers, chain)
    k = _walk_back(graph, qk[1], consumers, chain)
    v = _walk_back(graph, v_side[0], consumers, chain)
    if q is None or k is None or v is None:
        return None
    i = context
    while True:          # forward through views to the output projection
        nxt = consumers[i]
        if len(nxt) != 1:
            return None
        i = nxt[0]
        if graph.layers[i].op == GEMM:
            break
        if graph.layers[i].op not in VIEW_KINDS:
            return None
        chain.append(i)
    heads = int(graph.layers[scores].attrs["heads"])
    name = graph.layers[scores].name
    inside = set(chain) | {i}
    escaping = [graph.layers[c].name for n in chain for c in consumers[n] if c not in inside]
    if escaping:
        raise ModelError(f"attention at {name!r}: layer(s) {escaping[:3]} read per-head tensors of the attention "
                         "outside it; heads cannot stay sliced")
    widths = {graph.layers[p].name: int(graph.layers[p].attrs.get("n", 0) or 0) for p in (q, k, v)}
    if len(set(widths.values())) != 1 or next(iter(widths.values())) % heads:
        raise ModelError(f"attention at {name!r}: Q/K/V projections {widths} are not {heads} heads of one width "
                         "(grouped-query attention is not supported)")
    width = next(iter(widths.values()))
    if int(graph.layers[i].attrs.get("k", 0) or 0) != width:
        raise ModelError(f"attention at {name!r}: output projection {graph.layers[i].name!r} reads "
                         f"{graph.layers[i].attrs.get('k')} columns, not the {width} of the heads")
    return Attention(q, k, v, tuple(sorted(set(chain))), i, heads, width // heads)


def _elementwise(graph: Graph, i: int) -> bool:
    layer = graph.layers[i]
    if layer.op != ELTWISE:
        return False
    return not layer.onnx_ops or set(layer.onnx_ops) <= ELEMENTWISE_ONNX


def _feed_forward(graph: Graph, down: int, consumers: list[list[int]], taken: set[int]) -> FeedForward | None:
    layer = graph.layers[down]
    if layer.op != GEMM:
        return None
    width = int(layer.attrs.get("k", 0) or 0)
    inner: list[int] = []
    ups: list[int] = []
    frontier = [p for p in graph.predecessors[down]]
    while frontier:
        p = frontier.pop()
        if p == INPUT or p in taken:
            return None
        if graph.layers[p].op == GEMM:
            ups.append(p)
        elif _elementwise(graph, p):
            inner.append(p)
            frontier += list(graph.predecessors[p])
        else:
            return None
    if not ups or any(int(graph.layers[u].attrs.get("n", 0) or 0) != width for u in ups):
        return None
    if len({graph.predecessors[u] for u in ups}) != 1:
        return None
    inside = set(ups) | set(inner)
    if any(c not in inside and c != down for n in inside for c in consumers[n]):
        return None      # an intermediate slice escapes the FFN: it cannot stay sliced
    return FeedForward(tuple(sorted(set(ups))), tuple(sorted(set(inner))), down, width)


MAX_DECODE_CONTEXT = 2**21   # positions of a KV cache; the longest-context models read ~1-2 million


def decode_step(graph: Graph, context: int) -> Graph:
    """One autoregressive step of a Transformer graph exported for a prompt of S tokens: one new token
    against a KV cache of ``context`` positions (Bochem et al.'s autoregressive mode).

    S is the rows of the first Q projection. Every layer's work and tensors shrink by S (one row; an
    embedding looks up one row of its table), except inside attention: the scores are ``heads x 1 x context`` and the attention matmuls read the
    cache (``context`` keys and values per head). Layer names stay, so a plan made for the prompt
    graph applies to the decode graph. Costs must then come from a device model, not a profile.
    """
    from dataclasses import replace

    if context < 1:
        raise ModelError(f"decode step of {graph.name!r}: the KV cache needs at least 1 position, got {context}")
    if context > MAX_DECODE_CONTEXT:
        raise ModelError(f"decode step of {graph.name!r}: a KV cache of {context:,} positions is beyond the "
                         f"{MAX_DECODE_CONTEXT:,} hetsplit plans for (no model it costs reads that far); give a "
                         "smaller context (plan --decode)")
    blocks = find_blocks(graph)
    tokens = int(graph.layers[blocks[0].attention.q].attrs.get("m", 0) or 0)
    if tokens < 1:
        raise ModelError(f"decode step of {graph.name!r}: the Q projection has no row count (m)")
    attention = {}
    for b in blocks:
        for i in b.attention.heads_chain:
            attention[i] = b.attention
    layers = []
    for i, layer in enumerate(graph.layers):
        a = attention.get(i)
        if a is not None and layer.op == MATMUL:
            layers.append(_decode_matmul(layer, tokens, context))
        elif a is not None and layer.op == SOFTMAX:
            elems, old = a.heads * context, a.heads * tokens * tokens
            layers.append(replace(layer, out_bytes=_scaled(layer.out_bytes, old, elems),
                                  in_bytes=_scaled(layer.in_bytes, old, elems),
                                  attrs={**layer.attrs, "elements": elems, "row": context}))
        else:
            attrs = dict(layer.attrs)
            for key in ("m", "elements"):
                if key in attrs and attrs[key]:
                    attrs[key] = max(1, int(attrs[key]) // tokens)
            if attrs.get("lookup_bytes"):      # an embedding looks up one token's row, not S
                rows = int(attrs["lookup_bytes"])
                attrs["lookup_bytes"] = rows // tokens
                attrs["param_bytes_read"] = int(attrs["param_bytes_read"]) - (rows - rows // tokens)
            layers.append(replace(layer, macs=layer.macs // tokens, out_bytes=layer.out_bytes // tokens,
                                  in_bytes=layer.in_bytes // tokens, attrs=attrs))
    ratio = [new.out_bytes / old.out_bytes if old.out_bytes else 0.0 for new, old in zip(layers, graph.layers)]
    tensors = [replace(t, nbytes=int(t.nbytes * (ratio[t.producer] if t.producer != INPUT else 1 / tokens)))
               for t in graph.tensors]
    return Graph(f"{graph.name}@decode{context}", layers, tensors, source=graph.source,
                 meta={**graph.meta, "mode": "autoregressive", "context": context})


def _scaled(nbytes: int, old_elements: int, new_elements: int) -> int:
    return int(nbytes * new_elements / old_elements) if old_elements else nbytes


def _decode_matmul(layer: Layer, tokens: int, context: int) -> Layer:
    """Scores (1 x head_dim x context) or context (1 x context x head_dim) of one new token."""
    from dataclasses import replace

    a = dict(layer.attrs)
    heads, elem = int(a.get("heads", 1)), int(a.get("elem_bytes", 4) or 4)
    if int(a["n"]) == tokens:            # scores: q (1 x hd) against the cached keys
        a.update(m=1, n=context)
    else:                                # context: probabilities (1 x context) times the cached values
        a.update(m=1, k=context)
    m, k, n = int(a["m"]), int(a["k"]), int(a["n"])
    return replace(layer, macs=heads * m * k * n, out_bytes=heads * m * n * elem,
                   in_bytes=heads * (m * k + k * n) * elem, attrs=a)
