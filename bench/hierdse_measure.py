"""The cost of one measured fitness of ``hetsplit reproduce hierdse``: fresh processes against warm ones.

  .venv/bin/python bench/hierdse_measure.py                # 3 SPE + 3 NE random plans of ResNet-101 on 8 PEs
  .venv/bin/python bench/hierdse_measure.py --plans 2 --model resnet18

Each plan is measured twice in the same run, alternately: the baseline (``MeasureOptions(pool=False,
inputs=6, latency_inputs=1)``: a fresh process per rank, six inputs, the measurer before warm processes)
and the default (warm processes of ``runtime.pool``, four streamed inputs). Printed per plan: seconds,
throughput, memory and energy per device of both; then the median seconds per plan of each and their
ratio, which is what a 20-minute search's plan count scales with. Target (issue 23): >= 100 plans in
a 20-minute ``reproduce hierdse`` on 2 cores, that is about 12 s per plan or less (the analytical level
takes some of the budget too). Timings depend on the machine's load: print it beside them.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

from hetsplit.experiments.hierdse import CLUSTER, MODEL, MeasureOptions, RunMeasurer
from hetsplit.search.encodings import make_encoding
from hetsplit.workflow import load_problem

BASELINE = MeasureOptions(pool=False, inputs=6, latency_inputs=1)
TARGET_S = 12.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--cluster", default=CLUSTER)
    ap.add_argument("--plans", type=int, default=3, help="random plans per encoding (spe, ne)")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    problem = load_problem(args.model, args.cluster)
    plans = []
    for k, encoding in enumerate(("spe", "ne")):
        enc = make_encoding(problem, encoding, devices=problem.num_devices)
        x = np.random.default_rng(args.seed + k).integers(0, enc.upper + 1, size=(args.plans, enc.n_var))
        plans += [(encoding, p) for p in enc.plans(x)]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs; {args.model} on {args.cluster}")
    seconds: dict[str, list[float]] = {"baseline": [], "default": []}
    with RunMeasurer(args.model, problem, BASELINE) as fresh, RunMeasurer(args.model, problem) as warm:
        for i, (encoding, plan) in enumerate(plans):
            for name, measure in (("baseline", fresh), ("default", warm)):
                m = measure(plan)
                seconds[name].append(m.seconds)
                f = m.objectives()
                what = m.error or (f"{m.throughput:6.2f}/s {f[1] / 1e6:6.1f} MB {f[2]:.3f} J "
                                   f"spacing {m.details.get('interval_s')}")
                print(f"plan {i} ({encoding}) {name:8s} {m.seconds:5.1f} s  {what}", flush=True)
    base, new = (float(np.median(seconds[k])) for k in ("baseline", "default"))
    print(f"median seconds per plan: baseline {base:.1f}, default {new:.1f}; ratio {base / new:.2f}x; "
          f"target <= {TARGET_S:g} s: {'met' if new <= TARGET_S else 'not met'} "
          f"(load average now {os.getloadavg()[0]:.1f})")


if __name__ == "__main__":
    main()
