"""Seeded iterated local search over node-to-unit mappings, every neighbourhood in one batch call.

A step evaluates every single-layer move (a layer to another device that can run it) and every
swap of two layers on different devices where one of them sits on a busiest device, all at once
through the batch evaluator, and takes the best. Mappings compare by: fits memory, then
bottleneck, then how many resources share the bottleneck, then latency. At a local optimum the
best mapping so far is perturbed (a few random moves) and the descent starts again, until the
deadline, or until the bottleneck meets a proven lower bound and the descent stops improving.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from hetsplit.estimate.batch import BatchMetrics
from hetsplit.search.mapping_milp import PROOF_TOL
from hetsplit.search.node_mapping import NodeMapping

REL_TOL = 1e-9
PERTURB_MOVES = (2, 6)      # a perturbation moves this many layers (inclusive range)


@dataclass
class SearchStats:
    steps: int = 0
    evaluated: int = 0
    restarts: int = 0


def scores(batch: BatchMetrics) -> np.ndarray:
    """N x 4 keys, smaller is better: (does not fit, bottleneck, resources at the bottleneck, latency)."""
    b = batch.bottleneck_s
    at_max = (batch.compute_s_per_device >= b[:, None] * (1 - REL_TOL)).sum(axis=1)
    at_max += batch.max_transfer_s >= b * (1 - REL_TOL)
    return np.stack([~batch.fits, b, at_max, batch.latency_s], axis=1).astype(float)


def better(a: np.ndarray, b: np.ndarray) -> bool:
    """Is key ``a`` strictly better than ``b`` (bottleneck and latency compared with a tolerance)?"""
    for k, (x, y) in enumerate(zip(a, b)):
        tol = REL_TOL * max(abs(x), abs(y)) if k in (1, 3) else 0.0
        if x < y - tol:
            return True
        if x > y + tol:
            return False
    return False


def best_row(keys: np.ndarray) -> int:
    return int(np.lexsort(keys.T[::-1])[0])


class LocalSearch:
    """Iterated steepest descent for one problem."""

    def __init__(self, nm: NodeMapping, rng: np.random.Generator):
        self.nm, self.rng = nm, rng
        self.stats = SearchStats()
        self.moves = [(i, d) for i in range(nm.num_layers) for d in np.flatnonzero(nm.feasible[i])]

    def neighbours(self, cur: np.ndarray, batch_row: BatchMetrics) -> np.ndarray:
        """Every single move, and swaps that take a layer off a busiest device."""
        nm = self.nm
        cand = [(i, d) for i, d in self.moves if cur[i] != d]
        out = np.repeat(cur[None, :], len(cand), axis=0)
        if cand:
            idx = np.array(cand)
            out[np.arange(len(cand)), idx[:, 0]] = idx[:, 1]
        load = batch_row.compute_s_per_device[0]
        hot = np.flatnonzero(load >= load.max() * (1 - REL_TOL))
        swaps = []
        for i in np.flatnonzero(np.isin(cur, hot)):
            for j in range(nm.num_layers):
                if cur[j] != cur[i] and nm.feasible[i, cur[j]] and nm.feasible[j, cur[i]]:
                    row = cur.copy()
                    row[i], row[j] = cur[j], cur[i]
                    swaps.append(row)
        return np.concatenate([out, np.array(swaps).reshape(-1, nm.num_layers)]) if swaps else out

    def descend(self, cur: np.ndarray, deadline: float) -> tuple[np.ndarray, np.ndarray]:
        """Steepest descent from ``cur``; returns the local optimum and its key."""
        batch = self.nm.evaluate(cur)
        key = scores(batch)[0]
        while time.perf_counter() < deadline:
            cand = self.neighbours(cur, batch)
            if not len(cand):
                break
            cb = self.nm.evaluate(cand)
            keys = scores(cb)
            self.stats.evaluated += len(cand)
            k = best_row(keys)
            if not better(keys[k], key):
                break
            cur, key = cand[k], keys[k]
            batch = self.nm.evaluate(cur)
            self.stats.steps += 1
        return cur, key

    def perturb(self, cur: np.ndarray) -> np.ndarray:
        out = cur.copy()
        for _ in range(int(self.rng.integers(PERTURB_MOVES[0], PERTURB_MOVES[1] + 1))):
            i = int(self.rng.integers(self.nm.num_layers))
            out[i] = int(self.rng.choice(np.flatnonzero(self.nm.feasible[i])))
        return out

    def run(self, start: np.ndarray, deadline: float, lower_bound_s: float = 0.0) -> np.ndarray:
        """The best mapping found from ``start`` before ``deadline``."""
        best, best_key = self.descend(np.asarray(start, dtype=np.int64), deadline)
        while time.perf_counter() < deadline:
            if best_key[0] == 0 and best_key[1] <= lower_bound_s * (1 + PROOF_TOL):
                break            # the bottleneck is proven optimal, latency locally optimal
            cur, key = self.descend(self.perturb(best), deadline)
            self.stats.restarts += 1
            if better(key, best_key):
                best, best_key = cur, key
        return best
