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
  fits it, as ``call_s`` (one run gives one equation per device: no byte term is fitted, byte_s = 0);
- what a message end costs its worker (``cluster.links``: the link's ``message: {cpu}``), fitted on the
  same run's other figures: per device, its time per input neither computing nor waiting for a message
  (1 / throughput - compute - idle: its main thread posting and taking messages), summed over both devices
  and divided by the message ends between workers they handled (the ends the estimate charges: these
  clusters name no source or sink, so the driver's inputs and outputs are charged nothing). One figure for
  the one loopback medium, no byte term.
  The other three runs are held out.

    python bench/h200_check.py [--data bench/data/h200-16c] [--write] [--time-budget 10]
    python bench/h200_check.py --held-out bench/data/h200-16c-2

``--held-out DIR`` checks a later ``bench/gpu_host.py`` run (its ``summary.json`` names the runs) with
nothing fitted on any of them: each profile's ``segment`` key was measured by ``hetsplit profile`` on that
host, and the clusters' message end by the runtime's calibration there (toy runs), so every run is held out.

``--write`` stores the rescaled GPU profiles and the fitted ``segment`` keys (with their source) in the
data's profiles, and the fitted message end in its clusters; without it everything is done on copies.
Nothing is run on a GPU.
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
import yaml

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
from hetsplit.workflow import PlanRequest, load_problem, recommend_plans, search_plans  # noqa: E402
from hetsplit.workflow.comparison import Comparison  # noqa: E402

DATA = Path(__file__).resolve().parent / "data" / "h200-16c"
TARGET = 0.25
MODELS = ("resnet50", "mobilebert")
GPU_TYPE, CPU_TYPE = "local-gpu", "local-cpu"


@dataclass(frozen=True)
class Run:
    name: str
    model: str
    plan_index: int      # in its plans file (the log's ``hetsplit run ... --index``)
    report: str
    alone: bool = False  # the model on gpu0 alone, beside which its split is ranked
    plans: str = ""      # its plans file in the data folder (default: plans.<model>.json)

    @property
    def plans_file(self) -> str:
        return self.plans or f"plans.{self.model}.json"


RUNS = (Run("ResNet-50 map-opt cpu0+gpu0", "resnet50", 0, "run.resnet50.map-opt.json"),
        Run("ResNet-50 gpu0 alone", "resnet50", 3, "run.resnet50.gpu0.json", alone=True),
        Run("MobileBERT tensor-parallel", "mobilebert", 0, "run.mobilebert.tensor-parallel.json"),
        Run("MobileBERT gpu0 alone", "mobilebert", 2, "run.mobilebert.gpu0.json", alone=True))


def runs_of(data: Path) -> tuple[Run, ...]:
    """The data's four runs, the one to fit on first: ``RUNS`` (``bench/data/h200-16c``), or those a later
    ``gpu_host.py`` folder's ``summary.json`` names (its split of ResNet-50 first)."""
    path = data / "summary.json"
    rows = json.loads(path.read_text()).get("runs", []) if path.exists() else []
    if not rows or "report" not in rows[0]:
        return RUNS
    runs = [Run(r["run"], r["model"], r["plan_index"], r["report"], r["report"].endswith(".alone.json"),
                r["plans"] if r["plans"] != "plans.json" else f"plans.{r['model']}/plans.json") for r in rows]
    return tuple(sorted(runs, key=lambda r: (r.model != "resnet50", r.alone)))
MESSAGE_NOTE = ("each message end's CPU (message: cpu) is fitted on the ResNet-50 map-opt run "
                "(bench/h200_check.py)")


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


def fit_segments(problem: SplitProblem, tg: TaskGraph, report: Comparison, fit: Run) -> dict[str, SegmentCost]:
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
            f"fitted on the {fit.name} run ({fit.report}, bench/h200_check.py): {dev} computed "
            f"{m * 1e3:.3f} ms per input against its tasks' {layers[dev] * 1e3:.3f} ms over {counts[dev]} "
            f"segments: (measured - tasks) / segments as call_s; one run gives one figure, so no byte term"))
    return out


def fit_message_end(report: Comparison, fit: Run) -> tuple[float, str]:
    """Seconds one message end costs a worker, fitted on one run: summed over its devices, the time per
    input each spent neither computing nor waiting (1 / throughput - compute - idle), over the message ends
    between workers each handled (the ends the estimate charges; a run's driver messages are not, since
    these clusters name no source or sink). With where it comes from."""
    assert report.report is not None
    run = report.report
    wall = 1.0 / run.throughput
    rest = {d.device: wall - d.compute_s - d.idle_s for d in run.devices}
    ends = {d.device: sum((h.src == d.device) + (h.dst == d.device) for h in run.hops
                          if h.src != "driver" and h.dst != "driver") for d in run.devices}
    if sum(ends.values()) == 0 or min(rest.values()) <= 0:
        raise SystemExit(f"{fit.report}: no message ends between workers, or a device's time per input is "
                         f"all compute and waiting ({rest}): no message end to fit")
    end_s = sum(rest.values()) / sum(ends.values())
    parts = ", ".join(f"{dev} {rest[dev] * 1e3:.3f} ms over {ends[dev]} ends" for dev in rest)
    return end_s, (f"fitted on the {fit.name} run ({fit.report}, bench/h200_check.py): per input, time neither "
                   f"computing nor waiting ({parts}; 1 / {run.throughput:.1f}/s - compute - idle) over the ends "
                   f"of messages between workers")


