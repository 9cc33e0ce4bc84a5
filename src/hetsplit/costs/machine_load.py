"""How much of this machine other processes used while we measured it.

A calibration of this machine is only worth keeping when nothing else competed for its cores. The
CPU counters tell: the machine's busy time (``/proc/stat``: user, nice, system, irq, softirq and, in
a VM, the time the hypervisor stole) less this process's own CPU (its threads, and its children once
waited for: the profiler's co-load helpers are) less any CPU the caller knows its other processes spent
(``own_extra_s``: the ranks of a run, forked by the runtime's zygote and never waited for here, report
theirs, ``RunReport.ranks_cpu_s``) is what the others took. ``LoadWatch`` reads them before and after a
measurement; ``others_share`` is that time over the wall time of every CPU the counters cover. Where
the counters cannot be read (not Linux) the share is unknown (None), not zero.
"""

from __future__ import annotations

import os
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
    this process's own CPU with its waited-for children (s), and how many CPUs the busy time covers."""

    wall_s: float
    machine_busy_s: float | None
    own_s: float
    cpus: int


def read_clock() -> CpuClock:
    """The counters now."""
    t = os.times()
    own = t.user + t.system + t.children_user + t.children_system
    busy = None
    try:
        fields = STAT.read_text().split("\n", 1)[0].split()[1:]
        ticks = os.sysconf("SC_CLK_TCK")
        busy = sum(int(fields[i]) for i in BUSY_FIELDS if i < len(fields)) / ticks
    except (OSError, ValueError, IndexError, AttributeError):
        pass
    return CpuClock(time.monotonic(), busy, own, os.cpu_count() or 1)


def others_share(before: CpuClock, after: CpuClock, own_extra_s: float = 0.0) -> float | None:
    """The share of the machine's CPU time (0..1) other processes used between two readings, with
    ``own_extra_s`` seconds of CPU that processes of ours the counters do not see (not this one, nor a
    child it waited for) spent meanwhile counted as ours; None when the counters could not be read or
    no time passed."""
    if own_extra_s < 0:
        raise HetsplitError(f"own_extra_s must be a CPU time >= 0 s, got {own_extra_s}")
    wall = after.wall_s - before.wall_s
    if before.machine_busy_s is None or after.machine_busy_s is None or wall <= 0:
        return None
    others = (after.machine_busy_s - before.machine_busy_s) - (after.own_s - before.own_s) - own_extra_s
    return min(1.0, max(0.0, others / (wall * max(1, after.cpus))))


class LoadWatch:
    """``with LoadWatch() as w: measure()``, then ``w.share``: what other processes used meanwhile
    (``others_share``; None when unknown), or ``w.share_less(s)`` when processes of ours that this one
    did not wait for spent ``s`` seconds of CPU in it. ``clock`` reads the counters (default ``read_clock``)."""

    def __init__(self, clock: Callable[[], CpuClock] | None = None):
        self.clock = clock or read_clock
        self._before: CpuClock | None = None
        self._after: CpuClock | None = None

    def __enter__(self) -> "LoadWatch":
        self._before, self._after = self.clock(), None
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._before is not None
        self._after = self.clock()

    @property
    def share(self) -> float | None:
        """The share other processes used while watched (None: unknown, or still watching)."""
        return self.share_less(0.0)

    def share_less(self, own_extra_s: float) -> float | None:
        """The share with ``own_extra_s`` seconds of CPU spent by our own unwatched processes (a run's
        ranks) taken out (None: unknown, or still watching)."""
        if self._before is None or self._after is None:
            return None
        return others_share(self._before, self._after, own_extra_s)
