"""Runtime overhead: hetsplit's transfer path against raw torch.distributed, pipeline efficiency, and a
mapping and a tensor-parallel plan measured beside their predictions.

1. Per-hop overhead. Two processes ping-pong a tensor of each size (1 KB .. 16 MB; the targets are at 1 MB and
   10 MB) over gloo: rank 0 sends, rank 1 sends back the buffer it received into (as a worker relays what it
   received). Once as blocking ``dist.send`` / ``dist.recv`` do (each receive posted when needed: gloo moves a
   message only once its receive is posted, so this waits a notification per message): raw torch.distributed
   send/recv as a program calls them, the baseline the target names; once with raw ``ProcessGroup.send/recv``
   with receives posted one message ahead (raw gloo's best case, a stricter baseline, also reported); once
   posted ``depth`` ahead as the worker does; and once through hetsplit's own path (``Wire`` and
   ``runtime.inflight`` as ``runtime.worker`` uses them, with nothing to compute between a receive and a
   send: receives posted ``depth`` ahead into pooled buffers, every end timestamped, each transfer waited for
   by the compute thread itself; its receiver and sender threads started once, as a worker starts them once
   per run). Also printed: the hand-offs of a worker that computes between messages (every transfer lent to
   its receiver and sender threads, here around an empty sub-model, so they are all on the critical path; in a
   run they overlap the sub-models). Blocks of each alternate in the same run, in turn going first, so all see
   the same machine load; a hop is half a round trip (median and min over blocks). At 1 MB and 10 MB the
   overhead against each baseline is the median of each block's own ratio (its figures taken moments apart)
   over 121 blocks (of 100 round trips at 1 MB, 30 at 10 MB, by default), with a 95% bootstrap interval: the
   target is met when the whole interval lies at or below +10%, not met when it lies above, else
   inconclusive; the CPU time per round trip of each is printed beside it (the wall time of a loaded machine
   mostly says how long threads wait for a core). The overhead against blocking send/recv is also given in
   two paired factors: raw gloo posting receives ahead as the worker does against blocking (gloo's own gain
   or loss from the posting a worker needs to overlap transfers with compute), and hetsplit against raw
   gloo posting them the same way (what the runtime itself adds). ``--pin`` puts each of the two
   processes on a core of its own: on a small machine where the threads land moves a hop (on this 2-core
   VM one thread started and ended before a raw loop made its 1 MB hops ~15% slower, run after run;
   pinned, it made no difference).
2. Pipeline efficiency. A real plan runs with ``run_plan``; efficiency = measured throughput /
   the throughput its own measured stage and hop times allow (1 / the largest of them).
3. Plans beside predictions, through the same runtime: a sharded mapping of the toy CNN bounded by an
   emulated 1.5 MB/s link (needs root for the namespaces; else said and skipped) against the
   ``simulated`` fidelity, and the tensor-parallel plan of MobileBERT on the ``local`` cluster's two
   workers against its plan's ``closed`` and ``simulated`` figures.

    python bench/runtime_overhead.py                 # everything
    python bench/runtime_overhead.py --model resnet50 --stages 2 --inputs 24 --json out.json
    python bench/runtime_overhead.py --skip-hops --skip-plans --pin   # workers pinned to their own cores
Targets: overhead <= 10% against raw send/recv at 1 MB and 10 MB; efficiency >= 90%.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import sys
import time
from pathlib import Path

import numpy as np

SIZES = [1 << 10, 16 << 10, 256 << 10, 1 << 20, 4 << 20, 10 << 20, 16 << 20]
TARGETS = (1 << 20, 10 << 20)
TARGET_ROUNDS = {1 << 20: 100, 10 << 20: 30}   # round trips per block: ~60 ms and ~180 ms blocks here, long
#                                                enough that a block's ratio is not one scheduler hiccup
DEPTH = 2   # receives the worker posts ahead (RunConfig.depth)


def _peer(rank: int, port_q, result_q, sizes: list[int], plan: dict[int, tuple[int, int]], pin: bool) -> None:
    """One side of the hop blocks: for each size, ``plan[size]`` = (blocks, round trips per block) of
    each way of moving messages, alternating; rank 0 reports each block's seconds per hop and CPU per
    round trip, by way. ``pin``: this process (and the threads it starts) on a core of its own."""
    import os

    if pin:
        cores = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cores[rank % len(cores)]})
    import torch

    from hetsplit.runtime.inflight import InFlight, Shared
    from hetsplit.runtime.manifest import Manifest, Message, TensorSpec, WireTensor, Worker
    from hetsplit.runtime.wire import Wire, open_group, open_store
    from hetsplit.runtime.worker import BufferPool, Inbox, Outbox, Transfers

    torch.set_num_threads(1)
    if rank == 0:
        store = open_store(0, 2, "127.0.0.1", 0, 60)
        port_q.put(store.port)
    else:
        store = open_store(1, 2, "127.0.0.1", port_q.get(), 60)
    pg = open_group(store, rank, 2, "127.0.0.1", 60)
    other = 1 - rank
    out = {}
    wire = Wire(pg, f"rank{rank}", 60)
    for size in sizes:
        blocks, rounds = plan[size]
        spec = TensorSpec("x", (size // 4,), "float32")
        # the two messages as a worker's step loop posts them (its Inbox and Outbox): x from rank 0 to rank 1,
        # sent back as y from what rank 1 received
        y = TensorSpec("y", spec.shape, spec.dtype)
        msgs = [Message(0, "x", "rank0", 0, "rank1", 1, (WireTensor(spec, "x"),), tag=0),
                Message(1, "y", "rank1", 1, "rank0", 0, (WireTensor(y, "x"),), tag=1)]
        manifest = Manifest("hop", {}, [spec], [y], msgs, [], [Worker(0, "rank0"), Worker(1, "rank1")])
        buf = np.ones(spec.shape, dtype=np.float32)
        t = torch.from_numpy(buf)
        runs = {  # each returns seconds per hop; the worker's make 2 more round trips first (warm-up)
            "raw": lambda: _pingpong_raw(pg, t, rank, other, rounds, raw_bufs),
            "ahead": lambda: _pingpong_raw(pg, t, rank, other, rounds, raw_bufs, ahead=DEPTH),
            "blocking": lambda: _pingpong_raw(pg, t, rank, other, rounds, raw_bufs, ahead=0),
            "ours": lambda: _pingpong_worker(flight, ports, buf, rank, rounds, pool, DEPTH),
            "lending": lambda: _pingpong_worker(flight, ports, buf, rank, rounds, pool, DEPTH, computing=True)}
        hop: dict[str, list[float]] = {k: [] for k in runs}
        cpu: dict[str, list[float]] = {k: [] for k in runs}
        # each side's receive buffers live for the whole size, as a worker's pool lives for its run (fresh
        # ones per block would charge page faults and zeroing to whichever side allocates more of them)
        raw_bufs = [t.new_empty(t.shape) for _ in range(DEPTH + 1)]
        pool = BufferPool(wire.views)
        io = Transfers(manifest, rank, wire, pool)
        ports = (Inbox(io, 1 - rank, None), Outbox(io, rank, None, 0.0))   # rank 0 receives message 1, sends 0
        # one book of transfers and its helper threads for the whole size, as a worker has one for its run:
        # starting two threads per block cost ~30 us per 1 MB hop over blocks of 30 round trips (pinned; none
        # over blocks of 300)
        flight = InFlight(wire, Shared(), idle=pool.recycle)
        flight.start()
        _pingpong_raw(pg, t, rank, other, 2, raw_bufs)  # warm-up
        for b in range(blocks):
            for name in (list(runs) if b % 2 == 0 else list(runs)[::-1]):   # each goes first as often
                c0 = time.process_time()
                hop[name].append(runs[name]())
                cpu[name].append((time.process_time() - c0) / (rounds + 2 * (name in ("ours", "lending"))))
        flight.close()
        flight.join()
        out[size] = {"hop": hop, "cpu": cpu}
    if rank == 0:
        result_q.put(out)
    time.sleep(0.5)


def paired_overhead(ours: list[float], raw: list[float], resamples: int = 2000) -> tuple[float, float, float]:
    """The median over blocks of each block's own ratio ours / raw, minus 1, and a 95% bootstrap interval
    of that median (blocks resampled; a fixed seed, so a run's figures can be reproduced from its data)."""
    ratios = np.asarray(ours) / np.asarray(raw)
    rng = np.random.default_rng(0)
    boot = np.median(rng.choice(ratios, size=(resamples, len(ratios))), axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return float(np.median(ratios) - 1), float(lo - 1), float(hi - 1)


def interval(row: dict, key: str) -> str:
    """``row[key]`` with its 95% interval (``row[key + "_ci95"]``), as percentages."""
    lo, hi = row[f"{key}_ci95"]
    return f"{row[key]:+.1%} ({lo:+.1%} .. {hi:+.1%})"


def verdict(lo: float, hi: float, target: float = 0.10) -> str:
    """Whether the interval shows the overhead within ``target``, beyond it, or cannot tell."""
    return "met" if hi <= target else "not met" if lo > target else "inconclusive (the interval spans the target)"


def _pingpong_worker(flight, ports, buf: np.ndarray, rank: int, rounds: int, pool, depth: int = 2,
                     computing: bool = False) -> float:
    """Seconds per hop of ``rounds`` round trips as a worker moves messages (``worker.StepLoop``'s round):
    receives posted ``depth`` inputs ahead into pooled buffers through the message's ``Inbox``, sends through
    its ``Outbox`` (the objects the worker posts with), each message's ends timestamped into logs, every
    transfer waited for through ``InFlight``, buffers reused once their sends are done. With nothing to
    compute between a receive and a send the compute thread waits for each transfer itself; ``computing``:
    it lends them to its receiver and sender threads as before a sub-model (here an empty one), so the
    hand-offs a computing worker makes are all on the critical path. ``flight`` (the worker's ``InFlight``,
    its helpers started) and ``pool`` (its ``BufferPool``) are kept from block to block, as a worker keeps
    them from input to input."""
    from hetsplit.runtime.inflight import MessageLog

    inbox, outbox = ports
    rx_log, tx_log = MessageLog(0, inbox.edge.peer, inbox.edge.nbytes), MessageLog(1, outbox.edge.peer,
                                                                                  outbox.edge.nbytes)
    total = rounds + 2
    frames = {}
    local = {"x": buf}

    def post_recv(i: int) -> None:
        frames[i] = pool.frame()
        rx_log.start.append(time.time())
        works, bufs = inbox.post()
        flight.expect(works, inbox.edge, bufs, rx_log)

    def post_send() -> None:
        tx_log.start.append(time.time())
        works, keep = outbox.post(local)
        flight.sent(works, outbox.edge, tx_log, keep)

    for i in range(min(depth, total)):
        post_recv(i)
    t0 = time.perf_counter()
    # each rank runs the worker's round: take the round's message, post the receives ``depth`` ahead, [compute],
    # post the sends, retire the round's buffers; rank 0's round r takes the reply to input r - 1 and sends input r
    first = int(rank == 0)
    for r in range(total + first):
        i = r - first             # the input whose message this round takes (none in rank 0's first round)
        if i >= 0:
            got = flight.take(computing)
            if rank == 1:
                local["x"] = got
            if i + depth < total:
                post_recv(i + depth)
            if computing:
                flight.lend()
        if r == 2:                # rank 0: about to send input 2 (rounds round trips follow)
            t0 = time.perf_counter()
        if rank == 1 or r < total:
            post_send()
        if i >= 0:
            pool.retire(frames.pop(i), flight.posted_sends)
        pool.recycle(flight.settle())
    flight.finish()
    elapsed = time.perf_counter() - t0
    pool.recycle(flight.settle())     # every send is done: the next block starts with all buffers free
    if flight.shared.error:
        raise flight.shared.error
    assert len(rx_log.done) == len(tx_log.done) == total
    return elapsed / rounds / 2


def _pingpong_raw(pg, t, rank: int, other: int, rounds: int, bufs: list, ahead: int = 1,
                  cycle: int | None = None) -> float:
    """Seconds per hop of ``rounds`` round trips over raw ``send``/``recv``: rank 0 sends ``t``, rank 1 sends
    back the buffer it received into (as a worker relays what it received), receives posted ``ahead``
    messages early (1 is raw gloo's best case; the worker posts ``depth``; 0: each receive posted when it is
    needed, as blocking ``dist.send``/``dist.recv`` do) into ``cycle`` of ``bufs`` in turn (by default
    ``ahead + 1``, the fewest that posting ``ahead`` allows)."""
    bufs = bufs[:cycle or ahead + 1]
    t0 = time.perf_counter()
    posted = [pg.recv([bufs[k]], other, 0) for k in range(min(ahead, rounds))]

    def receive(k: int) -> None:
        (posted.pop(0) if ahead else pg.recv([bufs[k % len(bufs)]], other, 0)).wait()
        if ahead and k + ahead < rounds:
            posted.append(pg.recv([bufs[(k + ahead) % len(bufs)]], other, 0))

    for k in range(rounds):
        if rank == 0:
            pg.send([t], other, 0).wait()
            receive(k)
        else:
            receive(k)
            pg.send([bufs[k % len(bufs)]], other, 0).wait()
    return (time.perf_counter() - t0) / rounds / 2


def hop_overhead(sizes: list[int], rounds: int, blocks: int, target_rounds: int | None, target_blocks: int,
                 pin: bool = False) -> list[dict]:
    ctx = mp.get_context("spawn")
    port_q, result_q = ctx.Queue(), ctx.Queue()
    plan = {s: (target_blocks, target_rounds or TARGET_ROUNDS[s]) if s in TARGETS else (blocks, rounds) for s in sizes}
    procs = [ctx.Process(target=_peer, args=(r, port_q, result_q, sizes, plan, pin)) for r in (0, 1)]
    for p in procs:
        p.start()
    try:
        res = result_q.get(timeout=900)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    rows = []
    for size in sizes:
        hop, cpu = res[size]["hop"], res[size]["cpu"]
        med = {k: float(np.median(v)) for k, v in hop.items()}
        cpu_med = {k: float(np.median(v)) for k, v in cpu.items()}
        paired, lo, hi = paired_overhead(hop["ours"], hop["raw"])
        vs_blocking, b_lo, b_hi = paired_overhead(hop["ours"], hop["blocking"])
        # the overhead against blocking send/recv, in two factors: what raw gloo itself gains or loses by posting
        # receives ``DEPTH`` ahead as the worker does, and what hetsplit adds over raw gloo posting them so
        posting, p_lo, p_hi = paired_overhead(hop["ahead"], hop["blocking"])
        own, o_lo, o_hi = paired_overhead(hop["ours"], hop["ahead"])
        rows.append({"bytes": size, "blocks": plan[size][0], "round_trips_per_block": plan[size][1],
                     "raw_hop_s": med["raw"], "hetsplit_hop_s": med["ours"], "overhead": med["ours"] / med["raw"] - 1,
                     "raw_hop_min_s": min(hop["raw"]), "hetsplit_hop_min_s": min(hop["ours"]),
                     "overhead_min": min(hop["ours"]) / min(hop["raw"]) - 1,
                     "raw_bandwidth": size / med["raw"], "raw_cpu_per_round_trip_s": cpu_med["raw"],
                     "hetsplit_cpu_per_round_trip_s": cpu_med["ours"], "raw_ahead_hop_s": med["ahead"],
                     "raw_ahead_cpu_per_round_trip_s": cpu_med["ahead"], "lending_hop_s": med["lending"],
                     "lending_overhead": med["lending"] / med["raw"] - 1,
                     "lending_cpu_per_round_trip_s": cpu_med["lending"], "overhead_paired": paired,
                     "overhead_paired_ci95": [lo, hi], "verdict": verdict(lo, hi),
                     "raw_blocking_hop_s": med["blocking"], "overhead_vs_blocking": vs_blocking,
                     "overhead_vs_blocking_ci95": [b_lo, b_hi], "verdict_vs_blocking": verdict(b_lo, b_hi),
                     "ahead_vs_blocking": posting, "ahead_vs_blocking_ci95": [p_lo, p_hi],
                     "overhead_vs_same_posting": own, "overhead_vs_same_posting_ci95": [o_lo, o_hi]})
    return rows


def pipeline_efficiency(model: str, stages: int, inputs: int, pin: bool = False) -> dict:
    from hetsplit.plan.types import Plan, Stage
    from hetsplit.runtime import RunOptions, resolve_model, run_plan

    graph, path = resolve_model(model)
    c = np.cumsum(graph.macs) / graph.macs.sum()
    bounds = [0] + [int(np.searchsorted(c, (i + 1) / stages)) + 1 for i in range(stages - 1)] + [graph.num_layers]
    plan = Plan(graph.name, "local", "even-macs", [Stage(f"local-cpu{i}", graph.names[a:b])
                                                   for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))])
    r = run_plan(plan, graph, path, RunOptions(inputs=inputs, timeout_s=120, pin=pin))
    return {"model": model, "stages": stages, "inputs": inputs, "pinned": pin, "throughput": r.throughput,
            "stage_bound_throughput": r.stage_bound_throughput, "efficiency": r.pipeline_efficiency,
            "stage_compute_s": [d.compute_s for d in r.devices],
            "hop_wire_s": {f"{h.src}->{h.dst}": h.wire_s for h in r.hops}}


