"""Families of device multisets as rows of uint64 words, for the feasibility DP (``search.reach``).

Two encodings of one row (a set of multiset indices 0..M-1):
- packed bits, when every class has one device (multisets are subsets, index = bitmask): M bits,
  so 16 all-different devices take 1,024 words (8 KiB) per row;
- one byte per multiset otherwise (mixed-radix indices), viewed as uint64 words for ORs.
Rows are ORed as words either way; only ``shift`` (add one device of a class) and membership
differ.
"""

from __future__ import annotations

import numpy as np

# bit i of _LOW_HALF[c] is set when bit c of i is 0 (entries without element c, for c < 6)
_LOW_HALF = [np.uint64(sum(1 << i for i in range(64) if not (i >> c) & 1)) for c in range(6)]


class Families:
    """Row layout and operations for multisets of ``counts`` devices per class."""

    def __init__(self, counts: np.ndarray, strides: np.ndarray, num_stages: np.ndarray, max_stages: int):
        self.counts = np.asarray(counts, dtype=np.int64)
        self.strides = np.asarray(strides, dtype=np.int64)
        self.M = int(np.prod(self.counts + 1))
        self.packed = bool((self.counts == 1).all())
        self.words = max(1, self.M // 64) if self.packed else -(-self.M // 8)
        self.limited = max_stages < int(self.counts.sum())
        self.size_ok = self.from_bool(num_stages <= max_stages)

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
        """dst = {S + e_c : S in x, class c has a free device in S}; dst must be a zero row."""
        if self.packed:
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
        """dst = {S : S + e_c in x} (S with a free device of class c); dst must be a zero row."""
        if self.packed:
            if c < 6:
                np.bitwise_and(x >> np.uint64(1 << c), _LOW_HALF[c], out=dst)
            else:
                st = 1 << (c - 6)
                dst.reshape(-1, 2, st)[:, 0, :] = x.reshape(-1, 2, st)[:, 1, :]
        else:
            n, st = int(self.counts[c]), int(self.strides[c])
            d, s = dst.view(bool)[:self.M], x.view(bool)[:self.M]
            d.reshape(-1, n + 1, st)[:, :-1, :] = s.reshape(-1, n + 1, st)[:, 1:, :]
