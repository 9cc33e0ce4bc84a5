"""The order a worker runs its (input, segment) steps in: rounds, software-pipelined across inputs.

Run input by input, a worker whose input crosses to another device and back k times waits for each
crossing in turn, so the devices take turns on one input (a ResNet-50 mapping crossing 21 times
between an H100 and a CPU ran 8x below its predicted rate). Instead each segment gets a lag: how many
device crossings lie before it on the longest path from the driver (``segment_lags``). After the
first ``latency`` inputs (sent one at a time by the driver, so run input by input), round ``t`` runs
every segment ``s`` of this rank on input ``t - lag(s)``, in program order: a segment one crossing
behind works on an older input, whose data has been on its way for a round, and the devices work on
different inputs at once, as the simulator and the closed form assume.

Deadlock-free: order every step by (round, global topological position of its segment). Each message
goes from a lower key to a higher one (a crossing adds one to the lag; the driver's inputs arrive at
lag 0), every rank runs its steps by increasing key, and a rank posts its receives
``lookahead(...)`` rounds ahead, at least as far as any message's consumer lags its producer, so the
step with the least key not yet done can always proceed.

Plans with a sum combine (its gathers and scatters are the manifest's ``collectives``: tensor-parallel
plans, mappings with ``in`` shards) run input by input (lag 0 everywhere; ``estimate.here`` simulates
them so, ``TaskGraph.sums_across_devices``, and a test checks that it names the same plans). Lags would let them work
on many inputs at once, but a tensor-parallel plan crosses between its devices at every layer
(MobileBERT's: lags up to ~120), so ~120 inputs would be in flight at each worker, each holding the
tensors and receive buffers it still needs there: over 150 inputs its two workers peaked at 2.9 and
4.2 GB with lags (6.7 inputs/s), against 0.57 and 0.52 GB input by input (5.2/s). And an input's
output would come ~120 rounds (each about one input's compute) after it went in: the outputs of a
stream shorter than that all arrive at its end, where input by input the plan gives its
single-input latency (222-233 ms).
"""

from __future__ import annotations

from collections.abc import Iterator

from hetsplit.runtime.manifest import Manifest

Step = tuple[int, int]          # (input, segment index)


def producers(manifest: Manifest) -> dict[int, tuple[int, int]]:
    """Per message a worker sends: the (rank, segment index) that sends it (the driver's have none)."""
    return {mid: (w.rank, s.index) for w in manifest.stages for s in w.segments for mid in s.send}


def segment_lags(manifest: Manifest) -> dict[tuple[int, int], int]:
    """Per (rank, segment index): the most device crossings on a path from the driver to it (0 for
    every segment of a plan with a sum combine: see the module doc)."""
    segs = [(w.rank, s.index) for w in manifest.stages for s in w.segments]
    lag = {key: 0 for key in segs}
    if manifest.collectives:
        return lag
    producer = producers(manifest)
    changed = True
    while changed:                 # longest path by relaxation: the segment graph is a DAG, so this ends
        changed = False
        for w in manifest.stages:
            prev = 0
            for s in w.segments:
                need = max([prev] + [lag[producer[mid]] + 1 for mid in s.recv if mid in producer])
                if need > lag[w.rank, s.index]:
                    lag[w.rank, s.index], changed = need, True
                prev = lag[w.rank, s.index]
    return lag


def in_flight(manifest: Manifest) -> int:
    """How many inputs a stream of ``manifest`` keeps in flight at most: the deepest segment lag (rounds
    behind the first), plus one. A stream of fewer than a few times this never reaches its steady state."""
    return 1 + max(segment_lags(manifest).values(), default=0)


def rounds(lags: list[int], inputs: int, latency: int) -> list[list[Step]]:
    """A rank's steps, round by round: inputs ``0..latency-1`` one round each (all its segments), then
    round ``t`` runs segment ``j`` on input ``t - lags[j]`` for the inputs left. ``lags`` is per
    segment of the rank, in program order (non-decreasing)."""
    segments = range(len(lags))
    latency = min(latency, inputs)
    out = [[(i, j) for j in segments] for i in range(latency)] if lags else []
    top = max(lags, default=0)
    for t in range(latency, inputs + top):
        step = [(t - lags[j], j) for j in segments if latency <= t - lags[j] < inputs]
        if step:
            out.append(step)
    return out


def frees_after(plan: list[list[Step]]) -> list[int]:
    """Per round, the round after which its inputs are done at this rank (its receive buffers free)."""
    last: dict[int, int] = {}
    for r, steps in enumerate(plan):
        for i, _ in steps:
            last[i] = r
    return [max(last[i] for i, _ in steps) for steps in plan]


def lookahead(manifest: Manifest, lags: dict[tuple[int, int], int], depth: int) -> int:
    """How many rounds ahead every rank posts its receives: ``depth``, plus the most a message's
    consumer lags behind its producer (so no rank waits on a send whose receive is not yet posted)."""
    producer = producers(manifest)
    spread = [lags[w.rank, s.index] - lags[producer[mid]] for w in manifest.stages for s in w.segments
              for mid in s.recv if mid in producer]
    return depth + max(spread, default=0)


def p2p_order(manifest: Manifest, rank: int, plan: list[list[Step]], sending: bool) -> Iterator[tuple[int, int]]:
    """(input, message id) of every point-to-point message rank ``rank`` sends (or receives), in the order
    it posts them: its steps in round order, each segment's messages in manifest order (a worker posts a
    round's receives together, ahead of the round, in that same order)."""
    segs = manifest.worker(rank).segments
    return ((i, mid) for round_steps in plan for i, s in round_steps
            for mid in (segs[s].send if sending else segs[s].recv))
