"""Compiled kernels over ranges of plans, run side by side on a pool of threads.

A kernel here is ``kernel(lo, hi, *args)``: it evaluates plans ``lo..hi-1`` into their own rows of the
output arrays and releases the GIL (``njit(nogil=True)``), so ranges on different threads run at once
and write disjoint rows. Python threads rather than numba's ``parallel=True``: a parallel kernel is a
second compiled function, as costly to compile as the kernel itself, on every fresh machine.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

PARALLEL_MIN = 512   # fewer plans than this per thread: one thread (handing out ranges costs more)
PARALLEL_MIN_JOBS = 150_000   # ... or fewer tasks and edges than this over its plans

_pool: ThreadPoolExecutor | None = None


def thread_count() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def parallel_chunks(n: int, jobs: int = 0) -> int:
    """Ranges of plans to evaluate in parallel: one per thread, each of at least PARALLEL_MIN plans or
    PARALLEL_MIN_JOBS tasks and edges (plans of large task graphs are worth a thread sooner)."""
    per_thread = min(PARALLEL_MIN, max(1, PARALLEL_MIN_JOBS // max(jobs, 1)))
    return max(1, min(thread_count(), n // per_thread))


def run_in_ranges(kernel: Callable[..., Any], n: int, chunks: int, *args: Any) -> None:
    """``kernel(lo, hi, *args)`` over plans ``0..n-1`` cut into ``chunks`` ranges, one thread each (in
    this thread when one range); an error in any range is raised here once all have ended."""
    global _pool
    if chunks <= 1:
        kernel(0, n, *args)
        return
    if _pool is None:
        _pool = ThreadPoolExecutor(max_workers=thread_count(), thread_name_prefix="hetsplit-eval")
    futures = [_pool.submit(kernel, c * n // chunks, (c + 1) * n // chunks, *args) for c in range(chunks)]
    for f in futures:
        f.result()
