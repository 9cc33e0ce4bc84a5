"""TinyLlama-42M decoded tensor-parallel on 1, 2 and 4 local worker processes, beside the prediction.

Each run: Bochem et al.'s tensor-parallel plan (heads and F sliced, tree all-reduces, LM head by
vocabulary columns) over N ``local-cpu`` devices, one process each (one thread each), a prefill pass
over the prompt then greedy decode steps with per-rank KV caches; every step's logits checked against
the unsplit model; bytes per token checked against the plan's messages. The 1-worker run is the
speed-up's baseline, measured in the same invocation; each worker count runs ``--repeats`` times,
interleaved with the others (the machine is shared and noisy), and its median run is shown.

    python bench/tensor_parallel_run.py
    python bench/tensor_parallel_run.py --workers 1 2 4 --prompt 16 --new 48 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from hetsplit.experiments.tensor_parallel_run import format_table, run_tensor_parallel, zoo_model

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tinyllama-42m")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens (one prefill pass)")
    ap.add_argument("--new", type=int, default=48, help="decode steps (generated tokens)")
    ap.add_argument("--tree", type=int, default=4, help="all-reduce group size (0: flat)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per worker count (the median is shown)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    t0 = time.time()
    loaded = zoo_model(args.model)
    counts = sorted(set(args.workers))
    runs: dict[int, list] = {n: [] for n in counts}
    for _ in range(args.repeats):       # interleaved, so every worker count sees the machine's load alike
        for n in counts:
            runs[n].append(run_tensor_parallel(args.model, n, args.prompt, args.new, args.tree,
                                               measure_baseline=False, loaded=loaded))
    results = [sorted(runs[n], key=lambda r: r.measured_s)[(len(runs[n]) - 1) // 2] for n in counts]
    baseline = next((r.measured_s for r in results if r.workers == 1), None)
    for r in results:
        r.baseline_s = baseline
    print(f"{args.model}: prompt {args.prompt} tokens, {args.new} greedy decode steps (median after 2 warm-up), "
          f"tree {args.tree}; predicted = evaluator latency of the same plan on the decode step (cache "
          f"{results[0].prediction.context}), roofline local-cpu + loopback link, embedding, blocks and LM head")
    print(f"median of {args.repeats} interleaved runs per worker count; every run's logits verified")
    print(format_table(results))
    for n in counts:
        times = sorted(r.measured_s * 1e3 for r in runs[n])
        print(f"  {n} worker(s): runs {', '.join(f'{t:.2f}' for t in times)} ms/token; max abs err over runs "
              f"{max(r.report.max_abs_err for r in runs[n]):.2e}")
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({n: [r.to_dict() for r in runs[n]] for n in counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
