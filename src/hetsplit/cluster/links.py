"""What a link means: the one owner of a message's time, energy and CPU, and of shared ports.

Every estimate fidelity and every solver costs a message here (none writes the formula itself):

- a message of ``nbytes > 0`` from device u to v takes ``latency(u, v) + nbytes / bandwidth(u, v)`` of its
  wire (``message_time``; the latency is the wire's time per message) and costs the sender
  ``nbytes x energy_per_byte(u, v)`` joules (``message_energy``); a device does not message itself and a
  message of 0 bytes is none (both free);
- each end of a message costs its device's CPU ``end_s + end_byte_s x nbytes`` beyond the wire
  (``end_time``): what the runtime's threads spend to post, wake and hand a tensor over. It is a link
  property (``message: {cpu, byte}`` of a medium; ``Cluster.message_cpu_s`` / ``message_cpu_byte_s``);
  a device's end costs the largest figure of its links in or out (``LinkTables.end_s``: a device on one
  medium pays that medium's), so that a stage's cost depends on its own device only and the pipeline
  solvers stay exact. It is charged to the task that sends the message and to the first task that
  reads it at its destination, in its device's compute; the cluster's source and sink, which run no
  task, are charged nothing. Its energy is not modelled (0 J);
- ports (``Cluster.ports``): ``links``, a message holds its directed link; ``shared``, it holds both
  devices' ports, each carrying every message in or out of its device, one at a time (``wires``).

The formulas are written once, as plain arithmetic that works on Python floats, numpy arrays
(broadcast) and inside numba kernels (``*_jit``, inlined).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

if TYPE_CHECKING:
    from hetsplit.cluster.types import Cluster

SHARED = "shared"   # Cluster.ports value: a device's messages take turns on its one port


def message_time(latency_s: Any, per_byte_s: Any, nbytes: Any) -> Any:
    """Seconds a message of ``nbytes`` holds its wire: ``latency + nbytes x seconds per byte`` (0 for 0 bytes)."""
    return (nbytes > 0) * (latency_s + nbytes * per_byte_s)


def message_energy(joule_per_byte: Any, nbytes: Any) -> Any:
    """Joules a message of ``nbytes`` costs its sender: ``nbytes x energy per byte``."""
    return nbytes * joule_per_byte


def end_time(end_s: Any, end_byte_s: Any, nbytes: Any) -> Any:
    """CPU seconds one end of a message of ``nbytes`` costs its device (0 for 0 bytes)."""
    return (nbytes > 0) * (end_s + nbytes * end_byte_s)


def seconds_per_byte(bandwidth: Any) -> Any:
    """1 / bandwidth (0 for an infinite one: a device's link to itself)."""
    with np.errstate(divide="ignore"):
        out = np.where(np.isinf(bandwidth), 0.0, 1.0 / np.asarray(bandwidth, dtype=np.float64))
    return out if out.ndim else float(out)


message_time_jit = njit(cache=True, inline="always")(message_time)
message_energy_jit = njit(cache=True, inline="always")(message_energy)
end_time_jit = njit(cache=True, inline="always")(end_time)


def is_shared(ports: str) -> bool:
    return ports == SHARED


def wires(shared: bool, u: int, v: int) -> tuple[tuple[Any, ...], ...]:   # (kind, device, ...)
    """The resources a message from u to v holds: its directed link, or both devices' ports."""
    return (("port", u), ("port", v)) if shared else (("link", u, v),)


def wire_ids(shared: bool, u: Any, v: Any, n_dev: Any, base: Any) -> tuple[Any, Any]:   # ints or index arrays
    """``wires`` numbered for the compiled kernels: links ``base + u * D + v``, ports ``base + D * D + d``
    (with per-link ports the one link, twice). Plain numpy for array callers (``wire_ids_jit`` inside the
    kernels): calling a compiled function starts numba, 5 s of a process's first pipeline evaluation."""
    if shared:
        return base + n_dev * n_dev + u, base + n_dev * n_dev + v
    return base + u * n_dev + v, base + u * n_dev + v


wire_ids_jit = njit(cache=True, inline="always")(wire_ids)


@dataclass(frozen=True)
class LinkTables:
    """A cluster's links as the costs read them (D x D, free on the diagonal; ``end_*`` per device)."""

    latency_s: np.ndarray
    per_byte_s: np.ndarray
    joule_per_byte: np.ndarray
    end_s: np.ndarray          # (D,) a device's CPU per message end, fixed part
    end_byte_s: np.ndarray     # (D,) ... per byte
    shared: bool

    @classmethod
    def of(cls, cl: "Cluster") -> "LinkTables":
        d = cl.num_devices
        off = ~np.eye(d, dtype=bool)
        lat = np.where(off, cl.latency_s, 0.0)
        per_byte = np.where(off, seconds_per_byte(cl.bandwidth), 0.0)
        joule = np.where(off, cl.energy_per_byte, 0.0)
        return cls(lat, per_byte, joule, _per_device(cl.message_cpu_s, off), _per_device(cl.message_cpu_byte_s, off),
                   is_shared(cl.ports))

    def time(self, u: Any, v: Any, nbytes: Any) -> Any:
        """Seconds a message of ``nbytes`` holds its wire from u to v (vectorized; 0 when u == v)."""
        t = message_time(self.latency_s[u, v], self.per_byte_s[u, v], np.asarray(nbytes, dtype=np.float64))
        return t if np.ndim(t) else float(t)

    def energy(self, u: Any, v: Any, nbytes: Any) -> Any:
        e = message_energy(self.joule_per_byte[u, v], np.asarray(nbytes, dtype=np.float64))
        return e if np.ndim(e) else float(e)

    def end(self, d: Any, nbytes: Any) -> Any:
        """CPU seconds one end of a message of ``nbytes`` costs device d (vectorized)."""
        t = end_time(self.end_s[d], self.end_byte_s[d], np.asarray(nbytes, dtype=np.float64))
        return t if np.ndim(t) else float(t)

    @property
    def charges_ends(self) -> bool:
        return bool(np.any(self.end_s > 0) or np.any(self.end_byte_s > 0))

    def flat(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Latency, seconds per byte and joules per byte, flattened (u * D + v), for the compiled kernels."""
        return self.latency_s.ravel().copy(), self.per_byte_s.ravel().copy(), self.joule_per_byte.ravel().copy()


def _per_device(m: np.ndarray | None, off: np.ndarray) -> np.ndarray:
    """Per device, the largest figure of its links in or out (0 with no link; None: 0 everywhere)."""
    if m is None:
        return np.zeros(len(off))
    x = np.where(off, m, 0.0)
    return np.maximum(x.max(axis=1), x.max(axis=0)) if len(x) else np.zeros(0)
