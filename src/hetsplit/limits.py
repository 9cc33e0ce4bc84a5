"""Memory asks checked before allocating: a request that would not fit is refused with its estimate
and the option that lowers it, instead of growing until the kernel ends the process."""

from __future__ import annotations

import os
from pathlib import Path

from hetsplit.errors import UsageError

MEMORY_ENV = "HETSPLIT_MAX_MEMORY_GB"
_FALLBACK = 4 * 2**30   # when /proc/meminfo cannot be read


def memory_budget() -> int:
    """Bytes one request may take: ``HETSPLIT_MAX_MEMORY_GB`` GiB if set, else 80% of the memory
    available now (``MemAvailable``)."""
    raw = os.environ.get(MEMORY_ENV, "")
    try:
        if raw and float(raw) > 0:
            return int(float(raw) * 2**30)
    except ValueError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(int(line.split()[1]) * 1024 * 0.8)
    except (OSError, ValueError, IndexError):
        pass
    return _FALLBACK


def check_memory(need_bytes: float, what: str, lower: str) -> None:
    """UsageError when ``what`` (e.g. "simulating 10 inputs") would need more than ``memory_budget()``;
    ``lower`` says which option brings it down."""
    budget = memory_budget()
    if need_bytes > budget:
        raise UsageError(f"{what} would need about {_gib(need_bytes)} of memory, over the {_gib(budget)} "
                         f"allowed ({MEMORY_ENV} sets it; default 80% of the free memory); {lower}")


def _gib(n: float) -> str:
    return f"{n / 2**30:,.1f} GiB"
