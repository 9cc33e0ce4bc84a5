"""The MCU paper's claims can fail: on hand-made points where every check holds, moving each check's input past
its band turns its verdict; a check made constant is caught; the EDP is derived, not held out."""

from __future__ import annotations

import pytest

from claims_mutation import assert_every_check_turns, constant
from hetsplit.experiments.mcu import Costed, McuConfig, McuResults, PipelineRow, Point
from hetsplit.experiments.mcu_claims import check_claims
from hetsplit.plan.types import Metrics


def costed(latency_ms: float, energy_mj: float, **parts: float) -> Costed:
    lat, e = latency_ms * 1e-3, energy_mj * 1e-3
    m = Metrics(1 / lat, lat, "", lat, e, {}, {}, {}, True, e * lat)
    rest = latency_ms - sum(parts.values())
    breakdown = {"compute": 0.0, "c2c": 0.0, "l2": 0.0, "l3": 0.0, **{k: v * 1e-3 for k, v in parts.items()}}
    if "compute" not in parts:
        breakdown["compute"] = rest * 1e-3
    return Costed(m, breakdown, (), 0, 0.0, 0.0)


def point(workload: str, chips: int, speedup: float, energy_mj: float, energy_gain: float = 1.0,
          edp_gain: float = 1.0, **parts: float) -> Point:
    latency = 10.0 / speedup
    return Point(workload, chips, costed(latency, energy_mj, **parts), speedup, energy_gain, edp_gain)


def base_results() -> McuResults:
    """Every number at the paper's figure, every trend the paper's way."""
    pts = [point("tinyllama-ar", 1, 1.0, 0.8, l3=8.0), point("tinyllama-ar", 2, 1.9, 0.8, l3=4.0),
           point("tinyllama-ar", 4, 3.8, 0.8, l3=2.0),
           point("tinyllama-ar", 8, 26.1, 0.64, 1.25, 27.2, l2=0.3, compute=0.08),
           point("tinyllama-prompt", 1, 1.0, 3.0, compute=6.0, l3=3.0),
           point("tinyllama-prompt", 2, 1.9, 3.0, compute=3.0, l3=1.5),
           point("tinyllama-prompt", 4, 3.8, 3.0, compute=1.5, l3=0.8),
           point("tinyllama-prompt", 8, 9.9, 2.5, compute=0.8, l2=0.1),
           point("tinyllama64-ar", 1, 1.0, 0.8), point("tinyllama64-ar", 8, 20.0, 0.7),
           point("tinyllama64-ar", 16, 40.0, 0.66), point("tinyllama64-ar", 32, 50.0, 0.3),
           point("tinyllama64-ar", 64, 60.1, 0.6, energy_gain=1.3),
           point("tinyllama64-prompt", 1, 1.0, 3.0), point("tinyllama64-prompt", 16, 16.0, 2.5),
           point("tinyllama64-prompt", 64, 25.0, 2.5),
           point("mobilebert", 1, 1.0, 15.0, l3=5.0), point("mobilebert", 4, 4.7, 16.0, compute=2.0)]
    pipe = [PipelineRow(1, "tensor-parallel", "1 chip", costed(100.0, 5.0), 1),
            PipelineRow(1, "pipeline (exact)", "1 stage", costed(100.0, 5.0), 1),
            PipelineRow(8, "tensor-parallel", "8 chips", costed(12.0, 5.0), 8),
            PipelineRow(8, "pipeline (exact)", "8 stages", costed(100.0, 5.0), 8)]
    return McuResults(McuConfig(quick=True), pts, pipe)


def at(r: McuResults, workload: str, chips: int) -> Point:
    return r.point(workload, chips)  # type: ignore[return-value]


def scale(workload: str, chips: int, field: str, factor: float):
    def mutate(r: McuResults) -> None:
        p = at(r, workload, chips)
        setattr(p, field, getattr(p, field) * factor)
    return mutate


def energy(workload: str, chips: int, mj: float):
    def mutate(r: McuResults) -> None:
        at(r, workload, chips).cost.metrics.energy_j = mj * 1e-3
    return mutate


def parts(workload: str, chips: int, **ms: float):
    def mutate(r: McuResults) -> None:
        at(r, workload, chips).cost.breakdown_s.update({k: v * 1e-3 for k, v in ms.items()})
    return mutate


