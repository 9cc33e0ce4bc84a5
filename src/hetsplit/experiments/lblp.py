"""The IMC paper's experiments (Bougioukou & Antonakopoulos, seed 001) re-run in hetsplit's simulator.

- Sweeps (Fig. 2, 3 and the YOLOv8n text): each model over a range of unit counts N, every mapper
  (LBLP, WB, RR, RD over a few seeds, HEFT, map-opt). The IMC/DPU split follows the model:
  ``DPUs = max(1, round(N x d / L))`` (d: layers whose processing type is the DPU, L: all layers),
  so at N = L every unit can hold exactly one layer. Clusters are the built-in ``imce-N-k``.
- Mix (Fig. 4): ResNet-18 at a few N with the number of DPUs varied, LBLP against WB (and map-opt).
- Table I: ResNet-18 on ``imce-12`` (8 IMC + 4 DPU): layers, weights and utilization per unit.

Metrics, all from the estimator (``hetsplit.estimate``):
- processing rate: steady-state throughput of a saturated stream of ``inputs`` inputs (its
  discrete-event simulator);
- latency: the median latency of ``inputs`` inputs fed at the mapping's own rate, one every
  ``max(bottleneck_s, 1 / rate)`` (the simulator; feeding faster grows the queue without bound): the
  paper's measure, ``experiments.lblp_claims`` says why; beside it one input alone, the closed form's
  latency (``estimate_plan(..., "closed")``, what the planners report);
- utilization of a unit: its busy time per input x the sustained rate (the lesser of the simulated
  and the closed-form rate, so the busiest unit shows 100% and none more): its steady-state busy share.

``experiments/lblp_claims.py`` labels and grades the paper's claims; ``compare_search`` says where
map-opt (a search) beats LBLP and by how much.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate import estimate_plan
from hetsplit.estimate.simulate import SimOptions, simulate_plan
from hetsplit.plan.types import Plan
from hetsplit.search import make_partitioner, partitioner_names, partitioner_options
from hetsplit.search.node_mapping import NodeMapping

PAPER_ALGORITHMS = ("lblp", "wb", "rr", "rd")
ALGORITHMS = PAPER_ALGORITHMS + ("heft", "map-opt")
MODELS = ("resnet8", "resnet18", "yolov8n")
FIGURE_MODELS = ("resnet8", "resnet18")     # the models of the paper's Fig. 2 and 3
TIE = 0.005                                  # relative: closer than this counts as equal
PAPER_UTILIZATION = {"lblp": 0.783, "wb": 0.244}   # Table I: mean utilization of the IMC units

Loader = Callable[[str, str], SplitProblem]
Progress = Callable[[str], None]


def _default_loader(model: str, cluster: str) -> SplitProblem:
    from hetsplit.workflow import load_problem

    return load_problem(model, cluster)


def _quiet(_: str) -> None:
    pass


# ---- configuration -------------------------------------------------------------------------------

@dataclass(frozen=True)
class LblpConfig:
    """What to run. ``unit_counts`` per model (missing: ``default_unit_counts``); ``coarse`` picks
    fewer counts; ``budget_s``: map-opt's time budget per case; mix and table run only when their
    model is among ``models``."""

    models: tuple[str, ...] = MODELS
    algorithms: tuple[str, ...] = ALGORITHMS
    unit_counts: dict[str, tuple[int, ...]] = field(default_factory=dict)
    coarse: bool = False
    rd_seeds: int = 5
    inputs: int = 200
    budget_s: float = 2.0
    mix_model: str = "resnet18"
    mix_units: tuple[int, ...] = (8, 12, 16, 20)
    mix_dpus: tuple[int, ...] = (1, 2, 3, 4)
    mix_algorithms: tuple[str, ...] = ("lblp", "wb", "map-opt")
    table_model: str = "resnet18"
    table_cluster: str = "imce-12"
    table_algorithms: tuple[str, ...] = ("lblp", "wb")

    @classmethod
    def quick(cls, models: tuple[str, ...] = MODELS, budget_s: float = 0.5) -> "LblpConfig":
        """A reduced run: coarse unit counts, fewer inputs and seeds, one mix size."""
        return cls(models=models, coarse=True, rd_seeds=2, inputs=60, budget_s=budget_s,
                   mix_units=(12,), mix_dpus=(2, 4))


def default_unit_counts(layers: int, coarse: bool = False) -> tuple[int, ...]:
    """N from 2 to L: every N up to 16, then every other; above 32 layers (or coarse) powers of two."""
    if coarse or layers > 32:
        counts = [2 ** k for k in range(1, 8) if 2 ** k < layers]
    else:
        counts = list(range(2, min(layers, 16) + 1)) + list(range(18, layers, 2))
    return tuple(sorted(set(counts) | {layers}))


def sweep_dpus(units: int, layers: int, dpu_layers: int) -> int:
    """DPUs among N units, in the model's share of DPU layers (at least one of each kind)."""
    return min(units - 1, max(1, round(units * dpu_layers / layers)))


