"""Bochem et al. (seed 002): tensor-parallel Transformers on Siracusa MCUs, per block, and its claims.

Each workload is one Transformer block built from the paper's dimensions (``transformer_graph``),
split by hetsplit's tensor-parallel partitioner (heads and F over the chips, all-reduces in groups of
four) on the built-in ``siracusa-N`` clusters and costed by the estimator like any plan (``cost``):
closed-form latency, energy and throughput, the latency's breakdown from the critical path of one
simulated input, and where each chip keeps its weights from the memory model
(``estimate/memory.py``). The problem's ``ModelScope`` says how many such blocks the whole model has
(a chip's L3 regime is judged on its share of the whole model):

- TinyLlama-42M (E 512, F 2048, 8 heads, 8 blocks) autoregressive (one token against a KV cache of
  128) and prompt mode (16 tokens) on 1, 2, 4, 8 chips (Fig. 4a/b, 5a/b);
- the 64-head variant (head dimension 8) in both modes on 1 .. 64 chips (Fig. 6, 5);
- MobileBERT as the paper models it (E 512, F 512, 4 heads, S 268, BERT block: one FFN, post-norm,
  24 blocks) on 1 .. 4 chips, 3 showing uneven slices (Fig. 4c, 5c).

Beyond the paper, the whole zoo TinyLlama-42M (embedding, 8 blocks, LM head) decoding one token,
the problem ``hetsplit plan tinyllama-42m --cluster siracusa-N --decode 128`` costs
(``workflow.load_problem``): tensor-parallel over N chips (the ``tensor-parallel`` partitioner's
plan) against hetsplit's exact pipeline plan (``exact``, minimum bottleneck on the per-layer table)
and pipelines of tensor-parallel groups, so latency per token (one user), the rate with many
independent users in flight, and energy compare.

``experiments/mcu_claims.py`` labels and grades the paper's claims against these points (and
``experiments/mcu_fit.py`` fits the few chip parameters no document gives); ``report/mcu_repro.py``
draws and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Mapping

from hetsplit.cluster.types import Cluster
from hetsplit.costs.build import build_problem
from hetsplit.costs.problem import ModelScope, SplitProblem
from hetsplit.errors import PlanError
from hetsplit.estimate import SimOptions, estimate_plan, simulate
from hetsplit.estimate.memory import ChipMemory, plan_memory, regime_label
from hetsplit.graph.segments import block_starts
from hetsplit.graph.transformer import find_blocks
from hetsplit.graph.transformer_shapes import TransformerShape, transformer_graph
from hetsplit.graph.types import Graph
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Metrics, Plan
from hetsplit.search import make_partitioner
from hetsplit.search.tensor_parallel import tensor_parallel_plan
from hetsplit.workflow import load_cluster_spec, load_problem

Progress = Callable[[str], None]


def _quiet(_: str) -> None:
    return None


@dataclass(frozen=True)
class Workload:
    """One Transformer block of a model, in one mode, and the chip counts the paper runs it on."""

    key: str
    label: str
    shape: TransformerShape
    model_blocks: int            # blocks of the whole model (its weights decide L2 residency)
    chips: tuple[int, ...]
    quick_chips: tuple[int, ...]
    scaled: bool = False         # the 64-head scalability variant


def _tinyllama(heads: int, tokens: int, context: int, blocks: int = 1) -> TransformerShape:
    mode = "ar" if tokens == 1 else "prompt"
    return TransformerShape(f"tinyllama-42m{'-64h' if heads != 8 else ''}-{mode}", 512, 2048, heads, blocks,
                            tokens, context)


SCALE_CHIPS = (1, 2, 4, 8, 16, 32, 64)
WORKLOADS = (
    Workload("tinyllama-ar", "TinyLlama-42M, autoregressive (S=128)", _tinyllama(8, 1, 128), 8, (1, 2, 4, 8),
             (1, 2, 4, 8)),
    Workload("tinyllama-prompt", "TinyLlama-42M, prompt (S=16)", _tinyllama(8, 16, 16), 8, (1, 2, 4, 8),
             (1, 2, 4, 8)),
    Workload("tinyllama64-ar", "TinyLlama, 64 heads, autoregressive (S=128)", _tinyllama(64, 1, 128), 8,
             SCALE_CHIPS, (1, 8, 16, 32, 64), scaled=True),
    Workload("tinyllama64-prompt", "TinyLlama, 64 heads, prompt (S=16)", _tinyllama(64, 16, 16), 8, SCALE_CHIPS,
             (1, 16, 64), scaled=True),
    Workload("mobilebert", "MobileBERT (E=F=512, 4 heads, S=268)",
             TransformerShape("mobilebert", 512, 512, 4, 1, 268, 268, gated=False, pre_norm=False), 24,
             (1, 2, 3, 4), (1, 4)),
)
WORKLOAD = {w.key: w for w in WORKLOADS}
WHOLE_MODEL = "tinyllama-42m"      # beyond the paper: the zoo decoder, one token against a KV cache of
DECODE_CONTEXT = 128               # 128 positions, as ``hetsplit plan ... --decode 128`` costs it
PIPELINE_CHIPS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class McuConfig:
    """What ``run`` costs; the default is the paper's full set plus the pipeline comparison."""

    workloads: tuple[str, ...] = tuple(WORKLOAD)
    quick: bool = False                               # only the chip counts the claims need
    params: tuple[tuple[str, float], ...] = ()         # Siracusa parameters other than the preset's (a fit)
    pipeline_chips: tuple[int, ...] = PIPELINE_CHIPS  # () skips the comparison

    @classmethod
    def quick_run(cls) -> "McuConfig":
        return cls(quick=True, pipeline_chips=(1, 8))


