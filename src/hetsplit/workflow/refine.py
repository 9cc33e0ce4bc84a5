"""Measure the finalists: the top plans' real sub-models timed here, re-estimated, re-ranked (``plan --refine``).

The second level of the hierarchical DSE paper (Guo, Pimentel, Stefanov): the search ranks plans by the
analytical model, then the best few are measured on the devices and ranked by what was measured. Here,
for each of the top ``RefineOptions.top`` plans (distinct placements that fit, best first by the
objective):

1. the plan is split into its sub-models as the runtime splits it (``runtime.split_model``) and every
   segment is timed through a worker's executor call on this machine's CPU (``runtime.segment_timing``:
   one input passed through the whole split in one process, the median of ``repeats`` passes, the
   finalists' passes interleaved so that a drifting load slows them alike, by default by this thread's
   CPU time, which a shared machine's other processes do not inflate), while
   ``co_load`` other cores run the whole model (the load the calibrated ``local`` costs were measured
   under). Only devices with a profile source here are measured: this machine's cores (model ``local``);
   every other device keeps its modelled figures (its segments run here only to hand on real tensors);
2. the plan's problem is re-costed with the measurements: each measured device becomes a device type of
   its own whose layer times are those of the cluster's figures scaled, segment by segment, so that each
   segment's tasks add up to its measured call (combines, which the device model costs, kept as they
   are; a layer in two segments of a device takes their time-weighted factor), and whose segment cost and
   unfused extras are 0 (they are inside the measured call). Energy is scaled with the time (a ``local``
   core's energy is its busy time at its assumed power);
3. the plan is re-estimated on that problem by the one estimator (``estimate(..., "closed")``, no formula
   of its own), its ``metrics`` replaced, and the finalists re-ranked.

The single-device plans (the recommendation's yardstick) are refined alike, so a split is judged against
a measured device, not a modelled one.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from hetsplit.costs import CostTable, SplitProblem
from hetsplit.costs.local_calibration import MAX_CO_LOAD
from hetsplit.costs.local_calibration import MODEL as LOCAL_MODEL
from hetsplit.costs.segment import SegmentCost
from hetsplit.errors import HetsplitError, UsageError
from hetsplit.estimate import estimate_plan, task_costs
from hetsplit.estimate.accuracy import OBJECTIVES, SINGLE, figure, plan_kind
from hetsplit.estimate.segments import segment_charges
from hetsplit.plan import Plan, mark_pareto
from hetsplit.plan.check import check_plan
from hetsplit.plan.tasks import TaskGraph
from hetsplit.plan.types import Metrics

if TYPE_CHECKING:
    from hetsplit.runtime.segment_timing import SegmentTime
    from hetsplit.workflow import PlanSearch

TABLE_KINDS = ("layer", "stage", "shard")   # tasks whose time the cost table's column gives (scaled)
MEASURED, MODELLED = "measured", "modelled"


@dataclass(frozen=True)
class RefineOptions:
    """``top``: how many plans to measure (K >= 1); ``repeats`` passes (after ``warmup``) per plan, each
    segment's median kept; ``co_load``: other cores running the whole model meanwhile (None: as the
    ``local`` calibration, one per other usable core up to ``MAX_CO_LOAD``); ``objective``: what ranks
    the plans; ``model``: the zoo name or .onnx file to split (None: the one the problem was loaded from);
    ``clock``: "cpu" (this thread's CPU time per call: leaves out the time other processes held the core,
    steady on a shared machine) or "wall"; ``statistic``: median or min of the calls."""

    top: int
    repeats: int = 5
    warmup: int = 1
    co_load: int | None = None
    objective: str = "throughput"
    model: str | None = None
    clock: str = "cpu"
    statistic: str = "median"

    def __post_init__(self) -> None:
        if isinstance(self.top, bool) or not isinstance(self.top, int) or self.top < 1:
            raise UsageError(f"--refine {self.top!r}: give how many of the best plans to measure (1 or more)")
        if self.repeats < 1 or self.warmup < 0:
            raise UsageError(f"refine: repeats must be >= 1 and warmup >= 0, got {self.repeats} and {self.warmup}")
        if self.co_load is not None and self.co_load < 0:
            raise UsageError(f"refine: co_load must be >= 0, got {self.co_load}")
        if self.clock not in ("cpu", "wall") or self.statistic not in ("median", "min"):
            raise UsageError(f"refine: clock {self.clock!r} and statistic {self.statistic!r}; the clock is cpu or "
                             "wall, the statistic median or min")
        if self.objective not in OBJECTIVES:
            raise UsageError(f"refine: objective {self.objective!r}; choose one of {', '.join(OBJECTIVES)}")


@dataclass(frozen=True)
class SegmentFigure:
    """One segment of a refined plan: its device, its index there, what the estimate gave its tasks
    (``layers_s``) and charged beyond them (``cut_s``: call, boundary bytes, unfused extras), and its
    measured call (NaN: its device is modelled)."""

    device: str
    index: int
    layers_s: float
    cut_s: float
    measured_s: float

    @property
    def modelled_s(self) -> float:
        return self.layers_s + self.cut_s

    @property
    def measured_cut_s(self) -> float:
        """The measured call beyond the layers' modelled time (what the estimate calls ``cut_s``)."""
        return self.measured_s - self.layers_s


