"""Devices, links and clusters: the hardware side of a plan, in SI units.

A ``Cluster`` is built by the YAML loader (``hetsplit.cluster.load_cluster``) or in code. Links
are dense D x D matrices (bandwidth, latency, energy per byte) so costs and solvers index them
directly; the diagonal (a device talking to itself) is free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.cluster.links import LinkTables, end_time, message_energy, message_time, seconds_per_byte
from hetsplit.errors import ClusterError

DEVICE_KINDS = ("cpu", "gpu", "cim", "mcu", "imc", "dpu")
PORTS = ("links", "shared")  # how messages share the wires: per directed link, or one port per device


@dataclass(frozen=True)
class Medium:
    """A link technology: bandwidth (bytes/s), latency (s per message), energy (J/byte) and what each end
    of a message costs its device's CPU (s per message, s per byte); ``cluster.links`` says how they are
    charged."""

    name: str
    bandwidth: float
    latency_s: float = 0.0
    energy_per_byte: float = 0.0
    source: str = ""  # where the figures come from
    message_cpu_s: float = 0.0       # CPU per message end, fixed part
    message_cpu_byte_s: float = 0.0  # ... per byte

    def transfer_time(self, nbytes: float) -> float:
        return float(message_time(self.latency_s, seconds_per_byte(self.bandwidth), float(nbytes)))

    def transfer_energy(self, nbytes: float) -> float:
        return float(message_energy(self.energy_per_byte, float(nbytes)))

    def end_cpu(self, nbytes: float) -> float:
        return float(end_time(self.message_cpu_s, self.message_cpu_byte_s, float(nbytes)))


@dataclass(frozen=True)
class Device:
    """One compute device. ``type`` names its cost column; equal types must mean equal models."""

    name: str
    kind: str                      # one of DEVICE_KINDS
    type: str                      # cost column (device type): devices of one type cost the same
    memory_bytes: float            # memory available to the plan (inf = unlimited)
    model: str = "roofline"        # device model that estimates its per-layer costs
    params: dict[str, Any] = field(default_factory=dict)  # model parameters, SI units
    preset: str | None = None      # preset it came from, if any
    group: str | None = None       # named group it belongs to (edge, cloud, board3...)
    host: str | None = None        # machine it lives on, for the runtime (None = local)
    profile: str | None = None     # a hetsplit.profile/1 file measured on it: its type's costs (absolute path)

    def __post_init__(self) -> None:
        if self.kind not in DEVICE_KINDS:
            raise ClusterError(f"device {self.name!r}: unknown kind {self.kind!r}; expected one of {DEVICE_KINDS}")
        if not self.memory_bytes > 0:
            raise ClusterError(f"device {self.name!r}: memory must be > 0, got {self.memory_bytes}")

    def cost_signature(self) -> tuple[Any, ...]:
        """What must agree between devices that share a ``type``."""
        return (self.kind, self.model, tuple(sorted((k, repr(v)) for k, v in self.params.items())), self.profile)


@dataclass
class Cluster:
    """Devices plus D x D link matrices, an optional source (inputs arrive) and sink."""

    name: str
    devices: list[Device]
    bandwidth: np.ndarray          # D x D bytes/s; inf on the diagonal
    latency_s: np.ndarray          # D x D seconds; 0 on the diagonal
    energy_per_byte: np.ndarray    # D x D J/byte; 0 on the diagonal
    medium_names: list[list[str]] = field(default_factory=list)  # D x D, for display
    source: str | None = None      # device where model inputs arrive (None: no input transfer)
    sink: str | None = None        # device where outputs must end up (None: no output transfer)
    groups: dict[str, list[str]] = field(default_factory=dict)
    origin: str = ""               # file or built-in name it was loaded from
    description: str = ""          # what the cluster models, where its set-up comes from
    ports: str = "links"           # "links": every directed link carries its own messages; "shared": a
    #                                device has one port that its messages in and out take in turn
    message_cpu_s: np.ndarray | None = None       # D x D: CPU each end of a message costs, fixed (None: 0)
    message_cpu_byte_s: np.ndarray | None = None  # D x D: ... per byte (None: 0)

    def __post_init__(self) -> None:
        d = len(self.devices)
        if self.message_cpu_s is None:
            self.message_cpu_s = np.zeros((d, d))
        if self.message_cpu_byte_s is None:
            self.message_cpu_byte_s = np.zeros((d, d))
        self.validate()

    def validate(self) -> None:
        where = self.origin or self.name
        if not self.devices:
            raise ClusterError(f"{where}: a cluster needs at least one device")
        names = [d.name for d in self.devices]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ClusterError(f"{where}: duplicate device names {sorted(dup)}; give each device its own name")
        d = len(self.devices)
        for label, m in (("bandwidth", self.bandwidth), ("latency_s", self.latency_s),
                         ("energy_per_byte", self.energy_per_byte), ("message_cpu_s", self.message_cpu_s),
                         ("message_cpu_byte_s", self.message_cpu_byte_s)):
            if m is None:
                raise ClusterError(f"{where}: link matrix {label} is missing")
            if m.shape != (d, d):
                raise ClusterError(f"{where}: link matrix {label} has shape {m.shape}, expected {(d, d)}")
        off = ~np.eye(d, dtype=bool)
        if d > 1 and not np.all(self.bandwidth[off] > 0):
            raise ClusterError(f"{where}: every link needs a bandwidth > 0")
        by_type: dict[str, Device] = {}
        for dev in self.devices:
            first = by_type.setdefault(dev.type, dev)
            if first.cost_signature() != dev.cost_signature():
                raise ClusterError(
                    f"{where}: devices {first.name!r} and {dev.name!r} share type {dev.type!r} but differ in "
                    "kind, model or parameters; give them different 'type' names")
        if self.ports not in PORTS:
            raise ClusterError(f"{where}: links.ports is {self.ports!r}; expected one of {', '.join(PORTS)}")
        for role in ("source", "sink"):
            value = getattr(self, role)
            if value is not None and value not in names:
                raise ClusterError(f"{where}: {role} {value!r} is not a device; devices are {names}")

    # ---- lookups --------------------------------------------------------------------------------
    @property
    def file(self) -> str | None:
        """The absolute path of the YAML file the cluster was read from; None for a built-in or a dict."""
        path = Path(self.origin) if self.origin else None
        return str(path.resolve()) if path is not None and path.is_file() else None

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @cached_property
    def names(self) -> list[str]:
        return [d.name for d in self.devices]

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise ClusterError(f"cluster {self.name!r} has no device {name!r}; devices are {self.names}") from None

    def device(self, name: str) -> Device:
        return self.devices[self.index(name)]

    @cached_property
    def types(self) -> list[str]:
        """Distinct device types in first-seen order (the CostTable's columns)."""
        return list(dict.fromkeys(d.type for d in self.devices))

    @cached_property
    def type_index(self) -> np.ndarray:
        """Per device, the index of its type in ``types``."""
        return np.array([self.types.index(d.type) for d in self.devices], dtype=np.int64)

    def representative(self, type_name: str) -> Device:
        """The first device of a type (all devices of a type share its cost model)."""
        for d in self.devices:
            if d.type == type_name:
                return d
        raise ClusterError(f"cluster {self.name!r} has no device of type {type_name!r}; types are {self.types}")

    @cached_property
    def memory_bytes(self) -> np.ndarray:
        return np.array([d.memory_bytes for d in self.devices], dtype=np.float64)

    @property
    def source_index(self) -> int | None:
        return None if self.source is None else self.index(self.source)

    @property
    def sink_index(self) -> int | None:
        return None if self.sink is None else self.index(self.sink)

    def with_message_cpu(self, cpu_s: float, byte_s: float) -> "Cluster":
        """This cluster with every link's message ends costing ``cpu_s`` + ``byte_s`` per byte of CPU."""
        from dataclasses import replace

        off = ~np.eye(self.num_devices, dtype=bool)
        return replace(self, message_cpu_s=np.where(off, float(cpu_s), 0.0),
                       message_cpu_byte_s=np.where(off, float(byte_s), 0.0))

    @cached_property
    def links(self) -> LinkTables:
        """The link tables every cost reads (``cluster.links``)."""
        return LinkTables.of(self)

    def transfer_time(self, u: int, v: int, nbytes: float | np.ndarray) -> float | np.ndarray:
        """Seconds to move ``nbytes`` from device u to v (0 on the same device or for 0 bytes)."""
        t: float | np.ndarray = self.links.time(u, v, nbytes)
        return t

    def transfer_energy(self, u: int, v: int, nbytes: float | np.ndarray) -> float | np.ndarray:
        """Joules to move ``nbytes`` from device u to v."""
        e: float | np.ndarray = self.links.energy(u, v, nbytes)
        return e


def uniform_links(n: int, medium: Medium) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[list[str]]]:
    """Link matrices for ``n`` devices all joined by one medium (free on the diagonal)."""
    bw = np.full((n, n), medium.bandwidth, dtype=np.float64)
    lat = np.full((n, n), medium.latency_s, dtype=np.float64)
    en = np.full((n, n), medium.energy_per_byte, dtype=np.float64)
    np.fill_diagonal(bw, np.inf)
    np.fill_diagonal(lat, 0.0)
    np.fill_diagonal(en, 0.0)
    names = [[("" if i == j else medium.name) for j in range(n)] for i in range(n)]
    return bw, lat, en, names
