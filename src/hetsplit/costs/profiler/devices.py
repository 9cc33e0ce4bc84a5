"""What ``--device NAME`` means to the profiler: this machine's CPU/GPU, or a preset's model."""

from __future__ import annotations

import os
from pathlib import Path

from hetsplit.cluster.types import Device
from hetsplit.errors import ProfileError

LOCAL_CPU, LOCAL_GPU = "local-cpu", "local-gpu"
LOCAL = (LOCAL_CPU, LOCAL_GPU)


def _mem_total_bytes() -> float:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 8 * 2.0**30


def local_cpu(threads: int | None = None) -> Device:
    """This machine's CPU as a device (roofline figures are rough assumptions; measure it instead)."""
    cores = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
    params = {"peak_macs": cores * 2.5e9 * 16,   # assumption: 2.5 GHz, AVX2 2 FMA x 8 fp32 lanes per core
              "mem_bandwidth": 20e9,             # assumption: one DDR4 channel pair
              "power_active": 10.0 * cores,      # assumption: ~10 W per busy server core
              "threads": cores}
    return Device(LOCAL_CPU, "cpu", LOCAL_CPU, _mem_total_bytes(), "roofline", params)


def local_gpu() -> Device:
    try:
        import torch
    except ImportError:
        raise ProfileError("--device local-gpu needs PyTorch with CUDA; torch is not importable") from None
    if not torch.cuda.is_available():
        raise ProfileError("--device local-gpu: no CUDA GPU is visible here (torch.cuda.is_available() is False); "
                           "use --device local-cpu, or a GPU preset such as rtx3070ti for its modelled costs")
    prop = torch.cuda.get_device_properties(0)
    params = {"peak_macs": 1e13, "mem_bandwidth": 1e12, "power_active": 300.0}  # assumption; measure instead
    return Device(LOCAL_GPU, "gpu", LOCAL_GPU, float(prop.total_memory), "roofline", params)


def preset_device(spec: str) -> Device:
    """A device built from a preset name or preset file (its model, params and memory)."""
    from hetsplit.cluster.presets import load_preset

    p = load_preset(spec)
    if p.is_medium:
        raise ProfileError(f"{spec!r} is a link medium, not a device; name a device preset")
    return Device(p.name, p.kind, p.type or p.name, p.memory_bytes or float("inf"), p.model or "roofline",
                  dict(p.params), p.name)


def resolve_device(name: str, threads: int | None = None) -> Device:
    if name == LOCAL_CPU:
        return local_cpu(threads)
    if name == LOCAL_GPU:
        return local_gpu()
    return preset_device(name)