# ---- results -------------------------------------------------------------------------------------

@dataclass
class Run:
    """One mapping, simulated."""

    algorithm: str
    seed: int | None
    rate: float                      # simulated steady-state inferences/s (saturated stream)
    model_rate: float                # closed form: 1 / plan.metrics.bottleneck_s
    latency_s: float                 # median latency, inputs fed at the mapping's own rate
    unloaded_latency_s: float        # one input alone (the closed form's latency, the planners' figure)
    utilization: dict[str, float]    # per unit: busy time per input x sustained rate (<= 1)
    layers: dict[str, list[int]]     # per unit: 0-based layer indices
    weight_bytes: dict[str, float]   # per unit
    solve_s: float


@dataclass
class Case:
    """One model on one cluster: a run per algorithm (per seed for RD)."""

    model: str
    cluster: str
    units: int
    imc: int
    layers: int
    runs: list[Run]

    @property
    def dpus(self) -> int:
        return self.units - self.imc

    @property
    def algorithms(self) -> list[str]:
        return list(dict.fromkeys(r.algorithm for r in self.runs))

    def runs_of(self, algorithm: str) -> list[Run]:
        return [r for r in self.runs if r.algorithm == algorithm]

    def has(self, algorithm: str) -> bool:
        return bool(self.runs_of(algorithm))

    def rate(self, algorithm: str) -> float:
        """Processing rate (mean over seeds)."""
        return statistics.fmean(r.rate for r in self.runs_of(algorithm))

    def latency(self, algorithm: str) -> float:
        """One input's latency alone (mean over seeds): the planners' figure."""
        return statistics.fmean(r.unloaded_latency_s for r in self.runs_of(algorithm))

    def loaded(self, algorithm: str) -> float:
        """Median latency of inputs fed at the mapping's own rate (mean over seeds): the paper's measure."""
        return statistics.fmean(r.latency_s for r in self.runs_of(algorithm))


@dataclass
class Sweep:
    """One model over unit counts; ``dpu_layers`` sets each count's IMC/DPU split."""

    model: str
    layers: int
    dpu_layers: int
    cases: list[Case]

    def case(self, units: int) -> Case | None:
        return next((c for c in self.cases if c.units == units), None)

    def max_rate(self) -> float:
        return max(r.rate for c in self.cases for r in c.runs)

    def min_latency(self) -> float:
        return min(r.unloaded_latency_s for c in self.cases for r in c.runs)


@dataclass
class LblpResults:
    """Everything ``run`` measured; ``missing``: requested algorithms not registered here."""

    config: LblpConfig
    sweeps: list[Sweep]
    mix: list[Case]
    table: Case | None
    missing: list[str]
    wall_s: float
    table_layers: list[str] = field(default_factory=list)   # the table model's layer names, in id order

    def sweep(self, model: str) -> Sweep | None:
        return next((s for s in self.sweeps if s.model == model), None)


# ---- running -------------------------------------------------------------------------------------

def imce_cluster(units: int, imc: int) -> str:
    return f"imce-{units}-{imc}"


def dpu_layer_count(problem: SplitProblem) -> int:
    """Layers whose processing type (the fastest) is a DPU."""
    nm = NodeMapping(problem)
    kind = {int(t): problem.cluster.devices[int(nm.units_of_type(int(t))[0])].kind
            for t in np.unique(nm.processing_type)}
    return sum(kind[int(t)] == "dpu" for t in nm.processing_type)


