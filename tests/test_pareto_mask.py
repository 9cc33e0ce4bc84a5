"""Pareto marking against a direct definition of dominance."""

import numpy as np
from hypothesis import given, settings, strategies as st

from hetsplit.plan import pareto_mask


def dominated_by_definition(obj: np.ndarray) -> list[bool]:
    n = len(obj)
    return [any((obj[j] <= obj[i]).all() and (obj[j] < obj[i]).any() for j in range(n) if j != i) for i in range(n)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=25))
def test_mask_is_exactly_the_non_dominated_rows(points):
    obj = np.array(points, dtype=float)
    assert list(pareto_mask(obj)) == [not d for d in dominated_by_definition(obj)]


def test_hand_case():
    obj = np.array([[1, 5], [2, 2], [3, 3], [5, 1], [2, 2]])
    assert list(pareto_mask(obj)) == [True, True, False, True, True]
