"""Memory of a model run: analytic live bytes per layer, and the process's measured peak RSS."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hetsplit.graph.types import Graph

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def live_bytes_per_layer(graph: Graph) -> np.ndarray:
    """Bytes resident while layer i runs: its weights, plus every tensor alive across it.

    ``cut_bytes[i]`` holds every tensor produced before layer i and still needed at or after it (its
    inputs and the skips over it); add the layer's weights and its own output.
    """
    return graph.param_bytes + graph.cut_bytes[:-1] + graph.out_bytes


def _status_kib(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int | None:
    kib = _status_kib("VmRSS")
    return None if kib is None else kib * 1024


def reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not allowed."""
    try:
        _CLEAR_REFS.write_text("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int | None:
    kib = _status_kib("VmHWM")
    return None if kib is None else kib * 1024
