"""How much of this machine other processes used while we measured it.

A calibration of this machine is only worth keeping when nothing else competed for its cores. The
CPU counters tell: the machine's busy time (``/proc/stat``: user, nice, system, irq, softirq and, in
a VM, the time the hypervisor stole) less this process's own CPU is what the others took. Its own
CPU: its threads, its children once waited for (the profiler's co-load helpers are), and what its
other processes reported with ``count_own_cpu``: the ranks of a run, forked by the runtime's zygote or
run in a warm pool process, are never waited for here, so the launcher counts the CPU each one
reports (its ``job_cpu_s``) when the run ends. ``LoadWatch`` reads the counters before and after a
measurement; ``others_share`` is that time over the wall time of every CPU the counters cover. Where
the counters cannot be read (not Linux) the share is unknown (None), not zero.

What such a process spent counts once it is reported: a watch that holds only part of a run counts none
of its ranks' CPU, one that starts during a run counts all of it (the share comes out low, never below
0). The zygote's own start-up (about 2 s of CPU, once a process) is not reported, so a process's first
run shows it as the others'; a warm pool's processes, once closed and waited for, count a second time.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hetsplit.errors import HetsplitError

STAT = Path("/proc/stat")
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)      # user, nice, system, irq, softirq, steal (idle and iowait are not busy)


@dataclass(frozen=True)
class CpuClock:
    """One reading: wall clock (s), the machine's busy CPU over all its CPUs (s, None when unreadable),
    this process's own CPU with its waited-for children and what its other processes reported (s), and
    how many CPUs the busy time covers."""

    wall_s: float
    machine_busy_s: float | None
    own_s: float
    cpus: int


class _Reported:
    """CPU seconds this process's unwaited processes reported (``count_own_cpu``), summed."""

    lock = threading.Lock()
    seconds = 0.0


def count_own_cpu(seconds: float) -> None:
    """Count ``seconds`` of CPU that a process of ours spent, and that this process never waits for (so
    ``os.times`` never holds it), as this process's own from now on (``read_clock``)."""
    if not seconds >= 0:                      # also refuses nan
        raise HetsplitError(f"count_own_cpu: a CPU time is >= 0 s, got {seconds}")
    with _Reported.lock:
        _Reported.seconds += seconds


def read_clock() -> CpuClock:
    """The counters now."""
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system + _Reported.seconds
    busy = None
    try:
        fields = STAT.read_text().split("\n", 1)[0].split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
        busy = sum(int(fields[i]) for i in BUSY_FIELDS if i < len(fields)) / ticks
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    return CpuClock(time.monotonic(), busy, own, os.cpu_count() or 1)


def others_share(before: CpuClock, after: CpuClock) -> float | None:
    """The share of the machine's CPU time (0..1) other processes used between two readings; None when
    the counters could not be read or no time passed."""
    wall = after.wall_s - before.wall_s
    if before.machine_busy_s is None or after.machine_busy_s is None or wall <= 0:
        return None
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s)
    return min(1.0, max(0.0, others / (wall * max(1, after.cpus))))


class LoadWatch:
    """``with LoadWatch() as w: measure()``, then ``w.share``: what other processes used meanwhile
    (``others_share``; None when unknown). ``clock`` reads the counters (default ``read_clock``)."""

    def __init__(self, clock: Callable[[], CpuClock] | None = None):
        self.clock = clock or read_clock
        self.share: float | None = None
        self._before: CpuClock | None = None

    def __enter__(self) -> "LoadWatch":
        self._before = self.clock()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._before is not None
        self.share = others_share(self._before, self.clock())
