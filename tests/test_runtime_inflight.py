"""Who waits for a worker's transfers (runtime.inflight): every work is waited for exactly once, by the
compute thread when it is idle and nothing else is in flight, by a helper while a sub-model runs or while
a helper holds one; logs stay in program order; a helper's failure stops the compute thread."""

from __future__ import annotations

import threading
import time

import pytest

from hetsplit.runtime.inflight import InFlight, MessageLog, Shared, Stop
from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.wire import LinkFailure

EDGE = Edge("peer", 1, ())


class FakeWork:
    """A gloo-like work: waited for once (twice is a bug), done when ``release`` is set."""

    def __init__(self, release: threading.Event | None = None, fail: bool = False):
        self.release, self.fail = release, fail
        self.waiters: list[str] = []

    def wait(self, timeout=None) -> None:
        self.waiters.append(threading.current_thread().name)
        assert len(self.waiters) == 1, "a work waited for twice"
        if self.release is not None:
            assert self.release.wait(5)
        if self.fail:
            raise LinkFailure("device me: lost the connection to peer", "lost", "peer")


class FakeWire:
    work_timeout = None

    def wait(self, works, edge, sending):
        for w in works:
            w.wait(self.work_timeout)


@pytest.fixture
def flight():
    shared = Shared()
    f = InFlight(FakeWire(), shared)
    f.start()
    yield f
    f.close()
    f.join()


def test_an_idle_worker_waits_for_everything_itself_in_program_order(flight):
    rx, tx = MessageLog(0, "peer", 4), MessageLog(1, "peer", 4)
    works = []
    for i in range(3):
        r, s = FakeWork(), FakeWork()
        works += [r, s]
        flight.expect([r], EDGE, {0: [i]}, rx)
        flight.sent([s], EDGE, tx, None)
        assert flight.take(computing=False) == {0: [i]}
    flight.finish()
    assert all(w.waiters == ["MainThread"] for w in works)
    assert flight.settle() == flight.posted_sends == 3
    assert len(rx.done) == len(tx.done) == 3 and rx.done == sorted(rx.done) and tx.done == sorted(tx.done)
    assert flight.receiver.lent == flight.sender.lent == 0


def test_while_computing_the_helpers_wait_and_logs_keep_program_order(flight):
    rx, tx = MessageLog(0, "peer", 4), MessageLog(1, "peer", 4)
    slow = threading.Event()
    first, second = FakeWork(slow), FakeWork()
    flight.sent([first], EDGE, tx, None)
    r = FakeWork()
    flight.expect([r], EDGE, {0: ["x"]}, rx)
    flight.lend()                                      # a sub-model runs: both lent
    assert flight.take(computing=True) == {0: ["x"]}   # handed over by the receiver
    flight.sent([second], EDGE, tx, None)
    flight.wait_sends()                                # the sender holds one: the second is lent too, not waited here
    assert flight.settle() == 0                        # the first is not done: nothing logged yet
    slow.set()
    flight.finish()
    assert r.waiters == ["receiver"] and first.waiters == second.waiters == ["sender"]
    assert flight.settled == 2 and len(tx.done) == 2 and tx.done[0] <= tx.done[1]


def test_a_receive_is_lent_while_a_helper_holds_a_transfer(flight):
    release = threading.Event()
    flight.sent([FakeWork(release)], EDGE, None, None)
    flight.lend_sends()
    r = FakeWork()
    flight.expect([r], EDGE, {0: []}, None)
    threading.Timer(0.1, release.set).start()
    flight.take(computing=False)
    assert r.waiters == ["receiver"]
    flight.finish()


def test_a_helpers_failure_stops_the_compute_thread(flight):
    flight.sent([FakeWork(fail=True)], EDGE, None, None)
    flight.lend_sends()
    flight.expect([FakeWork(threading.Event())], EDGE, {0: []}, None)   # never lands
    t0 = time.time()
    with pytest.raises(Stop):
        flight.take(computing=False)
    assert time.time() - t0 < 2
    assert isinstance(flight.shared.error, LinkFailure)


def test_a_delayed_send_is_posted_by_the_sender_after_its_delay(flight):
    tx = MessageLog(1, "peer", 4)
    w = FakeWork()
    posted: list[float] = []

    def post():
        posted.append(time.time())
        return [w], "arrays"

    t0 = time.time()
    flight.send_later(post, 0.05, EDGE, tx)
    flight.finish()
    assert posted[0] - t0 >= 0.05 and w.waiters == ["sender"] and len(tx.done) == 1


def test_receives_posted_after_a_sub_model_started_are_the_compute_threads_again(flight):
    first, second = FakeWork(), FakeWork()
    flight.expect([first], EDGE, {0: [1]}, None)
    flight.lend()                                  # a sub-model runs: the first is lent
    flight.expect([second], EDGE, {0: [2]}, None)    # posted after it
    assert flight.take(computing=False) == {0: [1]} and flight.take(computing=False) == {0: [2]}
    assert first.waiters == ["receiver"] and second.waiters == ["MainThread"]
    assert not flight.unwatched_recvs and not flight.recvs



def test_an_idle_take_runs_its_idle_work_once_the_sends_are_done_and_before_the_receive():
    """The worker's buffers come back while it waits for a message: after its sends (which may read
    them) are done, before it blocks on the receive; a computing take leaves its sends to the sender."""
    order: list[str] = []

    class Logged(FakeWork):
        def __init__(self, name: str):
            super().__init__()
            self.name = name

        def wait(self, timeout=None) -> None:
            super().wait(timeout)
            order.append(self.name)

    shared = Shared()
    flight = InFlight(FakeWire(), shared, idle=lambda done: order.append("idle"))
    flight.start()
    flight.sent([Logged("send")], EDGE, None, None)
    flight.expect([Logged("recv")], EDGE, {0: [1]}, None)
    assert flight.take(computing=False) == {0: [1]}
    assert order == ["send", "idle", "recv"]
    flight.sent([Logged("send2")], EDGE, None, None)
    flight.expect([Logged("recv2")], EDGE, {0: [2]}, None)
    flight.lend()
    assert flight.take(computing=True) == {0: [2]}
    flight.finish()
    flight.close()
    flight.join()
    assert "idle" not in order[3:]