def _beside(label: str, report, plan, graph, cluster, inputs: int, note: str) -> dict:
    """A run's throughput beside the plan's ``closed`` and ``simulated`` figures on ``cluster``."""
    from hetsplit.workflow.run import predict

    closed, sim = predict(plan, graph, cluster, None, inputs)
    return {"plan": label, "inputs": inputs, "verified": report.verify is not None and report.verify.ok,
            "measured": report.throughput, "closed": closed.throughput, "simulated": sim.throughput, "note": note,
            "compute_s": {d.device: d.compute_s for d in report.devices}}


SLOW_LINK = """name: slow-link
devices:
  - {{name: a, type: fast, kind: cpu, memory: 8GiB, peak_macs: 1e12/s, mem_bandwidth: 20GB/s, power_active: 5W}}
  - {{name: b, type: fast, kind: cpu, memory: 8GiB, peak_macs: 1e12/s, mem_bandwidth: 20GB/s, power_active: 5W}}
links:
  default: {{bandwidth: {bandwidth}B/s, latency: 1ms}}
"""


def mapping_over_a_slow_link(inputs: int, bandwidth: float = 1.5e6) -> dict:
    """The toy CNN's sharded mapping over an emulated ``bandwidth`` link, beside the simulator."""
    import tempfile

    from hetsplit.runtime import LinkMatrix, RunOptions, emulation_available, run_manifest, split_model
    from hetsplit.runtime.toy import toy_model, toy_sharded_mapping
    from hetsplit.workflow import load_cluster_spec

    why = emulation_available()
    if why:
        return {"plan": "toy sharded mapping over an emulated link", "skipped": why}
    with tempfile.TemporaryDirectory(prefix="hetsplit-bench-") as d:
        (Path(d) / "slow-link.yaml").write_text(SLOW_LINK.format(bandwidth=bandwidth))
        cluster = load_cluster_spec(str(Path(d) / "slow-link.yaml"))
        graph = toy_model(Path(d) / "toy.onnx", channels=16, size=64)
        plan = toy_sharded_mapping(graph, "a", "b", cluster.name)
        manifest = split_model(plan, graph, Path(d) / "toy.onnx", Path(d) / "split", cluster=cluster)
        report = run_manifest(manifest, RunOptions(inputs=inputs + 1, latency_inputs=1, timeout_s=60,
                                                   links=LinkMatrix.from_cluster(manifest, cluster)))
    return _beside("toy sharded mapping, a -> b at %.3g MB/s (emulated)" % (bandwidth / 1e6), report, plan, graph,
                   cluster, inputs, "link-bound: the simulator's figure is the one to match (within 15%)")


