"""The H200 host's four runs costed as the planner costs them now, against what they measured.

``bench/data/h200-16c`` holds a lent CPU+GPU host's profiles, clusters, plans and the reports of four runs
(ResNet-50 map-opt over cpu0+gpu0 and on gpu0 alone, MobileBERT tensor-parallel and on gpu0 alone). This
costs each run with the ``simulated`` fidelity, which charges every segment (one executor call per input)
what its device type's ``SegmentCost`` says, by the one rule (``estimate.segments``: each segment ``call_s
+ per_byte x`` its boundary bytes, on its first task), a GPU shard its layer's launch part
(``estimate.task_costs.launch_part``), and prints predicted against measured throughput (target: within
+-25%); a plan that sums across devices is simulated input by input, as the runtime runs it
(``SimOptions.inputs_in_order``, as the ``here`` fidelity does). Then it plans both models with the pipeline (``exact``) and ``map-opt`` algorithms and says
whether the planner ranks gpu0 alone above both splits.

The figures it uses:

- the GPU profiles were taken when the profiler made a CUDA event per layer mark, which MobileBERT's
  ~600 marks paid on its critical path (layer sum 48.8 ms against 35.9 ms for the unmarked model). Until a
  GPU re-profiles them, their layer times are rescaled as the profiler now does (``costs.profiler.
  torch_onnx.unmarked``): by the profile's own unmarked whole-model median / its layer sum, recorded in
  its ``marks`` and ``source``;
- each device type's ``SegmentCost`` is fitted on ONE run, the ResNet-50 map-opt run (whole layers only,
  10 segments per device): (measured compute - its tasks' costs) / segments, as ``bench/segment_cost.py``
  fits it, as ``call_s`` (one run gives one equation per device: no byte term is fitted, byte_s = 0).
  The other three runs are held out.

    python bench/h200_check.py [--data bench/data/h200-16c] [--write] [--time-budget 10]

``--write`` stores the rescaled GPU profiles and the fitted ``segment`` keys (with their source) in the
data's profiles; without it everything is done on copies. Nothing is run on a GPU.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from segment_cost import per_segment, read_run  # noqa: E402  (a sibling bench script)

from hetsplit.costs.problem import SplitProblem  # noqa: E402
from hetsplit.costs.profiler.torch_onnx import unmarked  # noqa: E402
from hetsplit.costs.segment import SegmentCost  # noqa: E402
from hetsplit.estimate.fidelity import Simulated, estimate  # noqa: E402
from hetsplit.estimate.segments import charged  # noqa: E402
from hetsplit.estimate.task_costs import TaskCosts, launch_part, task_costs  # noqa: E402
from hetsplit.plan.check import check_plan  # noqa: E402
from hetsplit.plan.tasks import TaskGraph  # noqa: E402
from hetsplit.plan.types import Plan  # noqa: E402
from hetsplit.workflow import PlanRequest, load_problem, search_plans  # noqa: E402
from hetsplit.workflow.comparison import Comparison  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "h200-16c"
TARGET = 0.25
MODELS = ("resnet50", "mobilebert")
GPU_TYPE, CPU_TYPE = "local-gpu", "local-cpu"


@dataclass(frozen=True)
class Run:
    name: str
    model: str
    plan_index: int      # in plans.<model>.json (the log's ``hetsplit run ... --index``)
    report: str


RUNS = (Run("ResNet-50 map-opt cpu0+gpu0", "resnet50", 0, "run.resnet50.map-opt.json"),
        Run("ResNet-50 gpu0 alone", "resnet50", 3, "run.resnet50.gpu0.json"),
        Run("MobileBERT tensor-parallel", "mobilebert", 0, "run.mobilebert.tensor-parallel.json"),
        Run("MobileBERT gpu0 alone", "mobilebert", 2, "run.mobilebert.gpu0.json"))
FIT = RUNS[0]


def rescale_marked(doc: dict) -> bool:
    """Rescale an old GPU profile's layer times to its unmarked whole-model median (``unmarked``), as the
    profiler now does; False when it is already done (``marks`` present)."""
    if "marks" in doc:
        return False
    col = doc["device_types"][GPU_TYPE]
    per_run = np.asarray(col["time_s"], dtype=float)[None, :]
    scaled, marks = unmarked(per_run, [float(doc["whole_model"]["median_s"])])
    col["time_s"] = [float(v) for v in scaled[0]]
    note = (f"; layer times rescaled x{marks['layer_scale']:.4f} (unmarked whole-model median "
            f"{marks['unmarked_whole_s'] * 1e3:.2f} ms / layer sum {marks['marked_pass_s'] * 1e3:.2f} ms): a derived "
            "correction of this profile, taken when each layer mark made a CUDA event, until a GPU re-profiles it")
    col["source"] = col.get("source", doc.get("source", "")) + note
    doc["source"] = doc.get("source", "") + note
    marks["note"] = "derived afterwards from this profile's whole_model and layer_sum_s (bench/h200_check.py)"
    doc["marks"], doc["layer_sum_s"], doc["gap"] = marks, float(scaled.sum()), float(scaled.sum()) / \
        float(doc["whole_model"]["median_s"]) - 1
    return True


def per_device(problem: SplitProblem, tg: TaskGraph, costs: TaskCosts) -> dict[str, float]:
    """Seconds per input each device computes (its tasks on its type)."""
    out: dict[str, float] = {}
    for k, task in enumerate(tg.tasks):
        d = task.device
        name = problem.cluster.names[d]
        out[name] = out.get(name, 0.0) + float(costs.time_s[k, problem.device_type[d]])
    return out


def predicted_throughput(problem: SplitProblem, plan: Plan) -> tuple[float, dict[str, float]]:
    """The ``simulated`` fidelity's throughput (it charges every segment by the one rule,
    ``estimate.segments.charged``) and each device's compute with those charges."""
    tg = check_plan(problem.graph, problem.cluster, plan)
    # the runtime runs a plan that sums across devices input by input (runtime.rounds), as ``here`` simulates it
    options = replace(Simulated().options, inputs_in_order=tg.sums_across_devices())
    got = estimate(problem, [plan], Simulated(options))
    return float(got.throughput[0]), per_device(problem, tg, charged(problem, tg, task_costs(problem, tg)))