@dataclass(frozen=True)
class Costed:
    """One plan's figures, all from the estimator: its closed-form ``metrics``, the breakdown of one
    input's latency along its critical path (simulated: compute, chip-to-chip, L2, L3; they sum to the
    latency), where each chip keeps its weights (the memory model) and what crosses the chip-to-chip
    links per input."""

    metrics: Metrics
    breakdown_s: dict[str, float]
    chips: tuple[ChipMemory, ...]
    messages: int
    c2c_bytes: float
    c2c_energy_j: float

    @property
    def latency_s(self) -> float:
        return self.metrics.latency_s

    @property
    def energy_j(self) -> float:
        return self.metrics.energy_j

    @property
    def edp(self) -> float:
        return self.metrics.edp

    @property
    def throughput(self) -> float:
        """Inputs per second with enough independent inputs in flight (1 / the busiest resource)."""
        return self.metrics.throughput

    @property
    def regime(self) -> str:
        """The chips' L3 regime ("mixed: ..." when their segments differ)."""
        return regime_label(tuple(r for c in self.chips for r in c.regimes))

    def to_dict(self) -> dict:
        return {"latency_s": self.latency_s, "breakdown_s": dict(self.breakdown_s), "energy_j": self.energy_j,
                "edp_js": self.edp, "throughput": self.throughput, "regime": self.regime,
                "c2c_bytes": self.c2c_bytes, "c2c_energy_j": self.c2c_energy_j, "messages": self.messages,
                "metrics": self.metrics.to_dict(), "per_chip": [{**c.__dict__, "regime": c.regime}
                                                                for c in self.chips]}


def cost(problem: SplitProblem, plan: Plan) -> Costed:
    """``plan``'s figures from the estimator (``Costed``)."""
    tg = check_plan(problem.graph, problem.cluster, plan)
    sim = simulate(problem, tg, SimOptions(inputs=1, keep_timeline=False))
    parts = sim.breakdown()
    memory = plan_memory(problem, tg)
    messages = tg.messages()
    cl = problem.cluster
    return Costed(estimate_plan(problem, plan, "closed"),
                  {"compute": parts.get("compute", 0.0), "c2c": parts.get("transfer", 0.0),
                   "l2": parts.get("l2", 0.0), "l3": parts.get("l3", 0.0)},
                  memory.chips if memory is not None else (), len(messages), sum(m.nbytes for m in messages),
                  sum(float(cl.transfer_energy(m.src, m.dst, m.nbytes)) for m in messages))


@dataclass
class Point:
    """One workload on N chips, and its gains over one chip (1 when there is no 1-chip point)."""

    workload: str
    chips: int
    cost: Costed
    speedup: float = 1.0
    energy_gain: float = 1.0      # E(1 chip) / E(N chips)
    edp_gain: float = 1.0
    heads_per_chip: list[int] = field(default_factory=list)
    ffn_per_chip: list[int] = field(default_factory=list)


