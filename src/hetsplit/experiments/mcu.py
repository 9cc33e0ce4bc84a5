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

``check_claims`` grades each number the paper states against ours (within +-25%);
``report/mcu_repro.py`` draws and writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

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

BAND = 0.25                      # a number within +-25% of the paper's reproduces it
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
             (1, 8)),
    Workload("tinyllama-prompt", "TinyLlama-42M, prompt (S=16)", _tinyllama(8, 16, 16), 8, (1, 2, 4, 8), (1, 8)),
    Workload("tinyllama64-ar", "TinyLlama, 64 heads, autoregressive (S=128)", _tinyllama(64, 1, 128), 8,
             SCALE_CHIPS, (1, 64), scaled=True),
    Workload("tinyllama64-prompt", "TinyLlama, 64 heads, prompt (S=16)", _tinyllama(64, 16, 16), 8, SCALE_CHIPS,
             (1, 64), scaled=True),
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
    pipeline_chips: tuple[int, ...] = PIPELINE_CHIPS  # () skips the comparison

    @classmethod
    def quick_run(cls) -> "McuConfig":
        return cls(quick=True, pipeline_chips=(8,))


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


def siracusa(chips: int) -> Cluster:
    """The smallest built-in ``siracusa-N`` cluster with at least ``chips`` chips (3 chips: of 4)."""
    size = next(n for n in SCALE_CHIPS if n >= chips)
    if size not in _CLUSTERS:
        _CLUSTERS[size] = load_cluster_spec(f"siracusa-{size}")
    return _CLUSTERS[size]


def block_problem(w: Workload, chips: int) -> SplitProblem:
    """The block of ``w`` on the smallest ``siracusa-N`` with ``chips`` chips, one of ``w.model_blocks``."""
    return build_problem(transformer_graph(w.shape), siracusa(chips), scope=ModelScope(w.model_blocks))


def run_workload(w: Workload, chips: tuple[int, ...]) -> list[Point]:
    """The block of ``w`` tensor-parallel on each chip count, with gains over the 1-chip point."""
    out = []
    for n in chips:
        problem = block_problem(w, n)
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
        points += run_workload(w, chips)
    pipeline = compare_pipelines(config.pipeline_chips, progress=progress) if config.pipeline_chips else []
    return McuResults(config, points, pipeline)


# ---- the paper's numbers --------------------------------------------------------------------------

@dataclass(frozen=True)
class NumericClaim:
    """A number the paper states, ours beside it, and whether ours is within the band."""

    key: str
    claim: str
    where: str                    # where the paper says it
    paper: float
    ours: float | None            # None: not run
    unit: str
    evidence: str = ""            # how ours was obtained
    reason: str = ""              # why ours is out of band (the model's limit), when it is

    @property
    def ratio(self) -> float | None:
        return None if self.ours is None else self.ours / self.paper

    @property
    def within(self) -> bool | None:
        r = self.ratio
        return None if r is None else 1 - BAND <= r <= 1 + BAND

    @property
    def verdict(self) -> str:
        return {None: "not run", True: "within ±25%", False: "out of band"}[self.within]

    def to_dict(self) -> dict:
        return {"key": self.key, "claim": self.claim, "where": self.where, "paper": self.paper, "ours": self.ours,
                "unit": self.unit, "ratio": self.ratio, "within_band": self.within, "verdict": self.verdict,
                "evidence": self.evidence, "reason": self.reason}


# Why a claim may leave the band: what the analytical model leaves out (stated with the claim only
# when it does leave it).
LIMITS = {
    "speedup": "the 1-chip time is our L3 model (weights and activations streamed once per block at "
               "l3_bandwidth x l3_stream_efficiency), the paper's is GVSoC's tiled schedule, which re-reads tiles",
    "latency": "our kernels run at one rate per kind (GEMV, GEMM, elementwise) plus a fixed overhead per kernel; "
               "the paper's Deeploy kernels vary with their shapes",
    "energy": "our T_comp is compute time only; GVSoC's activity-based power differs by kernel",
    "scaled": "at 64 chips a chip's slice is 8 columns: time is set by per-kernel overhead and the all-reduce tree, "
              "which we model with two levels (groups of 4, then their leaders) and no per-message set-up",
}


