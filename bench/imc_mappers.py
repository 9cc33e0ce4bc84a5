"""The IMC paper's node-to-unit mappers timed on YOLOv8n over 32 units, and the mappings they give, in one run.

    python bench/imc_mappers.py [--model yolov8n] [--cluster imce-32] [--budget 10] [--rounds 3]

Each mapper (LBLP, WB, RR, RD, HEFT, map-opt; Bougioukou & Antonakopoulos, seed 001, and this
project's additions) maps every layer of the model onto the units of ``imce-32`` (21 IMC + 11 DPU).
Rounds alternate the mappers, so drift on a shared machine hits all alike; in each round a fast
mapper is called ``--calls`` times (its time is the mean per call), map-opt once: it searches for its
whole time budget (``--budget`` seconds, printed). Printed per mapper: median seconds over the
rounds, the ratio to the baseline measured in the same run (``--baseline``, default rr, the
cheapest), and its mapping's processing rate (steady-state throughput of the discrete-event
simulator, ``--inputs`` inputs), the unloaded latency of one input, the closed-form throughput and
the processing rate relative to LBLP's. Mappers not registered (yet) are skipped with a note.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hetsplit.estimate.simulate import SimOptions, simulate_plan
from hetsplit.search import make_partitioner, partitioner_names
from hetsplit.workflow import load_problem

MAPPERS = ("lblp", "wb", "rr", "rd", "heft", "map-opt")


def options(name: str, budget_s: float, seed: int) -> dict:
    if name == "map-opt":
        return {"time_budget_s": budget_s, "seed": seed}
    return {"seed": seed} if name == "rd" else {}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="yolov8n")
    ap.add_argument("--cluster", default="imce-32")
    ap.add_argument("--mappers", default=",".join(MAPPERS), help="comma-separated (default: all six)")
    ap.add_argument("--baseline", default="rr", help="mapper whose time the others are divided by (default rr)")
    ap.add_argument("--budget", type=float, default=10.0, help="map-opt's time budget in seconds (default 10)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (medians are printed)")
    ap.add_argument("--calls", type=int, default=5, help="calls of each fast mapper per round (default 5)")
    ap.add_argument("--inputs", type=int, default=200, help="inputs the simulator streams (default 200)")
    ap.add_argument("--seed", type=int, default=0, help="seed of rd and map-opt")
    args = ap.parse_args()
    problem = load_problem(args.model, args.cluster)
    wanted = [m.strip() for m in args.mappers.split(",") if m.strip()]
    known = set(partitioner_names())
    mappers = [m for m in wanted if m in known]
    for m in wanted:
        if m not in known:
            print(f"note: mapper {m!r} is not registered here; skipped")
    if not mappers:
        raise SystemExit("no mapper to time")
    kinds = [problem.cluster.devices[i].kind for i in range(problem.num_devices)]
    print(f"{args.model} ({problem.num_layers} layers) on {args.cluster}: {problem.num_devices} units "
          f"({kinds.count('imc')} IMC, {kinds.count('dpu')} DPU); {args.rounds} alternating rounds, fast mappers "
          f"{args.calls} calls per round, map-opt budget {args.budget:g} s")

    times: dict[str, list[float]] = {m: [] for m in mappers}
    plans: dict[str, list] = {m: [] for m in mappers}
    for r in range(args.rounds):
        order = mappers if r % 2 == 0 else mappers[::-1]    # alternate, so no mapper always goes first
        for m in order:
            calls = 1 if m == "map-opt" else max(1, args.calls)
            mapper = make_partitioner(m, **options(m, args.budget, args.seed))
            t0 = time.perf_counter()
            for _ in range(calls):
                plan = mapper.solve(problem)[0]
            times[m].append((time.perf_counter() - t0) / calls)
            plans[m].append(plan)

    sim = SimOptions(inputs=args.inputs, keep_timeline=False)
    rows = {}
    for m in mappers:
        results = [simulate_plan(problem, p, sim) for p in plans[m]]
        rates = [x.throughput for x in results]
        mid = sorted(range(len(rates)), key=lambda i: rates[i])[len(rates) // 2]   # the median round's mapping
        rows[m] = {"s": statistics.median(times[m]), "rate": rates[mid], "latency": results[mid].unloaded_latency_s,
                   "closed": plans[m][mid].metrics.throughput, "units": len(plans[m][mid].devices),
                   "spread": (min(rates), max(rates))}
    base = args.baseline if args.baseline in rows else min(rows, key=lambda m: rows[m]["s"])
    lblp = rows.get("lblp", {}).get("rate")
    print(f"{'mapper':8} {'median s':>10} {f'x {base}':>9} {'rate /s':>9} {'latency ms':>11} {'closed /s':>10} "
          f"{'rate/LBLP':>10} {'units':>6}")
    for m, row in rows.items():
        rel = f"{row['rate'] / lblp:10.3f}" if lblp else f"{'-':>10}"
        print(f"{m:8} {row['s']:10.4f} {row['s'] / rows[base]['s']:9.1f} {row['rate']:9.2f} "
              f"{row['latency'] * 1e3:11.3f} {row['closed']:10.2f} {rel} {row['units']:6d}")
    print(f"baseline: {base} ({rows[base]['s'] * 1e3:.2f} ms per call, median, measured in this run); rate: simulated "
          f"steady-state throughput of {args.inputs} inputs; latency: one input alone; closed: the closed-form bound")
    for m, row in rows.items():
        lo, hi = row["spread"]
        if hi > lo * (1 + 1e-9):
            print(f"note: {m}'s mapping varied over the rounds: rate {lo:.2f}..{hi:.2f}/s "
                  "(the median round's is shown)")
    if "map-opt" in rows:
        par = plans["map-opt"][0].params
        print(f"note: map-opt searched with a {args.budget:g} s budget and took {rows['map-opt']['s']:.2f} s (median); "
              f"it chose {par.get('chosen', '?')}'s mapping, proven optimal: {par.get('optimal', '?')}, gap to its "
              f"lower bound {par.get('gap', float('nan')):.1%}")


if __name__ == "__main__":
    main()