def row_latency(chips: int, kind: str, ms: float):
    def mutate(r: McuResults) -> None:
        next(x for x in r.pipeline if (x.chips, x.kind) == (chips, kind)).cost.metrics.latency_s = ms * 1e-3
    return mutate


MUTATIONS = {
    "tinyllama-ar-edp-8": [scale("tinyllama-ar", 8, "edp_gain", 1.5), scale("tinyllama-ar", 8, "edp_gain", 0.5)],
    "tinyllama-prompt-speedup-8": [scale("tinyllama-prompt", 8, "speedup", 1.3),
                                   scale("tinyllama-prompt", 8, "speedup", 0.7)],
    "tinyllama64-ar-speedup-64": [scale("tinyllama64-ar", 64, "speedup", 2.0)],
    "tinyllama64-ar-energy-64": [scale("tinyllama64-ar", 64, "energy_gain", 0.7)],
    "mobilebert-speedup-4": [scale("mobilebert", 4, "speedup", 0.5)],
    "tinyllama-ar-energy-falls-8": [energy("tinyllama-ar", 8, 0.9)],
    "tinyllama-prompt-energy-falls-8": [energy("tinyllama-prompt", 8, 3.1)],
    "mobilebert-energy-rises-4": [energy("mobilebert", 4, 14.0), energy("mobilebert", 4, 19.0)],
    "tinyllama-ar-superlinear-8": [scale("tinyllama-ar", 8, "speedup", 0.25), scale("tinyllama-ar", 4, "speedup", 1.5)],
    "tinyllama64-ar-superlinear-8-16": [scale("tinyllama64-ar", 16, "speedup", 0.3)],
    "tinyllama64-ar-quasi-linear-64": [scale("tinyllama64-ar", 64, "speedup", 2.0)],
    "tinyllama64-ar-energy-32": [energy("tinyllama64-ar", 32, 0.7)],
    "tinyllama64-prompt-diminishing": [scale("tinyllama64-prompt", 64, "speedup", 4.0)],
    "fig4-tinyllama-ar-1-dominant": [parts("tinyllama-ar", 1, compute=9.0)],
    "fig4-tinyllama-ar-2-dominant": [parts("tinyllama-ar", 2, c2c=5.0)],
    "fig4-tinyllama-ar-4-dominant": [parts("tinyllama-ar", 4, l2=3.0)],
    "fig4-tinyllama-ar-8-dominant": [parts("tinyllama-ar", 8, l3=0.4)],
    "fig4-tinyllama-prompt-1-dominant": [parts("tinyllama-prompt", 1, l3=7.0)],
    "fig4-tinyllama-prompt-2-dominant": [parts("tinyllama-prompt", 2, c2c=4.0)],
    "fig4-tinyllama-prompt-4-dominant": [parts("tinyllama-prompt", 4, l2=2.0)],
    "fig4-tinyllama-prompt-8-dominant": [parts("tinyllama-prompt", 8, l3=1.0)],
    "fig4-mobilebert-4-no-l3": [parts("mobilebert", 4, l3=0.2)],
    "pipeline-single-user": [row_latency(8, "pipeline (exact)", 30.0), row_latency(8, "tensor-parallel", 150.0)],
}


def test_every_mcu_check_turns_when_its_input_leaves_the_band():
    assert_every_check_turns(check_claims, base_results(), MUTATIONS)


@pytest.mark.parametrize("key", ["pipeline-single-user", "fig4-tinyllama-ar-8-dominant", "tinyllama-ar-edp-8"])
def test_an_mcu_check_made_constant_is_caught(key):
    with pytest.raises(AssertionError, match=key):
        assert_every_check_turns(constant(check_claims, key), base_results(), MUTATIONS)


def test_the_edp_is_derived_from_the_fitted_speedup_and_energy_and_counted_apart():
    cs = check_claims(base_results())
    edp = cs.get("tinyllama-ar-edp-8")
    assert edp.label == "derived" and edp.derived_from == ("tinyllama-ar-speedup-8", "tinyllama-ar-energy-8")
    assert cs.summary().startswith("held-out results: 4 of 4 hold; derived: 1 of 1 hold; sanity: 0 of 0 hold; "
                                   "fitted: 4; direction: ")
