"""The IMC paper's experiments (Bougioukou & Antonakopoulos, seed 001) re-run in hetsplit's simulator.

- Sweeps (Fig. 2, 3 and the YOLOv8n text): each model over a range of unit counts N, every mapper
  (LBLP, WB, RR, RD over a few seeds, HEFT, map-opt). The IMC/DPU split follows the model:
  ``DPUs = max(1, round(N x d / L))`` (d: layers whose processing type is the DPU, L: all layers),
  so at N = L every unit can hold exactly one layer. Clusters are the built-in ``imce-N-k``.
- Mix (Fig. 4): ResNet-18 at a few N with the number of DPUs varied, LBLP against WB (and map-opt).
- Table I: ResNet-18 on ``imce-12`` (8 IMC + 4 DPU): layers, weights and utilization per unit.

Metrics, all from the discrete-event simulator (``plan.simulate``):
- processing rate: steady-state throughput of a saturated stream of ``inputs`` inputs;
- latency: median latency of ``inputs`` inputs fed at the mapping's own rate, one every
  ``max(bottleneck_s, 1 / rate)`` (the closed form's bottleneck, or the simulated rate where the
  event-driven schedule cannot sustain the closed form's: feeding faster grows the queue without
  bound); the unloaded (one input alone) latency is kept beside it;
- utilization of a unit: its busy time per input x the sustained rate (the lesser of the simulated
  and the closed-form rate, so the busiest unit shows 100% and none more): its steady-state busy share.

``check_claims`` turns the paper's findings into verdicts (holds / partly / does not hold) with the
numbers; ``compare_search`` says where map-opt (a search) beats LBLP and by how much.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.estimate.simulate import SimOptions, simulate_plan
from hetsplit.plan.types import Plan
from hetsplit.search import make_partitioner, partitioner_names, partitioner_options
from hetsplit.search.node_mapping import NodeMapping

PAPER_ALGORITHMS = ("lblp", "wb", "rr", "rd")
ALGORITHMS = PAPER_ALGORITHMS + ("heft", "map-opt")
MODELS = ("resnet8", "resnet18", "yolov8n")
FIGURE_MODELS = ("resnet8", "resnet18")     # the models of the paper's Fig. 2 and 3
VERDICTS = ("holds", "partly", "does not hold")
TIE = 0.005                                  # relative: closer than this counts as equal
PAPER_RATE_X, PAPER_LATENCY_X = 2.0, 1.4     # ResNet-18, 12 units: LBLP over WB
PAPER_UTILIZATION = {"lblp": 0.783, "wb": 0.244}
PAPER_YOLO_LATENCY_GAP = 0.06
PAPER_FACTOR_SLACK = 0.05                    # a factor within 5% of the paper's counts as reached
PAPER_UTILIZATION_SLACK = 0.10               # mean utilization within 10 points counts as reproduced

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
    unloaded_latency_s: float        # one input alone
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
        """Loaded median latency (mean over seeds)."""
        return statistics.fmean(r.latency_s for r in self.runs_of(algorithm))

    def unloaded(self, algorithm: str) -> float:
        return statistics.fmean(r.unloaded_latency_s for r in self.runs_of(algorithm))


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
        return min(r.latency_s for c in self.cases for r in c.runs)


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
    return min(plans, key=lambda p: (p.metrics.bottleneck_s, p.metrics.latency_s)), spent


def measure(problem: SplitProblem, plan: Plan, algorithm: str, seed: int | None, inputs: int,
            solve_s: float) -> Run:
    """Simulate a plan: saturated for the rate and utilization, fed at its own rate for latency."""
    sat = simulate_plan(problem, plan, SimOptions(inputs=inputs, keep_timeline=False))
    interval = max(plan.metrics.bottleneck_s, 1.0 / sat.throughput)
    fed = simulate_plan(problem, plan, SimOptions(inputs=inputs, interval_s=interval, keep_timeline=False))
    sustained = min(float(sat.throughput), float(plan.metrics.throughput))
    names = problem.cluster.names
    layers: dict[str, list[int]] = {d: [] for d in names}
    for i, layer in enumerate(problem.graph.names):
        layers[plan.assign[layer]].append(i)
    weights = problem.graph.param_bytes
    return Run(algorithm, seed, float(sat.throughput), float(plan.metrics.throughput),
               fed.latency_percentile(50), float(sat.unloaded_latency_s),
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


# ---- claims --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Claim:
    claim: str
    verdict: str      # one of VERDICTS
    evidence: str


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _grade(passed: int, total: int) -> str:
    """holds: all; partly: at least half; does not hold: fewer."""
    if total and passed == total:
        return "holds"
    return "partly" if total and 2 * passed >= total else "does not hold"


def _rivals(case: Case) -> list[str]:
    return [a for a in PAPER_ALGORITHMS if a != "lblp" and case.has(a)]


def _lblp_best(case: Case) -> tuple[bool, bool, str]:
    """Is LBLP's rate highest and its latency lowest among the paper's algorithms? The closest rival."""
    rivals = _rivals(case)
    best_rate = max(rivals, key=case.rate)
    best_lat = min(rivals, key=case.latency)
    rate_ok = case.rate("lblp") >= case.rate(best_rate) * (1 - TIE)
    lat_ok = case.latency("lblp") <= case.latency(best_lat) * (1 + TIE)
    note = ""
    if not rate_ok:
        note += f" N={case.units}: {best_rate} rate +{_pct(case.rate(best_rate) / case.rate('lblp') - 1)}"
    if not lat_ok:
        note += f" N={case.units}: {best_lat} latency -{_pct(1 - case.latency(best_lat) / case.latency('lblp'))}"
    return rate_ok, lat_ok, note


def _figure_sweeps(results: LblpResults) -> list[Sweep]:
    chosen = [s for s in results.sweeps if s.model in FIGURE_MODELS]
    return chosen or results.sweeps


def claim_lblp_best(results: LblpResults) -> Claim | None:
    sweeps = [s for s in _figure_sweeps(results) if any(c.has("lblp") and _rivals(c) for c in s.cases)]
    if not sweeps:
        return None
    parts, passed, total = [], 0, 0
    for s in sweeps:
        checks = [_lblp_best(c) for c in s.cases if c.has("lblp") and _rivals(c)]
        r, lat = sum(c[0] for c in checks), sum(c[1] for c in checks)
        misses = "".join(c[2] for c in checks)
        parts.append(f"{s.model}: highest rate at {r}/{len(checks)} counts, lowest latency at {lat}/{len(checks)}"
                     + (f" (misses:{misses})" if misses else ""))
        passed, total = passed + r + lat, total + 2 * len(checks)
    heft = [(s.model, c.units) for s in results.sweeps for c in s.cases
            if c.has("heft") and c.has("lblp") and c.rate("heft") > c.rate("lblp") * (1 + TIE)]
    extra = [f"HEFT (not in the paper) has a higher rate than LBLP at {len(heft)} (model, N) cases"]
    other = [s for s in results.sweeps if s not in sweeps]
    for s in other:
        checks = [_lblp_best(c) for c in s.cases if c.has("lblp") and _rivals(c)]
        extra.append(f"{s.model} (not claimed): rate {sum(c[0] for c in checks)}/{len(checks)}, "
                     f"latency {sum(c[1] for c in checks)}/{len(checks)}")
    return Claim("LBLP gives the highest processing rate and the lowest latency at every unit count "
                 "(against WB, RR and RD; Fig. 2, 3)", _grade(passed, total),
                 "; ".join(parts) + f" (ties within {_pct(TIE)} count as best; RD: mean of its seeds); "
                 + "; ".join(extra))


def _spread(values: list[float]) -> float:
    return max(values) / min(values) - 1


def claim_convergence(results: LblpResults) -> Claim | None:
    rows, ok, total = [], 0, 0
    for s in results.sweeps:
        c = s.case(s.layers)
        if c is None:
            continue
        paper = [a for a in PAPER_ALGORITHMS if c.has(a)]
        if len(paper) < 2 or "lblp" not in paper:
            continue
        rate, lat = _spread([c.rate(a) for a in paper]), _spread([c.latency(a) for a in paper])
        one_each = all(len(v) <= 1 for a in paper for r in c.runs_of(a) for v in r.layers.values())
        total += 1
        ok += rate <= 0.01 and lat <= 0.01
        others = ", ".join(f"{a} rate {c.rate(a) / c.rate('lblp'):.3f}x latency {c.latency(a) / c.latency('lblp'):.3f}x"
                           for a in c.algorithms if a not in PAPER_ALGORITHMS)
        rows.append(f"{s.model} N={c.units}: rate spread {_pct(rate)}, latency spread {_pct(lat)}, "
                    f"one layer per unit: {'yes' if one_each else 'no'}" + (f"; {others}" if others else ""))
    if not total:
        return None
    return Claim("all algorithms converge when the number of units equals the number of nodes",
                 _grade(ok, total), "; ".join(rows) + " (spread: max/min - 1 over LBLP, WB, RR, RD; converged: "
                 "both within 1%)")


def _factor_met(measured: float, paper: float) -> bool:
    return measured >= paper * (1 - PAPER_FACTOR_SLACK)


def claim_resnet18_12(results: LblpResults) -> Claim | None:
    c = results.table
    if c is None or c.model != "resnet18" or not (c.has("lblp") and c.has("wb")):
        return None
    rate_x = c.rate("lblp") / c.rate("wb")
    lat_x = c.latency("wb") / c.latency("lblp")
    unl_x = c.unloaded("wb") / c.unloaded("lblp")
    met = _factor_met(rate_x, PAPER_RATE_X) + _factor_met(lat_x, PAPER_LATENCY_X)
    return Claim(f"ResNet-18, 12 units ({c.imc} IMC + {c.dpus} DPU): LBLP has > {PAPER_RATE_X:g}x the processing "
                 f"rate of WB and {PAPER_LATENCY_X:g}x lower latency", ("does not hold", "partly", "holds")[met],
                 f"rate {c.rate('lblp'):.0f} vs {c.rate('wb'):.0f} inferences/s = {rate_x:.2f}x; loaded latency "
                 f"{1e3 * c.latency('lblp'):.3f} vs {1e3 * c.latency('wb'):.3f} ms = {lat_x:.2f}x lower; unloaded "
                 f"latency {unl_x:.3f}x (a single input sees almost no difference on this sequential network)")


def imc_units(case: Case) -> list[str]:
    """The IMC units of a case's cluster (their names start with 'imc')."""
    return [d for d in case.runs[0].utilization if d.startswith("imc")]