METRICS: dict[str, tuple[Callable[[Point], float], str]] = {
    "speedup": (lambda p: p.speedup, "latency on 1 chip / on N"),
    "latency": (lambda p: p.cost.latency_s * 1e3, "critical path of one block"),
    "energy": (lambda p: p.cost.energy_j * 1e3, "N_c2c E_c2c + sum over chips (P T_comp + N_L3 E_L3 + N_L2 E_L2)"),
    "edp_gain": (lambda p: p.edp_gain, "energy x latency on 1 chip / on N"),
    "energy_gain": (lambda p: p.energy_gain, "energy on 1 chip / on N"),
}
# (key, claim, where in the paper, paper's value, unit, workload, chips, metric, limit that explains a miss)
PAPER_CLAIMS = (
    ("tinyllama-ar-speedup-8", "TinyLlama autoregressive: 26.1x faster on 8 chips than on 1",
     "abstract, Sec. V-B, Fig. 4a", 26.1, "x", "tinyllama-ar", 8, "speedup", "speedup"),
    ("tinyllama-ar-latency-8", "TinyLlama autoregressive: 0.54 ms per block on 8 chips", "abstract", 0.54, "ms",
     "tinyllama-ar", 8, "latency", "latency"),
    ("tinyllama-ar-energy-8", "TinyLlama autoregressive: 0.64 mJ per block on 8 chips", "abstract", 0.64, "mJ",
     "tinyllama-ar", 8, "energy", "energy"),
    ("tinyllama-ar-edp-8", "TinyLlama autoregressive: EDP 27.2x better on 8 chips than on 1", "abstract", 27.2, "x",
     "tinyllama-ar", 8, "edp_gain", "speedup"),
    ("tinyllama-prompt-speedup-8", "TinyLlama prompt: 9.9x faster on 8 chips than on 1", "Sec. V-B, Fig. 4b", 9.9,
     "x", "tinyllama-prompt", 8, "speedup", "speedup"),
    ("tinyllama64-ar-speedup-64", "TinyLlama with 64 heads, autoregressive: 60.1x faster on 64 chips than on 1",
     "Sec. V-C, Fig. 6", 60.1, "x", "tinyllama64-ar", 64, "speedup", "scaled"),
    ("tinyllama64-ar-energy-64", "TinyLlama with 64 heads, autoregressive: 1.3x less energy on 64 chips than on 1",
     "Sec. V-C, Fig. 5a", 1.3, "x", "tinyllama64-ar", 64, "energy_gain", "scaled"),
    ("mobilebert-speedup-4", "MobileBERT: 4.7x faster on 4 chips than on 1", "abstract, Sec. V-B, Fig. 4c", 4.7, "x",
     "mobilebert", 4, "speedup", "speedup"),
    ("mobilebert-latency-4", "MobileBERT: 38.8 ms per block on 4 chips", "abstract", 38.8, "ms", "mobilebert", 4,
     "latency", "latency"),
)


def check_claims(results: McuResults) -> list[NumericClaim]:
    """Every number of the paper's abstract and Sec. V against ours."""
    out = []
    for key, text, where, paper, unit, workload, chips, metric, limit in PAPER_CLAIMS:
        p, base = results.point(workload, chips), results.point(workload, 1)
        if p is None or base is None:
            out.append(NumericClaim(key, text, where, paper, None, unit, f"{workload} on 1 and {chips} chips not run"))
            continue
        value, how = METRICS[metric]
        ours = value(p)
        ev = (f"{how}; {chips} chips: {p.cost.latency_s * 1e3:.4g} ms, {p.cost.energy_j * 1e3:.4g} mJ, "
              f"{p.cost.regime}; 1 chip: {base.cost.latency_s * 1e3:.4g} ms, {base.cost.energy_j * 1e3:.4g} mJ, "
              f"{base.cost.regime}")
        within = 1 - BAND <= ours / paper <= 1 + BAND
        out.append(NumericClaim(key, text, where, paper, ours, unit, ev, "" if within else LIMITS[limit]))
    return out


@dataclass(frozen=True)
class Finding:
    """A statement beyond the paper's numbers, measured."""

    claim: str
    verdict: str
    evidence: str


def pipeline_findings(results: McuResults) -> list[Finding]:
    """Sec. III-B: pipelining needs many requests in flight and cannot lower one request's latency."""
    out = []
    by_n: dict[int, list[PipelineRow]] = {}
    for r in results.pipeline:
        by_n.setdefault(r.chips, []).append(r)
    multi = {n: rows for n, rows in by_n.items() if n > 1}
    if not multi:
        return [Finding("Pipelining cannot lower the latency of one request (Sec. III-B)", "not run", "")]
    one = by_n.get(1, [None])[0]
    notes, ok = [f"1 chip: {one.latency_s * 1e3:.1f} ms/token"] if one is not None else [], True
    for n, rows in sorted(multi.items()):
        tp = next(r for r in rows if r.kind == "tensor-parallel")
        pipe = min((r for r in rows if r.kind == "pipeline (exact)"), key=lambda r: r.latency_s)
        ok &= tp.latency_s < pipe.latency_s
        in_flight = max(1, round(pipe.throughput * pipe.latency_s))
        notes.append(f"{n} chips: tensor-parallel {tp.latency_s * 1e3:.2f} ms/token vs exact pipeline "
                     f"{pipe.latency_s * 1e3:.1f} ms/token ({pipe.latency_s / tp.latency_s:.1f}x slower; its rate "
                     f"of {pipe.throughput:.0f} tokens/s needs {in_flight} independent users in flight)")
    out.append(Finding("For one user, tensor-parallel gives lower latency per token than the exact pipeline plan "
                       "at every chip count (pipelining does not suit a single user, Sec. III-B)",
                       "holds" if ok else "does not hold", "; ".join(notes)))
    return out