@dataclass
class PipelineRow:
    """The whole TinyLlama on N chips under one way of splitting it (one token, one user)."""

    chips: int
    kind: str                     # "tensor-parallel", "pipeline (exact)", "pipeline of TP groups"
    layout: str
    cost: Costed
    chips_used: int

    @property
    def latency_s(self) -> float:
        return self.cost.latency_s

    @property
    def single_user_rate(self) -> float:
        """Tokens per second for one user: each token waits for the one before (1 / latency)."""
        return 1.0 / self.cost.latency_s

    @property
    def throughput(self) -> float:
        """Tokens per second with enough independent users in flight (1 / the busiest resource)."""
        return self.cost.throughput


@dataclass
class McuResults:
    config: McuConfig
    points: list[Point]
    pipeline: list[PipelineRow]

    def point(self, workload: str, chips: int) -> Point | None:
        return next((p for p in self.points if (p.workload, p.chips) == (workload, chips)), None)

    def series(self, workload: str) -> list[Point]:
        return [p for p in self.points if p.workload == workload]


_CLUSTERS: dict[int, Cluster] = {}
Params = Mapping[str, float]


def siracusa(chips: int, params: Params | None = None) -> Cluster:
    """The smallest built-in ``siracusa-N`` cluster with at least ``chips`` chips (3 chips: of 4), its
    chips' model parameters (SI units) replaced by ``params`` where given."""
    size = next(n for n in SCALE_CHIPS if n >= chips)
    if size not in _CLUSTERS:
        _CLUSTERS[size] = load_cluster_spec(f"siracusa-{size}")
    base = _CLUSTERS[size]
    if not params:
        return base
    return replace(base, devices=[replace(d, params={**d.params, **params}) for d in base.devices])


def block_problem(w: Workload, chips: int, params: Params | None = None) -> SplitProblem:
    """The block of ``w`` on the smallest ``siracusa-N`` with ``chips`` chips, one of ``w.model_blocks``."""
    return build_problem(transformer_graph(w.shape), siracusa(chips, params), scope=ModelScope(w.model_blocks))


def run_workload(w: Workload, chips: tuple[int, ...], params: Params | None = None) -> list[Point]:
    """The block of ``w`` tensor-parallel on each chip count, with gains over the 1-chip point."""
    out = []
    for n in chips:
        problem = block_problem(w, n, params)
        plan = tensor_parallel_plan(problem.graph, problem.cluster.names[:n], blocks=find_blocks(problem.graph))
        out.append(Point(w.key, n, cost(problem, plan), heads_per_chip=list(plan.params["heads_per_chip"]),
                         ffn_per_chip=list(plan.params["ffn_per_chip"][0]) if plan.params["ffn_per_chip"] else []))
    base = next((p.cost for p in out if p.chips == 1), None)
    if base is not None:
        for p in out:
            p.speedup = base.latency_s / p.cost.latency_s
            p.energy_gain = base.energy_j / p.cost.energy_j
            p.edp_gain = base.edp / p.cost.edp
    return out


# ---- beyond the paper: tensor-parallel vs pipelines on the whole model ----------------------------

def whole_model_problem(chips: int) -> SplitProblem:
    """The whole TinyLlama-42M decoding one token on ``siracusa-<chips>``: what ``hetsplit plan
    tinyllama-42m --cluster siracusa-<chips> --decode 128`` costs."""
    return load_problem(WHOLE_MODEL, f"siracusa-{chips}", decode_context=DECODE_CONTEXT)


def stage_layer_ranges(graph: Graph, stages: int) -> list[tuple[int, int]]:
    """``[start, stop)`` layers of ``stages`` consecutive stages of whole blocks, as even as can be."""
    starts = block_starts(graph)
    if stages > len(starts):
        raise PlanError(f"{stages} stages of whole blocks need {stages} blocks; {graph.name!r} has {len(starts)}")
    per, extra = divmod(len(starts), stages)
    firsts, b = [], 0
    for s in range(stages):
        firsts.append(starts[b])
        b += per + (1 if s < extra else 0)
    return list(zip(firsts, firsts[1:] + [graph.num_layers]))