def _options(name: str, config: LblpConfig, seed: int) -> dict:
    accepted = partitioner_options(name)
    opts: dict = {}
    if "seed" in accepted:
        opts["seed"] = seed
    if "time_budget_s" in accepted:
        opts["time_budget_s"] = config.budget_s
    if "verify_inputs" in accepted:
        opts["verify_inputs"] = config.inputs     # map-opt picks its finalist on the stream measured here
    return opts


def solve(problem: SplitProblem, name: str, config: LblpConfig, seed: int = 0) -> tuple[Plan, float]:
    """The mapper's best plan (highest closed-form rate, then lowest latency) and its solve time."""
    t0 = time.perf_counter()
    plans = make_partitioner(name, **_options(name, config, seed)).solve(problem)
    spent = time.perf_counter() - t0
    return min(plans, key=lambda p: (p.costed.bottleneck_s, p.costed.latency_s)), spent


def measure(problem: SplitProblem, plan: Plan, algorithm: str, seed: int | None, inputs: int,
            solve_s: float) -> Run:
    """Simulate a plan: saturated for the rate and utilization, fed at its own rate for latency."""
    sat = simulate_plan(problem, plan, SimOptions(inputs=inputs, keep_timeline=False))
    interval = max(plan.costed.bottleneck_s, 1.0 / sat.throughput)
    fed = simulate_plan(problem, plan, SimOptions(inputs=inputs, interval_s=interval, keep_timeline=False))
    sustained = min(float(sat.throughput), float(plan.costed.throughput))
    names = problem.cluster.names
    layers: dict[str, list[int]] = {d: [] for d in names}
    for i, layer in enumerate(problem.graph.names):
        layers[str(plan.assign[layer])].append(i)      # LBLP places whole layers
    weights = problem.graph.param_bytes
    return Run(algorithm, seed, float(sat.throughput), float(plan.costed.throughput),
               fed.latency_percentile(50), float(estimate_plan(problem, plan, "closed").latency_s),
               {d: sat.busy_s.get(d, 0.0) / inputs * sustained for d in names}, layers,
               {d: float(weights[idx].sum()) for d, idx in layers.items()}, solve_s)


def run_case(problem: SplitProblem, model: str, cluster: str, algorithms: tuple[str, ...],
             config: LblpConfig) -> Case:
    """Every algorithm (RD once per seed) on one problem."""
    runs = []
    for name in algorithms:
        seeds: list[int | None] = list(range(config.rd_seeds)) if name == "rd" else [None]
        for seed in seeds:
            plan, spent = solve(problem, name, config, seed or 0)
            runs.append(measure(problem, plan, name, seed, config.inputs, spent))
    imc = sum(d.kind == "imc" for d in problem.cluster.devices)
    return Case(model, cluster, problem.num_devices, imc, problem.num_layers, runs)


def run_sweep(model: str, config: LblpConfig, algorithms: tuple[str, ...], loader: Loader = _default_loader,
              progress: Progress = _quiet) -> Sweep:
    """One model over its unit counts."""
    probe = loader(model, imce_cluster(2, 1))
    layers, dpu_layers = probe.num_layers, dpu_layer_count(probe)
    counts = config.unit_counts.get(model) or default_unit_counts(layers, config.coarse)
    cases = []
    for n in counts:
        dpus = sweep_dpus(n, layers, dpu_layers)
        name = imce_cluster(n, n - dpus)
        progress(f"{model}: {name} ({n - dpus} IMC + {dpus} DPU)")
        cases.append(run_case(loader(model, name), model, name, algorithms, config))
    return Sweep(model, layers, dpu_layers, cases)


def run_mix(config: LblpConfig, algorithms: tuple[str, ...], loader: Loader = _default_loader,
            progress: Progress = _quiet) -> list[Case]:
    """Fig. 4: the mix model at each N with each DPU count."""
    out = []
    for n in config.mix_units:
        for dpus in config.mix_dpus:
            if 1 <= dpus < n:
                name = imce_cluster(n, n - dpus)
                progress(f"mix {config.mix_model}: {name}")
                out.append(run_case(loader(config.mix_model, name), config.mix_model, name, algorithms, config))
    return out