def with_message_end(cluster_yaml: Path, end_s: float) -> None:
    """Set the default link's ``message: {cpu}`` of ``cluster_yaml`` to ``end_s`` (in us)."""
    doc = yaml.safe_load(cluster_yaml.read_text())
    doc["links"]["default"]["message"] = {"cpu": f"{end_s * 1e6:.1f}us"}
    said = doc["description"].split(MESSAGE_NOTE)[0].rstrip("; ")
    doc["description"] = f"{said}; {MESSAGE_NOTE}"
    cluster_yaml.write_text(yaml.safe_dump(doc, sort_keys=False, width=110, default_flow_style=None))


def problems(data: Path) -> dict[str, SplitProblem]:
    return {m: load_problem(str(data / f"cpu.{m}.json"), str(data / f"cluster.{m}.yaml")) for m in MODELS}


def plan_of(data: Path, run: Run) -> Plan:
    doc = json.loads((data / run.plans_file).read_text())
    return Plan.from_dict(doc["plans"][run.plan_index], f"{run.plans_file}[{run.plan_index}]")


@dataclass(frozen=True)
class Fitted:
    """What ``prepare`` fitted on the fitted run: each device type's segment cost and the message end."""

    segments: dict[str, SegmentCost]
    message_end_s: float
    message_end_source: str


def prepare(src: Path, dst: Path, fit: Run) -> Fitted:
    """Copy ``src``'s clusters, profiles, plans and runs into ``dst``, rescale its GPU profiles
    (``rescale_marked``), fit the segment costs on ``fit`` and write them into every profile of their type,
    then fit the message end (with those segment costs charged) and write it into every cluster."""
    shutil.copytree(src, dst, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.txt", "*.md"))
    for m in MODELS:
        path = dst / f"gpu.{m}.json"
        doc = json.loads(path.read_text())
        if rescale_marked(doc):
            path.write_text(json.dumps(doc, indent=1))
    probs = problems(dst)
    tg = check_plan(probs[fit.model].graph, probs[fit.model].cluster, plan_of(dst, fit))
    fitted = fit_segments(probs[fit.model], tg, read_run(dst / fit.report), fit)
    for m in MODELS:
        for kind, t in (("cpu", CPU_TYPE), ("gpu", GPU_TYPE)):
            path = dst / f"{kind}.{m}.json"
            doc = json.loads(path.read_text())
            doc["device_types"][t]["segment"] = fitted[t].to_dict()
            path.write_text(json.dumps(doc, indent=1))
    end_s, source = fit_message_end(read_run(dst / fit.report), fit)
    for m in MODELS:
        with_message_end(dst / f"cluster.{m}.yaml", end_s)
    return Fitted(fitted, end_s, source)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--write", action="store_true", help="store the rescaled GPU profiles and the fitted segment "
                                                           "keys in the data's profiles, the message end in its "
                                                           "clusters")
    ap.add_argument("--time-budget", type=float, default=10.0, help="map-opt's budget per model (s)")
    ap.add_argument("--held-out", type=Path, default=None, metavar="DIR",
                    help="check a gpu_host.py run's folder as it is: nothing fitted, every run held out")
    args = ap.parse_args(argv)
    if args.held_out is not None:
        return held_out(args.held_out, args.time_budget)
    runs = runs_of(args.data)
    with tempfile.TemporaryDirectory(prefix="h200-check-") as tmp:
        work = Path(tmp)
        fitted = prepare(args.data, work, runs[0])
        for t, seg in fitted.segments.items():
            print(f"{t}: call_s {seg.call_s * 1e3:.4f} ms per segment ({seg.source})")
        print(f"message end: {fitted.message_end_s * 1e6:.1f} us per end ({fitted.message_end_source})")
        probs = problems(work)
        for m in MODELS:
            _, source = launch_part(probs[m], GPU_TYPE)
            print(f"{m} GPU shards: launch part {source}")
        predicted = check_runs(work, probs, runs, runs[0])
        print()
        for m in MODELS:
            rank_measured(m, predicted, runs)
        print()
        for m in MODELS:
            rank_plans(probs[m], args.time_budget)
        if args.write:
            for f in work.iterdir():
                if f.name.startswith(("cpu.", "gpu.", "cluster.")):
                    shutil.copy(f, args.data / f.name)
            print(f"wrote the rescaled GPU profiles, the segment keys and the message end into {args.data}")
    return 0


