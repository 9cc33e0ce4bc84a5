"""pymoo operators for integer chromosomes whose genes are categories (devices, split points)."""

from __future__ import annotations

import numpy as np
from pymoo.core.duplicate import DuplicateElimination
from pymoo.core.mutation import Mutation


class RandomResetMutation(Mutation):
    """Each gene, with probability ``prob_var`` (default 1 / n_var), takes a uniform value in 0..xu."""

    def _do(self, problem, X, random_state=None, **kwargs):  # noqa: N803 (pymoo's signature)
        x = np.asarray(X, dtype=np.int64)
        prob = np.asarray(self.get_prob_var(problem, size=len(x)), dtype=np.float64).reshape(-1, 1)
        hit = random_state.random(x.shape) < prob
        fresh = random_state.integers(0, np.asarray(problem.xu, dtype=np.int64) + 1, size=x.shape)
        return np.where(hit, fresh, x)


class RowDuplicates(DuplicateElimination):
    """Exact duplicate chromosomes, found by hashing rows (O(N), where pymoo's default is O(N^2))."""

    def _do(self, pop, other, is_duplicate):
        seen = set()
        if other is not None and len(other):
            seen = {_row_key(ind.X) for ind in other}
        for i, ind in enumerate(pop):
            key = _row_key(ind.X)
            if key in seen:
                is_duplicate[i] = True
            else:
                seen.add(key)
        return is_duplicate


def _row_key(x) -> bytes:
    """A chromosome's bytes as int64 (read row by row: stacking the population first copies it all)."""
    return np.asarray(x, dtype=np.int64).tobytes()
