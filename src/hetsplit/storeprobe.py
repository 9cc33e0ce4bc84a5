"""Reach a run's rendezvous with a plain socket, before torch is loaded: a bounded wait on a peer.

torch's store client can wait past its timeout (its constructor retries; a reply that never comes is
waited for forever), and loading torch takes seconds on a small board. ``probe`` speaks the few
messages of torch's TCPStore protocol a joining process needs (validate, ping, check a key, get it)
under Python socket timeouts, so a port where nothing listens, a peer that accepts and never answers,
one that answers pings only, and the store of another run all end in one message within the timeout,
with nothing of torch loaded. Kept free of heavy imports on purpose (``hetsplit worker`` runs it first).
"""

from __future__ import annotations

import math
import secrets
import socket
import struct
import time

from hetsplit.errors import RuntimeFailure, UsageError

MAX_TIMEOUT_S = 7 * 86400.0       # a week: any longer wait is a mistake (or an attack), not a setting
TOKEN_KEY = "hetsplit/token-sha256"
TOKEN_ENV = "HETSPLIT_TOKEN"      # where a worker reads the run's token (or --token-file)
_VALIDATE, _GET, _CHECK, _PING = 0, 3, 5, 13           # torch TCPStore's query types
_VALIDATION_MAGIC = 0x3C85F7CE
_READY = 0
_KEY_PREFIX = "/"                 # torch's client puts it before every key
_MAX_DIGEST = 1024                # a token digest is 64 hex characters


class Refused(RuntimeFailure):
    """A process presented another run's token (or the port serves no hetsplit run)."""


def check_timeout(seconds: float, flag: str = "--timeout") -> None:
    """Refuse a timeout that is not finite seconds in (0, a week], naming ``flag``."""
    if not (isinstance(seconds, (int, float)) and math.isfinite(seconds) and 0 < seconds <= MAX_TIMEOUT_S):
        raise UsageError(f"{flag} {seconds}: give a number of seconds > 0 and at most {MAX_TIMEOUT_S:g} (a week)")


def _key(name: str) -> bytes:
    raw = (_KEY_PREFIX + name).encode()
    return struct.pack("<Q", len(raw)) + raw


def _recv(s: socket.socket, n: int) -> bytes:
    got = b""
    while len(got) < n:
        part = s.recv(n - len(got))
        if not part:
            raise ConnectionResetError("closed by the peer")
        got += part
    return got


def _token_digest(s: socket.socket, deadline: float) -> bytes | None:
    """The published token digest, asked for until ``deadline``; None if none is published by then."""
    while True:
        s.settimeout(max(1e-3, deadline - time.monotonic()))
        s.sendall(struct.pack("<BQ", _CHECK, 1) + _key(TOKEN_KEY))
        if _recv(s, 1)[0] == _READY:
            s.sendall(struct.pack("<B", _GET) + _key(TOKEN_KEY))
            size = struct.unpack("<Q", _recv(s, 8))[0]
            return _recv(s, size) if size <= _MAX_DIGEST else b""
        if time.monotonic() + 0.1 >= deadline:
            return None
        time.sleep(0.1)


def probe(host: str, port: int, timeout_s: float, who: str, token_digest: str | None = None) -> None:
    """Wait until a store answers at ``host:port`` (connection refused: retried), within ``timeout_s``; with
    ``token_digest``, also until it publishes the run token's digest, which must be that one (``Refused``
    if it is another run's, or if the peer does not speak the store's protocol)."""
    deadline = time.monotonic() + timeout_s
    where = f"{host}:{port}"
    not_ours = f"{who}: {where} is not the rendezvous of a hetsplit run"
    reached = False
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            with socket.create_connection((host, port), timeout=left) as s:
                reached = True
                s.settimeout(max(1e-3, deadline - time.monotonic()))
                nonce = secrets.randbits(32)
                s.sendall(struct.pack("<BI", _VALIDATE, _VALIDATION_MAGIC) + struct.pack("<BI", _PING, nonce))
                if _recv(s, 4) != struct.pack("<I", nonce):
                    raise Refused(f"{not_ours} (it does not speak the store's protocol)")
                if token_digest is None:
                    return
                published = _token_digest(s, deadline)
            if published is None:
                raise Refused(f"{not_ours} (no run token published within {timeout_s:g} s)")
            if not secrets.compare_digest(published, token_digest.encode()):
                raise Refused(f"{who}: refused by the rendezvous at {where}: it serves another run (the run tokens "
                              "differ); give the token the driver printed, or another --port if two runs collide")
            return
        except socket.timeout:
            break
        except OSError:                     # refused, unreachable, reset: the driver may not be up yet
            time.sleep(min(0.25, max(0.0, deadline - time.monotonic())))
    if reached:
        raise Refused(f"{not_ours} (it did not answer within {timeout_s:g} s)")
    raise RuntimeFailure(f"{who}: cannot reach the rendezvous at {where} within {timeout_s:g} s (nothing answers "
                         "there: is the run started, the address and port right, a firewall open?)")
