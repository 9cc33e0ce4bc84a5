"""The transfers in flight at one worker, and which thread waits for each (``InFlight``).

A gloo ``Work`` can be waited for once, and only by blocking in its ``wait``: gloo's point-to-point works
have no future and report completion only once waited for. So each posted transfer is a ``Pending`` that
one thread owns and waits for, recording when it ended:

- the compute thread itself, when it needs a receive and no helper holds an unfinished transfer: an idle
  worker takes a message with one wake-up, as ``recv().wait()`` does; when no sub-model runs next it
  first waits for the sends it posted before (the order of raw send/recv), so each end is timestamped
  when it happens, else it leaves them to be lent with the sub-model;
- a helper thread (one for receives, one for sends) that the compute thread lends transfers to: before
  it runs a sub-model (what lands meanwhile is timestamped when it lands, and the sends overlap the
  compute), and whenever a helper already holds one, so the compute thread never blocks in gloo while
  another thread's transfer may fail: it waits for the hand-off instead and gives up (``Stop``) as soon
  as any thread has failed;
- a send delayed by an emulated link latency is lent at once: the sender sleeps the latency, then posts it.

Each transfer is lent at most once and never taken back, so exactly one thread waits for it. Message
logs are written by the compute thread alone, in program order (``take``, ``settle``).
"""

from __future__ import annotations

import collections
import itertools
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from hetsplit.runtime.manifest import Edge

POLL_S = 0.05


class Stop(Exception):
    """Raised inside a loop when another thread has failed."""


@dataclass
class Shared:
    """Failure state shared by the threads of one process."""

    stop: threading.Event = field(default_factory=threading.Event)
    error: BaseException | None = None

    def fail(self, exc: BaseException) -> None:
        if self.error is None:
            self.error = exc
        self.stop.set()

    def get(self, q: queue.SimpleQueue):
        """``q.get()`` that gives up (raising Stop) as soon as any thread failed."""
        while True:
            try:
                return q.get(timeout=POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stop() from None


@dataclass
class MessageLog:
    """Per-input timestamps of one message at one end: when it was posted, when it was done."""

    id: int
    peer: str
    nbytes: int
    start: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"id": self.id, "peer": self.peer, "nbytes": self.nbytes, "start": self.start, "done": self.done}


FAILED = -1.0     # ``Pending.at`` of a transfer that failed


class Pending:
    """One posted transfer (a step's works), what it fills or reads, its log (None: none), and its owner:
    None (the compute thread) or the helper it was lent to, which releases ``ended`` once it ended.
    ``at``: when it ended, 0.0 until then, ``FAILED`` if it failed (one field, set once, so the compute
    thread checks a transfer's state with one read). Whether it sends is its waiter's to say (a
    transfer is in one book, and lent to one helper, by its direction)."""

    __slots__ = ("works", "edge", "log", "payload", "helper", "ended", "at")
    reused = True     # once ended and logged, the book reuses it for a later transfer (``InFlight.free``)

    def __init__(self, works: list | None, edge: Edge, log: MessageLog | None, payload: Any):
        self.works: Any = works      # None only for a delayed send not yet posted
        self.edge = edge
        self.log = log
        self.payload = payload
        self.helper: Helper | None = None
        self.ended: Any = None     # a lock held until it ended, made when lent (most transfers never are): a
        #                            one-shot latch that wakes its waiter with one futex call, unlike an Event
        self.at = 0.0

    def wait(self, wire, sending: bool) -> None:
        """Wait for the transfer (its owner only, once) and record when it ended; a helper counts it
        finished before it signals the hand-off."""
        ended = self.ended
        try:
            wire.wait(self.works, self.edge, sending)
            at = time.time()
            if self.helper is not None:
                self.helper.finished += 1
            self.at = at
        except BaseException:
            self.at = FAILED
            raise
        finally:
            if ended is not None:
                ended.release()


class Delayed(Pending):
    """A send its waiter (the sender) posts itself, after sleeping ``delay_s``: ``post`` returns its works
    and the arrays they read."""

    __slots__ = ("post", "delay_s")
    reused = False

    def __init__(self, post: Callable[[], tuple[list, Any]], delay_s: float, edge: Edge, log: MessageLog | None):
        super().__init__(None, edge, log, None)
        self.post, self.delay_s = post, delay_s

    def wait(self, wire, sending: bool) -> None:
        try:
            time.sleep(self.delay_s)
            self.works, self.payload = self.post()
        except BaseException:
            self.at = FAILED
            if self.ended is not None:
                self.ended.release()
            raise
        super().wait(wire, sending)


