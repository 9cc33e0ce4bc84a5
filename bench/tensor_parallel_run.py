"""TinyLlama-42M decoded tensor-parallel on 1, 2 and 4 local worker processes, beside the prediction.

The zoo model is written once as a Hugging Face Llama folder and each run is the one LLM program
(``hetsplit generate``'s): one tensor-parallel stage over N ``local-cpu`` processes (one thread each),
equal shares of the KV-head groups, FFN columns and LM-head rows, a star all-reduce through the leader
twice per block; a prefill pass over the prompt, then greedy decode steps with per-rank KV caches; every
step's logits checked against the unsplit decoder. Predicted: the LLM estimator on the same plan
(``estimate.llm.predict_pipeline``, this machine costed by the torch probe). The 1-worker run is the
speed-up's baseline, measured in the same invocation; each worker count runs ``--repeats`` times,
interleaved with the others (the machine is shared and noisy), and its median run is shown.

    python bench/tensor_parallel_run.py
    python bench/tensor_parallel_run.py --workers 1 2 4 --prompt 16 --new 48 --repeats 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str]) -> int:
    from hetsplit.experiments.tensor_parallel_run import (TensorParallelRunOptions, format_table, run_tensor_parallel,
                                                          set_baseline, zoo_checkpoint)

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tinyllama-42m")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens (one prefill pass)")
    ap.add_argument("--new", type=int, default=48, help="generated tokens (greedy)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per worker count (the median is shown)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)

    t0 = time.time()
    counts = sorted(set(args.workers))
    runs: dict[int, list] = {n: [] for n in counts}
    opts = TensorParallelRunOptions(args.prompt, args.new)
    with tempfile.TemporaryDirectory(prefix="hetsplit-tp-") as tmp:
        folder = zoo_checkpoint(args.model, Path(tmp) / args.model)
        for _ in range(args.repeats):       # interleaved, so every worker count sees the machine's load alike
            for n in counts:
                runs[n].append(run_tensor_parallel(folder, n, opts))
    results = [sorted(runs[n], key=lambda r: r.measured_s)[(len(runs[n]) - 1) // 2] for n in counts]
    if counts[0] == 1:
        set_baseline(results, results[0])
    print(f"{args.model}: prompt {args.prompt} tokens, {args.new} greedy tokens (median decode step); one "
          "tensor-parallel stage, equal shares, star all-reduce; predicted = estimate.llm.predict_pipeline of "
          "the same plan (local-cpu costed by the torch probe, its message ends and syncs by the LLM message probe, "
          "loopback link's latency on top)")
    print(f"median of {args.repeats} interleaved runs per worker count; every run's logits verified")
    print(format_table(results))
    for n in counts:
        times = sorted(r.measured_s * 1e3 for r in runs[n])
        print(f"  {n} worker(s): runs {', '.join(f'{t:.2f}' for t in times)} ms/token; max abs err over runs "
              f"{max(r.max_abs_err for r in runs[n]):.2e}")
    print(f"({time.time() - t0:.0f} s)")
    if args.json:
        args.json.write_text(json.dumps({n: [r.to_dict() for r in runs[n]] for n in counts}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
