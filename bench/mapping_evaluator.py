"""The batch closed form of mappings against evaluating the same mappings one by one, in one run,
and the discrete-event simulator's events per second beside it.

    python bench/mapping_evaluator.py [--model resnet101] [--cluster jetson-xavier-nx-8] [--plans 100000]

Random node-to-device mappings (every layer on a random device: the non-contiguous, DAG-routed kind
the IMC mappers and the hybrid GA produce) of one model. Prints mappings per second of the batch
evaluator (every metric, one input's latency schedule included), of the batch evaluator without the
schedule (``latency=False``: throughput, energy and memory, what a search without a latency objective
asks for), and of a loop that evaluates one mapping per call (the baseline), their ratios, and checks
that all give the same metrics; then the simulator streaming inputs through one of the mappings.
Targets: >= 100,000 mappings/s median with every figure (issue 27), >= 1,000,000/s without the
schedule (issue 24), on ResNet-101 over 16 devices. Large batches are split into ranges evaluated on
threads, one per CPU this process may use (the first line says how many).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace

import numpy as np

from hetsplit.plan.check import check_plan
from hetsplit.estimate.mapping import MappingEvaluator
from hetsplit.estimate.threads import thread_count
from hetsplit.estimate.simulate import SimOptions, simulate
from hetsplit.plan.types import Plan
from hetsplit.workflow import load_problem


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet101")
    ap.add_argument("--cluster", default="jetson-xavier-nx-8")
    ap.add_argument("--plans", type=int, default=100_000)
    ap.add_argument("--loop-plans", type=int, default=300, help="mappings evaluated one per call (the baseline)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=5, help="timed runs of each (medians are printed)")
    ap.add_argument("--sim-inputs", type=int, default=200, help="inputs the simulator streams")
    args = ap.parse_args()
    problem = load_problem(args.model, args.cluster)
    names = problem.cluster.names
    first = Plan(problem.graph.name, problem.cluster.name, "bench", assign={n: names[0] for n in problem.graph.names})
    tg = check_plan(problem.graph, problem.cluster, first)  # the structure every mapping of whole layers shares
    rng = np.random.default_rng(args.seed)
    devices = rng.integers(0, problem.num_devices, size=(args.plans, tg.num_tasks))

    evaluator = MappingEvaluator(problem, tg)
    evaluator.evaluate(devices[:4096])  # warm-up
    k = min(args.loop_plans, args.plans)
    vec_runs, loop_runs, lean_runs = [], [], []
    for _ in range(args.repeats):  # alternate them, so drift on a shared machine hits all alike
        t0 = time.perf_counter()
        batch = evaluator.evaluate(devices)
        vec_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        lean = evaluator.evaluate(devices, latency=False)
        lean_runs.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        singles = [evaluator.evaluate(devices[i]) for i in range(k)]
        loop_runs.append(time.perf_counter() - t0)
    vec_s, loop_s, lean_s = float(np.median(vec_runs)), float(np.median(loop_runs)), float(np.median(lean_runs))
    for field in ("throughput", "energy_j", "memory_per_device_bytes"):
        assert np.array_equal(getattr(lean, field), getattr(batch, field)), field
    for i, one in enumerate(singles):
        for field in ("throughput", "latency_s", "energy_j"):
            assert np.isclose(getattr(one, field)[0], getattr(batch, field)[i], rtol=1e-12), (i, field)
    vec_rate, loop_rate = args.plans / vec_s, k / loop_s
    print(f"{args.model} ({problem.num_layers} layers, {len(tg.edge_src)} edges) on {args.cluster} "
          f"({problem.num_devices} devices), random whole-layer mappings; {thread_count()} thread(s)")
    print(f"batch      : {args.plans:>7} mappings in {vec_s:8.3f} s = {vec_rate:12,.0f} mappings/s (target >= 100,000; "
          f"median of {args.repeats}, fastest {args.plans / min(vec_runs):,.0f}/s)")
    print(f"no schedule: {args.plans:>7} mappings in {lean_s:8.3f} s = {args.plans / lean_s:12,.0f} mappings/s (target >= "
          f"1,000,000; latency=False: throughput, energy, memory; median, fastest {args.plans / min(lean_runs):,.0f}/s)")
    print(f"one by one : {k:>7} mappings in {loop_s:8.3f} s = {loop_rate:12,.0f} mappings/s (baseline, median)")
    print(f"ratio      : {vec_rate / loop_rate:.0f}x (every figure), {args.plans / lean_s / loop_rate:.0f}x (no schedule); "
          f"metrics identical on the {k} mappings compared, and with and without the schedule")
    moved = replace(tg, tasks=[replace(t, device=int(d)) for t, d in zip(tg.tasks, devices[0])])
    sims = [simulate(problem, moved, SimOptions(inputs=args.sim_inputs, keep_timeline=False), evaluator.costs)
            for _ in range(args.repeats)]
    rates = sorted(r.events / r.wall_s for r in sims)
    print(f"simulator  : {args.sim_inputs} inputs of mapping 0, {sims[0].events:,} events, "
          f"{rates[len(rates) // 2]:,.0f} events/s (median of {args.repeats})")


if __name__ == "__main__":
    main()
