"""A run's inputs: reproducible from a seed, so the driver, the reference model and the segment timer
feed the same tensors."""

from __future__ import annotations

import numpy as np

from hetsplit.runtime.manifest import TensorSpec


def make_inputs(specs: list[TensorSpec], n: int, seed: int) -> list[dict[str, np.ndarray]]:
    """``n`` reproducible input sets (normal floats, small non-negative integers, random booleans)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        feed = {}
        for t in specs:
            dt = np.dtype(t.dtype)
            if dt.kind == "f":
                feed[t.name] = rng.standard_normal(t.shape).astype(dt)
            elif dt.kind == "b":
                feed[t.name] = rng.random(t.shape) < 0.5
            else:
                feed[t.name] = rng.integers(0, 10, t.shape).astype(dt)
        out.append(feed)
    return out
