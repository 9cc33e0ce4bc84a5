"""Device emulation by pacing: an LLM stage's process (``runtime.llm_pipeline_worker``) computes at this
machine's full speed and, each time it has something to tell a peer (a hidden state, a tensor-parallel
partial sum, the token), first sleeps ``1 / s - 1`` times the CPU its thread took since it last did, so
its work takes what it takes on a device ``s`` times as fast as this machine's one-thread worker: the
share ``s`` of ``runtime.device_emulation``, the prompt's step at its own share where given.

Why not a CPU quota (``runtime.cpu_throttle``, which ``hetsplit run`` uses): under CFS bandwidth
control a decode step costs more CPU than it does unthrottled, the more so the smaller the share and the
shorter the period (``bench/throttle_cost.py``, SmolLM2-135M's step on this 2-core VM: its wall time x
share 1.07-1.43x the unthrottled step's at shares 0.5 and 0.25 over 2 and 10 ms periods, paced
1.01-1.13x), so every throttled stage ran slower than its device, and splits, whose stages are
throttled, looked worse than a device alone, which runs at a whole core. Paced, the work runs at full
speed and only the pauses stretch it.

What pacing does not slow: the message ends after the last pause of a step (posting a send, taking a
receive), which a cluster charges per link, not per device. The CPU counted is the stage's thread's
(``time.thread_time``), as the host probe times it (``costs.llm_probe.typical_time``). The shares come
from the driver of this machine's own run: never from the network (``runtime.peer_config``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass

from hetsplit.errors import RuntimeFailure

MIN_SLEEP_S = 0.002   # a pause owes less than this before it sleeps (but a step's last one)


@dataclass(frozen=True)
class Pace:
    """A stage's CPU share of one core for the prompt's step and for the decode steps (0 < s <= 1)."""

    prefill: float
    decode: float

    def __post_init__(self) -> None:
        for what, s in (("prompt", self.prefill), ("decode", self.decode)):
            if not (isinstance(s, float) and math.isfinite(s) and 0.0 < s <= 1.0):
                raise RuntimeFailure(f"pacing: the {what} share {s!r:.40} must be a number in (0, 1]")

    def share(self, first_step: bool) -> float:
        return self.prefill if first_step else self.decode


def paces_of(decode: Mapping[str, float], prefill: Mapping[str, float] | None,
             ranks: Mapping[int, str]) -> dict[str, list[float]]:
    """RunConfig's ``paces``: per rank whose device has a share below a whole core, [prompt's, decode's]
    (the prompt's the decode's where ``prefill`` gives none)."""
    out = {}
    for rank, dev in ranks.items():
        s = decode.get(dev, 1.0)
        first = (prefill or {}).get(dev, s)
        if s < 1.0 or first < 1.0:
            out[str(rank)] = [float(first), float(s)]
    return out


def read_pace(paces: Mapping[str, object], rank: int) -> Pace | None:
    """Rank ``rank``'s pace in RunConfig's ``paces`` (None: it runs at full speed); checked."""
    raw = paces.get(str(rank))
    if raw is None:
        return None
    if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(v, (int, float)) for v in raw)):
        raise RuntimeFailure(f"pacing: rank {rank}'s pace {raw!r:.80} must be [prompt share, decode share]")
    return Pace(float(raw[0]), float(raw[1]))


class Pacer:
    """Stretches one stage's work to its share: ``start()`` when its step begins computing, ``pause()``
    before each thing it tells a peer: it owes ``1 / s - 1`` times the thread's CPU since the last mark and
    sleeps what it owes once that is at least ``MIN_SLEEP_S`` (a tensor-parallel member pauses before each
    of its 60 all-reduces per SmolLM2 step, each wake-up late by a little), ``settle=True`` (a step's last
    pause) whatever it owes; a sleep longer than asked is owed back (negative), so the sleeps add up to
    the share over the run, not each one."""

    def __init__(self, pace: Pace | None):
        self.pace = pace
        self.stretch = 0.0
        self.since = time.thread_time()
        self.owed_s = 0.0
        self.slept_s = 0.0

    def start(self, first_step: bool) -> None:
        if self.pace is not None:
            self.stretch = 1.0 / self.pace.share(first_step) - 1.0
        self.since = time.thread_time()

    def pause(self, settle: bool = False) -> None:
        if self.pace is None:
            return
        self.owed_s += (time.thread_time() - self.since) * self.stretch
        if self.owed_s >= (0.0 if settle else MIN_SLEEP_S) and self.owed_s > 0:
            t0 = time.perf_counter()
            time.sleep(self.owed_s)
            took = time.perf_counter() - t0
            self.owed_s -= took
            self.slept_s += took
        self.since = time.thread_time()