def tensor_parallel_here(model: str, inputs: int) -> dict:
    """``model``'s tensor-parallel plan on the ``local`` cluster (this machine's two workers), run here."""
    from hetsplit.runtime import RunOptions, resolve_model, run_plan
    from hetsplit.search import make_partitioner
    from hetsplit.workflow import load_problem

    problem = load_problem(model, "local")
    (plan,) = make_partitioner("tensor-parallel").solve(problem)
    graph, path = resolve_model(model)
    report = run_plan(plan, graph, path, RunOptions(inputs=inputs + 1, latency_inputs=1, timeout_s=120),
                      cluster=problem.cluster)
    messages = sum(link.messages for link in report.links)
    return _beside(f"{model} tensor-parallel on local (2 workers)", report, plan, graph, problem.cluster, inputs,
                   f"{messages} messages per input; the plan's figures charge messages no CPU (the `here` "
                   "fidelity, `run --here`, adds the runtime's per-message costs)")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=20, help="ping-pongs per block")
    ap.add_argument("--blocks", type=int, default=15, help="alternating raw / hetsplit blocks per size")
    ap.add_argument("--target-rounds", type=int, default=None,
                    help="ping-pongs per block at the target sizes (default: 100 at 1 MB, 30 at 10 MB)")
    ap.add_argument("--target-blocks", type=int, default=121,
                    help="blocks at the target sizes (1 MB, 10 MB): enough for a 95%% interval narrower than the "
                    "noise (over 41, the interval against blocking send/recv was up to 33 points wide here)")
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=24)
    ap.add_argument("--pin", action="store_true",
                    help="pin each hop process and each stage's worker to its own core (as run --pin)")
    ap.add_argument("--skip-hops", action="store_true")
    ap.add_argument("--skip-pipeline", action="store_true")
    ap.add_argument("--skip-plans", action="store_true", help="skip the mapping and tensor-parallel runs")
    ap.add_argument("--plan-inputs", type=int, default=12, help="inputs streamed by each of those runs")
    ap.add_argument("--tp-model", default="mobilebert", help="model of the tensor-parallel run")
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    doc: dict = {}
    if not args.skip_hops:
        doc["hops"] = hop_overhead(SIZES, args.rounds, args.blocks, args.target_rounds, args.target_blocks, args.pin)
        print("hop = half a round trip; median and min over blocks (min: least disturbed by other load); CPU: "
              "one process's CPU time per round trip (its threads and gloo's), median")
        print(f"{'bytes':>10} {'raw med':>10} {'ours med':>10} {'overhead':>9} {'raw min':>10} {'ours min':>10} "
              f"{'overhead':>9} {'raw MB/s':>9} {'raw CPU':>9} {'ours CPU':>9}")
        for r in doc["hops"]:
            print(f"{r['bytes']:>10} {r['raw_hop_s'] * 1e3:>8.3f}ms {r['hetsplit_hop_s'] * 1e3:>8.3f}ms "
                  f"{r['overhead']:>+8.1%} {r['raw_hop_min_s'] * 1e3:>8.3f}ms {r['hetsplit_hop_min_s'] * 1e3:>8.3f}ms "
                  f"{r['overhead_min']:>+8.1%} {r['raw_bandwidth'] / 1e6:>9.0f} "
                  f"{r['raw_cpu_per_round_trip_s'] * 1e6:>7.0f}us {r['hetsplit_cpu_per_round_trip_s'] * 1e6:>7.0f}us")
        for r in (r for r in doc["hops"] if r["bytes"] in TARGETS):
            lo, hi = r["overhead_paired_ci95"]
            b_lo, b_hi = r["overhead_vs_blocking_ci95"]
            print(f"{r['bytes'] >> 20} MB against raw send/recv (blocking, each receive posted when needed, hop "
                  f"{r['raw_blocking_hop_s'] * 1e3:.3f} ms): overhead {r['overhead_vs_blocking']:+.1%} (median of "
                  f"{r['blocks']} blocks' own ratios, 95% interval {b_lo:+.1%} .. {b_hi:+.1%}; target <= +10%: "
                  f"{r['verdict_vs_blocking']}); against raw with one receive posted ahead (raw's best, stricter): "
                  f"{r['overhead_paired']:+.1%} ({lo:+.1%} .. {hi:+.1%}: {r['verdict']}); medians "
                  f"{r['overhead']:+.1%}, mins {r['overhead_min']:+.1%}; CPU per round trip "
                  f"{r['hetsplit_cpu_per_round_trip_s'] * 1e6:.0f} us vs raw {r['raw_cpu_per_round_trip_s'] * 1e6:.0f} us; "
                  f"raw with receives posted {DEPTH} ahead as the worker does: hop {r['raw_ahead_hop_s'] * 1e3:.3f} ms "
                  f"({r['raw_ahead_hop_s'] / r['raw_hop_s'] - 1:+.1%}); handing off as a computing worker does: hop "
                  f"{r['lending_hop_s'] * 1e3:.3f} ms ({r['lending_overhead']:+.1%})")
            print(f"  {r['bytes'] >> 20} MB, the overhead against blocking send/recv in two factors (paired, 95% "
                  f"intervals): raw gloo posting receives {DEPTH} ahead (as the worker does) against blocking "
                  f"{interval(r, 'ahead_vs_blocking')}; hetsplit against raw gloo posting them so "
                  f"{interval(r, 'overhead_vs_same_posting')}")
    if not args.skip_pipeline:
        doc["pipeline"] = p = pipeline_efficiency(args.model, args.stages, args.inputs, args.pin)
        print(f"pipeline {p['model']} x{p['stages']}{' pinned' if p['pinned'] else ''}: measured {p['throughput']:.2f}/s, stage-bound "
              f"{p['stage_bound_throughput']:.2f}/s, efficiency {p['efficiency']:.1%} (target >= 90%)")
    if not args.skip_plans:
        doc["plans"] = [mapping_over_a_slow_link(args.plan_inputs), tensor_parallel_here(args.tp_model,
                                                                                         args.plan_inputs)]
        for r in doc["plans"]:
            if "skipped" in r:
                print(f"{r['plan']}: skipped ({r['skipped']})")
                continue
            print(f"{r['plan']}: measured {r['measured']:.3g}/s, simulated {r['simulated']:.3g}/s (x"
                  f"{r['measured'] / r['simulated']:.2f}), closed {r['closed']:.3g}/s (x{r['measured'] / r['closed']:.2f}), "
                  f"{r['inputs']} inputs, verified {r['verified']}; {r['note']}")
    if args.json:
        Path(args.json).write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