def fit_segments(problem: SplitProblem, tg: TaskGraph, report: Comparison) -> dict[str, SegmentCost]:
    """Per device type, its ``SegmentCost`` fitted on one run: (measured compute - its tasks' costs) /
    segments (``segment_cost.per_segment``) as ``call_s``."""
    layers = per_device(problem, tg, task_costs(problem, tg))
    counts = {problem.cluster.names[d]: len(s) for d, s in tg.segments.items()}
    assert report.report is not None
    measured = {d.device: d for d in report.report.devices}
    for d in measured.values():
        if counts.get(d.device) != d.segments:
            raise SystemExit(f"{d.device}: the run made {d.segments} segments, the TaskGraph {counts}")
    fitted = per_segment(report, layers)
    out: dict[str, SegmentCost] = {}
    for dev, call_s in fitted.items():
        t = problem.cluster.types[problem.device_type[problem.cluster.names.index(dev)]]
        m = measured[dev].compute_s
        out[t] = SegmentCost(call_s, 0.0, 0.0, (
            f"fitted on the {FIT.name} run ({FIT.report}, bench/h200_check.py): {dev} computed "
            f"{m * 1e3:.3f} ms per input against its tasks' {layers[dev] * 1e3:.3f} ms over {counts[dev]} "
            f"segments: (measured - tasks) / segments as call_s; one run gives one figure, so no byte term"))
    return out


def problems(data: Path) -> dict[str, SplitProblem]:
    return {m: load_problem(str(data / f"cpu.{m}.json"), str(data / f"cluster.{m}.yaml")) for m in MODELS}


def plan_of(data: Path, run: Run) -> Plan:
    doc = json.loads((data / f"plans.{run.model}.json").read_text())
    return Plan.from_dict(doc["plans"][run.plan_index], f"plans.{run.model}.json[{run.plan_index}]")


