"""The worker's step loop (``worker.StepLoop``) on an in-process transport: a relay gets every input in
order and sends on what it received, each message end is logged once per input, receive buffers are
reused (no more than ``depth`` + 1 of them for a relay waiting on itself), and an emulated latency is
slept by the sender before it posts."""

from __future__ import annotations

import collections

import numpy as np
import pytest

from hetsplit.runtime.config import RunConfig
from hetsplit.runtime.manifest import Manifest, Message, Segment, TensorSpec, WireTensor, Worker
from hetsplit.runtime.wire import Wire
from hetsplit.runtime.worker import MAX_RETIRED_FRAMES, BufferPool, Segments, StepLoop, Transfers, dropped_after


class Done:
    def __init__(self, action=None):
        self.action = action

    def wait(self, timeout=None) -> bool:
        if self.action is not None:
            self.action()
            self.action = None
        return True


class Loopback:
    """A process group for one worker: receives fill in the next input's value (in posting order, per
    tag), sends record a copy of what they carried."""

    def __init__(self):
        self.next = collections.Counter()
        self.sent: list[tuple[int, int, float]] = []     # (peer, tag, value)

    def recv(self, tensors, rank, tag):
        value = self.next[tag]
        self.next[tag] += 1

        def land():
            tensors[0].fill_(float(value))
        return Done(land)

    def send(self, tensors, rank, tag):
        self.sent.append((rank, tag, float(tensors[0][0])))
        return Done()


def manifest(computing: bool) -> Manifest:
    x, y = TensorSpec("x", (4,), "float32"), TensorSpec("y", (4,), "float32")
    m0 = Message(0, "x", "driver", 0, "d", 1, (WireTensor(x, "x"),), tag=0)
    m1 = Message(1, "y", "d", 1, "driver", 0, (WireTensor(y, "x"),), tag=5)
    seg = Segment(0, ["relay"], "relay.onnx" if computing else None, inputs=[x], outputs=[], recv=[0], send=[1])
    return Manifest("relay", {}, [x], [y], [m0, m1], [], [Worker(0, "driver"), Worker(1, "d", segments=[seg])])


class Add:
    """A sub-model stand-in: the input plus 0.5 into the tensor it sends (``x``, in place)."""

    def call(self, local) -> None:
        local["x"] = local["x"] + 0.5


@pytest.mark.parametrize("computing", [False, True])
def test_a_relay_sends_on_every_input_in_order_and_logs_each_end_once(computing):
    n = 200
    m = manifest(computing)
    group = Loopback()
    wire = Wire(group, "d", 10)
    pool = BufferPool(wire.views)
    io = Transfers(m, 1, wire, pool)
    steps = Segments([Add() if computing else None], dropped_after(m, 1), n)
    loop = StepLoop(m, 1, io, steps, RunConfig("", inputs=n, latency_inputs=2, depth=2))
    loop.run()
    assert loop.shared.error is None
    shift = 0.5 if computing else 0.0
    assert group.sent == [(0, 5, i + shift) for i in range(n)]
    for log in (loop.rx_logs[0], loop.tx_logs[1]):
        assert len(log.start) == len(log.done) == n
        assert log.done == sorted(log.done) and all(a <= b for a, b in zip(log.start, log.done))
    assert len(steps.per_segment) == n and all(len(p) == 1 for p in steps.per_segment)
    made = sum(len(stack) for stack in pool.free.values())
    # buffers cycle: a handful, not one per input. Computing, every send goes through the helper threads and
    # the pool does not wait for them (a buffer still in a send makes it allocate another), so how many it
    # makes depends on thread scheduling, up to the frames the loop lets wait for their sends before it
    # waits for the sender itself, plus the round computing and those whose receives are posted ahead (a
    # starved sender once made it allocate 136 buffers for 200 inputs)
    assert made <= (MAX_RETIRED_FRAMES + 1 + loop.ahead if computing else 3), made


def test_an_emulated_latency_is_slept_before_the_send():
    n = 3
    m = manifest(False)
    group = Loopback()
    wire = Wire(group, "d", 10)
    io = Transfers(m, 1, wire, BufferPool(wire.views))
    loop = StepLoop(m, 1, io, Segments([None], dropped_after(m, 1), n),
                    RunConfig("", inputs=n, latency_inputs=n, delays_s={"1": {"0": 0.02}}))
    assert loop.segments[0][2][0].delay_s == 0.02
    loop.run()
    assert loop.shared.error is None
    assert [v for _, _, v in group.sent] == [0.0, 1.0, 2.0]
    log = loop.tx_logs[1]
    assert all(done - start >= 0.02 for start, done in zip(log.start, log.done))
    assert np.isfinite(loop.idle).all()


