"""Time and energy per TinyLlama-42M / MobileBERT block on 1..64 Siracusa chips (tensor-parallel).

Reproduces the effect of Bochem et al. (seed 002): time per block drops sharply once a block's share
of weights per chip fits on chip (double-buffered in L2). Chip-to-chip transfers are not included.
Run: .venv/bin/python bench/mcu_fit_on_chip.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from devmodel_graphs import llama_blocks  # noqa: E402

from hetsplit.cluster.presets import load_preset  # noqa: E402
from hetsplit.costs.models.mcu import McuModel, McuParams  # noqa: E402

PAPER = {"tinyllama decode": "26.1x on 8 chips, 60.1x on 64 (64-head variant)",
         "tinyllama prompt": "9.9x on 8 chips", "mobilebert": "4.7x on 4 chips"}


def main() -> None:
    base = dict(load_preset("siracusa").params)
    cases = {"tinyllama decode": (llama_blocks(8, seq=1), (1, 2, 4, 8, 16, 32, 64)),
             "tinyllama prompt": (llama_blocks(8, seq=16), (1, 2, 4, 8, 16, 32, 64)),
             "mobilebert": (llama_blocks(24, e=512, f=512, heads=4, seq=268), (1, 2, 4))}
    for name, (graph, sizes) in cases.items():
        print(f"\n{name} (paper: {PAPER[name]})")
        print(f"{'chips':>5} {'regime':>10} {'ms/block':>9} {'speedup':>8} {'uJ/block (all chips)':>21}")
        t1 = None
        for n in sizes:
            c = McuModel(McuParams.from_params({**base, "weight_fraction": 1 / n}, "siracusa")).block_costs(
                graph, range(15))
            t1 = t1 or c.time_s
            print(f"{n:5d} {c.regime:>10} {c.time_s * 1e3:9.3f} {t1 / c.time_s:7.1f}x {c.energy_j * n * 1e6:21.1f}")


if __name__ == "__main__":
    main()
