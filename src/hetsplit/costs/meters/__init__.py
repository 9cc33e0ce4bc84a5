"""Energy meters (RAPL for CPUs, NVML for NVIDIA GPUs), each "unavailable" where it cannot read."""

from __future__ import annotations

from hetsplit.costs.meters.base import EnergyMeter, UnavailableMeter
from hetsplit.costs.meters.nvml import NvmlMeter
from hetsplit.costs.meters.rapl import RaplMeter

__all__ = ["EnergyMeter", "NvmlMeter", "RaplMeter", "UnavailableMeter", "meter_for", "describe"]


def meter_for(kind: str) -> EnergyMeter:
    """The energy meter for a device kind: RAPL for cpu, NVML for gpu, otherwise unavailable."""
    if kind == "cpu":
        return RaplMeter()
    if kind == "gpu":
        return NvmlMeter()
    return UnavailableMeter(kind, f"no energy meter for device kind {kind!r}")


def describe(meter: EnergyMeter) -> str:
    return f"{meter.name}: " + ("available" if meter.available else f"unavailable ({meter.reason})")
