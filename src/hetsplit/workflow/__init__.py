"""The main job as library calls: load a model (or profile) and a cluster, find plans, run one, compare.

The documented Python API (README, docs/byo.md) below ``experiments``, ``report`` and ``cli``: they
call these, which hold the orchestration so commands stay thin (see docs/architecture.md). The short
path: ``export_torch`` (a ``torch.nn.Module``) or an .onnx file -> ``load_problem`` -> ``search_plans``
-> ``run_here`` -> ``compare_run``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Sequence, overload

from hetsplit.cluster import Cluster
from hetsplit.cluster.examples import is_builtin
from hetsplit.costs import CostTable, SplitProblem, build_problem, load_profile
from hetsplit.costs.local_calibration import MODEL as LOCAL_MODEL
from hetsplit.costs.local_calibration import local_costs
from hetsplit.errors import ClusterError, HetsplitError, PlanError, UsageError
from hetsplit.estimate import Here, HereOptions, LocalPrediction, SimResult
from hetsplit.estimate.accuracy import Recommendation, plan_kind, recommend
from hetsplit.estimate.processes import runs_here  # noqa: F401 - re-exported for the commands
from hetsplit.estimate.transfers import Transfer
from hetsplit.graph import Graph
from hetsplit.graph.input_shapes import InputShapes, check_recorded
from hetsplit.graph.transformer import decode_step
from hetsplit.outpath import output_dir  # noqa: F401 - re-exported for the commands
from hetsplit.plan import Plan, mark_pareto
from hetsplit.plan.pareto import DEFAULT_FRONT, MAPPING_FRONT
from hetsplit.search import PipelineConstraints, make_partitioner, partitioner_names, partitioner_options
from hetsplit.search.map_opt import OBJECTIVES as MAPPING_OBJECTIVES

if TYPE_CHECKING:
    from hetsplit.runtime.device_emulation import DeviceEmulation
    from hetsplit.costs.profile import Profile
    from hetsplit.runtime.report import RunReport
    from hetsplit.workflow.comparison import Comparison


def is_profile_path(spec: str) -> bool:
    return spec.endswith(".json")


def load_model_or_profile(spec: str, input_shapes: InputShapes | None = None) -> tuple[Graph, CostTable | None]:
    """A zoo name or .onnx path gives a graph (``input_shapes`` fix its symbolic input dims, see
    ``graph.input_shapes``); a .json profile gives a graph-lite and its costs (the shapes it records;
    others given are refused)."""
    if is_profile_path(spec):
        prof = load_profile(spec)
        if input_shapes and not prof.meta.get("input_shapes"):
            raise UsageError(f"the profile {spec} was measured at its model's own input shapes and records none; "
                             "--input-shape cannot change a measurement: leave it out, or profile the model at "
                             "that shape (hetsplit profile MODEL --input-shape ...)")
        recorded = check_recorded(prof.meta.get("input_shapes") or {}, input_shapes, f"the profile {spec}")
        if recorded:
            prof.graph.meta["input_shapes"] = {n: list(d) for n, d in recorded.items()}
        return prof.graph, prof.costs
    from hetsplit.graph import load_model

    return load_model(spec, input_shapes), None


def load_cluster_spec(spec: str, recalibrate: bool = False, confined: bool = False) -> Cluster:
    """A cluster by built-in name or YAML path; ``recalibrate``: measure this machine's ``local``
    devices anew (``costs.local_calibration``) when the cluster has any; ``confined``: the files it names
    must lie in its folder (``cluster.loader.load_cluster``)."""
    from hetsplit.cluster.loader import load_cluster

    cl = load_cluster(spec, confined)
    if recalibrate and any(d.model == LOCAL_MODEL for d in cl.devices):
        local_costs(recalibrate=True)
    return cl


def costs_notes(problem: SplitProblem) -> list[str]:
    """Where the costs of this machine's ``local`` devices (calibrated when, or fallback) and of the
    device types the cluster gives a measured profile come from."""
    return [f"{t} costs: {problem.costs.sources.get(t, '')}" for t in problem.cluster.types
            if problem.cluster.representative(t).model == LOCAL_MODEL or problem.cluster.representative(t).profile]


def load_problem(model: str, cluster: str | Cluster, decode_context: int | None = None,
                 recalibrate: bool = False, input_shapes: InputShapes | None = None) -> SplitProblem:
    """The SplitProblem of a model/profile spec on a cluster spec (built-in name or YAML path).

    ``decode_context``: cost one autoregressive step of a Transformer against a KV cache of that many
    positions instead of the exported prompt pass (``graph.transformer.decode_step``); a model named as
    a decode step names (``tinyllama-42m@decode128``, what a decode plan records) means the same;
    ``recalibrate``: see ``load_cluster_spec``; ``input_shapes``: see ``load_model_or_profile``."""
    model, decode_context = split_decode_name(model, decode_context)
    graph, profile_costs = load_model_or_profile(model, input_shapes)
    if decode_context is not None:
        if profile_costs is not None:
            raise HetsplitError(f"{model}: a profile measures the prompt pass it was taken on; a decode step is "
                                "costed by the device models, so give the model (zoo name or .onnx), not a profile")
        graph = decode_step(graph, decode_context)
    cl = cluster if isinstance(cluster, Cluster) else load_cluster_spec(cluster, recalibrate)
    return with_runtime_segment_cost(build_problem(graph, cl, profile_costs), recalibrate)


def with_runtime_segment_cost(problem: SplitProblem, recalibrate: bool = False) -> SplitProblem:
    """On this machine's ``local`` cluster (``runs_here``): ``problem`` with what a segment costs its
    workers and what each end of a message costs their CPU (every link's ``message`` figures,
    ``cluster.links``) as the runtime's calibration measured them (``runtime.calibration.runtime_costs``,
    cached; the ``here`` fidelity charges the same figures), in place of any other; any other cluster as
    it is."""
    from dataclasses import replace

    if not runs_here(problem.cluster):
        return problem
    from hetsplit.runtime.calibration import runtime_costs

    runtime = runtime_costs(recalibrate)
    segment = runtime.segment
    cluster = problem.cluster.with_message_cpu(runtime.worker_end_s, runtime.worker_byte_s)
    return replace(problem, cluster=cluster,
                   costs=replace(problem.costs, segment={t: segment for t in problem.costs.types}))


def split_decode_name(model: str, decode_context: int | None) -> tuple[str, int | None]:
    """``("m", 128)`` for ``"m@decode128"`` (a decode step's graph name); a different context given
    beside it is refused."""
    base, sep, tail = model.rpartition("@decode")
    if not sep or not tail.isdigit():
        return model, decode_context
    if decode_context is not None and decode_context != int(tail):
        raise UsageError(f"{model} is a decode step with a KV cache of {tail} positions; --decode {decode_context} "
                         "asks for another: give one of them")
    return base, int(tail)


@dataclass
class PlanRequest:
    """What to search for: algorithms, their shared constraints, and DONNA's alphas."""

    algorithms: Sequence[str] = ("donna",)
    alphas: Sequence[float] | None = None
    constraints: PipelineConstraints = PipelineConstraints()
    baselines: bool = True  # add the single-device plans for comparison
    seed: int = 0
    time_budget_s: float | None = None  # each algorithm's budget (search.base.Deadline); None: its default
    chips: int | None = None             # tensor-parallel: devices to split over (None: all)
    tree: int | None = None              # tensor-parallel: all-reduce group size (None: its default)
    objective: str | None = None         # map-opt: throughput, latency or energy (None: its default)

    def __post_init__(self) -> None:
        for a in self.alphas or ():
            if not 0.0 <= a <= 1.0:  # also false for nan
                raise UsageError(f"--alpha {a}: DONNA's weight must be a number from 0 (energy) to 1 (throughput)")
        if self.time_budget_s is not None and not (self.time_budget_s > 0 and math.isfinite(self.time_budget_s)):
            raise UsageError(f"--time-budget {self.time_budget_s:g}: give a positive number of seconds")
        if self.objective is not None and self.objective not in MAPPING_OBJECTIVES:
            raise UsageError(f"--objective {self.objective!r}: choose one of {', '.join(MAPPING_OBJECTIVES)}")


def _options_for(name: str, request: PlanRequest) -> dict[str, Any]:
    """The options a partitioner accepts, taken from the request (by constructor signature)."""
    params = partitioner_options(name)
    options: dict[str, Any] = {}
    if "constraints" in params:
        options["constraints"] = request.constraints
    if "alphas" in params and request.alphas is not None:
        options["alphas"] = tuple(request.alphas)
    if "seed" in params:
        options["seed"] = request.seed
    if "time_budget_s" in params and request.time_budget_s is not None:
        options["time_budget_s"] = request.time_budget_s
    for key in ("chips", "tree", "objective"):
        if key in params and getattr(request, key) is not None:
            options[key] = getattr(request, key)
    return options


@dataclass
class PlanSearch:
    """What a search found: the plans (Pareto front marked), per algorithm that refused, why, the
    ``recommendation`` (a split only where it beats the best single device by more than its kind's
    measured error, ``recommend_plans``) and ``notes`` on what the search left out."""

    plans: list[Plan]
    refusals: dict[str, str] = field(default_factory=dict)
    front: tuple[str, ...] = DEFAULT_FRONT    # the figures the Pareto marks are over
    recommendation: Recommendation | None = None
    notes: list[str] = field(default_factory=list)


def recommendation_objective(request: PlanRequest) -> str:
    """What a plan set's recommendation is judged by: map-opt's ``objective`` when given, else throughput."""
    return request.objective or "throughput"


def recommend_plans(problem: SplitProblem, plans: list[Plan], objective: str = "throughput",
                    singles: list[Plan] | None = None) -> Recommendation:
    """The plan to recommend among ``plans`` (evaluated on ``problem``) by ``objective``: a split only when
    its predicted gain over the best single device (``singles``, default the ``single`` partitioner's plans,
    by the same estimate) exceeds its kind's measured error (``estimate.accuracy``), else that single device,
    with a note saying why. Plans of another model or cluster are not judged."""
    kinds: list[str | None] = []
    for p in plans:
        try:
            kinds.append(plan_kind(problem, p))
        except PlanError:
            kinds.append(None)
    if singles is None:
        try:
            singles = make_partitioner("single").solve(problem)
        except HetsplitError:
            singles = []
    return recommend(plans, kinds, singles, objective)


def search_plans(problem: SplitProblem, request: PlanRequest) -> PlanSearch:
    """Run every requested partitioner (plus single-device baselines) and mark the Pareto front.

    An algorithm that refuses the problem (raises a HetsplitError) is recorded with its reason and the
    others' plans are kept; only when every requested algorithm refuses is that an error."""
    names = list(request.algorithms) + (["single"] if request.baselines and "single" not in request.algorithms else [])
    unknown = [n for n in names if n not in partitioner_names()]
    if unknown:
        raise HetsplitError(f"unknown algorithm {unknown[0]!r}; available: {partitioner_names()}")
    plans: list[Plan] = []
    refused: dict[str, HetsplitError] = {}
    notes: list[str] = []
    unknown = problem.costs.unknown_energy_types
    for name in names:
        options = _options_for(name, request)
        if unknown and "alphas" in partitioner_options(name) and request.alphas is None:
            options["alphas"] = (1.0,)      # the default sweep weighs energy, which is unknown here
            notes.append(f"{name} ran alpha 1 (throughput) only: the energy of device type(s) {', '.join(unknown)} "
                         "is unknown, so its default sweep towards energy (alpha < 1) was left out")
        try:
            found = make_partitioner(name, **options).solve(problem)
        except HetsplitError as exc:
            refused[name] = exc
            continue
        plans.extend(found)
        cut = next((p.params["cut_by_time_budget"] for p in found if "cut_by_time_budget" in (p.params or {})), None)
        if cut:
            notes.append(f"{name} was cut by --time-budget {request.time_budget_s:g} s ({cut}); its best plans so "
                         "far are kept")
    if refused and all(n in refused for n in request.algorithms):
        if len(refused) == 1:
            raise next(iter(refused.values()))
        by_reason: dict[str, list[str]] = {}
        for n, refusal in refused.items():
            by_reason.setdefault(str(refusal), []).append(n)
        raise HetsplitError("every algorithm refused: " + "; ".join(f"{', '.join(ns)}: {why}"
                                                                     for why, ns in by_reason.items()))
    if not plans:
        raise HetsplitError(f"no plan found for {problem.graph.name!r} on {problem.cluster.name!r}: "
                            "no device can hold the whole model and no split fits")
    stamp_plans(problem, plans)
    front: tuple[str, ...] = MAPPING_FRONT if "map-pareto" in request.algorithms else DEFAULT_FRONT
    if any(p.metrics is not None and math.isnan(p.metrics.energy_j) for p in plans):
        front = tuple(f for f in front if f != "energy")
        notes.append(f"the Pareto marks leave energy out: the energy of device type(s) {', '.join(unknown)} is unknown")
    return PlanSearch(mark_pareto(plans, front), {n: str(exc) for n, exc in refused.items()}, front,
                      recommend_plans(problem, plans, recommendation_objective(request)), notes)


def stamp_plans(problem: SplitProblem, plans: Sequence[Plan]) -> None:
    """Record in each plan what running it needs beyond the model: the cluster file and the input shapes
    the model was loaded with (``--input-shape``), so ``split`` and ``run`` need not be told again."""
    shapes = problem.graph.meta.get("input_shapes") or {}
    for p in plans:
        p.cluster_file = problem.cluster.file
        p.input_shapes = {n: list(d) for n, d in shapes.items()}


def plan_input_shapes(plan: Plan, given: InputShapes | None) -> InputShapes:
    """The input shapes to load ``plan``'s model with: those it records, or ``given`` when it records
    none; a ``given`` shape other than the recorded one is refused, naming both."""
    return check_recorded(plan.input_shapes, given, "the plan")


@dataclass
class HerePredictions:
    """Plans on this machine's ``local`` cluster, costed for the processes that would run them here:
    ``predictions`` (plan index, prediction), fastest plan first; ``failures`` (plan index, why);
    ``runtime_source``: where the runtime's costs come from."""

    predictions: list[tuple[int, LocalPrediction]]
    failures: list[tuple[int, str]]
    runtime_source: str

    SHORT_STAGE_S = 1e-3   # busiest unit below this: its compute is of the order of the runtime's own work

    def notes(self, model: str) -> list[str]:
        """What the predictions assume, where they are weakest, and how to check one."""
        notes = [f"the plan table gives each device a core of its own and messages that cost no CPU (its sub-model "
                 f"calls cost what the runtime's calibration measured, as here); `hetsplit run PLANS {model} --here` "
                 f"measures a plan beside this prediction. The runtime's costs: {self.runtime_source}"]
        short = [i for i, p in self.predictions if max(p.compute_s.get(u, 0.0) for u in p.units) < self.SHORT_STAGE_S]
        if short:
            notes.append(f"in plan(s) {', '.join(f'#{i}' for i in short)} even the busiest unit computes under "
                         f"{self.SHORT_STAGE_S * 1e3:g} ms per input: there the hand-overs between the runtime's "
                         "threads weigh as much as the compute, and this prediction is rougher (mostly optimistic)")
        notes += [f"plan #{i} could not be costed for running here: {why}" for i, why in self.failures]
        return notes


def predict_plans_here(problem: SplitProblem, plans: list[Plan], limit: int = 4, recalibrate: bool = False,
                       cores: int | None = None) -> HerePredictions | None:
    """For a plan set on this machine's ``local`` cluster, its ``limit`` fastest distinct placements
    (among those that fit) costed by the ``here`` fidelity for the worker processes and the driver that
    would run them on this machine's cores (``cores``, default those this process may use), with the
    runtime's per-message costs (``runtime.calibration.runtime_costs``; ``recalibrate`` measures those
    anew). The plan table's own figures give each device a core of its own and messages that cost no
    CPU. None for any other cluster."""
    if not runs_here(problem.cluster):
        return None
    from hetsplit.runtime.calibration import runtime_costs

    runtime = runtime_costs(recalibrate)
    here = Here(HereOptions(runtime, cores))
    order = sorted((i for i, p in enumerate(plans) if p.metrics is not None and p.metrics.fits),
                   key=lambda i: -plans[i].costed.throughput)
    seen: set[str] = set()
    found = HerePredictions([], [], runtime.source)
    for i in order:
        if len(seen) >= limit:
            break
        placement = repr(sorted(plans[i].placements().items()))
        if placement in seen:
            continue
        seen.add(placement)
        try:
            found.predictions.append((i, here.predictions(problem, [plans[i]])[0]))
        except HetsplitError as exc:
            found.failures.append((i, str(exc)))
    return found


def find_plans(problem: SplitProblem, request: PlanRequest) -> list[Plan]:
    """The plans of ``search_plans`` (refusals dropped; an error only when every algorithm refuses)."""
    return search_plans(problem, request).plans


def export_torch(module: Any, example_inputs: Any, path: str | Path, input_names: Sequence[str] | None = None,
                 dynamic_axes: dict[str, dict[int, str]] | None = None) -> Path:
    """Export a ``torch.nn.Module`` at ``example_inputs`` to the ONNX file ``path`` (``graph.torch_export``),
    ready for ``load_problem``; returns the path."""
    from hetsplit.graph.torch_export import export_module

    return export_module(module, example_inputs, path, input_names, dynamic_axes=dynamic_axes)


def profile_module(module: Any, example_input: Any, path: str | Path, device: str = "local-gpu",
                   repeats: int = 20, warmup: int = 5) -> "Profile":
    """Export a ``torch.nn.Module`` (one input tensor) to ``path`` and measure its per-layer times:
    ``local-gpu`` on this machine's CUDA GPU through PyTorch (an error naming the problem without one),
    ``local-cpu`` with onnxruntime on the exported file; ``save_profile`` writes it for a cluster YAML."""
    from hetsplit.costs.profiler import profile_model
    from hetsplit.costs.profiler.run import LOCAL_CPU, profile_module_on
    from hetsplit.graph import load_onnx

    onnx_path = export_torch(module, example_input, path)
    if device == LOCAL_CPU:
        return profile_model(str(onnx_path), LOCAL_CPU, repeats=repeats, warmup=warmup)
    return profile_module_on(load_onnx(onnx_path), module, tuple(example_input.shape), device, warmup, repeats)


@dataclass
class BaselineComparison:
    """A plan against a baseline plan: speed-up, energy ratio, per-device energy ratio."""

    plan: Plan
    speedup: float
    energy_ratio: float
    energy_per_device_ratio: float


def compare_to(plans: list[Plan], baseline: Plan) -> list[BaselineComparison]:
    b = baseline.costed
    out = []
    for p in plans:
        m = p.costed
        out.append(BaselineComparison(p, m.throughput / b.throughput if b.throughput else float("inf"),
                                      m.energy_j / b.energy_j if b.energy_j else float("inf"),
                                      m.energy_per_participating_device_j / b.energy_per_participating_device_j
                                      if b.energy_j else float("inf")))
    return out


def load_plan_problem(plan_path: str | Path, index: int | None = None, model: str | None = None,
                      cluster: str | None = None, profile: str | None = None,
                      input_shapes: InputShapes | None = None) -> tuple[Plan, SplitProblem]:
    """A plan from a file and the problem it runs on: the model (or a profile, which names its model
    and supplies the costs), the cluster and the input shapes default to the ones the plan records."""
    from hetsplit.plan import load_plan

    plan = load_plan(plan_path, index)
    cl = load_plan_cluster(plan, cluster, required=True)
    assert cl is not None  # required: an error otherwise
    shapes = plan_input_shapes(plan, input_shapes)
    return plan, load_problem(profile or model or plan_model(plan), cl, input_shapes=shapes or None)


def plan_model(plan: Plan) -> str:
    """The model a plan names, when no model is given: a zoo name (``resnet50``, ``tinyllama-42m@decode128``)
    only; a plan never makes hetsplit read a file (a model file is given with --model)."""
    from hetsplit.graph import zoo

    base, _ = split_decode_name(plan.model, None)
    if base not in zoo.names():
        raise UsageError(f"the plan's model {plan.model!r} is no zoo model; give the model with --model "
                         "(a zoo name or the .onnx file the plan was made for)")
    return plan.model


@overload
def load_plan_cluster(plan: Plan, given: str | None = None, *, required: Literal[True],
                      recalibrate: bool = False) -> Cluster: ...
@overload
def load_plan_cluster(plan: Plan, given: str | None = None, required: bool = False,
                      recalibrate: bool = False) -> Cluster | None: ...
def load_plan_cluster(plan: Plan, given: str | None = None, required: bool = False,
                      recalibrate: bool = False) -> Cluster | None:
    """The cluster a plan runs on: ``given`` (--cluster), else the YAML file the plan was made from, else the
    cluster it names. None when that cannot be found, unless ``required`` (then the error says why).
    ``recalibrate``: see ``load_cluster_spec``."""
    if given:
        return load_cluster_spec(given, recalibrate)
    gone = bool(plan.cluster_file) and not Path(str(plan.cluster_file)).exists()
    fix = "give one with --cluster (a YAML file or a built-in name)"
    try:
        if plan.cluster_file and not gone:
            return _plan_cluster_file(str(plan.cluster_file), recalibrate)
        was = f"the plan's cluster file {plan.cluster_file} is gone and " if gone else ""
        if not plan.cluster:
            raise ClusterError(f"{was}the plan names no cluster; {fix}")
        if not is_builtin(plan.cluster):  # a plan's cluster name is read as a built-in only, never as a path
            raise ClusterError(f"{was}the plan's cluster {plan.cluster!r} is no built-in cluster; {fix}")
        return load_cluster_spec(plan.cluster, recalibrate)
    except HetsplitError:
        if not required:
            return None
        raise


def _plan_cluster_file(path: str, recalibrate: bool) -> Cluster:
    """The cluster YAML a plan names, read only as a cluster: a ``.yaml``/``.yml`` file, and on any
    problem an error that quotes nothing of it (the file is the plan's word, not the user's)."""
    fix = f"give the cluster with --cluster (hetsplit shows what is wrong in a file named there: --cluster {path})"
    if Path(path).suffix.lower() not in (".yaml", ".yml"):
        raise ClusterError(f"the plan's cluster_file {path} is not a .yaml file; a plan may name only a cluster "
                           f"YAML; {fix}")
    try:
        return load_cluster_spec(path, recalibrate, confined=True)     # it may name only files beside it
    except HetsplitError:
        raise ClusterError(f"the plan's cluster_file {path} is not a readable hetsplit cluster; {fix}") from None


def import_autodice(mapping_path: str | Path, problem: SplitProblem, horizontal_path: str | Path | None = None,
                    device_keys: dict[str, str] | None = None, aliases: dict[str, str] | None = None) -> Plan:
    """An AutoDiCE ``mapping.json`` (and ``horizontal.json``) read as a plan of ``problem``'s model and
    cluster (``plan.autodice.read_autodice``), with its ``closed`` fidelity metrics."""
    from hetsplit.estimate import estimate_plan
    from hetsplit.plan.autodice import read_autodice

    plan = read_autodice(mapping_path, problem.graph, problem.cluster, horizontal_path, device_keys, aliases)
    plan.metrics = estimate_plan(problem, plan, "closed")
    return plan


@dataclass
class ReportDetails:
    """What the HTML report draws beyond the plans: ``cluster`` (``cluster.describe.cluster_to_dict``), each
    plan's ``transfers`` by plan index, the ``featured`` plan's simulated ``timeline`` and its ``run`` (the
    ``Comparison`` ``run_comparison`` gives). ``report.html`` draws it."""

    cluster: dict[str, Any]
    transfers: dict[int, list[Transfer]] = field(default_factory=dict)
    featured: int = 0
    timeline: SimResult | None = None
    run: "Comparison | None" = None
    recommendation: Recommendation | None = None


def report_details(problem: SplitProblem, plans: list[Plan], featured: int | None = None,
                   run: "RunReport | Comparison | None" = None, timeline_inputs: int = 8,
                   recommendation: Recommendation | None = None) -> ReportDetails:
    """What the HTML report draws beside the plan table (``ReportDetails``): the cluster, each plan's
    transfers, the simulated timeline of the featured plan (default: the one ``load_plan`` picks), with
    ``run`` (``read_run_doc``) its run measured against the prediction, and the ``recommendation`` (default:
    ``recommend_plans`` by throughput)."""
    from hetsplit.cluster.describe import cluster_to_dict
    from hetsplit.plan.check import check_plan
    from hetsplit.plan.io import featured_index
    from hetsplit.estimate.simulate import SimOptions, simulate
    from hetsplit.estimate.transfers import plan_transfers

    graphs = {}
    for i, plan in enumerate(plans):
        try:
            graphs[i] = check_plan(problem.graph, problem.cluster, plan)
        except PlanError:
            continue  # a plan of another model or cluster: drawn without its transfers
    k = featured_index(plans) if featured is None else featured
    if not 0 <= k < len(plans):
        raise PlanError(f"no plan #{k}; the set has {len(plans)} plans (0..{len(plans) - 1})")
    timeline = simulate(problem, graphs[k], SimOptions(inputs=timeline_inputs)) if k in graphs else None
    compared = run_comparison(run, plans[k], problem.cluster) if run is not None else None
    if recommendation is None:
        recommendation = recommend_plans(problem, plans)
    return ReportDetails(cluster_to_dict(problem.cluster), {i: plan_transfers(tg) for i, tg in graphs.items()},
                         k, timeline, compared, recommendation)


def device_emulation(plan: Plan, graph: Graph, cluster: Cluster, profile: str | None = None,
                     cores: int | None = None) -> "DeviceEmulation":
    """The CPU shares and time dilation that rehearse ``plan`` on ``cluster`` with this machine's cores
    (``run --emulate-devices``; ``runtime.device_emulation``): the plan's devices costed by ``profile``
    (else their device models), this machine's one-thread worker by the ``local`` cluster's model."""
    from hetsplit.cluster.examples import usable_cores
    from hetsplit.runtime.device_emulation import plan_emulation

    problem = build_problem(graph, cluster, load_profile(profile).costs if profile else None)
    host = build_problem(graph, load_cluster_spec("local"))
    return plan_emulation(plan, problem, host, cores or usable_cores())


# the run-and-compare job (workflow.run), re-exported: the README's short path ends in run_here and compare_run
from hetsplit.workflow.run import compare_run, read_run_doc, run_comparison, run_here  # noqa: E402,F401