def run(config: LblpConfig = LblpConfig(), loader: Loader = _default_loader, progress: Progress = _quiet) -> LblpResults:
    """Sweeps, mix and Table I as configured; unregistered algorithms are skipped (``missing``)."""
    t0 = time.perf_counter()
    known = set(partitioner_names())
    wanted = tuple(dict.fromkeys(config.algorithms + config.mix_algorithms + config.table_algorithms))
    missing = [a for a in wanted if a not in known]
    if missing:
        progress(f"not registered, skipped: {', '.join(missing)}")

    def have(names: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(a for a in names if a in known)

    sweeps = [run_sweep(m, config, have(config.algorithms), loader, progress) for m in config.models]
    mix = run_mix(config, have(config.mix_algorithms), loader, progress) if config.mix_model in config.models else []
    table, names = None, []
    if config.table_model in config.models:
        progress(f"table: {config.table_model} on {config.table_cluster}")
        problem = loader(config.table_model, config.table_cluster)
        table = run_case(problem, config.table_model, config.table_cluster, have(config.table_algorithms), config)
        names = list(problem.graph.names)
    return LblpResults(config, sweeps, mix, table, missing, time.perf_counter() - t0, names)


def imc_units(case: Case) -> list[str]:
    """The IMC units of a case's cluster (their names start with 'imc')."""
    return [d for d in case.runs[0].utilization if d.startswith("imc")]


def mean_utilization(case: Case, algorithm: str, units: list[str] | None = None) -> float:
    units = units if units is not None else imc_units(case)
    return statistics.fmean(statistics.fmean(r.utilization[u] for u in units) for r in case.runs_of(algorithm))


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


# ---- map-opt against LBLP ------------------------------------------------------------------------

@dataclass(frozen=True)
class Gain:
    """map-opt against LBLP on one case: positive is map-opt better."""

    model: str
    cluster: str
    units: int
    rate_gain: float       # map-opt rate / LBLP rate - 1
    latency_gain: float    # 1 - map-opt latency / LBLP latency


@dataclass
class SearchComparison:
    algorithm: str
    gains: list[Gain]

    def better_rate(self) -> list[Gain]:
        return [g for g in self.gains if g.rate_gain > TIE]

    def worse_rate(self) -> list[Gain]:
        return [g for g in self.gains if g.rate_gain < -TIE]

    def summary(self) -> str:
        """One paragraph: where the search beats LBLP, and by how much."""
        if not self.gains:
            return f"{self.algorithm}: not run (not registered or no case with LBLP)"
        up, down = self.better_rate(), self.worse_rate()
        lat_up = [g for g in self.gains if g.latency_gain > TIE]
        text = f"{self.algorithm} vs LBLP over {len(self.gains)} cases: higher rate in {len(up)}"
        if up:
            top = max(up, key=lambda g: g.rate_gain)
            text += (f" (by {pct(min(g.rate_gain for g in up))} to {pct(top.rate_gain)}, median "
                     f"{pct(statistics.median(g.rate_gain for g in up))}; largest {top.model} {top.cluster})")
        text += f"; lower latency in {len(lat_up)}"
        if lat_up:
            top = max(lat_up, key=lambda g: g.latency_gain)
            text += f" (up to {pct(top.latency_gain)}, {top.model} {top.cluster})"
        if down:
            low = min(down, key=lambda g: g.rate_gain)
            text += f"; lower rate than LBLP in {len(down)} (worst {pct(low.rate_gain)}, {low.model} {low.cluster})"
        return text + f"; equal (within {pct(TIE)}) elsewhere"


def compare_search(results: LblpResults, algorithm: str = "map-opt") -> SearchComparison:
    """Per case holding both (sweeps, then mixes not already swept), the search's gain over LBLP."""
    cases = [c for s in results.sweeps for c in s.cases]
    seen = {(c.model, c.cluster) for c in cases}
    cases += [c for c in results.mix if (c.model, c.cluster) not in seen]   # the same set-up runs once
    gains = [Gain(c.model, c.cluster, c.units, c.rate(algorithm) / c.rate("lblp") - 1,
                  1 - c.latency(algorithm) / c.latency("lblp"))
             for c in cases if c.has(algorithm) and c.has("lblp")]
    return SearchComparison(algorithm, gains)
