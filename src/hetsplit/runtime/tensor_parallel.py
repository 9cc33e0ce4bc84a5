"""A tensor-parallel TinyLlama (Bochem et al., seed 002) decoded for real by N processes.

``run_tensor_parallel_model(module, graph, plan, options)`` takes the torch model, its ONNX
``graph`` and a tensor-parallel plan of that graph (``search.tensor_parallel``), validated by
``check_plan``, and:

- maps the plan's shards to the torch modules by the ONNX layer names (``layers.0/wq/MatMul`` is
  ``layers.0.wq``): per block and rank a range of heads (the Q/K/V rows and the ``wo`` columns of
  those heads), a range of F (w1/w3 rows, w2 columns) and, where the plan slices the LM head by
  columns, a range of the vocabulary (rows of the tied output matrix); every rank gets a file with
  only its slices, the root (the plan's first device, rank 0) also the embedding and the norms;
- starts one process per device with the runtime's launcher (``runtime.launch``: rendezvous,
  timeouts, a dead process ends the run with its name); each decodes autoregressively with a KV
  cache of its own heads (``runtime.tensor_parallel_worker``): one prefill pass over the prompt,
  then ``new_tokens`` greedy steps, each fed the previous step's argmax;
- per block, two all-reduces over the trees of the plan: the root broadcasts the normed tensor down
  the tree of its ``broadcast`` combine, every member computes its partial sum, the partials go up
  the tree of the ``sum`` combine (``plan.check.collectives``: members to their group's leader,
  leaders to the root), the root adds the skip connection and runs the next norm; the LM head's
  input goes down the same way and its slices of logits straight to the root (``concat``);
- checks every step's logits against the unsplit model on the same tokens (teacher-forced: one
  causal pass of the module over the prompt and the generated tokens); a difference above
  ``atol`` fails the run.
"""

from __future__ import annotations

import contextlib
import json
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hetsplit.cluster.types import Cluster
from hetsplit.errors import ModelError, PlanError, RuntimeFailure
from hetsplit.graph.transformer import TransformerBlock, find_blocks
from hetsplit.graph.zoo.transformer import LlamaBlock, TinyLlama
from hetsplit.graph.types import Graph
from hetsplit.plan.check import check_plan, collectives
from hetsplit.plan.types import Collective, Plan
from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.launch import Launcher
from hetsplit.runtime.compile import plan_cluster

WORKER_MODULE = "hetsplit.runtime.tensor_parallel_worker"
JOB_FILE = "job.json"
LOGITS_FILE = "logits.pt"
Range = tuple[int, int]


def llama_of(module: nn.Module) -> TinyLlama:
    """``module`` as the decoder this runtime slices (the zoo's TinyLlama of LlamaBlocks); ModelError if not."""
    if not isinstance(module, TinyLlama) or not all(isinstance(b, LlamaBlock) for b in module.layers):
        raise ModelError(f"the tensor-parallel runtime decodes the zoo's TinyLlama (blocks of wq/wk/wv/wo, w1/w3/w2), "
                         f"not a {type(module).__name__}")
    return module


def block_of(module: TinyLlama, index: int) -> LlamaBlock:
    """Block ``index`` of the decoder (``llama_of`` checked every block's type)."""
    block = module.layers[index]
    assert isinstance(block, LlamaBlock)
    return block


# ---- the tree of one all-reduce ------------------------------------------------------------------

def leader(group: tuple[str, ...], root: str) -> str:
    """A reduction group's leader: the root where it is a member, else the group's first device."""
    return root if root in group else group[0]


def tree_parent(c: Collective, device: str) -> str | None:
    """Where ``device`` sends its partial (and receives the broadcast from); None for the root."""
    if device == c.root:
        return None
    group = next(g for g in c.groups() if device in g)
    head = leader(group, c.root)
    return c.root if device == head else head


def tree_children(c: Collective, device: str) -> list[str]:
    """The devices ``device`` receives partials from (and broadcasts to), in shard order."""
    return [d for d in c.devices if d != device and tree_parent(c, d) == device]


# ---- the job: what every rank is told --------------------------------------------------------------

@dataclass(frozen=True)
class Phase:
    """One synchronization: the root's normed tensor down the tree ``down`` (the plan's broadcast of it),
    partial sums up the tree ``up`` (the plan's all-reduce); None where the plan does not split."""

    down: Collective | None
    up: Collective | None


@dataclass(frozen=True)
class BlockLayout:
    """One block over the ranks: per rank its heads and F range (None: none), its two phases."""

    index: int                               # the torch block: ``module.layers[index]``
    heads: tuple[Range | None, ...]
    ffn: tuple[Range | None, ...]
    attention: Phase
    feed_forward: Phase


