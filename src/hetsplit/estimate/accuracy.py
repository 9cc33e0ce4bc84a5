"""How far the estimate has been from real runs, per plan kind, and the rule that turns it into a
recommendation: a split is recommended over the best single device only when its predicted gain exceeds
the error its kind's estimate has shown (docs/architecture.md, "Never recommend a loss").

Kinds (``plan_kind``): ``single`` (one device: no split), ``pipeline`` (stages, or whole layers with one
segment per device), ``mapping`` (whole layers, some device running several segments) and
``tensor-parallel`` (any layer cut into shards). Each kind's error is the worst of its measured runs
(``MEASURED``), ``max(predicted / measured, measured / predicted) - 1``, of throughput or latency.

The gain of a split over the best single device, by objective (``gain``):

- throughput: predicted throughput ratio - 1 (split over single);
- latency: predicted latency ratio - 1 (single over split);
- energy: predicted energy ratio - 1 (single over split), against the kind's throughput error: no split
  run has a measured energy (the meters of the hosts measured read nothing), and a plan's energy is its
  devices' busy time at their power plus its messages, so it errs as their busy time does.

A split "beats" the single device when gain > error; among those the one with the best figure after its
error, ``(1 + gain) / (1 + error)``, is recommended.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from hetsplit.costs.problem import SplitProblem
from hetsplit.errors import HetsplitError
from hetsplit.plan.check import check_plan
from hetsplit.plan.types import Metrics, Plan

SINGLE, PIPELINE, MAPPING, TENSOR_PARALLEL = "single", "pipeline", "mapping", "tensor-parallel"
OBJECTIVES = ("throughput", "latency", "energy")


@dataclass(frozen=True)
class MeasuredRun:
    """One plan run for real beside its estimate: measured over predicted throughput and latency."""

    plan: str                 # what ran, where
    estimate: str             # which estimate predicted it, and what it charged then
    throughput_ratio: float   # measured / predicted
    latency_ratio: float      # measured / predicted
    source: str               # the command that measured it, and where its figures are recorded

    def error(self, metric: str) -> float:
        """``max(p / m, m / p) - 1`` of ``metric`` (throughput or latency)."""
        r = self.throughput_ratio if metric == "throughput" else self.latency_ratio
        return max(r, 1.0 / r) - 1.0


_LOCAL_BENCH = ("bench/local_prediction.py --runs 3 --more (2-core VM, 2026-11-28, medians of 3 runs, outputs "
                "verified; docs/architecture.md, 'The estimator')")
_H200_BENCH = ("bench/gpu_host.py --out DIR --threads 4 --inputs 300 --tp-inputs 20 (H200 + 16 cores, "
               "2026-11-28, outputs verified; bench/data/h200-16c/summary.json and README.md)")
_RANKING_BENCH = ("bench/plan_ranking.py --runs 2 --cached --plans DIR (2-core VM, 2026-11-29 17:35 UTC, medians of 2 "
                  "runs, the local calibration measured again before each, outputs verified; 13 of 13 within +-20%, "
                  "tau 0.87; others used 0-8% of the CPU)")
_CLOSED_LOCAL = ("closed (the plan table's), cuts charged (the runtime calibration's segment cost for local-cpu) and "
                 "each message end's CPU (its message end, a link property of local)")
_HERE = "here (this machine's processes; each segment's call charged)"
_CLOSED = ("closed (the plan table's), cuts charged: the segment call fitted on the ResNet-50 map-opt run's device "
           "compute and each message end on its time neither computing nor waiting, the GPU profiles rescaled to "
           "their whole-model pass (bench/h200_check.py)")

MEASURED: dict[str, tuple[MeasuredRun, ...]] = {
    PIPELINE: (
        MeasuredRun("ResNet-18 two-stage pipeline on local", _HERE, 1.04, 0.86, _LOCAL_BENCH),
        MeasuredRun("ResNet-50 two-stage pipeline on local", _HERE, 1.01, 0.94, _LOCAL_BENCH),
        MeasuredRun("DenseNet-121 two-stage pipeline on local", _HERE, 0.91, 0.98, _LOCAL_BENCH),
        MeasuredRun("ResNet-50 two-stage pipeline on local", _CLOSED_LOCAL, 0.94, 0.99, _RANKING_BENCH),
        MeasuredRun("DenseNet-121 two-stage pipeline on local", _CLOSED_LOCAL, 0.90, 1.00, _RANKING_BENCH),
        MeasuredRun("MobileBERT two-stage pipeline on local", _CLOSED_LOCAL, 0.83, 1.21, _RANKING_BENCH),
        MeasuredRun("YOLOv8n two-stage pipeline on local", _CLOSED_LOCAL, 0.86, 1.10, _RANKING_BENCH),
    ),
    MAPPING: (
        MeasuredRun("ResNet-50 map-opt, cpu0[18] + gpu0[54], 10 segments each, H200 host", _CLOSED,
                    126.9 / 132.65, 26.32 / 17.669, _H200_BENCH),
        MeasuredRun("ResNet-50 map-opt on local, 17 segments per device", _HERE, 0.95, 0.98, _LOCAL_BENCH),
        MeasuredRun("ResNet-50 map-opt on local", _CLOSED_LOCAL, 0.85, 1.07, _RANKING_BENCH),
        MeasuredRun("DenseNet-121 map-opt on local", _CLOSED_LOCAL, 0.99, 0.97, _RANKING_BENCH),
        MeasuredRun("MobileBERT map-opt on local (twice the inputs it keeps in flight)", _CLOSED_LOCAL, 0.87, 0.84,
                    _RANKING_BENCH),
        MeasuredRun("YOLOv8n map-opt on local", _CLOSED_LOCAL, 0.91, 1.09, _RANKING_BENCH),
    ),
    TENSOR_PARALLEL: (
        MeasuredRun("MobileBERT tensor-parallel, cpu0 + one shard on gpu0, ~120 segments each, H200 host", _CLOSED,
                    4.819 / 5.566, 336.4 / 179.65, _H200_BENCH),
        MeasuredRun("MobileBERT tensor-parallel on local, ~120 segments per device", _HERE, 0.90, 1.15, _LOCAL_BENCH),
        MeasuredRun("MobileBERT tensor-parallel on local (run input by input, as charged)", _CLOSED_LOCAL, 0.95, 1.20,
                    _RANKING_BENCH),
    ),
}


@dataclass(frozen=True)
class KindError:
    """A plan kind's measured error for one objective, and the run that set it (the worst)."""

    kind: str
    error: float
    run: MeasuredRun

    @property
    def says(self) -> str:
        return f"{self.error:.0%} ({self.run.plan}; estimate {self.run.estimate})"


