"""Bochem et al.'s claims (seed 002) against ``experiments.mcu``'s points, each labelled.

The nine numbers (``mcu_paper.FIGURES``): the four the Siracusa parameters were fitted to are
``fitted``; the EDP gain, computed from two fitted figures, ``derived``; the other four ``held-out``,
holding within ``BAND``. The paper's trends are ``direction`` claims, all held out: among them Fig. 4's
runtime breakdown, which part dominates a block at each chip count, and Sec. III-B's argument that a
pipeline cannot lower one request's latency. When one comes out reversed, its ``reason`` names the
model's assumption that reverses it.
"""

from __future__ import annotations

from typing import Callable

from hetsplit.experiments.claims import (Band, Claim, ClaimSet, derived_number, direction, fitted, grade,
                                         held_out_number, inconclusive)
from hetsplit.experiments.mcu import McuResults, PipelineRow, Point
from hetsplit.experiments.mcu_paper import (DERIVED_FROM, FIGURES, FITTED_PARAMS, METRICS, Figure, figure_value,
                                            fitted_from)

BAND = Band(0.25)
PAPER = "Bochem et al., Transformers on Siracusa MCUs (seed 002)"

# Why a held-out number may leave the band (stated only when it does)
LIMITS = {
    "speedup": "the 1-chip time is our L3 model (weights and activations streamed once per block at "
               "l3_bandwidth x l3_stream_efficiency), the paper's is GVSoC's tiled schedule",
    "edp_gain": "as the speed-up, and the 1-chip energy counts each weight's L3 read once",
    "tinyllama64": "at 32 and 64 chips a chip keeps all its weights in L2 and its slice is 8 to 16 columns: our "
                   "time is then its GEMV compute, a fixed kernel_overhead_cycles per kernel (an assumption, 1000 "
                   "cycles) and MIPI transfers with no per-message set-up; the paper's 60.1x says fixed costs per "
                   "kernel and per transfer weigh far more there than ours do",
    "tinyllama64-energy": "at 64 chips ours pays no L3 energy (all weights resident) and little energy for fixed "
                          "costs (kernel_overhead_cycles, an assumption, at P on every chip), while the 1-chip "
                          "energy is the same streamed block; the paper's smaller 1.3x leaves more energy per chip "
                          "for its fixed costs",
}
SAME_L3 = ("our 1-chip (streamed) regime reads every weight and activation from L3 exactly once, as the chips' "
           "prefetch does, so N_L3 E_L3 is the same on 1 and N chips, and the MACs too; what differs is the fixed "
           "kernel_overhead_cycles every chip pays at P and the chip-to-chip energy, both growing with N. The paper's "
           "single chip also keeps intermediate tensors in L3 (Sec. V-B), which ours does not model")


def _limit(fig: Figure) -> str:
    if fig.workload.startswith("tinyllama64"):
        return LIMITS["tinyllama64-energy" if fig.metric == "energy_gain" else "tinyllama64"]
    return LIMITS.get(fig.metric, "")


def figure_claim(fig: Figure, results: McuResults) -> Claim:
    """One of the paper's numbers against ours: fitted, held out, or inconclusive when not run."""
    p, base = results.point(fig.workload, fig.chips), results.point(fig.workload, 1)
    kw = dict(where=fig.where, paper=fig.paper, unit=fig.unit)
    if p is None or base is None:
        return inconclusive(fig.key, fig.claim, 0, f"{fig.workload} on 1 and {fig.chips} chips not run", needed=2,
                            **kw)
    ours = figure_value(fig, p)
    how = METRICS[fig.metric][1]
    ev = (f"{how}; {fig.chips} chips: {p.cost.latency_s * 1e3:.4g} ms, {p.cost.energy_j * 1e3:.4g} mJ, "
          f"{p.cost.regime}; 1 chip: {base.cost.latency_s * 1e3:.4g} ms, {base.cost.energy_j * 1e3:.4g} mJ, "
          f"{base.cost.regime}")
    params = fitted_from(fig.key)
    if params:
        return fitted(fig.key, fig.claim, params, ev + f"; ours / paper {ours / fig.paper:.2f}", ours=ours, **kw)
    if fig.key in DERIVED_FROM:
        return derived_number(fig.key, fig.claim, fig.paper, ours, BAND, ev, DERIVED_FROM[fig.key], _limit(fig),
                              where=fig.where, unit=fig.unit)
    return held_out_number(fig.key, fig.claim, fig.paper, ours, BAND, ev, _limit(fig), where=fig.where, unit=fig.unit)


