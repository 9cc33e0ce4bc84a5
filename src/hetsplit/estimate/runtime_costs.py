"""What the runtime itself costs per message on this machine: the figures the ``here`` fidelity charges.

A message of the runtime costs CPU at both of its ends beyond the transfer itself (a worker's
receiver and sender threads and gloo's loop thread wake and hand the tensors over; the driver posts
from its one thread), and wall time on the path of an input sent alone. ``runtime.calibration``
measures them with toy runs through the runtime and caches them (``costs.calibration_store``);
this module holds the figures, so that ``estimate`` can use them without importing the runtime. The
same calibration measures what each segment's executor call costs beyond its layers (``segment``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hetsplit.cluster.links import end_time
from hetsplit.costs.segment import SegmentCost


@dataclass
class RuntimeCosts:
    """The runtime's own cost of a message on this machine (SI units)."""

    worker_end_s: float            # a worker's CPU per message end (receive or send), fixed part
    driver_end_s: float            # the driver's CPU per message end, fixed part
    worker_byte_s: float           # a worker's CPU per byte at one end
    driver_byte_s: float           # the driver's CPU per byte at one end
    message_latency_s: float       # wall time a message adds to an input alone
    source: str
    end_wait_s: float = 0.0        # oversubscribed: a stage's wait per message end beyond its CPU
    segment_s: float = 0.0         # a segment's executor call beyond its layers, fixed part (``costs.segment``)
    segment_byte_s: float = 0.0    # ... and per byte crossing its boundary
    measured: list[dict[str, Any]] = field(default_factory=list)   # per toy run: what the fit used
    measured_segments: list[dict[str, Any]] = field(default_factory=list)   # per toy segment: the segment fit's

    def end_cpu_s(self, at_driver: bool, nbytes: float) -> float:
        """CPU one end of a message of ``nbytes`` costs its process (the link rule's ``end_time``)."""
        if at_driver:
            return float(end_time(self.driver_end_s, self.driver_byte_s, float(nbytes)))
        return float(end_time(self.worker_end_s, self.worker_byte_s, float(nbytes)))

    @property
    def segment(self) -> SegmentCost:
        """What each segment costs a worker beyond its layers (a CPU: no host copy)."""
        return SegmentCost(self.segment_s, self.segment_byte_s, 0.0,
                           f"the runtime's calibration: {self.source}" if self.source else "the runtime's calibration")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "RuntimeCosts":
        return cls(**doc)

    @classmethod
    def fallback(cls, reason: str) -> "RuntimeCosts":
        """Every end costs half the built-in loopback link's latency, no per-byte CPU, segments nothing
        beyond their layers (not measured)."""
        from hetsplit.cluster.local import loopback_latency_s

        latency = loopback_latency_s()
        return cls(latency / 2, latency / 2, 0.0, 0.0, latency,
                   f"FALLBACK: the loopback link's latency per message, not measured here ({reason})")
