"""NVIDIA GPU energy through NVML (pynvml): total energy consumption counter, millijoules.

pynvml is optional: without it, without a driver or on a GPU older than Volta (no energy counter)
the meter reports unavailable with the reason.
"""

from __future__ import annotations

from typing import Any


class NvmlMeter:
    name = "nvml"

    def __init__(self, index: int = 0) -> None:
        self.available = False
        self.reason = ""
        self._nvml: Any = None
        self._handle: Any = None
        self._start: int | None = None
        try:
            import pynvml  # type: ignore[import-not-found]
        except ImportError:
            self.reason = "pynvml is not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        except Exception as exc:  # NVMLError subclasses vary by driver; any failure means unavailable
            self.reason = f"NVML cannot read the energy counter of GPU {index} ({exc})"
            return
        self._nvml = pynvml
        self.available = True

    def start(self) -> None:
        self._start = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) if self.available else None

    def stop(self) -> float | None:
        if not self.available or self._start is None:
            return None
        end = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)
        self._start, start = None, self._start
        return (end - start) * 1e-3