def _need(results: McuResults, workload: str, chips: tuple[int, ...]) -> list[Point] | None:
    pts = [results.point(workload, n) for n in chips]
    return None if any(p is None for p in pts) else pts  # type: ignore[return-value]


def _energies(pts: list[Point]) -> str:
    return ", ".join(f"{p.chips} chip{'s' if p.chips > 1 else ''} {p.cost.energy_j * 1e3:.4g} mJ" for p in pts)


def _speedups(pts: list[Point]) -> str:
    return ", ".join(f"{p.chips}: {p.speedup:.3g}x" for p in pts)


Check = Callable[[McuResults], Claim]


def _trend(key: str, text: str, workload: str, chips: tuple[int, ...],
           judge: Callable[[list[Point]], tuple[bool, str]], reason: str, where: str) -> Check:
    """A direction claim on ``workload``'s points at ``chips``: ``judge`` says whether it holds, and the evidence."""
    def check(results: McuResults) -> Claim:
        pts = _need(results, workload, chips)
        if pts is None:
            return inconclusive(key, text, 0, f"{workload} on {chips} chips not run", needed=len(chips), where=where)
        ok, evidence = judge(pts)
        return direction(key, text, ok, evidence, reason, where=where)
    return check


TRENDS: tuple[Check, ...] = (
    _trend("tinyllama-ar-energy-falls-8", "TinyLlama autoregressive: 8 chips use less energy per block than 1",
           "tinyllama-ar", (1, 8), lambda p: (p[1].cost.energy_j < p[0].cost.energy_j, _energies(p)), SAME_L3,
           "Sec. V-B, Fig. 5a"),
    _trend("tinyllama-prompt-energy-falls-8", "TinyLlama prompt: 8 chips use less energy per block than 1",
           "tinyllama-prompt", (1, 8), lambda p: (p[1].cost.energy_j < p[0].cost.energy_j, _energies(p)), SAME_L3,
           "Sec. V-B, Fig. 5b"),
    _trend("mobilebert-energy-rises-4", "MobileBERT: 4 chips use slightly more energy per block than 1",
           "mobilebert", (1, 4), lambda p: (p[0].cost.energy_j < p[1].cost.energy_j <= p[0].cost.energy_j
                                            * (1 + BAND.rel), _energies(p)),
           "our one chip streams MobileBERT's S = 268 activations through L3 (charged at 100 pJ/B), which 4 chips "
           "keep in L2; and gemm_efficiency is one constant, so a chip's smaller GEMM slices run as efficiently as "
           "whole ones: the lower core utilization the paper names for the rise is not in the model",
           "Sec. V-B, Fig. 5c"),
    _trend("tinyllama-ar-superlinear-8", "TinyLlama autoregressive: super-linear on 8 chips (a block's weights fit on "
           "chip), not on 2 and 4", "tinyllama-ar", (2, 4, 8),
           lambda p: (p[0].speedup <= 2 and p[1].speedup <= 4 and p[2].speedup > 8, _speedups(p)),
           "the L3 regimes: a chip's share of a block must fit twice in L2 to be prefetched", "Sec. V-B, Fig. 4a"),
    _trend("tinyllama64-ar-superlinear-8-16", "TinyLlama with 64 heads, autoregressive: super-linear on 8 and 16 "
           "chips", "tinyllama64-ar", (8, 16), lambda p: (p[0].speedup > 8 and p[1].speedup > 16, _speedups(p)),
           "the L3 regimes", "Sec. V-C"),
    _trend("tinyllama64-ar-quasi-linear-64", "TinyLlama with 64 heads, autoregressive: quasi-linear (not super-linear) "
           "on 64 chips", "tinyllama64-ar", (64,), lambda p: (p[0].speedup <= 64, _speedups(p)),
           LIMITS["tinyllama64"], "Sec. V-C, Fig. 6"),
    _trend("tinyllama64-ar-energy-32", "TinyLlama with 64 heads, autoregressive: less energy on 32 chips than on 16 "
           "(all weights on chip, no double buffering)", "tinyllama64-ar", (16, 32),
           lambda p: (p[1].cost.energy_j < p[0].cost.energy_j, _energies(p)),
           "the resident regime: a chip's share of the whole model must fit in L2", "Sec. V-C, Fig. 5a"),
    _trend("tinyllama64-prompt-diminishing", "TinyLlama with 64 heads, prompt: returns diminish beyond 16 chips",
           "tinyllama64-prompt", (16, 64), lambda p: (p[1].speedup / 64 < p[0].speedup / 16, _speedups(p)),
           "chip-to-chip transfers and per-kernel overheads", "Sec. V-C, Fig. 6"),
)


