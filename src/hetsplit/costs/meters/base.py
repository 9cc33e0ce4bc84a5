"""Energy meters: read a device's energy counter around a measured run.

A meter is started and stopped around a block of work; ``stop()`` returns the joules spent, or None
when the meter is unavailable. ``available`` and ``reason`` say why a meter cannot measure (no RAPL
powercap tree, no NVIDIA driver, no permission) so a profile records "unavailable" instead of failing.
"""

from __future__ import annotations

from typing import Protocol


class EnergyMeter(Protocol):
    name: str
    available: bool
    reason: str            # why it is unavailable ("" when available)

    def start(self) -> None: ...

    def stop(self) -> float | None: ...


class UnavailableMeter:
    """A meter that never measures; it carries the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.available = False
        self.reason = reason

    def start(self) -> None:
        return None

    def stop(self) -> float | None:
        return None

    def describe(self) -> str:
        return f"{self.name}: unavailable ({self.reason})"