def mean_utilization(case: Case, algorithm: str, units: list[str] | None = None) -> float:
    units = units if units is not None else imc_units(case)
    return statistics.fmean(statistics.fmean(r.utilization[u] for u in units) for r in case.runs_of(algorithm))


def claim_utilization(results: LblpResults) -> Claim | None:
    c = results.table
    if c is None or not all(c.has(a) for a in PAPER_UTILIZATION):
        return None
    got = {a: mean_utilization(c, a) for a in PAPER_UTILIZATION}
    close = all(abs(got[a] - PAPER_UTILIZATION[a]) <= PAPER_UTILIZATION_SLACK for a in got)
    direction = got["lblp"] > got["wb"] * (1 + TIE)
    verdict = "holds" if close and direction else ("partly" if direction else "does not hold")
    all_units = list(c.runs[0].utilization)
    return Claim(f"{c.model} on {c.cluster}: mean utilization of the IMC units 78.3% with LBLP, 24.4% with WB "
                 "(Table I)", verdict,
                 f"measured LBLP {_pct(got['lblp'])}, WB {_pct(got['wb'])} (ratio {got['lblp'] / got['wb']:.2f}x, paper "
                 f"{0.783 / 0.244:.2f}x); over all {len(all_units)} units LBLP {_pct(mean_utilization(c, 'lblp', all_units))}, "
                 f"WB {_pct(mean_utilization(c, 'wb', all_units))}; 'reproduced' needs both within "
                 f"{100 * PAPER_UTILIZATION_SLACK:.0f} points")