def ping_pong(hops: int) -> Manifest:
    """Device d hands each input to device e and back ``hops`` times (d's segment j receives ``a<j>`` and
    sends it on, e sends it back as ``a<j+1>``), then to the driver: d's last segments lag its first by
    2 x hops rounds, so d works on that many inputs at once."""
    spec = [TensorSpec(f"a{j}", (4,), "float32") for j in range(hops + 1)]
    msgs = [Message(0, "a0", "driver", 0, "d", 1, (WireTensor(spec[0], "x"),), tag=0)]
    d_segs, e_segs = [], []
    for j in range(hops):
        out, back = len(msgs), len(msgs) + 1
        msgs += [Message(out, f"a{j}", "d", 1, "e", 2, (WireTensor(spec[j], f"a{j}"),), tag=10 + 2 * j),
                 Message(back, f"a{j + 1}", "e", 2, "d", 1, (WireTensor(spec[j + 1], f"a{j}"),), tag=11 + 2 * j)]
        recv = [0] if j == 0 else [back - 2]
        d_segs.append(Segment(j, [f"d{j}"], None, inputs=[spec[j]], outputs=[], recv=recv, send=[out]))
        e_segs.append(Segment(j, [f"e{j}"], None, inputs=[spec[j]], outputs=[], recv=[out], send=[back]))
    last = len(msgs)
    msgs.append(Message(last, "y", "d", 1, "driver", 0, (WireTensor(spec[hops], f"a{hops}"),), tag=9))
    d_segs.append(Segment(hops, ["dz"], None, inputs=[spec[hops]], outputs=[], recv=[last - 1], send=[last]))
    return Manifest("ping-pong", {}, [spec[0]], [spec[hops]], msgs, [],
                    [Worker(0, "driver"), Worker(1, "d", segments=d_segs), Worker(2, "e", segments=e_segs)])


def test_a_lagging_worker_reuses_the_buffers_its_inputs_no_longer_hold():
    """Each buffer d received goes back to the pool once the step that read it has run (its input holds
    it no longer), not when every input of its round is done here, 2 x hops rounds later: the buffers d
    makes do not grow with the depth of its lag (they did: one per message of every input in flight)."""
    hops, n = 12, 80
    m = ping_pong(hops)
    group = Loopback()
    wire = Wire(group, "d", 10)
    pool = BufferPool(wire.views)
    loop = StepLoop(m, 1, Transfers(m, 1, wire, pool), Segments([None] * (hops + 1), dropped_after(m, 1), n),
                    RunConfig("", inputs=n, latency_inputs=2, depth=2))
    assert max(i for steps in loop.plan for i, _ in steps) == n - 1 and len(loop.plan) > n + 2 * hops - 1
    loop.run()
    assert loop.shared.error is None
    assert [v for _, tag, v in group.sent if tag == 9] == [float(i) for i in range(n)]
    made = sum(len(stack) for stack in pool.free.values())
    per_round = hops + 1         # d's receives in a full round: one per segment, each on another input
    assert made <= (loop.ahead + 2) * per_round, made


def test_the_inputs_a_stream_keeps_in_flight_are_its_deepest_lag_plus_one():
    """``RunReport.depth_note`` and ``MappingRunOptions.fill`` go by it: one input per round of lag, plus one."""
    from hetsplit.runtime.rounds import in_flight

    assert [in_flight(ping_pong(h)) for h in (1, 3)] == [3, 7]
    assert in_flight(manifest(True)) == 1


def test_a_buffer_an_input_still_views_is_not_released():
    """An output may view its input (a reshape): that buffer stays in the frame until its input is done."""
    import torch

    from hetsplit.runtime.worker import release

    bufs = [np.zeros(8, np.float32) for _ in range(3)]
    frame = [(b, [], []) for b in bufs]
    kept = {"view": bufs[0].reshape(2, 4), "tensor": torch.from_numpy(bufs[2])[2:], "own": np.ones(8)}
    freed = release(frame, (0, 1, 2), kept.values())
    assert [e[0] is bufs[1] for e in freed] == [True] and frame[0] is not None and frame[1] is None
    assert frame[2] is not None
    assert len(release(frame, (0, 2), ())) == 2 and frame == [None, None, None]
