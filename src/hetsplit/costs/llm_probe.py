"""What this machine's CPU does for an LLM step in torch on one thread (the runtime's executor): a
short probe, not a fit to any run. 1536 x 576 float32 matrix-vector products over distinct matrices of
``STREAM_BYTES`` in all give the bytes per second weights stream at from memory (a model's weights are
read once per step, from beyond the cache: one matrix read again and again stays in the cache and ran
~1.6x faster on a 2-core Xeon VM, 21 against 12-14 GB/s), a 64-row product MAC/s, and one decode step of a tiny random block (the
runtime's own block code, ``graph.llm.decoder.Block``, all overhead) the fixed cost of a block,
spread over the step graph's layers of a block. ``probe_device(device)`` returns the device with
roofline parameters set from them."""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, replace
from functools import lru_cache

from hetsplit.cluster.types import Device
from hetsplit.graph.llm.step_graph import Phase

ONE_TOKEN = Phase(1, 1)
STREAM_BYTES = 256 * 2**20     # the GEMV probe's working set: beyond the caches of the CPUs it runs on


@dataclass(frozen=True)
class TorchCpuProbe:
    """Fixed seconds per call, weight bytes per second, MAC/s (one torch thread)."""

    call_s: float                   # fixed seconds per step-graph layer
    bytes_per_s: float
    macs_per_s: float


def typical_time(fn, repeat: int) -> float:
    """The median of ``repeat`` timed calls of ``fn``: a typical call, as the run's steps are (the median
    decode step is what is measured), not the luckiest."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@lru_cache(maxsize=1)
def probe_torch_cpu(repeat: int = 30) -> TorchCpuProbe:
    """Time F.linear on one thread: a tiny GEMV (the call), 1536 x 576 GEMVs streamed over ``STREAM_BYTES``
    of matrices (bytes), a 64-row GEMM (MACs), and a tiny block's decode step; each the median of
    ``repeat`` timings (``typical_time``)."""
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
            call = typical_time(lambda: [F.linear(small_x, small_w) for _ in range(n)], repeat) / n
            gemv = _streamed_gemv_s(big_x, big_w, repeat)
            gemm = typical_time(lambda: F.linear(rows, big_w), repeat)
            block, x = _tiny_block()
            step = typical_time(lambda: [block(x, 8) for _ in range(n)], repeat) / n
    finally:
        torch.set_num_threads(threads)
    nbytes = big_w.numel() * 4
    return TorchCpuProbe(step / layers_per_block(), nbytes / max(gemv - call, 1e-9),
                         rows.shape[0] * big_w.numel() / max(gemm - call, 1e-9))


def _streamed_gemv_s(x, w, repeat: int) -> float:
    """Seconds of one GEMV of ``w``'s shape, over distinct matrices of ``STREAM_BYTES`` in all (none cached)."""
    from torch.nn import functional as F

    stream = [w.new_full(w.shape, 0.01) for _ in range(max(1, STREAM_BYTES // (w.numel() * w.element_size())))]
    return typical_time(lambda: [F.linear(x, m) for m in stream], repeat) / len(stream)


def layers_per_block() -> int:
    """How many layers ``graph.llm.step_graph`` gives one block (the block's fixed cost is spread over them)."""
    from hetsplit.graph.llm.step_graph import block_of, step_graph

    cfg, tensors = _tiny_config()
    return sum(1 for n in step_graph(cfg, tensors, ONE_TOKEN).names if block_of(n) == 0)


def _tiny_config():
    from hetsplit.graph.llm.config import BLOCK_TENSORS, LlmConfig, StoredTensor, block_tensor

    cfg = LlmConfig("probe", 32, 1, 4, 2, 32, 16, 16)
    shapes = {"attn_q": (32, 32), "attn_k": (16, 32), "attn_v": (16, 32), "attn_output": (32, 32),
              "ffn_gate": (32, 32), "ffn_up": (32, 32), "ffn_down": (32, 32), "attn_norm": (32,), "ffn_norm": (32,),
              "token_embd": (16, 32), "output_norm": (32,), "output": (16, 32)}
    names = {block_tensor(0, r): shapes[r] for r in BLOCK_TENSORS}
    names.update({f"{r}.weight": shapes[r] for r in ("token_embd", "output_norm", "output")})
    size = {n: 4 * math.prod(sh) for n, sh in names.items()}
    return cfg, {n: StoredTensor(n, sh, "F32", size[n]) for n, sh in names.items()}


def _tiny_block():
    """A random block of 32 wide (4 heads, 2 KV heads): its decode step is all fixed cost."""
    import torch

    from hetsplit.graph.llm.decoder import Block, RopeTables

    cfg, tensors = _tiny_config()
    g = torch.Generator().manual_seed(0)
    w = {n: torch.randn(*t.shape, generator=g) * 0.1 for n, t in tensors.items()}
    return Block(cfg, w, 0, 16, RopeTables(cfg.head_dim, 10000.0, 16)), torch.randn(1, 32, generator=g)


def probe_device(device: Device, probe: TorchCpuProbe | None = None) -> Device:
    """``device`` costed by the roofline model at the probe's figures (efficiencies 1: the figures are
    what was reached), with where they come from."""
    p = probe or probe_torch_cpu()
    params = {**device.params, "peak_macs": p.macs_per_s, "mem_bandwidth": p.bytes_per_s, "mem_efficiency": 1.0,
              "efficiency": {"default": 1.0, "gemm": 1.0, "matmul": 1.0}, "overhead_s": p.call_s,
              "power_active": device.params.get("power_active", 10.0)}
    return replace(device, model="roofline", params=params)
