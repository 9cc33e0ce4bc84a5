"""Families of device multisets as rows of uint64 words, for the feasibility DP (``search.reach``).

Two encodings of one row (a set of state indices 0..M-1, ``search.states``):
- packed bits, when every class has one device (multisets are subsets, index = bitmask): M bits,
  so 16 all-different devices take 1,024 words (8 KiB) per row;
- one byte per multiset otherwise (mixed-radix indices), viewed as uint64 words for ORs.
Rows are ORed as words either way; only ``shift`` (apply a move) and membership differ. With
multi-device units a move is a gather through the state space's index maps.
"""

from __future__ import annotations

import numpy as np

from hetsplit.search.states import StateSpace

# bit i of _LOW_HALF[c] is set when bit c of i is 0 (entries without element c, for c < 6)
_LOW_HALF = [np.uint64(sum(1 << i for i in range(64) if not (i >> c) & 1)) for c in range(6)]


class Families:
    """Row layout and operations over the states of ``space``."""

    def __init__(self, space: StateSpace):
        self.space = space
        self.counts = space.sizes
        self.strides = space.strides
        self.M = space.M
        self.packed = space.packed
        self.words = max(1, self.M // 64) if self.packed else -(-self.M // 8)
        self.limited = not space.size_ok[space.valid].all()
        self.size_ok = self.from_bool(space.size_ok)

    def zeros(self, *shape: int) -> np.ndarray:
        return np.zeros((*shape, self.words), dtype=np.uint64)

    def from_bool(self, mask: np.ndarray) -> np.ndarray:
        """A row holding the indices where ``mask`` (length M) is true."""
        if self.packed:
            bits = np.zeros(self.words * 64, dtype=bool)
            bits[:self.M] = mask
            return np.packbits(bits, bitorder="little").view(np.uint64).copy()  # little-endian words
        row = np.zeros(self.words * 8, dtype=bool)
        row[:self.M] = mask
        return row.view(np.uint64)

    def to_bool(self, row: np.ndarray) -> np.ndarray:
        if self.packed:
            return np.unpackbits(row.view(np.uint8), bitorder="little")[:self.M].astype(bool)
        return row.view(bool)[:self.M]

    def add(self, row: np.ndarray, S: int) -> None:
        if self.packed:
            row[S >> 6] |= np.uint64(1 << (S & 63))
        else:
            row.view(bool)[S] = True

    def member(self, row: np.ndarray, S: int) -> bool:
        if self.packed:
            return bool((int(row[S >> 6]) >> (S & 63)) & 1)
        return bool(row.view(bool)[S])

    def first(self, row: np.ndarray) -> int:
        """Smallest index in the row, or -1 if it is empty."""
        nz = np.flatnonzero(row)
        if nz.size == 0:
            return -1
        w = int(nz[0])
        if self.packed:
            v = int(row[w])
            return w * 64 + (v & -v).bit_length() - 1
        return w * 8 + int(np.flatnonzero(row[w:w + 1].view(bool))[0])

    def shift_into(self, dst: np.ndarray, x: np.ndarray, c: int) -> None:
        """dst = {move c applied to S : S in x} (plain: S + e_c where class c has a free device);
        dst must be a zero row."""
        if not self.space.plain:
            src, to = self.space.maps[c]
            dst.view(bool)[to] = x.view(bool)[src]
        elif self.packed:
            if c < 6:
                np.left_shift(x & _LOW_HALF[c], np.uint64(1 << c), out=dst)
            else:
                st = 1 << (c - 6)
                dst.reshape(-1, 2, st)[:, 1, :] = x.reshape(-1, 2, st)[:, 0, :]
        else:
            n, st = int(self.counts[c]), int(self.strides[c])
            d, s = dst.view(bool)[:self.M], x.view(bool)[:self.M]
            d.reshape(-1, n + 1, st)[:, 1:, :] = s.reshape(-1, n + 1, st)[:, :-1, :]
        if self.limited:
            dst &= self.size_ok

    def unshift_into(self, dst: np.ndarray, x: np.ndarray, c: int) -> None:
        """dst = {S : move c applied to S is in x}; dst must be a zero row."""
        if not self.space.plain:
            src, to = self.space.maps[c]
            dst.view(bool)[src] = x.view(bool)[to]
        elif self.packed:
            if c < 6:
                np.bitwise_and(x >> np.uint64(1 << c), _LOW_HALF[c], out=dst)
            else:
                st = 1 << (c - 6)
                dst.reshape(-1, 2, st)[:, 0, :] = x.reshape(-1, 2, st)[:, 1, :]
        else:
            n, st = int(self.counts[c]), int(self.strides[c])
            d, s = dst.view(bool)[:self.M], x.view(bool)[:self.M]
            d.reshape(-1, n + 1, st)[:, :-1, :] = s.reshape(-1, n + 1, st)[:, 1:, :]
