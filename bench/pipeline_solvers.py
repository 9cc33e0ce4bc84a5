"""Benchmark of the pipeline solvers: solve time and peak memory, and exact / pipeedge ratios.

    .venv/bin/python bench/pipeline_solvers.py [--quick] [--cap SECONDS] [--only TEXT ...]

Each (case, solver) runs in a fresh subprocess: once timed (no tracing), once under tracemalloc for
the peak of Python + numpy allocations (skipped when the timed run took longer than 20 s). A run
that exceeds the cap is killed and reported as "> cap". PipeEdge's DP is exponential in the number
of distinct devices, so on the 16-all-different case it runs on 8..12 devices of the same family
and the 16-device time is extrapolated from the measured growth per device (printed as such).
Ratios are measured in this run, on the same machine, on the same instances. Wall and CPU seconds
are both printed: on a shared machine the wall time of a single-threaded solver inflates with load.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def build(case: str):
    """The SplitProblem of a case name: rand:L:D[:T] (synthetic), synth:L:CLUSTER (a synthetic
    L-layer model on a built-in cluster) or real:MODEL:CLUSTER."""
    kind, *rest = case.split(":")
    if kind == "rand":
        from _instances import big_problem
        L, D = int(rest[0]), int(rest[1])
        T = int(rest[2]) if len(rest) > 2 else None
        return big_problem(1, L, D, T)
    from hetsplit.cluster import load_cluster
    if kind == "synth":
        from _instances import synthetic_on_cluster
        return synthetic_on_cluster(1, int(rest[0]), load_cluster(rest[1]))
    from hetsplit.costs.build import build_problem
    from hetsplit.graph import load_model
    return build_problem(load_model(rest[0]), load_cluster(rest[1]))


def run_one(case: str, algo: str, trace: bool) -> dict:
    from hetsplit.search import make_partitioner
    problem = build(case)
    solver = make_partitioner(algo)
    if trace:
        tracemalloc.start()
    t0, c0 = time.perf_counter(), time.process_time()
    plans = solver.solve(problem)
    dt, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = tracemalloc.get_traced_memory()[1] if trace else 0
    best = min(plans, key=lambda p: p.metrics.bottleneck_s)
    return {"seconds": dt, "cpu_seconds": cpu, "peak_bytes": peak, "plans": len(plans), "bottleneck_s": best.metrics.bottleneck_s,
            "stages": len(best.stages), "layers": problem.num_layers, "devices": problem.num_devices,
            "params": {k: v for k, v in best.params.items() if k in ("checks", "classes", "multisets", "tie_break")},
            "states": _states(problem, algo)}


def _states(problem, algo: str) -> str:
    """Labels x usage states the pareto/exact DPs of a case run over (after the symmetry grouping)."""
    from hetsplit.search.classes import build_classes
    cm = build_classes(problem, units=algo != "pipeedge")
    units = sum(1 for c in cm.units if len(c[0]) > 1 for _ in c)
    return f"{cm.num_classes} labels x {cm.num_multisets} states" + (f", {units} units" if units else "")


def measure(case: str, algo: str, cap: float) -> dict:
    """Timed run, then a traced run for memory; each in its own process, killed at the cap."""
    out: dict = {"case": case, "algo": algo}
    for trace in (False, True):
        if trace and out.get("seconds", math.inf) > 20:
            break
        cmd = [sys.executable, __file__, "--one", case, algo] + (["--trace"] if trace else [])
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=cap, cwd=ROOT,
                                 env={**os.environ, "PYTHONWARNINGS": "ignore"})
        except subprocess.TimeoutExpired:
            out.setdefault("seconds", math.inf)
            out["capped"] = cap
            break
        if res.returncode != 0:
            out["error"] = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else f"exit {res.returncode}"
            break
        r = json.loads(res.stdout.strip().splitlines()[-1])
        if trace:
            out["peak_bytes"] = r["peak_bytes"]
        else:
            out.update(r)
    return out


def fmt_s(x: float) -> str:
    return "-" if x is None else (">cap" if math.isinf(x) else f"{x:.2f}")


def row(r: dict, note: str = "") -> str:
    mem = f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") else "-"
    shape = f"L={r.get('layers', '?')} D={r.get('devices', '?')}"
    extra = r.get("error") or "; ".join(x for x in (note, r.get("states", "")) if x)
    return (f"| {r['case']:<44} | {r['algo']:<8} | {shape:<12} | {fmt_s(r.get('seconds')):>7} | "
            f"{fmt_s(r.get('cpu_seconds')):>6} | {mem:>7} | "
            f"{r.get('plans', '-'):>5} | {r.get('bottleneck_s', float('nan')):.6g} | {extra}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--quick", action="store_true", help="skip the PipeEdge growth series")
    ap.add_argument("--cap", type=float, default=120.0, help="seconds before a run is killed")
    ap.add_argument("--only", nargs="+", metavar="TEXT",
                    help="run only the rows whose 'case algo' contains one of these texts (e.g. jetson, pareto)")
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_one(a.one[0], a.one[1], a.trace)))
        return

    print(f"| {'case':<44} | solver   | size         |  wall s |  cpu s | peak MiB | plans | bottleneck s | notes")
    print("|---|---|---|---|---|---|---|---|---|")
    results = {}

    def go(case: str, algo: str, note: str = "", cap: float | None = None) -> dict:
        if a.only and not any(t in f"{case} {algo}" for t in a.only):
            return {"seconds": math.inf}
        r = measure(case, algo, cap or a.cap)
        results[(case, algo)] = r
        print(row(r, note), flush=True)
        return r

    # point 2: exact on 16 all-different devices x 48 layers (target <= 3 s, <= 200 MB)
    go("rand:48:16", "exact", "target <= 3 s, <= 200 MB")
    go("rand:48:16", "pipeedge", "same instance; PipeEdge C++ reported 306 s, 1.46 GB")
    # PipeEdge growth on the same family: 8, 10, 12 all-different devices
    growth = []
    if not a.quick:
        for d in (8, 10, 12):
            e = go(f"rand:48:{d}", "exact")
            p = go(f"rand:48:{d}", "pipeedge")
            if math.isfinite(p.get("seconds", math.inf)):
                growth.append((d, p["seconds"], e["seconds"]))
    # point 2: 64 devices of 4 types x 152 layers (target <= 2 s)
    go("rand:152:64:4", "exact", "target <= 2 s")
    # PipeEdge's own reference shape: 16 devices of 4 types x 128 layers (its C++: 3.6 s)
    go("rand:128:16:4", "exact")
    go("rand:128:16:4", "pipeedge", "PipeEdge C++ reported 3.6 s")
    # point 3: the exact front
    go("rand:152:10", "pareto", "target <= 10 s")
    for cl in ("donna-2cpu-1gpu-1cim-hb-wcc", "donna-4cpu-hb-wcc", "donna-2cpu-2cim-lb-wcc", "jetson-xavier-nx-4"):
        go(f"real:resnet152:{cl}", "pareto", "target <= 10 s")
    # the Jetson boards as interchangeable units (board 0 holds the source; boards 1.. are permutable)
    for cl in ("jetson-xavier-nx-8", "jetson-xavier-nx-4"):
        for case in (f"real:resnet152:{cl}", f"synth:152:{cl}"):
            for algo in ("pareto", "exact"):
                if (case, algo) != ("real:resnet152:jetson-xavier-nx-4", "pareto"):  # measured above
                    go(case, algo, "pareto target <= 10 s" if algo == "pareto" else "")
    go("real:resnet152:donna-2cpu-1gpu-1cim-hb-wcc", "exact")
    go("real:resnet152:donna-2cpu-1gpu-1cim-hb-wcc", "pipeedge")
    go("real:resnet152:donna-2cpu-1gpu-1cim-hb-wcc", "donna", "6 alphas")

    print()
    if len(growth) >= 2:
        (d0, t0, _), (d1, t1, _) = growth[0], growth[-1]
        per_dev = (t1 / t0) ** (1 / (d1 - d0))
        t16 = t1 * per_dev ** (16 - d1)
        print(f"PipeEdge growth on 48 layers: x{per_dev:.2f} per extra distinct device "
              f"(measured {d0}..{d1}); extrapolated 16 devices: {t16:.0f} s "
              f"(its state table alone: 49 x 16 x 2^16 floats = {49 * 16 * 2**16 * 8 / 2**20:.0f} MiB)")
        ex16 = results[("rand:48:16", "exact")]["seconds"]  # wall vs wall: both under the same load
        print(f"ratio pipeedge / exact at 16 devices (extrapolated pipeedge): {t16 / ex16:.0f}x")
        for d, tp, te in growth:
            print(f"ratio pipeedge / exact at {d} devices (measured): {tp / te:.1f}x")
    p16 = results.get(("rand:48:16", "pipeedge"), {})
    if math.isfinite(p16.get("seconds", math.inf)):
        e16 = results[("rand:48:16", "exact")]
        print(f"ratio pipeedge / exact at 16 all-different devices x 48 layers (measured): "
              f"{p16['seconds'] / e16['seconds']:.1f}x wall, {p16['cpu_seconds'] / e16['cpu_seconds']:.1f}x CPU")
    p = results.get(("rand:128:16:4", "pipeedge"), {})
    e = results.get(("rand:128:16:4", "exact"), {})
    if math.isfinite(p.get("seconds", math.inf)) and e.get("seconds"):
        print(f"ratio pipeedge / exact on 16 devices of 4 types x 128 layers (measured): {p['seconds'] / e['seconds']:.1f}x wall, "
              f"{p['cpu_seconds'] / e['cpu_seconds']:.1f}x CPU")


if __name__ == "__main__":
    main()