def kind_error(kind: str, objective: str, measured: dict[str, tuple[MeasuredRun, ...]] = MEASURED) -> KindError:
    """The worst measured error of ``kind``'s estimate for ``objective`` (energy: throughput's, see above)."""
    if objective not in OBJECTIVES:
        raise HetsplitError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    runs = measured.get(kind)
    if not runs:
        raise HetsplitError(f"no measured run of a {kind} plan: its estimate's error is unknown")
    metric = "latency" if objective == "latency" else "throughput"
    worst = max(runs, key=lambda r: r.error(metric))
    return KindError(kind, worst.error(metric), worst)


def plan_kind(problem: SplitProblem, plan: Plan) -> str:
    """``single``, ``pipeline``, ``mapping`` or ``tensor-parallel`` (see the module docstring)."""
    if len(set(plan.devices)) <= 1:
        return SINGLE
    if any(not isinstance(p, str) for p in plan.placements().values()):
        return TENSOR_PARALLEL
    if plan.is_pipeline:
        return PIPELINE
    segments = check_plan(problem.graph, problem.cluster, plan).segments
    return PIPELINE if all(len(s) <= 1 for s in segments.values()) else MAPPING


def figure(m: Metrics, objective: str) -> float:
    """A plan's figure for ``objective`` (throughput: higher is better; latency, energy: lower)."""
    return {"throughput": m.throughput, "latency": m.latency_s, "energy": m.energy_j}[objective]


def gain(split: Metrics, single: Metrics, objective: str) -> float:
    """The predicted gain of ``split`` over ``single`` by ``objective`` (ratio - 1; NaN where unknown)."""
    a, b = figure(split, objective), figure(single, objective)
    ratio = a / b if objective == "throughput" else b / a
    return ratio - 1.0 if math.isfinite(ratio) else math.nan


def better(a: Metrics, b: Metrics, objective: str) -> bool:
    """Whether ``a`` is better than ``b`` by ``objective`` (an unknown figure is never better)."""
    fa, fb = figure(a, objective), figure(b, objective)
    if math.isnan(fa):
        return False
    return math.isnan(fb) or (fa > fb if objective == "throughput" else fa < fb)


@dataclass(frozen=True)
class Verdict:
    """A split that fits, against the best single device."""

    index: int                # its row in the plan set
    kind: str
    gain: float               # predicted gain over the best single device (NaN: unknown)
    error: KindError          # its kind's measured error

    @property
    def beats_single(self) -> bool:
        return self.gain > self.error.error          # False for NaN

    @property
    def margin(self) -> float:
        """The split's figure after its error, over the single device's: ``(1 + gain) / (1 + error)``."""
        return (1.0 + self.gain) / (1.0 + self.error.error)


