"""Fit the four Siracusa parameters no document gives to the four figures chosen for them, and print both.

The choice (which figure pins which parameter, and why) is written in
``hetsplit.experiments.mcu_paper``; the method in ``hetsplit.experiments.mcu_fit``. Prints the
figures used, the fitted values (to copy into ``cluster/presets/siracusa.yaml``, whose sources name
this script), ours against each fit figure, and whether the preset holds the values found.
Run: .venv/bin/python bench/mcu_fit.py
"""

from __future__ import annotations

import time

from hetsplit.experiments.mcu_fit import GRIDS, fit, preset_params
from hetsplit.experiments.mcu_paper import FIGURE, FIGURES, FIT_FIGURES, FITTED_PARAMS


def main() -> None:
    print(f"fit to {len(FIT_FIGURES)} of the paper's {len(FIGURES)} figures:")
    for name, key in FITTED_PARAMS.items():
        f = FIGURE[key]
        print(f"  {name:22s} <- {f.claim} ({f.where})")
    print("held out: " + "; ".join(f.claim for f in FIGURES if f.key not in FIT_FIGURES))
    t0 = time.perf_counter()
    res = fit()
    print(f"\ncoordinate descent: {res.sweeps} sweeps, {res.evaluations} evaluations, "
          f"{time.perf_counter() - t0:.0f} s (grids: " + ", ".join(f"{k} {len(g)} values" for k, g in GRIDS.items())
          + ")")
    preset = preset_params()
    print(f"\n{'parameter':22s} {'fitted':>10s} {'preset':>10s}")
    for name, value in res.params.items():
        print(f"{name:22s} {value:10.4g} {preset[name]:10.4g}" + ("" if value == preset[name] else "   <- differs"))
    print(f"\n{'figure':28s} {'paper':>8s} {'ours':>8s} {'ours/paper':>10s}")
    for f, ours in res.figures:
        print(f"{f.key:28s} {f.paper:8.4g} {ours:8.4g} {ours / f.paper:10.3f}")
    print(f"worst ratio over the fit figures: {res.worst_ratio:.3f}")


if __name__ == "__main__":
    main()