PARTS = {"compute": "compute", "c2c": "chip-to-chip", "l2": "L2", "l3": "L3"}
# Fig. 4a/b (Sec. V-B): which part of a block's runtime is the largest, per mode and chip count, as the text reads
# the bars: autoregressive, "for 1, 2, and 4 chips, many off-chip transfers are required ... the major contributor";
# on 8 chips a block's weights are on chip ("we don't need off-chip transfer to process the current layer when 8 or
# more chips are used") and "accessing memory is the main contributor": L2; prompt, "computation is the largest".
DOMINANT = (("tinyllama-ar", 1, ("l3",)), ("tinyllama-ar", 2, ("l3",)), ("tinyllama-ar", 4, ("l3",)),
            ("tinyllama-ar", 8, ("l2",)), ("tinyllama-prompt", 1, ("compute",)),
            ("tinyllama-prompt", 2, ("compute",)), ("tinyllama-prompt", 4, ("compute",)),
            ("tinyllama-prompt", 8, ("compute",)))
WHY_REVERSED = {
    "l3": "the streamed regime's L3 rate (l3_bandwidth x l3_stream_efficiency, fitted to the 26.1x) against the GEMV "
          "rate sets how much of the 1-chip block is L3",
    "l2": "our chip prefetches the next block's weights on its one L3 channel during the block (double buffering) and "
          "that load (l3_bandwidth, fitted to the 0.54 ms) is longer than the block's own work, so the critical path "
          "ends on the L3 prefetch; GVSoC's bars count the block's own on-chip accesses, ours keep L2 access inside "
          "each kernel's compute time",
    "compute": "the GEMM rate (gemm_efficiency, fitted to MobileBERT) against the L3 stream rate",
}


def breakdown_claim(results: McuResults, workload: str, chips: int, expected: tuple[str, ...]) -> Claim:
    """Fig. 4: the largest part of one block's runtime on ``chips`` chips is one of ``expected``."""
    mode = "autoregressive" if workload.endswith("-ar") else "prompt"
    names = " or ".join(PARTS[e] for e in expected)
    key = f"fig4-{workload}-{chips}-dominant"
    text = f"TinyLlama {mode}, {chips} chip{'s' if chips > 1 else ''}: {names} is the largest part of a block's runtime"
    where = f"Sec. V-B, Fig. 4{'a' if mode == 'autoregressive' else 'b'}"
    p = results.point(workload, chips)
    if p is None:
        return inconclusive(key, text, 0, f"{workload} on {chips} chips not run", needed=1, where=where)
    b = p.cost.breakdown_s
    largest = max(PARTS, key=lambda k: b.get(k, 0.0))
    ev = ", ".join(f"{PARTS[k]} {b.get(k, 0.0) * 1e3:.3g} ms" for k in PARTS) + f" (largest: {PARTS[largest]})"
    return direction(key, text, largest in expected, ev, WHY_REVERSED[expected[0]], where=where)