@dataclass(frozen=True)
class HeadLayout:
    """The LM head: per rank its vocabulary columns, the normed tensor's tree down to them; the
    slices meet on the root (concat: each straight to the root)."""

    vocab: tuple[Range | None, ...]
    down: Collective | None


@dataclass(frozen=True)
class Member:
    """What the launcher reads of a rank."""

    rank: int
    device: str


@dataclass
class TensorParallelJob:
    """The model's dimensions, the layout, the prompt; stands in for a manifest (``world_size``,
    ``worker(rank)``, ``stages``) for the launcher and the rendezvous."""

    model: str
    devices: list[str]
    dim: int
    heads: int
    seq: int
    eps: float
    blocks: list[BlockLayout]
    head: HeadLayout
    prompt: list[int]
    new_tokens: int

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def world_size(self) -> int:
        return len(self.devices)

    @property
    def stages(self) -> list[Member]:
        return [Member(r, d) for r, d in enumerate(self.devices)]

    def worker(self, rank: int) -> Member:
        return Member(rank, self.devices[rank])

    def steps(self) -> list[int]:
        """Tokens fed per step: the prompt in one pass, then one per generated token."""
        return [len(self.prompt)] + [1] * self.new_tokens

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(_encode(self)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "TensorParallelJob":
        d = json.loads(Path(path).read_text())
        blocks = [BlockLayout(b["index"], _ranges_of(b["heads"]), _ranges_of(b["ffn"]), _phase(b["attention"]),
                              _phase(b["feed_forward"])) for b in d["blocks"]]
        head = HeadLayout(_ranges_of(d["head"]["vocab"]), _coll(d["head"]["down"]))
        return cls(**{**d, "blocks": blocks, "head": head})


def _encode(x: Any) -> Any:
    """JSON of the job's dataclasses (field by field)."""
    if hasattr(x, "__dataclass_fields__"):
        return {k: _encode(getattr(x, k)) for k in x.__dataclass_fields__}
    if isinstance(x, (list, tuple)):
        return [_encode(v) for v in x]
    return x


def _coll(d: dict | None) -> Collective | None:
    return None if d is None else Collective(d["layer"], tuple(d["devices"]), d["root"], int(d["tree"]))


def _phase(d: dict) -> Phase:
    return Phase(_coll(d["down"]), _coll(d["up"]))


def _ranges_of(rs: list) -> tuple[Range | None, ...]:
    return tuple(None if r is None else (int(r[0]), int(r[1])) for r in rs)


# ---- from the plan's shards to torch modules -----------------------------------------------------

def module_path(layer: str) -> str:
    """The torch module an ONNX layer name comes from: ``layers.0/wq/MatMul`` -> ``layers.0.wq``."""
    return ".".join(layer.split("/")[:-1])


def _role(module: TinyLlama, layer: str, expected: tuple[str, ...]) -> tuple[int, str]:
    """(block index, attribute) of the Linear an ONNX layer maps to, checked against the block's roles."""
    path = module_path(layer)
    parts = path.split(".")
    try:
        target = module.get_submodule(path)
        index = int(parts[-2])
        block = block_of(module, index)
    except (AttributeError, ValueError, IndexError):
        raise ModelError(f"layer {layer!r}: no torch module {path!r} in a block 'layers.<i>' of the model") from None
    if parts[-1] not in expected or getattr(block, parts[-1], None) is not target or \
            not isinstance(target, nn.Linear):
        raise ModelError(f"layer {layer!r} maps to {path!r}, not to a Linear {' or '.join(expected)} of block {index}")
    return index, parts[-1]


def _ranges(plan: Plan, layer: str, devices: list[str], axis: str, unit: int, total: int) -> tuple[Range | None, ...]:
    """Per rank the ``[start, stop)`` of ``layer`` in ``unit``s (a whole layer: all of it, on the root)."""
    place = plan.assign[layer]
    if isinstance(place, str):
        if place != devices[0]:
            raise PlanError(f"layer {layer!r} runs whole on {place!r}; a layer that is not split runs on the root "
                            f"{devices[0]!r}")
        return tuple((0, total) if d == place else None for d in devices)
    out: list[Range | None] = [None] * len(devices)
    for s in place:
        if s.axis != axis or s.start % unit or s.stop % unit:
            raise PlanError(f"layer {layer!r}: shard {s.device}:{s.axis}[{s.start}:{s.stop}] is not a slice of "
                            f"'{axis}' on multiples of {unit}")
        out[devices.index(s.device)] = (s.start // unit, s.stop // unit)
    return tuple(out)


def _same(plan: Plan, graph: Graph, devices: list[str], layers: list[tuple[int, str]], unit: int,
          total: int) -> tuple[Range | None, ...]:
    """The ranges all ``(layer index, axis)`` share; PlanError when they differ."""
    found = [_ranges(plan, graph.names[i], devices, axis, unit, total) for i, axis in layers]
    if any(f != found[0] for f in found[1:]):
        names = ", ".join(graph.names[i] for i, _ in layers)
        raise PlanError(f"layers {names} are sliced differently; the tensor-parallel runtime runs each block's "
                        "heads (Q, K, V, wo) and F (w1, w3, w2) as one slicing")
    return found[0]


class _PlanTrees:
    """The plan's trees: all-reduces (``collectives``) and broadcasts (the devices reading a layer the
    root broadcasts, with the root, in cluster order: ``check_plan``'s broadcast tree)."""

    def __init__(self, graph: Graph, plan: Plan, order: list[str]):
        self.graph, self.plan, self.order = graph, plan, order
        self.sums = {c.layer: c for c in collectives(graph, plan)}

    def up(self, layer: int) -> Collective | None:
        return self.sums.get(self.graph.names[layer])

    def down(self, reader: int) -> Collective | None:
        """The broadcast tree of the layer that ``reader`` reads (None: it is not broadcast)."""
        (src,) = [p for p in self.graph.predecessors[reader]]
        name = self.graph.names[src]
        comb = self.plan.combine.get(name)
        if comb is None or comb.kind != "broadcast":
            return None
        devices = {comb.on}
        for t in self.graph.tensors:
            if t.producer == src:
                for c in t.consumers:
                    place = self.plan.assign[self.graph.names[c]]
                    devices |= {place} if isinstance(place, str) else {s.device for s in place}
        return Collective(name, tuple(d for d in self.order if d in devices), comb.on, comb.tree)


def block_layout(graph: Graph, plan: Plan, module: TinyLlama, block: TransformerBlock, devices: list[str],
                 trees: _PlanTrees) -> BlockLayout:
    """One block of the plan as ranges per rank, its modules checked against the torch block."""
    a = block.attention
    if len(block.ffns) != 1:
        raise ModelError(f"block {block.index} has {len(block.ffns)} feed-forwards; the runtime runs Llama blocks (one)")
    f = block.ffns[0]
    roles = [_role(module, graph.names[i], want) for i, want in
             [(a.q, ("wq",)), (a.k, ("wk",)), (a.v, ("wv",)), (a.out, ("wo",)), (f.down, ("w2",)),
              *[(u, ("w1", "w3")) for u in f.up]]]
    if len({r[0] for r in roles}) != 1 or len({r[1] for r in roles}) != len(roles):
        raise ModelError(f"block {block.index}: its layers map to torch modules {roles}, not to one Llama block")
    heads = _same(plan, graph, devices, [(a.q, "out"), (a.k, "out"), (a.v, "out"), (a.out, "in")], a.head_dim, a.heads)
    ffn = _same(plan, graph, devices, [*[(u, "out") for u in f.up], (f.down, "in")], 1, f.width)
    return BlockLayout(roles[0][0], heads, ffn, Phase(trees.down(a.q), trees.up(a.out)),
                       Phase(trees.down(f.up[0]), trees.up(f.down)))


def head_layer(graph: Graph) -> int:
    """The layer making the model's output (the LM head)."""
    (i,) = [t.producer for t in graph.tensors if t.is_output]
    return i


def head_layout(graph: Graph, plan: Plan, module: TinyLlama, devices: list[str], trees: _PlanTrees) -> HeadLayout:
    """The LM head (the model's output layer, ``output/...``): whole on the root or by columns."""
    i = head_layer(graph)
    name, comb = graph.names[i], plan.combine.get(graph.names[i])
    if module_path(name) != "output" or (comb is not None and comb.kind != "concat"):
        raise ModelError(f"the model's output comes from {name!r}, not from the LM head 'output' (whole or by columns)")
    return HeadLayout(_ranges(plan, name, devices, "out", 1, module.output.out_features), trees.down(i))


def make_job(graph: Graph, plan: Plan, module: TinyLlama, order: list[str], prompt: list[int],
             new_tokens: int) -> TensorParallelJob:
    """The job of ``plan`` (checked on ``graph`` and a cluster whose devices are ``order``) for ``module``."""
    blocks = find_blocks(graph)
    devices = plan.devices
    root = devices[0]
    trees = _PlanTrees(graph, plan, order)
    layout = [block_layout(graph, plan, module, b, devices, trees) for b in blocks]
    head = head_layout(graph, plan, module, devices, trees)
    sliced = {graph.names[i] for b in blocks for i in (*b.sliced_layers, head_layer(graph))}
    stray = [n for n in graph.names if n not in sliced and plan.assign[n] != root]
    if stray:
        raise PlanError(f"layers {stray[:3]} are not on the root {root!r}; the tensor-parallel runtime runs the "
                        "embedding, norms and residual adds on the root")
    bad = [c.layer for c in trees.sums.values() if c.root != root]
    if bad:
        raise PlanError(f"the all-reduce of {bad[0]!r} ends on {trees.sums[bad[0]].root!r}, not on the root {root!r}")
    if sorted(b.index for b in layout) != list(range(len(module.layers))):
        raise ModelError(f"the graph's blocks map to torch blocks {[b.index for b in layout]}, the model has "
                         f"{len(module.layers)}")
    seq = int(module.mask.shape[0])
    if len(prompt) + new_tokens > seq:
        raise ModelError(f"{len(prompt)} prompt + {new_tokens} new tokens exceed the model's {seq} positions")
    first = block_of(module, 0)
    return TensorParallelJob(graph.name, devices, module.tok_embeddings.embedding_dim, first.heads, seq,
                             float(module.norm.eps), layout, head, list(prompt), new_tokens)


# ---- each rank's weights -------------------------------------------------------------------------

def rank_weights(module: TinyLlama, job: TensorParallelJob, rank: int) -> dict[str, torch.Tensor]:
    """The tensors rank ``rank`` holds, cloned (nothing shared with another rank): its heads' Q/K/V
    rows and wo columns, its F slice's w1/w3 rows and w2 columns, its vocabulary rows of the LM head;
    the root also the embedding and the norms; every rank with heads the RoPE tables (buffers)."""
    hd, out = job.head_dim, {}
    for b in job.blocks:
        blk, p = block_of(module, b.index), f"layers.{b.index}."
        heads, ffn = b.heads[rank], b.ffn[rank]
        if heads is not None:
            lo, hi = (x * hd for x in heads)
            for name in ("wq", "wk", "wv"):
                out[p + name] = getattr(blk, name).weight[lo:hi]
            out[p + "wo"] = blk.wo.weight[:, lo:hi]
        if ffn is not None:
            lo, hi = ffn
            out[p + "w1"], out[p + "w3"] = blk.w1.weight[lo:hi], blk.w3.weight[lo:hi]
            out[p + "w2"] = blk.w2.weight[:, lo:hi]
        if rank == 0:
            out[p + "attention_norm"], out[p + "ffn_norm"] = blk.attention_norm.weight, blk.ffn_norm.weight
    vocab = job.head.vocab[rank]
    if vocab is not None:
        lo, hi = vocab
        out["output"] = module.output.weight[lo:hi]
    if rank == 0:
        out["tok_embeddings"], out["norm"] = module.tok_embeddings.weight, module.norm.weight
    if any(b.heads[rank] is not None for b in job.blocks):
        out["cos"], out["sin"] = module.cos, module.sin
    return {k: v.detach().clone().contiguous() for k, v in out.items()}


def block_parameters(module: TinyLlama) -> int:
    """Parameters of the model's blocks (projections and norms)."""
    return sum(p.numel() for p in module.layers.parameters())


# ---- the run ---------------------------------------------------------------------------------------

@dataclass
class TensorParallelOptions:
    """How to run: ``prompt_tokens`` in one prefill pass, then ``new_tokens`` greedy decode steps; the
    first ``warmup`` of them are left out of the median time per token."""

    prompt_tokens: int = 8
    new_tokens: int = 16
    warmup: int = 2
    seed: int = 0
    atol: float = 1e-3
    timeout_s: float = 60.0
    startup_timeout_s: float = 120.0
    faults: dict[str, dict] = field(default_factory=dict)   # rank -> {"kind": die|stall, "after": step}
    run_dir: Path | None = None
    cluster: Cluster | None = None


@dataclass
class RankReport:
    """One rank's decode steps (medians per generated token, after warm-up) and what it holds."""

    rank: int
    device: str
    step_s: float
    compute_s: float
    comm_s: float
    sent_bytes: int                 # per decode token
    block_params: int
    other_params: int
    peak_rss_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


@dataclass
class TensorParallelReport:
    """A verified run: the tokens, the time per token (the root's step wall time), per rank details."""

    model: str
    devices: list[str]
    tree: int
    prompt: list[int]
    generated: list[int]
    max_abs_err: float
    s_per_token: float               # median decode step, after warm-up
    prefill_s: float
    steps_s: list[float]
    ranks: list[RankReport]
    model_block_params: int

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in vars(self).items() if k != "ranks"}
        return {**d, "ranks": [r.to_dict() for r in self.ranks]}


def reference_logits(module: TinyLlama, tokens: list[int]) -> torch.Tensor:
    """The unsplit model's logits at every position of ``tokens`` (one causal pass, padded to its
    length with token 0: later positions do not change earlier ones)."""
    seq = int(module.mask.shape[0])
    ids = torch.zeros(1, seq, dtype=torch.int64)
    ids[0, :len(tokens)] = torch.tensor(tokens)
    with torch.no_grad():
        return module(ids)[0, :len(tokens)]


def _median_after(values: list[float], skip: int) -> float:
    kept = values[skip:] if len(values) > skip else values
    return float(statistics.median(kept)) if kept else float("nan")


def _rank_report(doc: dict, skip: int) -> RankReport:
    decode = doc["steps"][1:]          # step 0 is the prefill
    sent = {s["sent_bytes"] for s in decode}
    if len(sent) > 1:
        raise RuntimeFailure(f"device {doc['device']}: sent {sorted(sent)} bytes in different decode steps; every "
                             "step moves the same messages")
    return RankReport(int(doc["rank"]), doc["device"], _median_after([s["wall_s"] for s in decode], skip),
                      _median_after([s["compute_s"] for s in decode], skip),
                      _median_after([s["comm_s"] for s in decode], skip),
                      int(sent.pop()) if sent else 0, int(doc["block_params"]),
                      int(doc["other_params"]), int(doc.get("peak_rss_bytes", 0)))


def _tree(plan: Plan) -> int:
    return int(plan.params.get("tree", 0) or next((c.tree for c in plan.combine.values()), 0))


def run_tensor_parallel_model(module: nn.Module, graph: Graph, plan: Plan,
                              options: TensorParallelOptions | None = None) -> TensorParallelReport:
    """Run ``plan`` (a tensor-parallel plan of ``graph``, the ONNX import of ``module``) on one process
    per device of this machine; raises RuntimeFailure when a process fails or the logits differ."""
    opts = options or TensorParallelOptions()
    llama = llama_of(module)
    cluster = plan_cluster(plan, opts.cluster)
    check_plan(graph, cluster, plan)
    gen = torch.Generator().manual_seed(opts.seed)
    prompt = torch.randint(0, llama.tok_embeddings.num_embeddings, (opts.prompt_tokens,), generator=gen).tolist()
    job = make_job(graph, plan, llama, cluster.names, prompt, opts.new_tokens)
    with contextlib.ExitStack() as stack:
        run_dir = Path(opts.run_dir or stack.enter_context(tempfile.TemporaryDirectory(prefix="hetsplit-tp-")))
        run_dir.mkdir(parents=True, exist_ok=True)
        for rank in range(job.world_size):
            torch.save(rank_weights(llama, job, rank), run_dir / f"rank{rank}.pt")
        cfg = RunConfig(str(job.save(run_dir / JOB_FILE)), inputs=len(job.steps()), timeout_s=opts.timeout_s,
                        startup_timeout_s=opts.startup_timeout_s, seed=opts.seed, atol=opts.atol,
                        faults=dict(opts.faults))
        launcher = Launcher(job, cfg, run_dir)
        launcher.module = WORKER_MODULE
        docs = launcher.run()
        logits = torch.load(run_dir / LOGITS_FILE)
    root = docs[0]
    tokens = prompt + root["generated"][:opts.new_tokens]
    ref = reference_logits(llama, tokens)
    if logits.shape != ref.shape:
        raise RuntimeFailure(f"the root returned logits of shape {tuple(logits.shape)}, the unsplit model gives "
                             f"{tuple(ref.shape)}")
    err = float((logits - ref).abs().max())
    if not err <= opts.atol:
        raise RuntimeFailure(f"tensor-parallel run of {graph.name!r} on {job.world_size} processes: the logits differ "
                             f"from the unsplit model's by up to {err:.3g} (allowed {opts.atol:g})")
    steps = [s["wall_s"] for s in root["steps"]]
    return TensorParallelReport(graph.name, job.devices, _tree(plan), prompt, root["generated"], err,
                                _median_after(steps[1:], opts.warmup), steps[0], steps,
                                [_rank_report(docs[r], opts.warmup) for r in sorted(docs)], block_parameters(llama))
