"""Fitting what a segment costs beyond its layers from measured segments (``costs.segment``).

Used by the runtime's calibration (``runtime.segment_calibration``: the toy run for real on this machine's
CPU workers) and the GPU profiler (``costs.profiler.segment_probe``: the model cut into segments run one
executor call each). Each row is one segment: its ``boundary_bytes``, its median time per call
(``measured_s``) and its layers' profiled time (``layers_s``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from hetsplit.errors import HetsplitError

FLOOR_S = 1e-5      # excesses below this weigh as much as it does in the fit (timer noise)


def fit_segments(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """``(fixed_s, byte_s)``: the line through each segment's excess (measured less its layers) over its
    boundary bytes that fits them with the least relative error (the excesses span 0.03-1.4 ms here, and
    a plan's segments are mostly small ones, which an absolute fit would leave to the largest), neither
    below 0 (a negative one is pinned at 0 and the other refitted)."""
    if not rows:
        raise HetsplitError("segment calibration: no segment was measured")
    x = np.array([r["boundary_bytes"] for r in rows], dtype=float)
    y = np.array([r["measured_s"] - r["layers_s"] for r in rows], dtype=float)
    w = 1.0 / np.maximum(np.abs(y), FLOOR_S)
    ones = np.ones_like(x)

    def line(*columns: np.ndarray) -> np.ndarray:
        return np.linalg.lstsq(np.column_stack(columns) * w[:, None], y * w, rcond=None)[0]

    fixed_s, byte_s = line(ones, x) if np.ptp(x) > 0 else (0.0, -1.0)
    if byte_s < 0:                         # a falling line, or no spread in bytes to fit one: a level
        fixed_s, byte_s = line(ones)[0], 0.0
    if fixed_s < 0:                        # a line through below 0: through 0 instead
        fixed_s, byte_s = 0.0, line(x)[0]
    return max(0.0, float(fixed_s)), max(0.0, float(byte_s))
