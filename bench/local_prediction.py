"""Predictions on the `local` cluster against real runs: ResNet-18 (CIFAR), ResNet-50, DenseNet-121.

  .venv/bin/python bench/local_prediction.py [--runs 3] [--cached]

For each model: the exact minimum-bottleneck two-stage plan on the built-in `local` cluster (its
costs from this machine's cached calibration, `costs.local_calibration`), run three times for
real (`experiments.mapping_run.run_mapping`: one worker per stage, every output verified). The
prediction is the runtime-aware one of `mapping_run.predict_here` on the plan's own costs (what
`hetsplit plan MODEL --cluster local` prints under "run here"):
throughput = min(simulated pipeline, unit bound, cores / total work), where the runtime's own CPU
per message end (workers' and driver's, measured here on first use by toy runs,
`experiments.runtime_calibration`) is in the unit busy time and in the total work; latency =
simulated unloaded latency at the calibration's alone-vs-co-loaded factor + the driver's messages
(input in, output out) at the measured per-message latency. Prints measured/predicted for both;
target within +-15%. Beside it, measured over the plan table's own throughput (each stage on a
core of its own, messages free), the figure the runtime-aware prediction corrects. Both calibrations
are measured anew at the start (the baseline of this run); `--cached` uses this machine's cached ones.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hetsplit.costs.local_calibration import local_costs
from hetsplit.experiments.mapping_run import MappingRunOptions, planned_profile, predict_here, run_mapping
from hetsplit.experiments.runtime_calibration import runtime_costs
from hetsplit.workflow import PlanRequest, load_problem, search_plans

MODELS = {"resnet18": 1000, "resnet50": 60, "densenet121": 60}   # model -> inputs per run: >= 2 s streamed
LATENCY_INPUTS = 10          # sent one at a time first; their median is the latency (the first pays first use)
TARGET = 0.15


def two_stage(model: str):
    problem = load_problem(model, "local")
    plans = [p for p in search_plans(problem, PlanRequest(algorithms=("exact",), baselines=False)).plans
             if len(p.devices) == 2]
    plan = min(plans, key=lambda p: p.metrics.bottleneck_s)
    return problem, plan, planned_profile(problem)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--cached", action="store_true",
                    help="use this machine's cached calibrations (default: measure both anew, in this run)")
    args = ap.parse_args()
    t0 = time.monotonic()
    print(local_costs(recalibrate=not args.cached).source, flush=True)
    print(runtime_costs(recalibrate=not args.cached).source, flush=True)
    print(f"\n{'model':12} {'run':>3} {'pred/s':>8} {'meas/s':>8} {'thr m/p':>7} {'pred lat':>9} {'meas lat':>9} "
          f"{'lat m/p':>7} {'compute m/p':>11}  max abs err")
    cases = {model: two_stage(model) for model in MODELS}
    preds = {model: predict_here(plan, problem.graph, profile) for model, (problem, plan, profile) in cases.items()}
    ratios: dict[str, list[tuple[float, float, float]]] = {model: [] for model in MODELS}
    for run in range(args.runs):                      # round robin: a slower spell of the machine hits every model
        for model, (problem, plan, profile) in cases.items():
            pred = preds[model]
            res = run_mapping(model, plan, MappingRunOptions(inputs=MODELS[model], latency_inputs=LATENCY_INPUTS,
                                                             profile=profile, timeout_s=120))
            thr, lat = res.measured_throughput / pred.predicted_throughput, res.measured_latency_s / pred.predicted_latency_s
            compute = sum(u.measured_s for u in res.units) / sum(u.predicted_s for u in res.units)
            ratios[model].append((thr, lat, res.measured_throughput / plan.metrics.throughput))
            print(f"{model:12} {run:3d} {pred.predicted_throughput:8.1f} {res.measured_throughput:8.1f} {thr:7.2f} "
                  f"{pred.predicted_latency_s * 1e3:7.2f}ms {res.measured_latency_s * 1e3:7.2f}ms {lat:7.2f} "
                  f"{compute:11.2f}  {res.max_abs_err:.1e}", flush=True)
    print("\nmedian over runs (target: measured/predicted within 1 +- 15%; compute m/p: the stages' measured compute "
          "over the calibration's, how far the machine drifted)")
    for model, (problem, plan, profile) in cases.items():
        thr = statistics.median(r[0] for r in ratios[model])
        lat = statistics.median(r[1] for r in ratios[model])
        ok = "yes" if abs(thr - 1) <= TARGET and abs(lat - 1) <= TARGET else "no"
        stages = " -> ".join(f"{s.device}[{len(s.layers)}]" for s in plan.stages)
        table = statistics.median(r[2] for r in ratios[model])
        print(f"{model:12} {stages:34} throughput {thr:5.2f}  latency {lat:5.2f}  limited by "
              f"{preds[model].limited_by:26} within target: {ok}   (against the plan table's throughput, "
              f"which gives each stage a core and free messages: {table:.2f})")
    print(f"\n{time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()
