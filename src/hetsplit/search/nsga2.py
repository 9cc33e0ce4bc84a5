"""NSGA-II on arrays (Deb et al. 2002) for integer chromosomes whose genes are categories.

The population is three arrays (chromosomes N x V, objectives N x K, constraint violation N), never
per-individual objects, and the loop is ask/tell: ``ask`` gives the chromosomes to evaluate (the
first population, then each generation's offspring), ``tell`` takes their objectives and violations
and keeps the best ``pop_size`` of parents and offspring. One numpy Generator, seeded once, makes
every random choice, so a seed fixes the run.

- Constrained domination: a feasible individual (violation <= 0) beats an infeasible one; of two
  infeasible ones the smaller violation wins; of two feasible ones, Pareto domination (minimized).
- Survival: feasible individuals by non-dominated rank, the front that does not fit whole cut by
  crowding distance (larger first, ties at random); then infeasible ones by violation.
- Mating: binary tournaments over pairs drawn from shuffled copies of the population (infeasible:
  smaller violation; feasible: domination, then larger crowding, then a coin), uniform crossover
  (each mating with ``crossover_prob``, each gene from either parent with probability 1/2, two
  children), random-reset mutation (each child with ``mutation_prob``, each gene with
  ``mutation_rate``, default 1 / genes), duplicates removed by hashing rows (against the parents and
  the offspring so far; mating repeats until the offspring are complete or ``MAX_MATINGS`` rounds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import cast

import numpy as np
from numba import njit

from hetsplit.errors import HetsplitError

MAX_MATINGS = 100        # mating rounds per generation before giving up on distinct offspring


@dataclass(frozen=True)
class GASettings:
    """The operators' parameters: population size and the variation probabilities (see the module)."""

    pop_size: int = 100
    crossover_prob: float = 0.9
    mutation_prob: float = 1.0
    mutation_rate: float | None = None      # None: 1 / genes (at most 1/2)

    def __post_init__(self) -> None:
        if self.pop_size < 2:
            raise HetsplitError(f"a population of {self.pop_size}: give 2 or more")
        for name in ("crossover_prob", "mutation_prob"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise HetsplitError(f"{name} {p}: give a probability in 0..1")
        if self.mutation_rate is not None and not 0.0 <= self.mutation_rate <= 1.0:
            raise HetsplitError(f"mutation_rate {self.mutation_rate}: give a probability in 0..1")


class NSGA2:
    """NSGA-II over genes ``0..upper[g]`` (ask/tell; see the module). After a ``tell``, ``x``, ``f``
    and ``cv`` hold the population, ``rank`` its constrained non-dominated rank and ``crowding`` its
    crowding distance within its front (infeasible individuals: 0)."""

    def __init__(self, upper: np.ndarray, settings: GASettings, seed: int, initial: np.ndarray | None = None):
        self.upper = np.asarray(upper, dtype=np.int64).reshape(-1)
        self.n_var = len(self.upper)
        self.settings = settings
        self.rng = np.random.default_rng(seed)
        rate = settings.mutation_rate
        self.mutation_rate = min(0.5, 1.0 / max(1, self.n_var)) if rate is None else rate
        self.dtype = _gene_dtype(int(self.upper.max(initial=0)))
        self.x = np.zeros((0, self.n_var), dtype=self.dtype)
        self.f = np.zeros((0, 0))
        self.cv = np.zeros(0)
        self.rank = np.zeros(0, dtype=np.int64)
        self.crowding = np.zeros(0)
        self.generation = 0                 # tells so far
        self._initial = initial
        self._asked: np.ndarray | None = None
        self._asked_keys: list[bytes] = []
        self._keys: list[bytes] = []        # the population's row keys (duplicate removal)

    # -- the loop ------------------------------------------------------------------------------------

    def ask(self) -> np.ndarray:
        """The chromosomes to evaluate next, in the smallest integer type that holds the genes
        (possibly fewer than ``pop_size`` when no more distinct ones are found; none at all then means
        the search space is exhausted)."""
        if self._asked is not None:
            raise HetsplitError("ask twice without a tell")
        self._asked = self._first() if self.generation == 0 else self._offspring()
        return self._asked

    def tell(self, f: np.ndarray, cv: np.ndarray) -> None:
        """The objectives (N x K, minimized) and constraint violations (N; <= 0: feasible) of the last
        ``ask``; keeps the best ``pop_size`` of the population and them."""
        if self._asked is None:
            raise HetsplitError("tell without an ask")
        x, keys, self._asked = self._asked, self._asked_keys, None
        f = np.asarray(f, dtype=np.float64).reshape(len(x), -1 if len(x) else self.f.shape[1])
        cv = np.maximum(np.asarray(cv, dtype=np.float64).reshape(len(x)), 0.0)
        if np.isnan(f).any() or np.isnan(cv).any():
            raise HetsplitError("NSGA-II was told NaN objectives or violations (give a large number instead)")
        old = len(self.x)
        if old:
            f, cv, keys = np.concatenate([self.f, f]), np.concatenate([self.cv, cv]), self._keys + keys
        rank, crowd = rank_and_crowding(f, cv)
        order = np.lexsort((self.rng.random(len(f)), -crowd, rank))[: self.settings.pop_size]
        parent = order < old
        new_x = np.empty((len(order), self.n_var), dtype=self.dtype)
        new_x[parent] = self.x[order[parent]]
        new_x[~parent] = x[order[~parent] - old]
        self.x, self.f, self.cv, self.rank, self.crowding = new_x, f[order], cv[order], rank[order], crowd[order]
        self._keys = [keys[i] for i in order.tolist()]
        self.generation += 1

    # -- variation -----------------------------------------------------------------------------------

    def _first(self) -> np.ndarray:
        """The initial population: ``initial``'s distinct rows, then distinct uniform random ones."""
        rows = np.zeros((0, self.n_var), dtype=self.dtype)
        if self._initial is not None and len(self._initial):
            rows = np.asarray(self._initial).reshape(-1, self.n_var)
            if rows.size and ((rows < 0) | (rows > self.upper[None, :])).any():
                raise HetsplitError("an initial chromosome has a gene outside 0..upper")
            rows = rows.astype(self.dtype)
        given = [rows]

        def make(need: int) -> np.ndarray:
            if given:
                return given.pop()
            return self.rng.integers(0, self.upper + 1, size=(need, self.n_var)).astype(self.dtype)

        return self._collect(make, set())

    def _offspring(self) -> np.ndarray:
        """``pop_size`` distinct new chromosomes (none equal to a parent) by selection, crossover and
        mutation."""
        return self._collect(lambda need: self._mutate(self._crossover(self._select(math.ceil(need / 2)))),
                             set(self._keys))

    def _collect(self, make, seen: set[bytes]) -> np.ndarray:
        """Up to ``pop_size`` rows, none in ``seen`` nor repeated: ``make(still needed)`` is asked at
        most ``MAX_MATINGS`` times; their keys are kept for ``tell``."""
        n = self.settings.pop_size
        out: list[np.ndarray] = []
        self._asked_keys = []
        for _ in range(MAX_MATINGS):
            need = n - len(self._asked_keys)
            if need <= 0:
                break
            rows = make(need)
            keep: list[int] = []
            for i, key in enumerate(_row_keys(rows)):
                if len(keep) < need and key not in seen:
                    seen.add(key)
                    keep.append(i)
                    self._asked_keys.append(key)
            out.append(rows[keep])
        return np.concatenate(out) if out else np.zeros((0, self.n_var), dtype=self.dtype)

    def _select(self, matings: int) -> np.ndarray:
        """matings x 2 parent indices, each the winner of a binary tournament."""
        n = len(self.x)
        need = 4 * matings
        perms = np.concatenate([self.rng.permutation(n) for _ in range(math.ceil(need / n))])[:need]
        a, b = perms[0::2], perms[1::2]
        a_wins = tournament(self.f, self.cv, self.crowding, a, b, self.rng.random(len(a)))
        return np.where(a_wins, a, b).reshape(matings, 2)

    def _crossover(self, parents: np.ndarray) -> np.ndarray:
        """Uniform crossover: two children per mating (the parents' copies when it does not happen)."""
        p1, p2 = self.x[parents[:, 0]], self.x[parents[:, 1]]
        mate = self.rng.random(len(parents)) < self.settings.crossover_prob
        swap = _coins(self.rng, p1.shape) & mate[:, None]
        diff = (p1 ^ p2) & -swap.astype(self.dtype)      # all bits set where the genes swap (xor swap:
        return np.concatenate([p1 ^ diff, p2 ^ diff])   # np.where is ~30x slower on small integers)

    def _mutate(self, x: np.ndarray) -> np.ndarray:
        """Random reset: a hit gene takes a uniform value in 0..upper. Each gene of a mutated child is
        hit independently with ``mutation_rate``: drawn as the number of hits (binomial), then which
        genes (a uniform subset of that size), the same law without a draw per gene."""
        rows = np.flatnonzero(self.rng.random(len(x)) < self.settings.mutation_prob)
        cells = len(rows) * self.n_var
        hits = int(self.rng.binomial(cells, self.mutation_rate)) if cells else 0
        if not hits:
            return x
        at = self.rng.choice(cells, size=hits, replace=False)
        r, c = rows[at // self.n_var], at % self.n_var
        x = x.copy()
        x[r, c] = self.rng.integers(0, self.upper[c] + 1).astype(self.dtype)
        return x


def _coins(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    """Fair coins of ``shape`` (one random bit each)."""
    size = shape[0] * shape[1]
    bits = np.unpackbits(np.frombuffer(rng.bytes((size + 7) // 8), dtype=np.uint8), count=size)
    return bits.reshape(shape).astype(bool)


def _gene_dtype(top: int) -> np.dtype:
    """The smallest signed integer type holding 0..top."""
    for dt in (np.int8, np.int16, np.int32):
        if top <= np.iinfo(dt).max:
            return np.dtype(dt)
    return np.dtype(np.int64)


def _row_keys(x: np.ndarray) -> list[bytes]:
    """Each row's bytes, for hashing."""
    x = np.ascontiguousarray(x)
    if not x.shape[1]:
        return [b""] * len(x)
    return cast(list[bytes], x.view(np.dtype((np.void, x.itemsize * x.shape[1]))).ravel().tolist())


# -- ranking -----------------------------------------------------------------------------------------


def rank_and_crowding(f: np.ndarray, cv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Constrained non-dominated rank (0 best) and crowding distance of every row.

    Feasible rows (``cv`` <= 0) are ranked by Pareto domination of ``f``; infeasible ones come after
    every feasible rank, one rank per distinct violation, smaller first (Deb's constrained domination
    gives exactly these fronts). Crowding distance is computed within each feasible front; infeasible
    rows get 0."""
    f = np.ascontiguousarray(f, dtype=np.float64)
    cv = np.asarray(cv, dtype=np.float64)
    n = len(f)
    rank = np.zeros(n, dtype=np.int64)
    crowd = np.zeros(n)
    ok = cv <= 0
    feas = np.flatnonzero(ok)
    fronts = 0
    if len(feas):
        sub = f[feas]
        order = np.lexsort(sub.T[::-1])
        r = _sorted_ranks(sub[order])
        rank[feas[order]] = r
        fronts = int(r.max()) + 1
        crowd[feas] = crowding_distance(sub, rank[feas])
    bad = np.flatnonzero(~ok)
    if len(bad):
        levels = np.unique(cv[bad], return_inverse=True)[1]
        rank[bad] = fronts + levels.reshape(-1)
    return rank, crowd


def nondominated_rank(f: np.ndarray) -> np.ndarray:
    """Pareto rank of every row of ``f`` (minimized; 0: not dominated; equal rows share a rank)."""
    f = np.ascontiguousarray(f, dtype=np.float64)
    if not len(f):
        return np.zeros(0, dtype=np.int64)
    order = np.lexsort(f.T[::-1])
    rank = np.empty(len(f), dtype=np.int64)
    rank[order] = _sorted_ranks(f[order])
    return rank


@njit(cache=True)
def _sorted_ranks(rows: np.ndarray) -> np.ndarray:
    """Ranks of lexicographically sorted ``rows`` (efficient non-dominated sort, sequential search:
    a row's dominators all come before it, so it joins the first front none of whose members
    dominates it; a front's members are tried newest first)."""
    n, k = rows.shape
    rank = np.empty(n, dtype=np.int64)
    head = np.full(n, -1, dtype=np.int64)     # newest member of each front
    nxt = np.full(n, -1, dtype=np.int64)      # the member added before it
    fronts = 0
    for i in range(n):
        r = 0
        while r < fronts:
            j = head[r]
            dominated = False
            while j >= 0:
                le, lt = True, False
                for c in range(k):
                    if rows[j, c] > rows[i, c]:
                        le = False
                        break
                    if rows[j, c] < rows[i, c]:
                        lt = True
                if le and lt:
                    dominated = True
                    break
                j = nxt[j]
            if not dominated:
                break
            r += 1
        if r == fronts:
            fronts += 1
        rank[i] = r
        nxt[i] = head[r]
        head[r] = i
    return rank


def crowding_distance(f: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Crowding distance of every row within its front (rows of equal ``rank``): per objective, the
    gap between its two neighbours in sorted order divided by the front's range in that objective,
    averaged over the objectives; a front's first and last in any objective whose range is not zero
    (and every member of a front of one or two) get infinity."""
    f = np.ascontiguousarray(f, dtype=np.float64)
    rank = np.asarray(rank, dtype=np.int64)
    if not len(f):
        return np.zeros(0)
    order = np.argsort(rank, kind="stable")
    bounds = np.flatnonzero(np.diff(rank[order])) + 1
    starts = np.concatenate([[0], bounds]).astype(np.int64)
    ends = np.concatenate([bounds, [len(f)]]).astype(np.int64)
    return _crowding(f, order.astype(np.int64), starts, ends)


@njit(cache=True)
def _crowding(f: np.ndarray, order: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    n, k = f.shape
    out = np.zeros(n)
    for s in range(len(starts)):
        members = order[starts[s]:ends[s]]
        m = len(members)
        if m <= 2:
            for i in members:
                out[i] = np.inf
            continue
        for c in range(k):
            vals = np.empty(m)
            for i in range(m):
                vals[i] = f[members[i], c]
            idx = np.argsort(vals, kind="mergesort")
            span = vals[idx[m - 1]] - vals[idx[0]]
            if span <= 0:
                continue
            out[members[idx[0]]] = np.inf
            out[members[idx[m - 1]]] = np.inf
            for p in range(1, m - 1):
                out[members[idx[p]]] += (vals[idx[p + 1]] - vals[idx[p - 1]]) / span / k
    return out


@njit(cache=True)
def _tournament(f: np.ndarray, cv: np.ndarray, crowd: np.ndarray, a: np.ndarray, b: np.ndarray,
                coin: np.ndarray) -> np.ndarray:
    k = f.shape[1]
    wins = np.empty(len(a), dtype=np.bool_)
    for t in range(len(a)):
        i, j = a[t], b[t]
        if cv[i] > 0 or cv[j] > 0:
            wins[t] = cv[i] < cv[j] or (cv[i] == cv[j] and coin[t] < 0.5)
            continue
        i_le, j_le, i_lt, j_lt = True, True, False, False
        for c in range(k):
            if f[i, c] < f[j, c]:
                i_lt, j_le = True, False
            elif f[i, c] > f[j, c]:
                j_lt, i_le = True, False
        if i_le and i_lt:
            wins[t] = True
        elif j_le and j_lt:
            wins[t] = False
        elif crowd[i] != crowd[j]:
            wins[t] = crowd[i] > crowd[j]
        else:
            wins[t] = coin[t] < 0.5
    return wins


def tournament(f: np.ndarray, cv: np.ndarray, crowd: np.ndarray, a: np.ndarray, b: np.ndarray,
               coin: np.ndarray) -> np.ndarray:
    """Whether ``a[t]`` wins its binary tournament against ``b[t]`` (see the module; ``coin`` in [0, 1)
    settles ties)."""
    return _tournament(np.ascontiguousarray(f, dtype=np.float64), np.asarray(cv, dtype=np.float64),
                       np.asarray(crowd, dtype=np.float64), a.astype(np.int64), b.astype(np.int64), coin)
