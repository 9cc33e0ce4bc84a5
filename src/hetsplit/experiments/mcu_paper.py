"""Bochem et al.'s figures (seed 002), and which of them the Siracusa parameters may be fitted to.

``FIGURES`` are the nine numbers of the abstract and Sec. V. No document gives four of the chip's
parameters (``FITTED_PARAMS``); they are fitted (``experiments/mcu_fit.py``) to four figures only,
``FIT_FIGURES``, chosen before the other five were looked at with the new model, one figure per
parameter, the figure that parameter dominates in the model:

- ``gemm_efficiency`` (share of PULP-NN's 15.5 MAC/cycle Deeploy's GEMMs reach) <- MobileBERT's 38.8
  ms per block on 4 chips: S = 268 makes every matrix product a GEMM, the chips keep their weights in
  L2, so compute sets the time;
- ``l3_bandwidth`` (off-chip burst bandwidth) <- TinyLlama's 0.54 ms per block on 8 chips: each chip
  prefetches its eighth of the next block's weights during the block (double buffering), and that load
  is the longest job;
- ``gemv_macs_per_cycle`` (matrix-vector rate) <- TinyLlama's 0.64 mJ per block on 8 chips: with the L3
  energy fixed by the weights' bytes, what is left is P x T_comp, the chips' GEMV time;
- ``l3_stream_efficiency`` (share of L3 bandwidth reached when weights stream through L2 in tiles) <-
  TinyLlama's 26.1x from 1 to 8 chips: it sets the one-chip time, which streams the block from L3.

TinyLlama's EDP gain on 8 chips follows from two of these (``DERIVED_FROM``): it is ``derived``. The
other four numbers and every qualitative claim are held out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Figure:
    """A number the paper states: for ``workload`` on ``chips`` chips, ``metric`` is ``paper``."""

    key: str
    claim: str
    where: str
    paper: float
    unit: str
    workload: str
    chips: int
    metric: str


def _latency_ms(p) -> float:
    return p.cost.latency_s * 1e3


def _energy_mj(p) -> float:
    return p.cost.energy_j * 1e3


METRICS: dict[str, tuple[Callable[..., float], str]] = {
    "speedup": (lambda p: p.speedup, "latency on 1 chip / on N"),
    "latency": (_latency_ms, "critical path of one block"),
    "energy": (_energy_mj, "N_c2c E_c2c + sum over chips (P T_comp + N_L3 E_L3 + N_L2 E_L2)"),
    "edp_gain": (lambda p: p.edp_gain, "energy x latency on 1 chip / on N"),
    "energy_gain": (lambda p: p.energy_gain, "energy on 1 chip / on N"),
}

FIGURES = (
    Figure("tinyllama-ar-speedup-8", "TinyLlama autoregressive: 26.1x faster on 8 chips than on 1",
           "abstract, Sec. V-B, Fig. 4a", 26.1, "x", "tinyllama-ar", 8, "speedup"),
    Figure("tinyllama-ar-latency-8", "TinyLlama autoregressive: 0.54 ms per block on 8 chips", "abstract", 0.54,
           "ms", "tinyllama-ar", 8, "latency"),
    Figure("tinyllama-ar-energy-8", "TinyLlama autoregressive: 0.64 mJ per block on 8 chips", "abstract", 0.64,
           "mJ", "tinyllama-ar", 8, "energy"),
    Figure("tinyllama-ar-edp-8", "TinyLlama autoregressive: EDP 27.2x better on 8 chips than on 1", "abstract",
           27.2, "x", "tinyllama-ar", 8, "edp_gain"),
    Figure("tinyllama-prompt-speedup-8", "TinyLlama prompt: 9.9x faster on 8 chips than on 1", "Sec. V-B, Fig. 4b",
           9.9, "x", "tinyllama-prompt", 8, "speedup"),
    Figure("tinyllama64-ar-speedup-64", "TinyLlama with 64 heads, autoregressive: 60.1x faster on 64 chips than on 1",
           "Sec. V-C, Fig. 6", 60.1, "x", "tinyllama64-ar", 64, "speedup"),
    Figure("tinyllama64-ar-energy-64", "TinyLlama with 64 heads, autoregressive: 1.3x less energy on 64 chips than "
           "on 1", "Sec. V-C, Fig. 5a", 1.3, "x", "tinyllama64-ar", 64, "energy_gain"),
    Figure("mobilebert-speedup-4", "MobileBERT: 4.7x faster on 4 chips than on 1", "abstract, Sec. V-B, Fig. 4c", 4.7,
           "x", "mobilebert", 4, "speedup"),
    Figure("mobilebert-latency-4", "MobileBERT: 38.8 ms per block on 4 chips", "abstract", 38.8, "ms", "mobilebert",
           4, "latency"),
)
FIGURE = {f.key: f for f in FIGURES}

# parameter -> the one figure it is fitted to (see the module docstring for why that one)
FITTED_PARAMS: dict[str, str] = {
    "gemm_efficiency": "mobilebert-latency-4",
    "l3_bandwidth": "tinyllama-ar-latency-8",
    "gemv_macs_per_cycle": "tinyllama-ar-energy-8",
    "l3_stream_efficiency": "tinyllama-ar-speedup-8",
}
FIT_FIGURES: tuple[str, ...] = tuple(FITTED_PARAMS.values())

# figure -> the fitted figures ours is computed from: EDP gain = speed-up x E(1 chip) / E(8 chips), of which the
# speed-up and the 8-chip energy are fitted (only the 1-chip energy is not), so it is ``derived``, not held out
DERIVED_FROM: dict[str, tuple[str, ...]] = {"tinyllama-ar-edp-8": ("tinyllama-ar-speedup-8", "tinyllama-ar-energy-8")}


def fitted_from(key: str) -> tuple[str, ...]:
    """The parameters fitted to figure ``key`` (empty: it is held out)."""
    return tuple(p for p, k in FITTED_PARAMS.items() if k == key)


def figure_value(fig: Figure, point) -> float:
    """Ours for ``fig`` from ``point`` (an ``experiments.mcu.Point``: its workload at ``fig.chips`` chips,
    gains over that workload's 1-chip point)."""
    return METRICS[fig.metric][0](point)
