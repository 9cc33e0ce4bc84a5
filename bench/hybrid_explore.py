"""NSGA-II exploration speed: the thesis's setting and evaluations per second of each encoding.

  .venv/bin/python bench/hybrid_explore.py                       # DenseNet-121, 16 PEs, 1000 x 100
  .venv/bin/python bench/hybrid_explore.py --quick               # 200 x 10 (a smoke run)

For each encoding (naive, advanced p=2, spe):
  1. evaluations per second of the batch evaluator: one call on a population of ``--pop`` random
     chromosomes (median of ``--repeats``), against the baseline measured in the same run: the same
     chromosomes decoded to plans and evaluated one by one (``check_plan`` + the evaluator, as any
     tool without a batch path would); the ratio is printed;
  2. the thesis's setting: NSGA-II with population ``--pop`` for ``--gens`` generations on
     DenseNet-121 over the 16 PEs of jetson-xavier-nx-8, wall time against the 60 s target
     (issue 11), with the share spent in the evaluator.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hetsplit.estimate.evaluate import evaluate
from hetsplit.search.encodings import make_encoding
from hetsplit.search.explore import ExploreOptions, explore
from hetsplit.workflow import load_problem

TARGET_S = 60.0


def batch_rate(enc, x: np.ndarray, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        enc.evaluate(x)
        times.append(time.perf_counter() - t0)
    return len(x) / statistics.median(times)


def one_by_one_rate(problem, enc, x: np.ndarray) -> float:
    t0 = time.perf_counter()
    for row in x:
        evaluate(problem, enc.plan(row))
    return len(x) / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="densenet121")
    ap.add_argument("--cluster", default="jetson-xavier-nx-8")
    ap.add_argument("--encodings", nargs="+", default=["naive", "advanced", "spe"])
    ap.add_argument("--splits", type=int, default=2)
    ap.add_argument("--pop", type=int, default=1000)
    ap.add_argument("--gens", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline-plans", type=int, default=20, help="chromosomes evaluated one by one")
    ap.add_argument("--quick", action="store_true", help="population 200, 10 generations")
    args = ap.parse_args()
    if args.quick:
        args.pop, args.gens, args.repeats = 200, 10, 3
    problem = load_problem(args.model, args.cluster)
    print(f"{args.model} ({problem.num_layers} layers) on {args.cluster} ({problem.num_devices} PEs); "
          f"population {args.pop} x {args.gens} generations")
    rng = np.random.default_rng(0)
    rows = []
    for name in args.encodings:
        t0 = time.perf_counter()
        enc = make_encoding(problem, name, args.splits)
        setup = time.perf_counter() - t0
        x = rng.integers(0, enc.upper + 1, size=(args.pop, enc.n_var))
        fast = batch_rate(enc, x, args.repeats)
        slow = one_by_one_rate(problem, enc, x[: args.baseline_plans])
        res = explore(problem, ExploreOptions(encoding=name, splits=args.splits, pop_size=args.pop,
                                              generations=args.gens, seed=0))
        label = f"{name} p={args.splits}" if name == "advanced" else name
        rows.append((label, enc.n_var, setup, fast, slow, res))
        print(f"  {label:13s} genes {enc.n_var:5d}  set-up {setup:5.2f} s  batch {fast:9,.0f} eval/s  one by one "
              f"{slow:7,.1f} eval/s  ratio {fast / slow:7.0f}x  |  NSGA-II {res.seconds:6.1f} s "
              f"({res.eval_seconds / res.seconds:4.0%} evaluating, {res.evaluations} evaluations, "
              f"{len(res.plans)} Pareto plans)  target {TARGET_S:.0f} s: "
              f"{'met' if res.seconds <= TARGET_S else 'MISSED'} ({res.seconds / TARGET_S:.2f} of it)", flush=True)


if __name__ == "__main__":
    main()
