"""The discrete-event simulator on a 16-unit mapping, against the closed-form evaluation, in one run.

    python bench/simulator.py [--model yolov8n] [--cluster jetson-xavier-nx-8] [--inputs 1000]

Every layer of the model goes whole to the device that would finish it first given what it already
has (greedy least-loaded, by each device type's cost of the layer): a plan/2 assign over all 16 units
of the cluster, tensors routed directly. Prints the simulator's wall seconds, events processed and
events per second, the closed-form evaluation's time of the same plan (the baseline) and the ratio,
and both methods' throughput, latency and energy (energy must agree; the closed-form throughput is
an upper bound: links serving the lowest input first, the default, reach it; FIFO links under a
saturated stream need not, and their throughput is printed beside it).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hetsplit.costs.problem import SplitProblem
from hetsplit.plan.check import check_plan
from hetsplit.estimate.batch import metrics_at
from hetsplit.estimate.mapping import evaluate_mappings
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.estimate.task_costs import task_costs
from hetsplit.plan.types import Plan
from hetsplit.workflow import load_problem


def least_loaded_plan(problem: SplitProblem) -> Plan:
    """Each layer, in topological order, on the device whose load plus the layer's time is smallest."""
    load = np.zeros(problem.num_devices)
    per_device = problem.costs.time_s[:, problem.device_type]  # L x D
    assign = {}
    for i, name in enumerate(problem.graph.names):
        d = int(np.argmin(load + per_device[i]))
        load[d] += per_device[i, d]
        assign[name] = problem.cluster.names[d]
    return Plan(problem.graph.name, problem.cluster.name, "least-loaded", assign=assign)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov8n")
    ap.add_argument("--cluster", default="jetson-xavier-nx-8")
    ap.add_argument("--inputs", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3, help="timed runs of each (medians are printed)")
    args = ap.parse_args()
    problem = load_problem(args.model, args.cluster)
    plan = least_loaded_plan(problem)
    tg = check_plan(problem.graph, problem.cluster, plan)
    costs = task_costs(problem, tg)
    options = SimOptions(inputs=args.inputs, keep_timeline=True)
    sim_runs, eval_runs = [], []
    for _ in range(args.repeats):  # alternate the two, so drift on a shared machine hits both alike
        t0 = time.perf_counter()
        result = simulate(problem, tg, options, costs)
        sim_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        closed = evaluate_mappings(problem, tg, costs=costs)
        eval_runs.append(time.perf_counter() - t0)
    sim_s, eval_s = float(np.median(sim_runs)), float(np.median(eval_runs))
    metrics = metrics_at(problem, closed, 0)
    fifo = simulate(problem, tg, SimOptions(inputs=args.inputs, keep_timeline=False, link_order="fifo"), costs)
    assert np.isclose(result.energy_j, metrics.energy_j, rtol=1e-9)
    used = len({t.device for t in tg.tasks})
    print(f"{args.model} ({problem.num_layers} layers, {tg.num_tasks} tasks, {len(tg.messages())} messages per input) "
          f"on {args.cluster}: greedy least-loaded mapping over {used} of {problem.num_devices} devices")
    print(f"simulator   : {args.inputs} inputs in {sim_s:.3f} s (median of {args.repeats}; event loop "
          f"{result.wall_s:.3f} s), {result.events:,} events = {result.events / result.wall_s:,.0f} events/s "
          f"in the loop, {result.events / sim_s:,.0f} events/s overall, {len(result.timeline):,} spans kept")
    print(f"closed form : one evaluation of the same task graph and costs in {eval_s * 1e3:.2f} ms (baseline, median)")
    print(f"ratio       : the simulation takes {sim_s / eval_s:,.0f}x one closed-form evaluation")
    print(f"throughput  : simulated {result.throughput:.4g}/s, closed-form bound {metrics.throughput:.4g}/s "
          f"({result.throughput / metrics.throughput:.1%}; FIFO links instead: {fifo.throughput:.4g}/s)")
    print(f"latency     : unloaded simulated "
          f"{result.unloaded_latency_s * 1e3:.3f} ms, closed form {metrics.latency_s * 1e3:.3f} ms; p50 under load "
          f"{result.latency_percentile(50):.3f} s; energy {result.energy_j:.4g} J/inference both")


if __name__ == "__main__":
    main()
