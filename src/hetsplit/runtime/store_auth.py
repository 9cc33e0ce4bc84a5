"""Values in a run's store, authenticated with the run token and sized before their bytes are read.

torch's ``TCPStore`` has no authentication: anyone who reaches the rendezvous port can read and write
it. Every value the driver publishes to the workers on other hosts (the remote map, the worker's
configuration, the manifest, the sub-models, an abort) and every value a worker sends back (beats,
reports, the error of a worker that failed before it computed) therefore carries an HMAC-SHA256 under
a key derived from the run token (``StoreKey``): a value that fails the check is refused with a message
naming it, so a host that reaches the port without the token can change nothing a peer acts on. The
MAC binds the value to its key's name, so a value cannot be moved under another name either.

Values of any size (``put``/``fetch``) go in chunks of at most ``CHUNK`` bytes after a sealed header
that declares their size, their chunk count and their SHA-256: a reader checks the header's MAC and
refuses a size over its cap before it reads a single chunk, checks each chunk's length against what
is left, and accepts the bytes only once their digest matches (constant-time compares throughout).
What is not covered: gloo's own rendezvous keys and its tensor stream (``docs/trust.md``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from hetsplit.errors import RuntimeFailure

if TYPE_CHECKING:      # the store's protocol; imported for types only (this module loads no torch)
    from hetsplit.runtime.rendezvous import KeyValueStore

CHUNK = 4 << 20           # the store takes values up to 8 MiB: larger ones go in chunks
MAC_BYTES = 32
HEADER_MAX = 4096         # a sealed header is a few hundred bytes
_LABEL = b"hetsplit store key/1"


class Unauthenticated(RuntimeFailure):
    """A store value whose MAC does not match the run token's key (forged, corrupted or of another run)."""


@dataclass(frozen=True)
class StoreKey:
    """The run's MAC key, derived from its token (never the token itself, never published)."""

    key: bytes

    @classmethod
    def of(cls, token: str) -> "StoreKey":
        return cls(hmac.new(token.encode(), _LABEL, hashlib.sha256).digest())

    def mac(self, name: str, payload: bytes) -> bytes:
        return hmac.new(self.key, name.encode() + b"\0" + payload, hashlib.sha256).digest()

    def seal(self, name: str, payload: bytes) -> bytes:
        """``payload`` with its MAC under ``name`` in front."""
        return self.mac(name, payload) + payload

    def open(self, name: str, value: bytes, who: str) -> bytes:
        """The payload of a sealed ``value`` read under ``name``; ``Unauthenticated`` naming it if it fails."""
        if len(value) < MAC_BYTES or not hmac.compare_digest(value[:MAC_BYTES], self.mac(name, value[MAC_BYTES:])):
            raise Unauthenticated(f"{who}: the store value {name!r} is not authenticated by this run's token (forged "
                                  "by a host without the token, or of another run); refused")
        return value[MAC_BYTES:]


def put(store: KeyValueStore, key: StoreKey, name: str, data: bytes) -> None:
    """Store ``data`` under ``name``: its chunks, then the sealed header (so a reader never sees part of it)."""
    chunks = [data[i:i + CHUNK] for i in range(0, len(data), CHUNK)] or [b""]
    for i, c in enumerate(chunks):
        store.set(f"{name}#{i}", c)
    header = {"nbytes": len(data), "chunks": len(chunks), "sha256": hashlib.sha256(data).hexdigest()}
    store.set(name, key.seal(name, json.dumps(header).encode()))


def put_file(store: KeyValueStore, key: StoreKey, name: str, path: Path) -> None:
    """``put`` of a file's bytes, read and stored a chunk at a time (a checkpoint need not fit in memory twice)."""
    h, nbytes, count = hashlib.sha256(), 0, 0
    with open(path, "rb") as f:
        while (c := f.read(CHUNK)) or count == 0:
            store.set(f"{name}#{count}", c)
            h.update(c)
            nbytes, count = nbytes + len(c), count + 1
            if len(c) < CHUNK:
                break
    header = {"nbytes": nbytes, "chunks": count, "sha256": h.hexdigest()}
    store.set(name, key.seal(name, json.dumps(header).encode()))


def declared(store: KeyValueStore, key: StoreKey, name: str, cap: int, who: str) -> int:
    """The size ``name``'s authenticated header declares (refused above ``cap``), before any of its bytes."""
    return _header(store, key, name, cap, who)[0]


def _header(store: KeyValueStore, key: StoreKey, name: str, cap: int, who: str) -> tuple[int, int, bytes]:
    raw = store.get(name)
    if len(raw) > HEADER_MAX:
        raise Unauthenticated(f"{who}: the store value {name!r} is {len(raw)} bytes, not a header; refused")
    try:
        head = json.loads(key.open(name, raw, who))
        nbytes, count, digest = int(head["nbytes"]), int(head["chunks"]), bytes.fromhex(head["sha256"])
    except (ValueError, TypeError, KeyError) as exc:
        raise RuntimeFailure(f"{who}: the header of {name!r} is malformed ({exc}); refused") from None
    if not 0 <= nbytes <= cap:
        raise RuntimeFailure(f"{who}: {name!r} is declared as {nbytes:,} bytes, over the {cap:,} accepted; refused")
    if count != max(1, -(-nbytes // CHUNK)) or len(digest) != 32:
        raise RuntimeFailure(f"{who}: the header of {name!r} declares {count} chunks for {nbytes:,} bytes; refused")
    return nbytes, count, digest


def fetch(store: KeyValueStore, key: StoreKey, name: str, cap: int, who: str, sink: BinaryIO | None = None) -> bytes:
    """A value written by ``put``, at most ``cap`` bytes (declared first, checked before any chunk is read);
    written to ``sink`` chunk by chunk when given (then b"" is returned), else returned."""
    nbytes, count, digest = _header(store, key, name, cap, who)
    out = bytearray()
    h, left = hashlib.sha256(), nbytes
    for i in range(count):
        c = store.get(f"{name}#{i}")
        if len(c) > min(CHUNK, left) or (i < count - 1 and len(c) != CHUNK):
            raise RuntimeFailure(f"{who}: chunk {i} of {name!r} does not match its declared size; refused")
        left -= len(c)
        h.update(c)
        if sink is not None:
            sink.write(c)
        else:
            out += c
    if left != 0 or not hmac.compare_digest(h.digest(), digest):
        raise Unauthenticated(f"{who}: the bytes of {name!r} do not match their authenticated digest; refused")
    return bytes(out)


def set_sealed(store: KeyValueStore, key: StoreKey, name: str, payload: bytes) -> None:
    store.set(name, key.seal(name, payload))


def get_sealed(store: KeyValueStore, key: StoreKey, name: str, who: str, cap: int = HEADER_MAX) -> bytes:
    """A small sealed value (at most ``cap`` bytes)."""
    raw = store.get(name)
    if len(raw) > cap + MAC_BYTES:
        raise RuntimeFailure(f"{who}: the store value {name!r} is {len(raw):,} bytes, over the {cap:,} accepted; "
                             "refused")
    return key.open(name, raw, who)