def check_runs(work: Path, probs: dict[str, SplitProblem], runs: tuple[Run, ...],
               fit: Run | None) -> dict[str, tuple[float, float]]:
    """Print each run's predicted against measured throughput and each device's busy time per input
    (predicted: its layers, segments and message ends; measured: 1 / throughput - its idle time, compute
    and message handling), saying which was ``fit``; per run name, (predicted, measured) throughput."""
    out: dict[str, tuple[float, float]] = {}
    ok = 0
    width = max(len(r.name) for r in runs)
    print(f"\n{'run':{width}} {'measured':>9} {'predicted':>9} {'error':>7}  busy per device and input, predicted "
          "(measured)")
    for run in runs:
        thr, busy = predicted_throughput(probs[run.model], plan_of(work, run))
        report = read_run(work / run.report).report
        assert report is not None
        meas = report.throughput
        err = thr / meas - 1
        ok += abs(err) <= TARGET
        held = "fitted on" if run is fit else "held out"
        devs = ", ".join(f"{d.device} {busy[d.device] * 1e3:.2f} ms ({(1 / meas - d.idle_s) * 1e3:.2f})"
                         for d in report.devices)
        print(f"{run.name:{width}} {meas:8.1f}/s {thr:8.1f}/s {err:+7.1%}  {devs}  [{held}]")
        out[run.name] = (thr, meas)
    print(f"{ok} of {len(runs)} runs within +-{TARGET:.0%}" + ("" if fit else ", every one held out"))
    return out


def held_out(data: Path, budget: float) -> int:
    """Cost each run of a ``gpu_host.py`` folder with its own measured figures (nothing fitted) against
    what it measured, say whether the splits rank below gpu0 alone as measured, and plan both models."""
    summary = json.loads((data / "summary.json").read_text())
    probs, runs = problems(data), runs_of(data)
    print(f"message end: {summary['message']['end_s'] * 1e6:.1f} us ({summary['message']['source']})")
    for m in MODELS:
        for t in (CPU_TYPE, GPU_TYPE):
            seg = probs[m].costs.segment_cost(t)
            print(f"{m} {t}: a segment {seg.call_s * 1e6:.0f} us per call + {seg.byte_s * 1e9:.3f} ns/B beyond its "
                  f"layers ({seg.source[:100]}...)")
    figures = check_runs(data, probs, runs, None)
    print()
    for m in MODELS:
        rank_measured(m, figures, runs)
    print()
    for m in MODELS:
        rank_plans(probs[m], budget)
    return 0


def rank_measured(model: str, figures: dict[str, tuple[float, float]], every: tuple[Run, ...]) -> None:
    """Whether the estimate ranks the model's measured split below gpu0 alone, as the runs measured."""
    runs = [r for r in every if r.model == model]
    alone = next(r for r in runs if r.alone)
    for split in (r for r in runs if r is not alone):
        (p_split, m_split), (p_alone, m_alone) = figures[split.name], figures[alone.name]
        agree = (p_alone > p_split) == (m_alone > m_split)
        print(f"  {model}: predicted {alone.name} {p_alone:.1f}/s against {split.name} {p_split:.1f}/s; measured "
              f"{m_alone:.1f}/s against {m_split:.1f}/s: {'ranked as measured' if agree else 'ranked WRONG'}")


def rank_plans(problem: SplitProblem, budget: float) -> None:
    """Plan with the pipeline (exact) and map-opt algorithms, as ``hetsplit plan`` does, and print each plan
    with what the planner recommends (a split only beyond its kind's measured error). These splits were
    not run on the host: their figures are predictions only."""
    name = problem.graph.name
    plans: list[Plan] = []
    for algo in ("exact", "map-opt"):
        try:
            plans += search_plans(problem, PlanRequest(algorithms=(algo,), baselines=algo == "exact",
                                                       time_budget_s=budget)).plans
        except Exception as exc:  # noqa: BLE001 - a solver that fails is reported, the others still rank
            print(f"  {name} {algo}: failed ({type(exc).__name__}: {str(exc).splitlines()[0][:160]})")
    for k, p in enumerate(plans):
        tg = check_plan(problem.graph, problem.cluster, p)
        used = "+".join(sorted({problem.cluster.names[d] for d in tg.device}))
        segs = ", ".join(f"{problem.cluster.names[d]} {len(s)}" for d, s in sorted(tg.segments.items()))
        planner = p.metrics.throughput if p.metrics else float("nan")
        thr, _ = predicted_throughput(problem, p)
        print(f"  {name} #{k} {p.algorithm:8} on {used:10}: planner {planner:7.1f}/s, simulated {thr:7.1f}/s "
              f"(segments: {segs})")
    rec = recommend_plans(problem, plans)
    print(f"  {name}: the planner recommends: {rec.note}")


if __name__ == "__main__":
    sys.exit(main())