def tp_pipeline_plan(graph: Graph, groups: list[list[str]]) -> Plan:
    """A pipeline of tensor-parallel groups: stage s holds consecutive whole blocks, split over
    ``groups[s]`` as ``tensor_parallel_plan`` splits them (its first chip the stage's root); the
    stages pass the residual stream root to root."""
    blocks = find_blocks(graph)
    ranges = stage_layer_ranges(graph, len(groups))
    starts = block_starts(graph)
    assign, combine = {}, {}
    for (lo, hi), devices in zip(ranges, groups):
        mine = [b for b, s in zip(blocks, starts) if lo <= s < hi]
        part = tensor_parallel_plan(graph, devices, blocks=mine)
        for name in graph.names[lo:hi]:
            assign[name] = part.assign[name]
            if name in part.combine:
                combine[name] = part.combine[name]
    parts = [f"[{len(g)} chips: {sum(1 for s in starts if lo <= s < hi)} blocks]"
             for (lo, hi), g in zip(ranges, groups)]
    layout = f"{len(parts)} stages of {parts[0]}" if len(set(parts)) == 1 else " -> ".join(parts)
    return Plan(graph.name, "", "tp-pipeline", params={"layout": layout, "groups": [list(g) for g in groups]},
                assign=assign, combine=combine)


def _pipeline_layout(graph: Graph, plan: Plan) -> str:
    """"8 stages: 15 layers (1 block) x8"-like: each run of equal stages once, with its count."""
    starts = set(block_starts(graph))
    parts = []
    for s in plan.stages:
        first = graph.index(s.layers[0])
        whole = sum(1 for i in range(first, first + len(s.layers)) if i in starts)
        parts.append(f"{len(s.layers)} layers" + (f" ({whole} block{'s' if whole > 1 else ''})" if whole else ""))
    runs: list[list] = []
    for text in parts:
        if runs and runs[-1][0] == text:
            runs[-1][1] += 1
        else:
            runs.append([text, 1])
    return f"{len(plan.stages)} stages: " + ", ".join(t if k == 1 else f"{t} x{k}" for t, k in runs)


def compare_pipelines(chips: tuple[int, ...], progress: Progress = _quiet) -> list[PipelineRow]:
    """Tensor-parallel, the exact pipeline and every even pipeline of tensor-parallel groups (2+
    stages of 2+ chips, whole blocks per stage) of the whole model (``whole_model_problem``) on each
    chip count."""
    rows = []
    for n in chips:
        problem = whole_model_problem(n)
        graph, names = problem.graph, problem.cluster.names
        n_blocks = len(block_starts(graph))
        progress(f"whole {graph.name} on {n} chip(s): tensor-parallel, exact pipeline, pipelines of TP groups")
        (tp,) = make_partitioner("tensor-parallel").solve(problem)
        rows.append(PipelineRow(n, "tensor-parallel", f"{n} chip{'s' if n > 1 else ''}: all {n_blocks} blocks",
                                cost(problem, tp), n))
        exact = make_partitioner("exact").solve(problem)[0]
        rows.append(PipelineRow(n, "pipeline (exact)", _pipeline_layout(graph, exact), cost(problem, exact),
                                len(exact.stages)))
        for stages in range(2, min(n // 2, n_blocks) + 1):
            if n % stages or n_blocks % stages:
                continue
            g = n // stages
            plan = tp_pipeline_plan(graph, [names[s * g:(s + 1) * g] for s in range(stages)])
            rows.append(PipelineRow(n, "pipeline of TP groups", plan.params["layout"], cost(problem, plan), n))
    return rows


def run(config: McuConfig = McuConfig(), progress: Progress = _quiet) -> McuResults:
    """Every point of ``config`` (see the module docstring)."""
    points = []
    for key in config.workloads:
        w = WORKLOAD[key]
        chips = w.quick_chips if config.quick else w.chips
        progress(f"{w.label}: tensor-parallel on {', '.join(map(str, chips))} chip(s)")
        points += run_workload(w, chips, dict(config.params))
    pipeline = compare_pipelines(config.pipeline_chips, progress=progress) if config.pipeline_chips else []
    return McuResults(config, points, pipeline)
