"""Time, energy and their breakdown per Transformer block on 1..64 Siracusa chips (tensor-parallel).

Reproduces the effect of Bochem et al. (seed 002): time per block drops sharply once a chip's share
of a block's weights fits on chip (double-buffered in L2), and again once its share of the whole
model does (resident). Each point is the block's tensor-parallel plan costed by the estimator
(Siracusa model per chip, each chip's weights placed by estimate/memory.py, all-reduces over MIPI;
the breakdown follows the critical path of one simulated input); the 64-head TinyLlama runs up to 64
chips, as in the paper's scalability study. ``hetsplit reproduce mcu`` grades the
paper's numbers.
Run: .venv/bin/python bench/mcu_fit_on_chip.py
"""

from __future__ import annotations

from hetsplit.experiments.mcu import WORKLOADS, run_workload

PAPER = {"tinyllama-ar": "26.1x on 8 chips, 0.54 ms and 0.64 mJ per block", "tinyllama-prompt": "9.9x on 8 chips",
         "tinyllama64-ar": "60.1x and 1.3x less energy on 64 chips", "tinyllama64-prompt": "diminishing beyond 16",
         "mobilebert": "4.7x on 4 chips, 38.8 ms per block"}


def main() -> None:
    for w in WORKLOADS:
        print(f"\n{w.label} (paper: {PAPER[w.key]})")
        print(f"{'chips':>5} {'regime':>28} {'ms/block':>9} {'speedup':>8} {'uJ/block':>9}   "
              "critical path: compute / chip-to-chip / L2 / L3 (ms)")
        for p in run_workload(w, w.chips):
            parts = " / ".join(f"{v * 1e3:.3f}" for v in p.cost.breakdown_s.values())
            print(f"{p.chips:5d} {p.cost.regime:>28} {p.cost.latency_s * 1e3:9.3f} {p.speedup:7.1f}x "
                  f"{p.cost.energy_j * 1e6:9.1f}   {parts}")


if __name__ == "__main__":
    main()
