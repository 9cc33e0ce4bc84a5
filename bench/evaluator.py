"""Vectorized pipeline evaluation against evaluating the same plans one by one, in one run.

    python bench/evaluator.py [--model resnet152] [--cluster donna-2cpu-1gpu-1cim-hb-wcc] [--plans 20000]

Prints plans per second of both ways and their ratio (the baseline is the per-plan loop), and
checks that both give the same bottleneck and energy for every plan.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from hetsplit.estimate import evaluate_pipelines, make_plan
from hetsplit.workflow import load_problem


def random_plans(n_layers: int, n_devices: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n`` random pipelines with one stage per device, distinct cut points, devices shuffled."""
    rng = np.random.default_rng(seed)
    cuts = np.stack([np.sort(rng.choice(np.arange(1, n_layers), n_devices - 1, replace=False)) for _ in range(n)])
    bounds = np.concatenate([np.zeros((n, 1), int), cuts, np.full((n, 1), n_layers)], axis=1)
    devices = np.stack([rng.permutation(n_devices) for _ in range(n)])
    return bounds, devices


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="resnet152")
    ap.add_argument("--cluster", default="donna-2cpu-1gpu-1cim-hb-wcc")
    ap.add_argument("--plans", type=int, default=20000)
    ap.add_argument("--loop-plans", type=int, default=500, help="plans evaluated one by one (the baseline)")
    args = ap.parse_args()
    problem = load_problem(args.model, args.cluster)
    bounds, devices = random_plans(problem.num_layers, problem.num_devices, args.plans, seed=0)

    t0 = time.perf_counter()
    batch = evaluate_pipelines(problem, bounds, devices)
    vec_s = time.perf_counter() - t0
    k = min(args.loop_plans, args.plans)
    t0 = time.perf_counter()
    singles = [make_plan(problem, bounds[i], devices[i], "bench").metrics for i in range(k)]
    loop_s = time.perf_counter() - t0
    assert all(m.bottleneck_s == batch.bottleneck_s[i] and m.energy_j == batch.energy_j[i]
               for i, m in enumerate(singles)), "vectorized and per-plan metrics differ"
    vec_rate, loop_rate = args.plans / vec_s, k / loop_s
    print(f"{args.model} ({problem.num_layers} layers) on {args.cluster} ({problem.num_devices} devices)")
    print(f"vectorized : {args.plans:>7} plans in {vec_s:8.3f} s = {vec_rate:12,.0f} plans/s")
    print(f"one by one : {k:>7} plans in {loop_s:8.3f} s = {loop_rate:12,.0f} plans/s (baseline)")
    print(f"ratio      : {vec_rate / loop_rate:.0f}x; metrics identical on the {k} plans compared")


if __name__ == "__main__":
    main()