class Helper(threading.Thread):
    """Waits for the transfers lent to it, in the order lent (``sending``: a sender's, else a receiver's)."""

    def __init__(self, name: str, wire, shared: Shared, sending: bool):
        super().__init__(daemon=True, name=name)
        self.wire, self.shared, self.sending = wire, shared, sending
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.lent = 0              # transfers lent so far (the compute thread counts)
        self.finished = 0          # of those, the ones done (this thread counts; a failed one never is)

    def lend(self, p: Pending) -> None:
        p.helper, p.ended = self, threading.Lock()
        p.ended.acquire()
        self.lent += 1
        self.inbox.put(p)

    def close(self) -> None:
        self.inbox.put(None)

    def run(self) -> None:
        try:
            while (p := self.shared.get(self.inbox)) is not None:
                p.wait(self.wire, self.sending)
        except Stop:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the compute thread
            self.shared.fail(exc)


class InFlight:
    """The compute thread's book of its posted transfers: receives until taken, sends until done; those
    nobody waits for yet (its own, not yet waited for) are also queued in ``unwatched_*``, in order.
    ``idle(sends_done)`` runs in an idle take once its sends are done, before it waits to receive, with
    the count of sends done so far (``settle``)."""

    def __init__(self, wire, shared: Shared, idle: Callable[[int], None] | None = None):
        self.wire, self.shared = wire, shared
        self.timeout = wire.work_timeout      # what the compute thread's own waits are given (``_own``)
        self.idle = idle
        self.receiver, self.sender = Helper("receiver", wire, shared, False), Helper("sender", wire, shared, True)
        self.recvs: collections.deque[Pending] = collections.deque()   # posted, not taken (program order)
        self.sends: collections.deque[Pending] = collections.deque()   # posted, not settled (program order)
        self.unwatched_recvs: collections.deque[Pending] = collections.deque()   # a suffix of recvs
        self.unwatched_sends: collections.deque[Pending] = collections.deque()
        self.posted_sends = 0
        self.settled = 0
        self.free: list[Pending] = []     # transfers ended and logged, to be reused (``expect``, ``sent``)

    def start(self) -> None:
        self.receiver.start()
        self.sender.start()

    def _book(self, works: list, edge: Edge, log: MessageLog | None, payload: Any) -> Pending:
        """A transfer just posted: a ``Pending`` taken back (``free``) if there is one, filled as its
        ``__init__`` would (one store a field), else a new one (a reused one costs about half)."""
        free = self.free
        if not free:
            return Pending(works, edge, log, payload)
        p = free.pop()
        p.works = works
        p.edge = edge
        p.log = log
        p.payload = payload
        p.helper = p.ended = None
        p.at = 0.0
        return p

    def expect(self, works: list, edge: Edge, got: Any, log: MessageLog | None) -> None:
        """A posted receive (its works, what they fill: ``take`` returns it; its log, if any)."""
        p = self._book(works, edge, log, got)
        self.recvs.append(p)
        self.unwatched_recvs.append(p)

    def sent(self, works: list, edge: Edge, log: MessageLog | None, keep: Any) -> None:
        """A posted send (its works, the arrays they read: kept alive until it is done; its log, if any)."""
        p = self._book(works, edge, log, keep)
        self.sends.append(p)
        self.unwatched_sends.append(p)
        self.posted_sends += 1

    def send_later(self, post: Callable[[], tuple[list, Any]], delay_s: float, edge: Edge,
                   log: MessageLog | None) -> None:
        """A send the sender posts after sleeping ``delay_s`` (``post`` returns its works and arrays)."""
        p = Delayed(post, delay_s, edge, log)
        self.sends.append(p)
        self.posted_sends += 1
        self.sender.lend(p)

    def busy(self) -> bool:
        """Whether a helper holds an unfinished transfer (it may still block, or fail)."""
        r, s = self.receiver, self.sender
        return r.finished < r.lent or s.finished < s.lent

    def lend(self) -> None:
        """Before computing: lend every transfer nobody waits for yet to its helper."""
        self.lend_sends()
        while self.unwatched_recvs:
            self.receiver.lend(self.unwatched_recvs.popleft())

    def take(self, computing: bool) -> Any:
        """The next receive's payload (what ``expect`` was given), once landed. Unless ``computing`` (a
        sub-model runs next, and the sends in flight are lent with it, to overlap it), the sends are waited
        for first and then ``idle`` runs (the worker takes back the buffers they read, while the message may
        still be on its way, so the receives it posts next reuse them)."""
        p = self.recvs.popleft()
        mine = p.helper is None
        if mine:
            self.unwatched_recvs.popleft()    # it is their first
        r, s = self.receiver, self.sender
        if not computing:
            unwatched = self.unwatched_sends
            while unwatched:                  # wait_sends(), in line: once per message
                q = unwatched.popleft()
                if r.finished < r.lent or s.finished < s.lent:
                    s.lend(q)
                else:
                    self._own(q, True)
            if self.idle is not None:
                self.idle(self.settle())
        if p.at <= 0.0:                       # not ended yet (or failed)
            if not mine:
                self._finish(p)
            elif r.finished < r.lent or s.finished < s.lent:     # busy(), inlined: once per message
                r.lend(p)
                self._finish(p)
            else:
                self._own(p, False)
        if p.log is not None:
            p.log.done.append(p.at)
        self.free.append(p)       # what it filled stays referenced until reused: pooled buffers
        return p.payload

    def lend_sends(self) -> None:
        while self.unwatched_sends:
            self.sender.lend(self.unwatched_sends.popleft())

    def wait_sends(self) -> None:
        """Wait here for the sends nobody waits for yet (lent to the sender if a helper is busy)."""
        unwatched, r, s = self.unwatched_sends, self.receiver, self.sender
        while unwatched:
            p = unwatched.popleft()
            if r.finished < r.lent or s.finished < s.lent:      # busy(), inlined: once per message
                s.lend(p)
            else:
                self._own(p, True)

    def drain_sends(self, upto: int) -> int:
        """Wait until the first ``upto`` sends posted are done (when the sender falls far behind, rather than
        let the worker's pool allocate a buffer per input); how many are done (``settle``)."""
        self.wait_sends()
        for p in itertools.islice(self.sends, max(0, upto - self.settled)):
            if p.at <= 0.0:
                self._finish(p)
        return self.settle()

    def _own(self, p: Pending, sending: bool) -> None:
        """Wait here for ``p``, which nobody else waits for (Stop at once if any thread has failed):
        ``Wire.wait`` in line (its timeout, and a transport error named as a LinkFailure), a call less on
        every message's critical path."""
        if self.shared.error is not None:
            raise Stop()
        try:
            for w in p.works:
                w.wait(self.timeout)
        except RuntimeError as exc:
            p.at = FAILED
            raise self.wire.failure(p.edge.peer, sending, exc) from None
        except BaseException:
            p.at = FAILED
            raise
        p.at = time.time()

    def _finish(self, p: Pending) -> None:
        """Wait for ``p``'s helper's hand-off, unless it ended (Stop once any thread failed)."""
        if p.at != 0.0:
            if p.at < 0.0:
                raise Stop()
            return
        ended = p.ended
        assert ended is not None, "a transfer nobody waits for"
        if self.shared.stop.is_set():
            raise Stop()
        while not ended.acquire(timeout=POLL_S):
            if self.shared.stop.is_set():
                raise Stop()
        if p.at < 0.0:
            raise Stop()

    def settle(self) -> int:
        """Log the sends done, in program order; how many are (a prefix of those posted)."""
        sends = self.sends
        while sends and sends[0].at > 0.0:
            p = sends.popleft()
            if p.log is not None:
                p.log.done.append(p.at)
            self.settled += 1
            if p.reused:
                p.payload = p.works = None      # what it read is no longer kept alive
                self.free.append(p)
        return self.settled

    def finish(self) -> None:
        """Wait for every send posted (the end of the stream)."""
        self.wait_sends()
        for p in self.sends:
            self._finish(p)
        self.settle()

    def close(self) -> None:
        """Let the helpers end (once what was lent to them is done)."""
        self.receiver.close()
        self.sender.close()

    def join(self) -> None:
        """Wait for the helpers to end; at once if any thread failed (they are daemons)."""
        for t in (self.receiver, self.sender):
            while t.is_alive() and self.shared.error is None:
                t.join(POLL_S)