def claim_yolo(results: LblpResults) -> Claim | None:
    s = results.sweep("yolov8n")
    cases = [c for c in s.cases if c.has("lblp") and c.has("wb")] if s else []
    if not cases:
        return None
    loaded = max(cases, key=lambda c: abs(c.latency("wb") / c.latency("lblp") - 1))
    unloaded = max(cases, key=lambda c: abs(c.unloaded("wb") / c.unloaded("lblp") - 1))
    gap_l = abs(loaded.latency("wb") / loaded.latency("lblp") - 1)
    gap_u = abs(unloaded.unloaded("wb") / unloaded.unloaded("lblp") - 1)
    ok = (gap_l <= PAPER_YOLO_LATENCY_GAP) + (gap_u <= PAPER_YOLO_LATENCY_GAP)
    per_n = ", ".join(f"N={c.units} {c.latency('wb') / c.latency('lblp'):.2f}x" for c in cases)
    return Claim("YOLOv8n: LBLP and WB latencies differ by at most 6%", ("does not hold", "partly", "holds")[ok],
                 f"largest gap, loaded latency: {_pct(gap_l)} (N={loaded.units}); unloaded latency: {_pct(gap_u)} "
                 f"(N={unloaded.units}); WB / LBLP loaded latency per N: {per_n}; our YOLOv8n has {s.layers} "
                 "layers (fused groups), the paper's 233 ONNX nodes")


