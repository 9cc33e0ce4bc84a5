"""The overlap machinery of a stage process: a receiver thread and a sender thread around its compute loop.

The driver needs none of it (process.run_driver posts and waits from its one thread).

The receiver posts receives for input i+1 while input i computes; the sender ships input i-1's
results meanwhile. Receive buffers come from a small pool of *frames* (one array per incoming
tensor), so steady state allocates nothing; a frame returns to the pool once its tensors are
computed on and relayed. Every thread records timestamps (``time.time()``, comparable across
processes of one machine) so transfer and idle times can be measured after the run.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from hetsplit.runtime.manifest import Edge
from hetsplit.runtime.wire import Wire

Frame = dict[str, np.ndarray]
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

    def get(self, q: queue.Queue):
        """``q.get()`` that gives up (raising Stop) as soon as any thread failed."""
        while True:
            try:
                return q.get(timeout=POLL_S)
            except queue.Empty:
                if self.stop.is_set():
                    raise Stop() from None


@dataclass
class EdgeLog:
    """Per-input timestamps of one edge."""

    peer: str
    nbytes: int
    start: list[float] = field(default_factory=list)   # receive posted / send posted
    done: list[float] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"peer": self.peer, "nbytes": self.nbytes, "start": self.start, "done": self.done}


class Receiver(threading.Thread):
    """Receives ``n`` inputs' tensors over ``edges`` into pooled frames, in order; consumers ``take()``.

    Receives are posted as soon as a frame is free (up to ``depth`` inputs in flight), and this
    thread waits for them, so each transfer's completion time is recorded when it happens, not
    when the consumer gets round to it.
    """

    def __init__(self, wire: Wire, edges: list[Edge], n: int, depth: int, shared: Shared):
        super().__init__(daemon=True, name="receiver")
        self.wire, self.edges, self.n, self.shared = wire, edges, n, shared
        self.pool: queue.Queue[Frame] = queue.Queue()
        for _ in range(depth):
            self.pool.put({t.name: self._buffer(e, t) for e in edges for t in e.tensors})
        self.ready: queue.Queue[tuple[int, Frame]] = queue.Queue()
        self.logs = [EdgeLog(e.peer, e.nbytes) for e in edges]

    def run(self) -> None:
        try:
            for i in range(self.n):
                frame = self.shared.get(self.pool)
                posted = []
                for e, log in zip(self.edges, self.logs):
                    log.start.append(time.time())
                    posted.append(self.wire.post_recv(e, [frame[t.name] for t in e.tensors]))
                for e, log, works in zip(self.edges, self.logs, posted):
                    self.wire.wait(works, e, sending=False)
                    log.done.append(time.time())
                self.ready.put((i, frame))
        except Stop:
            pass
        except RuntimeError as exc:
            self.shared.fail(self.wire.failure(self.edges[0].peer, False, exc))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.shared.fail(exc)

    def _buffer(self, edge: Edge, spec):
        if self.wire.on_gpu(edge):
            from hetsplit.runtime.nccl import cuda_empty

            return cuda_empty(spec)
        return spec.empty()

    def take(self) -> tuple[int, Frame]:
        """The next input's frame, once all its tensors have arrived (Stop if any thread failed)."""
        return self.shared.get(self.ready)

    def release(self, frame: Frame) -> None:
        self.pool.put(frame)


class Sender(threading.Thread):
    """Sends ``n`` inputs' tensors over ``edges``, in order; producers call ``submit``.

    Without emulated delays, ``submit`` posts the sends at once from the producer's thread (gloo
    sends are asynchronous), so a transfer starts the moment its tensors exist; this thread only
    waits for completion, records it and releases the frame. With a delay per edge, this thread
    sleeps it and then posts.
    """

    def __init__(self, wire: Wire, edges: list[Edge], n: int, shared: Shared, delays_s: list[float] | None = None,
                 release=None):
        super().__init__(daemon=True, name="sender")
        self.wire, self.edges, self.n, self.shared = wire, edges, n, shared
        self.delays = delays_s or [0.0] * len(edges)
        self.inbox: queue.Queue = queue.Queue()
        self.release = release
        self.logs = [EdgeLog(e.peer, e.nbytes) for e in edges]

    def _post(self, e: Edge, log: EdgeLog, arrays: dict[str, np.ndarray]) -> list:
        log.start.append(time.time())
        return self.wire.post(e, [arrays[t.name] for t in e.tensors], sending=True)

    def submit(self, i: int, arrays: dict[str, np.ndarray], frame: Frame | None) -> None:
        posted = None
        if not any(self.delays):
            posted = [self._post(e, log, arrays) for e, log in zip(self.edges, self.logs)]
        self.inbox.put((i, arrays, frame, posted))

    def run(self) -> None:
        try:
            for _ in range(self.n):
                _, arrays, frame, posted = self.shared.get(self.inbox)
                for k, (e, log, delay) in enumerate(zip(self.edges, self.logs, self.delays)):
                    if posted is None:  # emulated link latency: the link is busy for it, as the cost model says
                        log.start.append(time.time())
                        time.sleep(delay)
                        works = self.wire.post_send(e, [arrays[t.name] for t in e.tensors])
                    else:
                        works = posted[k]
                    self.wire.wait(works, e, sending=True)
                    log.done.append(time.time())
                if frame is not None and self.release is not None:
                    self.release(frame)
        except Stop:
            pass
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.shared.fail(exc)
