"""The rendezvous of a run: one torch ``TCPStore``, and the run's token that sets it apart from others.

Every run gets a random token (``new_token``, in its ``RunConfig``). Whoever serves the store (the
driver process, or the launcher on the driver's host in a run across hosts) publishes the token's
SHA-256 under ``TOKEN_KEY``; everything the run keeps in the store lives under ``run/<token>/``
(gloo's own rendezvous, the files shipped to other hosts, heartbeats, reports). A process that joins
first compares the published digest with its own token's: a process of another run (the same port,
a worker left from an earlier run) is refused at once with a message saying so, and as it never
writes under this run's prefix it cannot disturb the run. The token separates runs; it is not
authentication (the store has none): run across hosts only on a network you trust.
"""

from __future__ import annotations

import datetime
import hashlib
import secrets

import torch.distributed as dist

from hetsplit.errors import RuntimeFailure, UsageError

TOKEN_KEY = "hetsplit/token-sha256"


class Refused(RuntimeFailure):
    """A process presented another run's token (or the port serves no hetsplit run)."""


def new_token() -> str:
    """A fresh random run token (128 bits, hex)."""
    return secrets.token_hex(16)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


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


def join(host: str, port: int, token: str, timeout_s: float, who: str) -> dist.TCPStore:
    """Join the store at ``host:port`` and check that it serves the run of ``token`` (``Refused`` if not)."""
    check_port(port)
    try:
        store = dist.TCPStore(host, port, None, False, _td(timeout_s))
    except (RuntimeError, OSError) as exc:
        raise RuntimeFailure(f"{who}: cannot reach the rendezvous at {host}:{port} within {timeout_s:g} s "
                             f"({_first_line(exc)})") from None
    try:
        store.wait([TOKEN_KEY], _td(timeout_s))
        published = store.get(TOKEN_KEY).decode()
    except (RuntimeError, OSError):
        raise Refused(f"{who}: {host}:{port} is not the rendezvous of a hetsplit run (no run token published "
                      f"within {timeout_s:g} s)") from None
    if published != digest(token):
        raise Refused(f"{who}: refused by the rendezvous at {host}:{port}: it serves another run (the run tokens "
                      "differ); give the token the driver printed, or another --port if two runs collide")
    return store


def scoped(store: dist.Store, token: str) -> dist.PrefixStore:
    """The run's own part of the store (every key under ``run/<token>/``)."""
    return dist.PrefixStore(f"run/{token}/", store)
