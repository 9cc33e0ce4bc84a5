"""Exact hypervolume of a set of points (minimized objectives) up to a reference point.

Slicing (Zitzler's HSO): the volume is cut along the last objective into slabs between consecutive
point values, each slab's depth times the (K-1)-dimensional volume of the points below it; three
objectives and fewer are swept in one compiled pass (O(n^2) for three), more recurse down to three.
"""

from __future__ import annotations

import numpy as np
from numba import njit


def exact_hypervolume(points: np.ndarray, ref: np.ndarray) -> float:
    """The volume dominated by ``points`` (N x K) and bounded by ``ref`` (K); points not strictly
    better than ``ref`` in every objective add nothing."""
    pts = np.asarray(points, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64).reshape(-1)
    pts = pts.reshape(-1, len(ref))
    pts = pts[(pts < ref[None, :]).all(axis=1)]
    if not len(pts):
        return 0.0
    return float(_slices(np.unique(pts, axis=0), ref))


def _slices(pts: np.ndarray, ref: np.ndarray) -> float:
    k = pts.shape[1]
    if k <= 3:
        return _hv3(np.ascontiguousarray(pts), ref.copy(), k)
    pts = pts[np.argsort(pts[:, -1], kind="stable")]
    total = 0.0
    for i in range(len(pts)):
        depth = (pts[i + 1, -1] if i + 1 < len(pts) else ref[-1]) - pts[i, -1]
        if depth > 0:
            total += depth * _slices(pts[: i + 1, :-1], ref[:-1])
    return total


@njit(cache=True)
def _hv3(pts: np.ndarray, ref: np.ndarray, k: int) -> float:
    """Hypervolume for k <= 3 objectives: slabs along the last one (k = 3), each a staircase sweep."""
    n = pts.shape[0]
    if k == 1:
        return ref[0] - pts[:, 0].min()
    by_x = np.argsort(pts[:, 0], kind="mergesort")
    if k == 2:
        return _area(pts, by_x, np.ones(n, dtype=np.bool_), ref[0], ref[1])
    by_z = np.argsort(pts[:, 2], kind="mergesort")
    active = np.zeros(n, dtype=np.bool_)
    total = 0.0
    for s in range(n):
        active[by_z[s]] = True
        z_next = pts[by_z[s + 1], 2] if s + 1 < n else ref[2]
        depth = z_next - pts[by_z[s], 2]
        if depth > 0:
            total += depth * _area(pts, by_x, active, ref[0], ref[1])
    return total


@njit(cache=True)
def _area(pts: np.ndarray, by_x: np.ndarray, active: np.ndarray, rx: float, ry: float) -> float:
    """Area dominated by the active points in the first two objectives, up to (rx, ry)."""
    area = 0.0
    ymin = ry
    prev = np.nan
    for j in by_x:
        if not active[j]:
            continue
        if prev == prev:            # not the first active point
            area += (pts[j, 0] - prev) * (ry - ymin)
        prev = pts[j, 0]
        ymin = min(ymin, pts[j, 1])
    if prev == prev:
        area += (rx - prev) * (ry - ymin)
    return area
