"""The hierarchical DSE paper's claims can fail: on hand-made curves where every check holds, a rival search that
finds better mappings turns each verdict; a check made constant is caught."""

from __future__ import annotations

import numpy as np
import pytest

from claims_mutation import assert_every_check_turns, constant
from hetsplit.experiments.hierdse import EXPERIMENTS, MIN_MEASURED, HierDseOptions, HierDseResults, check_claims
from hetsplit.search.hierarchical import HierarchicalResult, Measurement, MeasuredPoint


def result(name: str, points: list[tuple[float, float, float, float]]) -> HierarchicalResult:
    """(t, throughput, memory, energy) points on 8 PEs, after enough poor ones at t = 1 s to back a verdict."""
    points = [(1.0, 1.0, 1e3, 10.0)] * (MIN_MEASURED - len(points)) + points
    pts = [MeasuredPoint(t, 1, 8, np.array([1 / thr, mem, e]), None, Measurement(thr, mem, e))
           for t, thr, mem, e in points]
    return HierarchicalResult(EXPERIMENTS[name], [], [], np.zeros((0, 3)), pts, [], max(p[0] for p in points))


def base_results() -> HierDseResults:
    runs = {"3s-2l-SPE": result("3s-2l-SPE", [(10, 20, 100, 1.0), (50, 40, 80, 0.5), (200, 50, 70, 0.4)]),
            "1s-non-SPE": result("1s-non-SPE", [(10, 10, 150, 2.0), (150, 30, 90, 0.6), (200, 35, 90, 0.6)]),
            "1s-non-NE": result("1s-non-NE", [(10, 12, 140, 1.5), (200, 15, 100, 0.7)])}
    return HierDseResults(HierDseOptions(), runs, 600.0, 140)


def found(name: str, thr: float, mem: float, energy: float):
    """``name``'s search also finds (thr, mem, energy) at 100 s, in place of one of its poor plans."""
    def mutate(r: HierDseResults) -> None:
        pts = r.runs[name].points
        pts[0] = MeasuredPoint(100.0, 1, 8, np.array([1 / thr, mem, energy]), None, Measurement(thr, mem, energy))
        pts.sort(key=lambda p: p.t_s)
    return mutate


MUTATIONS = {
    "spe-beats-ne": [found("1s-non-NE", 100, 50, 0.1)],
    "hierarchy-better": [found("1s-non-SPE", 100, 50, 0.1)],
    "hierarchy-sooner": [found("1s-non-SPE", 100, 50, 0.1)],
}


def test_every_hierdse_check_turns_when_a_rival_finds_better_mappings():
    assert_every_check_turns(check_claims, base_results(), MUTATIONS)


@pytest.mark.parametrize("key", list(MUTATIONS))
def test_a_hierdse_check_made_constant_is_caught(key):
    with pytest.raises(AssertionError, match=key):
        assert_every_check_turns(constant(check_claims, key), base_results(), MUTATIONS)