def mobilebert_l3_claim(results: McuResults) -> Claim:
    """Fig. 4c: on 4 chips MobileBERT's off-chip L3 transfers are suppressed (its super-linear speed-up)."""
    key, text, where = "fig4-mobilebert-4-no-l3", "MobileBERT, 4 chips: no off-chip (L3) time in a block", \
        "Sec. V-B, Fig. 4c"
    p = results.point("mobilebert", 4)
    if p is None:
        return inconclusive(key, text, 0, "mobilebert on 4 chips not run", needed=1, where=where)
    b = p.cost.breakdown_s
    share = b.get("l3", 0.0) / p.cost.latency_s
    return direction(key, text, share < 0.01, f"L3 {share:.1%} of {p.cost.latency_s * 1e3:.3g} ms ({p.cost.regime})",
                     "the resident regime: 4 chips' shares of MobileBERT's 24 blocks must fit in L2", where=where)


def pipeline_claim(results: McuResults) -> Claim:
    """Sec. III-B: a pipeline "is unable to optimize the latency of an individual request"; tensor parallelism can.
    Per chip count N > 1: the exact pipeline's latency per token is not below one chip's by more than the band, and
    tensor-parallel's is below the pipeline's."""
    key = "pipeline-single-user"
    text = ("For one user, a pipeline over N chips does not lower the latency per token below one chip's (within the "
            "band), while tensor parallelism does")
    by_n: dict[int, list[PipelineRow]] = {}
    for r in results.pipeline:
        by_n.setdefault(r.chips, []).append(r)
    multi = {n: rows for n, rows in by_n.items() if n > 1}
    if not multi or 1 not in by_n:
        return inconclusive(key, text, len(by_n), "the whole-model comparison was not run on 1 and more chips",
                            needed=2, where="Sec. III-B")
    one = next(r for r in by_n[1] if r.kind == "tensor-parallel").latency_s
    passed, total, notes = 0, 0, []
    for n, rows in sorted(multi.items()):
        tp = next(r for r in rows if r.kind == "tensor-parallel")
        pipe = next(r for r in rows if r.kind == "pipeline (exact)")
        checks = [pipe.latency_s >= one * (1 - BAND.rel), tp.latency_s < pipe.latency_s]
        passed, total = passed + sum(checks), total + 2
        notes.append(f"{n} chips: pipeline ({pipe.layout}) {pipe.latency_s * 1e3:.2f} ms/token = "
                     f"{pipe.latency_s / one:.2f}x one chip's {one * 1e3:.2f} ms; tensor-parallel "
                     f"{tp.latency_s * 1e3:.2f} ms/token")
    return direction(key, text, grade(passed, total), "; ".join(notes),
                     "a pipeline's stage keeps its few blocks in L2 where one chip streams the whole model from L3, so "
                     "our pipeline saves the L3 time one request would spend; the paper's argument counts compute only",
                     where="Sec. III-B")


def check_claims(results: McuResults) -> ClaimSet:
    """Every number and trend of the paper, labelled (module docstring)."""
    claims = [figure_claim(f, results) for f in FIGURES]
    claims += [t(results) for t in TRENDS]
    claims += [breakdown_claim(results, w, n, e) for w, n, e in DOMINANT]
    claims += [mobilebert_l3_claim(results), pipeline_claim(results)]
    fit = ", ".join(f"{p} <- {k}" for p, k in FITTED_PARAMS.items())
    return ClaimSet(PAPER, tuple(claims), BAND, (
        f"Fitted: four Siracusa parameters no document gives, each to one of the paper's figures ({fit}), chosen "
        "before the other figures were compared (experiments/mcu_paper.py; rerun: bench/mcu_fit.py). Every other "
        "parameter is documented or a stated assumption (cluster/presets/siracusa.yaml).",))
