"""Device-usage states of the pipeline DPs, the stage labels, and the moves between them.

Devices form unit classes (``search.units``): class U has n_U interchangeable units of P_U
positions. A *state* S says, per class and per non-empty usage pattern rho (a subset of positions),
how many units of the class have exactly the positions rho in use: one mixed-radix digit 0..n_U per
(U, rho), at most n_U units per class. For single-device units (P_U = 1) this is the multiset of
used devices per class (PipeEdge's multiset of types; a bitmask when all devices differ).

With multi-device units only the valid states are kept (renumbered), so S is an index into them.
A *label* (U, rho, q) describes the stage just placed: position q of a unit of class U whose
pattern, q included, is rho. A *move* (v, r) places the next stage as label v = (U, rho, q) on a
unit whose pattern was sigma = rho - {q}: it takes one such unit (a fresh one when sigma is empty)
and sets its pattern to rho, so S -> S + e(U, rho) - e(U, sigma). The reserve r says how many
units of pattern sigma must remain besides the one taken: a move from a stage on a unit of
pattern sigma of the same class to *another* unit of that pattern needs r = 1 (the current unit
is one of them); r = 0 otherwise, and r = 0 from such a stage means the *same* unit (the transfer
goes over the unit's inner link). Moves 0..C-1 are the r = 0 moves of labels 0..C-1, so with
single-device units moves and labels coincide.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

Label = tuple[int, int, int]  # (unit class, pattern bitmask, position)


class StateSpace:
    """States, labels and moves of unit classes with ``sizes`` units of ``positions`` devices."""

    def __init__(self, sizes: list[int], positions: list[int], max_stages: int):
        self.sizes = np.asarray(sizes, dtype=np.int64)
        self.positions = np.asarray(positions, dtype=np.int64)
        self.labels: list[Label] = [(U, rho, q) for U, P in enumerate(positions)
                                    for rho in range(1, 1 << P) for q in range(P) if rho >> q & 1]
        self.digit: dict[tuple[int, int], int] = {}
        digit_cls: list[int] = []
        digit_pop: list[int] = []
        for U, P in enumerate(positions):
            for rho in range(1, 1 << P):
                self.digit[(U, rho)] = len(digit_cls)
                digit_cls.append(U)
                digit_pop.append(rho.bit_count())
        self.digit_cls = np.array(digit_cls, dtype=np.int64)
        radix = self.sizes[self.digit_cls] + 1
        self.radix = radix
        self.strides = np.concatenate([[1], np.cumprod(radix)[:-1]]).astype(np.int64)
        self.M = int(np.prod(radix))
        self.plain = bool((self.positions == 1).all())
        self.packed = self.plain and bool((self.sizes == 1).all())
        S = np.arange(self.M)
        self.num_stages = np.zeros(self.M, dtype=np.int64)
        self.valid = np.ones(self.M, dtype=bool)
        for U in range(len(sizes)):
            total = np.zeros(self.M, dtype=np.int64)
            for d in np.flatnonzero(self.digit_cls == U):
                dig = self.digit_value(S, int(d))
                total += dig
                self.num_stages += dig * digit_pop[d]
            self.valid &= total <= self.sizes[U]
        # multi-device units: keep only the valid states (at most n_U units per class), renumbered
        self.full = np.arange(self.M) if self.plain else np.flatnonzero(self.valid)
        self.rank = np.full(self.M, -1, dtype=np.int64)
        self.rank[self.full] = np.arange(self.full.size)
        self.M = int(self.full.size)
        self.num_stages, self.valid = self.num_stages[self.full], self.valid[self.full]
        self.size_ok = self.valid & (self.num_stages <= max_stages)
        C = len(self.labels)
        self.moves: list[tuple[int, int]] = [(v, 0) for v in range(C)] + [
            (v, 1) for v, (U, rho, q) in enumerate(self.labels) if rho != 1 << q]
        self.move_label = np.array([v for v, _ in self.moves], dtype=np.int64)

    @property
    def num_labels(self) -> int:
        return len(self.labels)

    @property
    def num_moves(self) -> int:
        return len(self.moves)

    def digit_value(self, S, d: int):
        """Digit d of full (uncompacted) state indices S."""
        return (S // self.strides[d]) % self.radix[d]

    def sigma(self, m: int) -> tuple[int, int, int]:
        """(class, pattern before, reserve) of move m."""
        v, r = self.moves[m]
        U, rho, q = self.labels[v]
        return U, rho & ~(1 << q), r

    def delta(self, m: int) -> int:
        U, sig, _ = self.sigma(m)
        rho = self.labels[self.move_label[m]][1]
        return int(self.strides[self.digit[(U, rho)]]) - (int(self.strides[self.digit[(U, sig)]]) if sig else 0)

    @cached_property
    def guards(self) -> list[np.ndarray]:
        """guards[m][S]: move m may be applied to state S (S valid, a unit of pattern sigma free)."""
        S = self.full
        out = []
        for m in range(self.num_moves):
            U, sig, r = self.sigma(m)
            if sig:
                ok = self.digit_value(S, self.digit[(U, sig)]) >= 1 + r
            else:
                total = sum(self.digit_value(S, int(d)) for d in np.flatnonzero(self.digit_cls == U))
                ok = total + 1 <= self.sizes[U]
            out.append(ok & self.valid)
        return out

    @cached_property
    def maps(self) -> list[tuple[np.ndarray, np.ndarray]]:
        """(source states, destination states) of each move."""
        out = []
        for m in range(self.num_moves):
            src = np.flatnonzero(self.guards[m])
            out.append((src, self.rank[self.full[src] + self.delta(m)]))
        return out

    def initial(self, c: int) -> int:
        """The state after a first stage on label c, or -1 when c cannot be a first stage."""
        U, rho, q = self.labels[c]
        return int(self.rank[self.strides[self.digit[(U, rho)]]]) if rho == 1 << q else -1

    def prev(self, S: int, m: int) -> int:
        """The state from which move m leads to S, or -1."""
        F0 = int(self.full[S]) - self.delta(m)
        if not 0 <= F0 < self.rank.size or self.rank[F0] < 0:
            return -1
        S0 = int(self.rank[F0])
        return S0 if self.guards[m][S0] else -1

    def shift(self, x: np.ndarray, m: int, fill) -> np.ndarray:
        """y[..., move_m(S)] = x[..., S] along the last axis; fill where nothing arrives."""
        if self.plain:
            n, st = int(self.sizes[m]), int(self.strides[m])
            xv = x.reshape(*x.shape[:-1], -1, n + 1, st)
            y = np.empty_like(xv)
            y[..., 0, :] = fill
            y[..., 1:, :] = xv[..., :-1, :]
            return y.reshape(x.shape)
        src, dst = self.maps[m]
        y = np.full_like(x, fill)
        y[..., dst] = x[..., src]
        return y

    @cached_property
    def flat_maps(self) -> tuple[np.ndarray, np.ndarray]:
        """(source, destination) flat indices from a (moves, M) array into a (labels, M) array."""
        src, dst = [], []
        for m, (s, d) in enumerate(self.maps):
            src.append(m * self.M + s)
            dst.append(self.move_label[m] * self.M + d)
        return np.concatenate(src), np.concatenate(dst)