def claim_mix(results: LblpResults) -> Claim | None:
    cases = [c for c in results.mix if c.has("lblp") and c.has("wb")]
    if not cases:
        return None
    rate_x = [c.rate("lblp") / c.rate("wb") for c in cases]
    lat_x = [c.latency("wb") / c.latency("lblp") for c in cases]
    better = sum(r >= 1 - TIE and x >= 1 - TIE and (r > 1 + TIE or x > 1 + TIE) for r, x in zip(rate_x, lat_x))
    worse = [f"{c.cluster} rate {r:.2f}x latency {x:.2f}x" for c, r, x in zip(cases, rate_x, lat_x)
             if not (r >= 1 - TIE and x >= 1 - TIE and (r > 1 + TIE or x > 1 + TIE))]
    return Claim(f"{cases[0].model}, any IMC/DPU mix: LBLP performs significantly better than WB (Fig. 4)",
                 _grade(better, len(cases)),
                 f"LBLP better in {better}/{len(cases)} mixes (no worse in both metrics, better by > {_pct(TIE)} in "
                 f"one); LBLP / WB rate {min(rate_x):.2f}x to {max(rate_x):.2f}x, WB / LBLP latency "
                 f"{min(lat_x):.2f}x to {max(lat_x):.2f}x" + (f"; not better: {'; '.join(worse)}" if worse else ""))


def claim_rr_rd_vs_wb(results: LblpResults) -> Claim | None:
    s = results.sweep("resnet8")
    cases = [c for c in s.cases if all(c.has(a) for a in ("wb", "rr", "rd"))] if s else []
    if not cases:
        return None
    above = [c.units for c in cases if max(c.rate("rr"), c.rate("rd")) > c.rate("wb") * (1 + TIE)]
    below = [c.units for c in cases if min(c.rate("rr"), c.rate("rd")) < c.rate("wb") * (1 - TIE)]
    verdict = "holds" if above and below else ("partly" if above else "does not hold")
    return Claim("ResNet-8: RR and RD are moderate, occasionally surpassing WB (Fig. 2)", verdict,
                 f"RR or RD (mean of seeds) has a higher rate than WB at {len(above)}/{len(cases)} counts "
                 f"(N = {above or 'none'}); one of them is below WB at {len(below)} (N = {below or 'none'})")


CLAIM_CHECKS = (claim_lblp_best, claim_convergence, claim_resnet18_12, claim_utilization, claim_yolo, claim_mix,
                claim_rr_rd_vs_wb)


def check_claims(results: LblpResults) -> list[Claim]:
    """The paper's findings that the results can check, each with a verdict and the numbers."""
    return [c for c in (check(results) for check in CLAIM_CHECKS) if c is not None]


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
            text += (f" (by {_pct(min(g.rate_gain for g in up))} to {_pct(top.rate_gain)}, median "
                     f"{_pct(statistics.median(g.rate_gain for g in up))}; largest {top.model} {top.cluster})")
        text += f"; lower latency in {len(lat_up)}"
        if lat_up:
            top = max(lat_up, key=lambda g: g.latency_gain)
            text += f" (up to {_pct(top.latency_gain)}, {top.model} {top.cluster})"
        if down:
            low = min(down, key=lambda g: g.rate_gain)
            text += f"; lower rate than LBLP in {len(down)} (worst {_pct(low.rate_gain)}, {low.model} {low.cluster})"
        return text + f"; equal (within {_pct(TIE)}) elsewhere"


def compare_search(results: LblpResults, algorithm: str = "map-opt") -> SearchComparison:
    """Per case holding both (sweeps, then mixes not already swept), the search's gain over LBLP."""
    cases = [c for s in results.sweeps for c in s.cases]
    seen = {(c.model, c.cluster) for c in cases}
    cases += [c for c in results.mix if (c.model, c.cluster) not in seen]   # the same set-up runs once
    gains = [Gain(c.model, c.cluster, c.units, c.rate(algorithm) / c.rate("lblp") - 1,
                  1 - c.latency(algorithm) / c.latency("lblp"))
             for c in cases if c.has(algorithm) and c.has("lblp")]
    return SearchComparison(algorithm, gains)
