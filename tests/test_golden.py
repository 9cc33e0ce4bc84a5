"""Golden figures: every algorithm family's plans on built-in clusters cost exactly what the
golden files say, at every deterministic fidelity (tests/golden/cases.py; regenerate.py rewrites them)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "golden"))

from cases import CASES, figures, read_golden  # noqa: E402

RTOL = 1e-9


def assert_same(actual, expected, where: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and set(actual) == set(expected), f"{where}: keys differ"
        for k in expected:
            assert_same(actual[k], expected[k], f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{where}: lengths differ"
        for i, (a, e) in enumerate(zip(actual, expected)):
            assert_same(a, e, f"{where}[{i}]")
    elif isinstance(expected, float) and not isinstance(expected, bool):
        assert isinstance(actual, (int, float)) and math.isclose(actual, expected, rel_tol=RTOL, abs_tol=0.0), \
            f"{where}: {actual!r} != golden {expected!r}"
    else:
        assert actual == expected, f"{where}: {actual!r} != golden {expected!r}"


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_figures_match_the_golden_file(case):
    assert_same(figures(case), read_golden(case), case.name)
