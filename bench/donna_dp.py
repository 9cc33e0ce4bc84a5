"""DONNA's DP on long chains: seconds for one alpha and for the default six, on a synthetic problem.

    .venv/bin/python bench/donna_dp.py [--layers 2000] [--devices 4] [--repeats 3]

The problem is ``tests/_instances.big_problem`` (all-different devices, loose memories); the first
call (numba compiling, or loading its cache) is reported apart. Wall and CPU seconds are both printed:
on a shared machine the wall time inflates with load.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def timed(fn) -> tuple[float, float]:
    w, c = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=2000)
    ap.add_argument("--devices", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    from _instances import big_problem

    from hetsplit.search.donna import DEFAULT_ALPHAS, Donna, donna_dp

    p = big_problem(1, args.layers, args.devices)
    first = timed(lambda: donna_dp(p, 1.0))
    print(f"{args.layers} layers, {args.devices} devices; first call (compile or cache load): "
          f"{first[0]:.2f} s wall, {first[1]:.2f} s CPU")
    for label, fn in (("one alpha (1.0)", lambda: donna_dp(p, 1.0)),
                      (f"{len(DEFAULT_ALPHAS)} alphas (Donna().solve)", lambda: Donna().solve(p))):
        runs = [timed(fn) for _ in range(args.repeats)]
        best = min(runs)
        print(f"{label}: best of {args.repeats}: {best[0]:.3f} s wall, {best[1]:.3f} s CPU")


if __name__ == "__main__":
    main()