@dataclass
class RefinedPlan:
    """A plan measured here: its index in the plan list, its metrics before (``modelled``) and after
    (``refined``), its segments, and which of its devices were measured and which kept modelled figures."""

    index: int
    modelled: Metrics
    refined: Metrics
    segments: list[SegmentFigure]
    measured_devices: tuple[str, ...]
    modelled_devices: tuple[str, ...]

    @property
    def label(self) -> str:
        """What the plan's figures are: "measured", or which devices are measured and which modelled."""
        if not self.measured_devices:
            return MODELLED
        if not self.modelled_devices:
            return MEASURED
        return f"{MEASURED} {', '.join(self.measured_devices)}; {MODELLED} {', '.join(self.modelled_devices)}"

    def totals(self) -> tuple[float, float, float, float]:
        """Over its measured segments: (modelled seconds, measured seconds, modelled cut, measured cut)."""
        segs = [s for s in self.segments if not math.isnan(s.measured_s)]
        return (sum(s.modelled_s for s in segs), sum(s.measured_s for s in segs),
                sum(s.cut_s for s in segs), sum(s.measured_cut_s for s in segs))


@dataclass
class Refinement:
    """What ``refine_plans`` did: the refined plans (finalists first, in their modelled order; a plan on no
    device measurable here is not among them and keeps its figures), the finalists' plan indices by
    modelled rank (``before``) and by refined rank (``after``), notes, each device's type, and the plans
    that share a refined plan's placement (``same``: they take its figures)."""

    objective: str
    plans: list[RefinedPlan] = field(default_factory=list)
    before: list[int] = field(default_factory=list)
    after: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)    # device -> its type in the plans' problem
    same: dict[int, int] = field(default_factory=dict)     # plan index -> the refined plan of its placement

    def cut_extra(self, index: int) -> tuple[float, float] | None:
        """What cutting costs plan ``index`` beyond the whole model on one device, modelled and measured: its
        segments' sum less a measured single-device plan's one segment on the same device type. None unless
        every device of the plan was measured and they and such a single device share one type."""
        r = self.of(index)
        if r is None or r.modelled_devices or not r.segments:
            return None
        kinds = {self.types.get(s.device) for s in r.segments}
        if len(kinds) != 1:
            return None
        for w in self.plans:
            if len(w.segments) == 1 and not w.modelled_devices and self.types.get(w.segments[0].device) in kinds:
                whole = w.segments[0]
                modelled, measured, _, _ = r.totals()
                return modelled - whole.modelled_s, measured - whole.measured_s
        return None

    def of(self, index: int) -> RefinedPlan | None:
        return next((r for r in self.plans if r.index == index), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: per refined plan its figures before and after and its segments, and both rankings."""
        def plan(r: RefinedPlan) -> dict[str, Any]:
            return {"index": r.index, "figures": r.label, "measured_devices": list(r.measured_devices),
                    "modelled_devices": list(r.modelled_devices), "modelled": r.modelled.to_dict(),
                    "refined": r.refined.to_dict(),
                    "segments": [{"device": s.device, "index": s.index, "layers_s": s.layers_s, "cut_s": s.cut_s,
                                  "measured_s": None if math.isnan(s.measured_s) else s.measured_s}
                                 for s in r.segments]}
        return {"objective": self.objective, "before": self.before, "after": self.after,
                "plans": [plan(r) for r in self.plans], "notes": self.notes}

    def labels(self, count: int) -> dict[int, str]:
        """Per plan index below ``count``: what its figures are (measured or modelled)."""
        return {i: (r.label if (r := self.of(self.same.get(i, i))) is not None else MODELLED) for i in range(count)}


def rank_key(metrics: Metrics, objective: str) -> float:
    """Smaller is better: the objective's figure (throughput negated); an unknown figure last."""
    value = figure(metrics, objective)
    if math.isnan(value):
        return math.inf
    return -value if objective == "throughput" else value


def metrics_of(plan: Plan) -> Metrics:
    """The plan's estimated metrics (a plan is refined only once it has them)."""
    if plan.metrics is None:
        raise HetsplitError(f"plan {plan.algorithm} has no estimated metrics to refine; estimate it first")
    return plan.metrics


def placement(plan: Plan) -> str:
    """What runs where in ``plan`` (two plans alike in it run alike)."""
    return repr(sorted(plan.placements().items()))


def finalists(plans: list[Plan], top: int, objective: str) -> list[int]:
    """The indices of the ``top`` best plans that fit, one per placement, best first."""
    order = sorted((i for i, p in enumerate(plans) if p.metrics is not None and p.metrics.fits),
                   key=lambda i: rank_key(metrics_of(plans[i]), objective))
    seen: set[str] = set()
    out: list[int] = []
    for i in order:
        where = placement(plans[i])
        if where not in seen:
            seen.add(where)
            out.append(i)
        if len(out) == top:
            break
    return out


def measurable_devices(problem: SplitProblem) -> set[str]:
    """The devices with a profile source here: this machine's cores (device model ``local``)."""
    return {d.name for d in problem.cluster.devices if d.model == LOCAL_MODEL}


def default_co_load() -> int:
    from hetsplit.costs.profiler.coload import usable_cpus

    return max(0, min(len(usable_cpus()) - 1, MAX_CO_LOAD))


def refine_plans(problem: SplitProblem, plans: list[Plan], options: RefineOptions,
                 extra: list[int] | None = None) -> Refinement:
    """Measure the ``options.top`` best of ``plans`` (and the plans ``extra`` names), re-estimate each with
    its measured segments and replace its ``metrics`` (see the module docstring); the finalists re-ranked."""
    from hetsplit.costs.profiler.coload import CoLoad
    from hetsplit.runtime import split_model
    from hetsplit.runtime.run import resolve_model
    from hetsplit.runtime.segment_timing import Timing, time_splits

    if problem.graph.meta.get("from_profile") and options.model is None:
        raise UsageError(f"--refine runs the plans' sub-models, and the profile {problem.graph.source} holds no "
                         "model: plan the model itself (zoo name or .onnx file)")
    found = Refinement(options.objective, types={d.name: d.type for d in problem.cluster.devices})
    found.before = finalists(plans, options.top, options.objective)
    here = measurable_devices(problem)
    chosen = [i for i in dict.fromkeys(found.before + list(extra or [])) if here & set(plans[i].devices)]
    if not here:
        found.notes.append(f"no device of {problem.cluster.name} can be measured here (none is one of this machine's "
                           "cores, model 'local'): every figure stays modelled")
        return found
    spec = options.model or problem.graph.source.removeprefix("zoo:")
    graph, path = resolve_model(spec, problem.graph.meta.get("input_shapes") or None)
    if graph.names != problem.graph.names:
        raise HetsplitError(f"--refine: {spec} does not have the layers of the planned model {problem.graph.name}")
    co_load = default_co_load() if options.co_load is None else options.co_load
    with tempfile.TemporaryDirectory(prefix="hetsplit-refine-") as tmp:
        manifests = {i: split_model(plans[i], graph, path, Path(tmp) / f"plan{i}", cluster=problem.cluster)
                     for i in chosen}
        timing = Timing(1, options.clock, options.statistic, options.repeats, options.warmup)
        with CoLoad(path, co_load, 1):      # this process on a core of its own, the helpers on others
            times = time_splits([manifests[i] for i in chosen], [here & set(plans[i].devices) for i in chosen],
                                timing)     # interleaved: a load that drifts slows every plan alike
        measured = dict(zip(chosen, times))
    for i in chosen:
        found.plans.append(refine_one(problem, plans[i], i, measured[i], here))
        plans[i].metrics = found.plans[-1].refined
    done = {placement(plans[r.index]): r.index for r in found.plans}
    for i, p in enumerate(plans):      # another plan of a measured placement (DONNA's alphas): the same figures
        twin = done.get(placement(p)) if i not in chosen and p.metrics is not None else None
        if twin is not None:
            p.metrics, found.same[i] = plans[twin].metrics, twin
    found.after = sorted(found.before, key=lambda i: rank_key(metrics_of(plans[i]), options.objective))
    found.notes.append(
        f"refined: {len(found.before)} plan(s) measured here, each segment timed as a worker's onnxruntime call "
        f"({options.statistic} of {options.repeats} by the {options.clock} clock, one thread, {co_load} other "
        f"core(s) running the model meanwhile) on "
        f"{', '.join(sorted(here))}; re-estimated by the closed form with the measured segments")
    return found


def refine_one(problem: SplitProblem, plan: Plan, index: int, times: list[SegmentTime], here: set[str]) -> RefinedPlan:
    """The plan re-estimated with its measured segments ``times`` (see the module docstring)."""
    tg = check_plan(problem.graph, problem.cluster, plan)
    costs, charges = task_costs(problem, tg), segment_charges(problem, tg)
    types = problem.device_type
    figures: list[SegmentFigure] = []
    measured: dict[int, list[tuple[list[int], float]]] = {}
    for t in times:
        d = problem.cluster.index(t.device)
        segs = tg.segments.get(d, [])
        if t.index >= len(segs) or [tg.tasks[n].name for n in segs[t.index]] != list(t.tasks):
            raise HetsplitError(f"--refine: the runtime's segment {t.index} of {t.device} is not the estimate's; "
                                "the plan cannot be refined")
        tasks = segs[t.index]
        figures.append(SegmentFigure(t.device, t.index, float(costs.time_s[tasks, types[d]].sum()),
                                     float(charges.total_s[tasks].sum()), t.seconds))
        if not math.isnan(t.seconds):
            measured.setdefault(d, []).append((tasks, t.seconds))
    refined = measured_problem(problem, tg, measured)
    used = list(dict.fromkeys(plan.devices))
    return RefinedPlan(index, metrics_of(plan), estimate_plan(refined, plan, "closed"), figures,
                       tuple(d for d in used if d in here), tuple(d for d in used if d not in here))


class Column(NamedTuple):
    """One device type's column of a cost table."""

    time_s: np.ndarray
    energy_j: np.ndarray
    mem_bytes: np.ndarray
    unfused_s: np.ndarray
    energy_known: bool


def measured_problem(problem: SplitProblem, tg: TaskGraph, measured: dict[int, list[tuple[list[int], float]]]
                     ) -> SplitProblem:
    """``problem`` with each device of ``measured`` (device index -> its segments' tasks and measured
    seconds) a type of its own, costed so that each segment's tasks add up to its measured call. A message's
    CPU at each end (``cluster.links``) is outside that call and stays modelled, on top."""
    if not measured:
        return problem
    table, costs = problem.costs, task_costs(problem, tg)
    unfused, known = table.unfused_s, table.energy_known
    assert unfused is not None and known is not None       # CostTable fills both

    def column(k: int, scale: np.ndarray | float = 1.0, cut_free: bool = False) -> Column:
        return Column(table.time_s[:, k] * scale, table.energy_j[:, k] * scale, table.mem_bytes[:, k],
                      np.zeros(table.num_layers) if cut_free else unfused[:, k], bool(known[k]))

    columns = {t: column(table.type_index(t)) for t in table.types}
    devices = list(problem.cluster.devices)
    for d, segs in measured.items():
        k = int(problem.device_type[d])
        num, den = np.zeros(table.num_layers), np.zeros(table.num_layers)
        for tasks, seconds in segs:
            scaled = [n for n in tasks if tg.tasks[n].kind in TABLE_KINDS]
            fixed = float(sum(costs.time_s[n, k] for n in tasks if tg.tasks[n].kind not in TABLE_KINDS))
            base = float(costs.time_s[scaled, k].sum())
            if base <= 0:
                continue
            factor = max(seconds - fixed, 0.0) / base
            for n in scaled:
                for layer in tg.tasks[n].layers:
                    w = table.time_s[layer, k] if tg.tasks[n].kind != "shard" else costs.time_s[n, k]
                    num[layer] += factor * w
                    den[layer] += w
        name = f"{devices[d].type}@{devices[d].name}"
        columns[name] = column(k, np.where(den > 0, num / np.where(den > 0, den, 1.0), 1.0), cut_free=True)
        devices[d] = replace(devices[d], type=name)
    types = list(dict.fromkeys(dev.type for dev in devices))
    fresh = {dev.type for dev in devices} - set(table.types)
    def stacked(f: str) -> np.ndarray:
        return np.stack([getattr(columns[t], f) for t in types], 1)

    refined = CostTable(
        table.layer_names, types, stacked("time_s"), stacked("energy_j"), stacked("mem_bytes"),
        {t: ("measured here: the plan's segments timed as the runtime's calls, the layers of each scaled to it"
             if t in fresh else table.sources.get(t, "")) for t in types},
        {t: (SegmentCost(source="inside the measured segment times") if t in fresh else table.segment[t])
         for t in types if t in fresh or t in table.segment},
        stacked("unfused_s"), np.array([columns[t].energy_known for t in types], dtype=bool))
    return SplitProblem(problem.graph, replace(problem.cluster, devices=devices), refined, problem.scope)


def refine_search(problem: SplitProblem, found: PlanSearch, options: RefineOptions) -> Refinement:
    """``refine_plans`` on a search's plans, its single-device plans measured too, and its Pareto marks and
    recommendation made again from the refined figures (a split judged against a single device measured
    alike)."""
    from hetsplit.workflow import recommend_plans

    singles = [i for i, p in enumerate(found.plans) if single_device(problem, p)]
    refinement = refine_plans(problem, found.plans, options, singles)
    if refinement.plans:
        mark_pareto(found.plans, found.front)
        found.recommendation = recommend_plans(problem, found.plans, options.objective,
                                               [found.plans[i] for i in singles] or None)
        if not singles:
            refinement.notes.append("the best single device is modelled (the plan set holds no single-device plan "
                                    "to measure: leave out --no-baselines to measure it too)")
    return refinement


def single_device(problem: SplitProblem, plan: Plan) -> bool:
    """Whether ``plan`` runs the whole model on one device (what the recommendation weighs splits against)."""
    try:
        return plan_kind(problem, plan) == SINGLE
    except HetsplitError:
        return False
