"""The rendezvous of a run: one torch ``TCPStore``, and the run's token that sets it apart from others.

Every run gets a random token (``new_token``, in its ``RunConfig``). Whoever serves the store (the
driver process, or the launcher on the driver's host in a run across hosts) publishes the token's
SHA-256 under ``TOKEN_KEY``; everything the run keeps in the store lives under ``run/<token>/``
(gloo's own rendezvous, the files shipped to other hosts, heartbeats, reports). A process that joins
first compares the published digest with its own token's: a process of another run (the same port,
a worker left from an earlier run) is refused at once with a message saying so, and as it never
writes under this run's prefix it cannot disturb the run. The token separates runs; what a run across
hosts acts on in the store is also authenticated with a key derived from it (``runtime.store_auth``).
"""

from __future__ import annotations

import datetime
import hashlib
import secrets
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Protocol, overload

import torch.distributed as dist

from hetsplit.errors import RuntimeFailure, UsageError
from hetsplit.storeprobe import TOKEN_KEY, Refused, probe

__all__ = ["TOKEN_KEY", "Refused", "Watchdog", "check_port", "digest", "free_port", "join", "new_token", "scoped",
           "serve"]


def new_token() -> str:
    """A fresh random run token (128 bits, hex)."""
    return secrets.token_hex(16)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def free_port() -> int:
    """A TCP port free on this host now (for a driver whose runs must all serve one port: ``--recover``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return int(s.getsockname()[1])


def check_port(port: int, flag: str = "--port") -> None:
    """Refuse a port outside 0..65535 up front (0: a free port picked by the OS)."""
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise UsageError(f"{flag} {port}: give a TCP port in 1..65535, or 0 to let the system pick a free one")


def _td(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def _first_line(exc: BaseException) -> str:
    text = str(exc)
    return text.splitlines()[0] if text else type(exc).__name__


def serve(port: int, token: str, timeout_s: float, who: str = "driver") -> dist.TCPStore:
    """Serve the run's store on ``port`` (all interfaces; 0: the OS picks) and publish the token's digest."""
    check_port(port)
    try:
        store = dist.TCPStore("0.0.0.0", port, None, True, _td(timeout_s), wait_for_workers=False)
    except (RuntimeError, OSError) as exc:
        low = str(exc).lower()
        if "in use" in low or "address already" in low or "errno: 98" in low:
            raise RuntimeFailure(f"{who}: port {port} is in use (another run, or another program); pass another "
                                 "--port, or 0 to pick a free one") from None
        raise RuntimeFailure(f"{who}: cannot serve the rendezvous on port {port} ({_first_line(exc)})") from None
    store.set(TOKEN_KEY, digest(token))
    return store


def join(host: str, port: int, token: str, timeout_s: float, who: str, dog: "Watchdog | None" = None) -> dist.TCPStore:
    """Join the store at ``host:port`` and check that it serves the run of ``token`` (``Refused`` if not),
    all within ``timeout_s`` (the token's calls timed by ``dog`` when given)."""
    check_port(port)
    deadline = time.monotonic() + timeout_s
    probe(host, port, timeout_s, who, digest(token))
    left = max(0.1, deadline - time.monotonic())
    try:
        store = dist.TCPStore(host, port, None, False, _td(left))
    except (RuntimeError, OSError) as exc:
        raise RuntimeFailure(f"{who}: cannot reach the rendezvous at {host}:{port} within {timeout_s:g} s "
                             f"({_first_line(exc)})") from None
    left = max(0.1, deadline - time.monotonic())
    calls = dog.watched(store) if dog is not None else store
    try:
        calls.wait([TOKEN_KEY], _td(left))
        published = calls.get(TOKEN_KEY).decode()
    except (RuntimeError, OSError):
        raise Refused(f"{who}: {host}:{port} is not the rendezvous of a hetsplit run (no run token published "
                      f"within {timeout_s:g} s)") from None
    if published != digest(token):
        raise Refused(f"{who}: refused by the rendezvous at {host}:{port}: it serves another run (the run tokens "
                      "differ); give the token the driver printed, or another --port if two runs collide")
    return store


class KeyValueStore(Protocol):
    """The store calls hetsplit makes: torch's ``dist.Store`` and a ``WatchedStore`` both answer them."""

    def set(self, key: str, value: Any) -> None: ...   # torch's stub says str; its binding takes bytes too

    def get(self, key: str) -> bytes: ...

    def check(self, keys: list[str]) -> bool: ...

    @overload
    def wait(self, keys: list[str]) -> None: ...

    @overload
    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None: ...

    def add(self, key: str, value: int) -> int: ...


def scoped(store: dist.Store, token: str) -> dist.PrefixStore:
    """The run's own part of the store (every key under ``run/<token>/``)."""
    return dist.PrefixStore(f"run/{token}/", store)


class Watchdog:
    """Ends this process when no store call completes for ``seconds`` (``on_stall`` then runs in the
    watchdog's thread: it must end the process, e.g. print and ``os._exit``).

    torch's store client has no timeout of its own on a reply: a server that accepts a request and
    never answers (a hostile or wedged driver) blocks the call forever, inside C++ where no signal
    handler runs (SIGTERM and Ctrl-C included). The calls release the GIL, so this thread still runs."""

    def __init__(self, seconds: float, on_stall: Callable[[], None]):
        self.seconds, self.on_stall = seconds, on_stall
        self.last = time.monotonic()
        self.busy = 0
        self.remove: Path | None = None     # a temporary folder to remove when it ends the process
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="hetsplit-watchdog", daemon=True)

    def __enter__(self) -> "Watchdog":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()

    def kick(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while not self.done.wait(min(0.25, self.seconds / 40)):
            if self.busy and time.monotonic() - self.last > self.seconds:
                self.on_stall()
                return

    def watched(self, store: KeyValueStore) -> "WatchedStore":
        return WatchedStore(store, self)


class WatchedStore:
    """A store whose every call is timed by a ``Watchdog`` (the calls hetsplit makes: set, get, check,
    wait, add)."""

    def __init__(self, store: KeyValueStore, dog: Watchdog):
        self._store, self._dog = store, dog

    def _call(self, name: str, *args: object) -> Any:
        dog = self._dog
        dog.kick()
        dog.busy += 1
        try:
            return getattr(self._store, name)(*args)
        finally:
            dog.busy -= 1
            dog.kick()

    def set(self, key: str, value: Any) -> None:
        self._call("set", key, value)

    def get(self, key: str) -> bytes:
        return bytes(self._call("get", key))

    def check(self, keys: list[str]) -> bool:
        return bool(self._call("check", keys))

    @overload
    def wait(self, keys: list[str]) -> None: ...

    @overload
    def wait(self, keys: list[str], timeout: datetime.timedelta) -> None: ...

    def wait(self, keys: list[str], timeout: datetime.timedelta | None = None) -> None:
        self._call("wait", keys) if timeout is None else self._call("wait", keys, timeout)

    def add(self, key: str, value: int) -> int:
        return int(self._call("add", key, value))
