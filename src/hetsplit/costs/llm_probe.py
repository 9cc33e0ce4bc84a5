"""What this machine's CPU does for an LLM step in torch on one thread (the runtime's executor): a
short probe, not a fit to any run. Matrix-vector products of float32 weights at two sizes give the
bytes per second weights stream at and the fixed cost of one call; a matrix-matrix product gives
MAC/s. ``probe_device(device)`` returns the device with roofline parameters set from them."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from functools import lru_cache

from hetsplit.cluster.types import Device


@dataclass(frozen=True)
class TorchCpuProbe:
    """Fixed seconds per call, weight bytes per second, MAC/s (one torch thread)."""

    call_s: float
    bytes_per_s: float
    macs_per_s: float


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


@lru_cache(maxsize=1)
def probe_torch_cpu(repeat: int = 30) -> TorchCpuProbe:
    """Time F.linear on one thread: a tiny GEMV (the call), a 1536 x 576 GEMV (bytes), a 64-row GEMM (MACs).
    Best of ``repeat``: the machine is shared, the minimum is the device's own speed."""
    import torch
    from torch.nn import functional as F

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        small_w, small_x = torch.randn(8, 8), torch.randn(1, 8)
        big_w, big_x = torch.randn(1536, 576), torch.randn(1, 576)
        rows = torch.randn(64, 576)
        with torch.no_grad():
            for _ in range(3):
                F.linear(big_x, big_w), F.linear(rows, big_w)
            n = 20
            call = _best(lambda: [F.linear(small_x, small_w) for _ in range(n)], repeat) / n
            gemv = _best(lambda: [F.linear(big_x, big_w) for _ in range(n)], repeat) / n
            gemm = _best(lambda: F.linear(rows, big_w), repeat)
    finally:
        torch.set_num_threads(threads)
    nbytes = big_w.numel() * 4
    return TorchCpuProbe(call, nbytes / max(gemv - call, 1e-9), rows.shape[0] * big_w.numel() / max(gemm - call, 1e-9))


def probe_device(device: Device, probe: TorchCpuProbe | None = None) -> Device:
    """``device`` costed by the roofline model at the probe's figures (efficiencies 1: the figures are
    what was reached), with where they come from."""
    p = probe or probe_torch_cpu()
    params = {**device.params, "peak_macs": p.macs_per_s, "mem_bandwidth": p.bytes_per_s, "mem_efficiency": 1.0,
              "efficiency": {"default": 1.0, "gemm": 1.0, "matmul": 1.0}, "overhead_s": p.call_s,
              "power_active": device.params.get("power_active", 10.0)}
    return replace(device, model="roofline", params=params)