@dataclass
class Recommendation:
    """What a plan set recommends for ``objective``: a split only when it beats the best single device by
    more than its kind's measured error, else that single device, with a ``note`` saying why."""

    objective: str
    single: Plan | None                  # the best single device (None: no device holds the whole model)
    single_index: int | None             # its row in the plan set (None: the set lacks it)
    verdicts: list[Verdict] = field(default_factory=list)
    recommended: int | None = None       # the recommended row; None with ``single``: the single device
    note: str = ""

    @property
    def recommends_split(self) -> bool:
        return self.recommended is not None and self.recommended != self.single_index

    def verdict(self, index: int) -> Verdict | None:
        return next((v for v in self.verdicts if v.index == index), None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (NaN as null): ``recommended`` is the recommended row, null when it is the best single
        device and the set lacks it (``best_single_device.index`` null too)."""
        def num(x: float) -> float | None:
            return x if math.isfinite(x) else None
        single = None if self.single is None else {
            "device": self.single.devices[0], "index": self.single_index,
            self.objective: num(figure(self.single.costed, self.objective))}
        return {"objective": self.objective, "recommended": self.recommended,
                "recommends_split": self.recommends_split, "best_single_device": single,
                "splits": [{"index": v.index, "kind": v.kind, "gain": num(v.gain), "error": v.error.error,
                            "error_measured_by": f"{v.error.run.plan} ({v.error.run.source})"}
                           for v in self.verdicts],
                "note": self.note}


def recommend(plans: list[Plan], kinds: list[str | None], singles: list[Plan], objective: str = "throughput",
              measured: dict[str, tuple[MeasuredRun, ...]] = MEASURED) -> Recommendation:
    """The recommendation among ``plans`` (evaluated; ``kinds[i]`` is ``plans[i]``'s ``plan_kind``, None for
    a plan not to judge) against the best of ``singles`` (the whole model on each device alone, costed by
    the same estimate)."""
    if objective not in OBJECTIVES:
        raise HetsplitError(f"objective {objective!r}: choose one of {', '.join(OBJECTIVES)}")
    fit = [s for s in singles if s.metrics is not None and s.metrics.fits]
    single = None
    for s in fit:
        if single is None or better(s.costed, single.costed, objective):
            single = s
    single_index = None if single is None else next(
        (i for i, p in enumerate(plans) if kinds[i] == SINGLE and p.devices == single.devices
         and p.metrics is not None and p.metrics.fits), None)
    rec = Recommendation(objective, single, single_index)
    splits = [i for i, p in enumerate(plans)
              if kinds[i] not in (SINGLE, None) and p.metrics is not None and p.metrics.fits]
    if single is None:
        if splits:
            best = splits[0]
            for i in splits[1:]:
                best = i if better(plans[i].costed, plans[best].costed, objective) else best
            rec.recommended = best
            rec.note = f"no device holds the whole model alone, so a split is needed: plan #{best}, the best by {objective}"
        else:
            rec.note = "no plan fits: nothing to recommend"
        return rec
    rec.verdicts = [Verdict(i, kind, gain(plans[i].costed, single.costed, objective),
                            kind_error(kind, objective, measured)) for i in splits if (kind := kinds[i]) is not None]
    alone = f"{single.devices[0]} alone" + (f" (plan #{single_index})" if single_index is not None else "")
    winners = [v for v in rec.verdicts if v.beats_single]
    if winners:
        v = max(winners, key=lambda w: w.margin)
        rec.recommended = v.index
        rec.note = (f"plan #{v.index} ({v.kind}) is predicted {v.gain:+.0%} in {objective} over {alone}, beyond "
                    f"the {v.error.error:.0%} its kind's estimate has erred by ({v.error.run.plan})")
        return rec
    rec.recommended = single_index
    known = [v for v in rec.verdicts if not math.isnan(v.gain)]
    if not known:
        found = any(kinds[i] not in (SINGLE, None) for i in range(len(plans)))
        why = (("no split fits" if found else "no search found a split worth having (each plan found runs the whole "
                "model on one device)") if not rec.verdicts else f"no split's {objective} is known beside it")
    else:
        v = max(known, key=lambda w: w.gain)
        why = (f"no split is predicted better in {objective}" if v.gain <= 0 else
               f"the best split, plan #{v.index} ({v.kind}), is predicted {v.gain:+.0%} in {objective}, within the "
               f"{v.error.error:.0%} its kind's estimate has erred by ({v.error.run.plan})")
    rec.note = f"{alone} is recommended: {why}"
    return rec