def prepare(src: Path, dst: Path) -> dict[str, SegmentCost]:
    """Copy ``src``'s clusters and profiles into ``dst``, rescale its GPU profiles (``rescale_marked``), fit
    the segment costs on ``FIT`` and write them into every profile of their type."""
    for f in src.iterdir():
        if f.suffix in (".json", ".yaml"):
            shutil.copy(f, dst / f.name)
    for m in MODELS:
        path = dst / f"gpu.{m}.json"
        doc = json.loads(path.read_text())
        if rescale_marked(doc):
            path.write_text(json.dumps(doc, indent=1))
    probs = problems(dst)
    tg = check_plan(probs[FIT.model].graph, probs[FIT.model].cluster, plan_of(dst, FIT))
    fitted = fit_segments(probs[FIT.model], tg, read_run(dst / FIT.report))
    for m in MODELS:
        for kind, t in (("cpu", CPU_TYPE), ("gpu", GPU_TYPE)):
            path = dst / f"{kind}.{m}.json"
            doc = json.loads(path.read_text())
            doc["device_types"][t]["segment"] = fitted[t].to_dict()
            path.write_text(json.dumps(doc, indent=1))
    return fitted


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--write", action="store_true", help="store the rescaled GPU profiles and the fitted segment "
                                                           "keys in the data's profiles")
    ap.add_argument("--time-budget", type=float, default=10.0, help="map-opt's budget per model (s)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="h200-check-") as tmp:
        work = Path(tmp)
        fitted = prepare(args.data, work)
        for t, seg in fitted.items():
            print(f"{t}: call_s {seg.call_s * 1e3:.4f} ms per segment ({seg.source})")
        probs = problems(work)
        for m in MODELS:
            _, source = launch_part(probs[m], GPU_TYPE)
            print(f"{m} GPU shards: launch part {source}")
        ok = 0
        print(f"\n{'run':32} {'measured':>9} {'predicted':>9} {'error':>7}  compute per device, predicted (measured)")
        for run in RUNS:
            pr = probs[run.model]
            thr, compute = predicted_throughput(pr, plan_of(work, run))
            report = read_run(work / run.report).report
            assert report is not None
            meas = report.throughput
            err = thr / meas - 1
            ok += abs(err) <= TARGET
            held = "fitted on" if run is FIT else "held out"
            devs = ", ".join(f"{d.device} {compute[d.device] * 1e3:.2f} ms ({d.compute_s * 1e3:.2f})"
                             for d in report.devices)
            print(f"{run.name:32} {meas:8.1f}/s {thr:8.1f}/s {err:+7.1%}  {devs}  [{held}]")
        print(f"{ok} of {len(RUNS)} runs within +-{TARGET:.0%}")
        print()
        for m in MODELS:
            rank_plans(probs[m], args.time_budget)
        if args.write:
            for f in work.glob("*.json"):
                if f.name.startswith(("cpu.", "gpu.")):
                    shutil.copy(f, args.data / f.name)
            print(f"wrote the rescaled GPU profiles and the segment keys into {args.data}")
    return 0


def rank_plans(problem: SplitProblem, budget: float) -> None:
    """Plan with the pipeline (exact) and map-opt algorithms; say whether gpu0 alone is ranked above both
    splits, by the planner's own figures and by the simulated fidelity with the segments charged."""
    name = problem.graph.name
    plans: list[Plan] = []
    for algo in ("exact", "map-opt"):
        try:
            plans += search_plans(problem, PlanRequest(algorithms=(algo,), baselines=algo == "exact",
                                                       time_budget_s=budget)).plans
        except Exception as exc:  # noqa: BLE001 - a solver that fails is reported, the others still rank
            print(f"  {name} {algo}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
    rows = []
    for p in plans:
        tg = check_plan(problem.graph, problem.cluster, p)
        used = sorted({problem.cluster.names[d] for d in tg.device})
        thr, _ = predicted_throughput(problem, p)
        rows.append((p.algorithm, "+".join(used), p.metrics.throughput if p.metrics else float("nan"), thr))
    for algo, used, planner, sim in rows:
        print(f"  {name} {algo:8} on {used:10}: planner {planner:8.1f}/s, simulated with segments {sim:8.1f}/s")
    alone = max((r for r in rows if r[1] == "gpu0"), key=lambda r: r[3])
    splits = {a: max((r for r in rows if r[0] == a and "+" in r[1]), key=lambda r: r[3], default=None)
              for a in ("exact", "map-opt")}
    for key, col in (("the planner", 2), ("simulated with segments", 3)):
        above = all(s is None or alone[col] > s[col] for s in splits.values())
        got = ", ".join(f"{a} {'(no split)' if s is None else f'{s[col]:.1f}/s'}" for a, s in splits.items())
        print(f"  {name}: gpu0 alone {alone[col]:.1f}/s {'above' if above else 'NOT above'} both splits by {key} "
              f"({got})")


if __name__ == "__main__":
    sys.exit(main())
