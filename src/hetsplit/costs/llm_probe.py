"""What this machine's CPU does for an LLM's step in torch on one thread (the runtime's executor): a
short probe of the model's own shapes, not a fit to any run. Each figure is the median CPU time of its
repeats on this thread (``typical_time``): what the work costs one core, whatever else the machine runs
meanwhile (wall time on a shared machine measured other processes too, by 2-4x here).

- bytes/s: 1536 x 576 float32 matrix-vector products over distinct matrices of ``STREAM_BYTES`` in all, as
  a model's weights stream from memory once per step (one matrix read again and again stays in the cache
  and ran ~1.6x faster on a 2-core Xeon VM).
- MAC/s: the same stream multiplied by the prompt's rows (``ProbeShape.rows``): a prompt of a few tokens
  is a small-row GEMM, far from the peak a 64-row product reaches, and still streams its weights.
- the fixed cost per layer: one decode step (one token against ``ProbeShape.context`` cached positions)
  through blocks of the model's shapes with constant weights (the runtime's own ``graph.llm.decoder.Block``,
  enough blocks that their weights stream from memory as a stage's do), less what the roofline charges
  those blocks at the two figures above, spread over the step graph's layers of a block. A block's
  norms, RoPE, KV cache update, attention and SwiGLU run some 50 small torch ops; at the model's shapes,
  between matrices that evict the caches, they cost ~2x what the same ops cost on a tiny block.
- the prompt's fixed cost per layer: the same for one prompt step (``ProbeShape.rows`` tokens at position
  0: its causal mask and attention over the rows), less what the roofline charges it: a prompt's step
  costs more beyond its matrices than a decode step does (SmolLM2's shapes on one thread here, a prompt
  block of 6 tokens took 10-25% more than the decode step's fixed cost charged it).

A GPU is probed the same way on its host's CUDA (``probe_torch_cuda``), each figure the median wall time of
its repeats with the GPU synchronized around each: there a step is launch-bound (some 50 kernels a block,
each a few microseconds however small), which the fixed cost per layer carries, where the data sheet's
roofline would predict a step a hundred times faster than it runs.

``probe_device(device, probe)`` returns the device with roofline parameters set from them."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from hetsplit.cluster.types import Device
from hetsplit.graph.llm.config import LlmConfig, StoredTensor, block_tensor
from hetsplit.graph.llm.step_graph import FLOAT32, Phase, block_of, step_graph
from hetsplit.torch_threads import as_a_rank

ONE_TOKEN = Phase(1, 1)
STREAM_BYTES = 256 * 2**20     # the working set of each streamed part: beyond the caches of the CPUs it runs on
MAX_BLOCKS = 32                # blocks of a tiny model: its step is all fixed cost, no need to stream
GEMV_SHAPE = (1536, 576)
MAX_ROWS = 64                  # a prompt longer than this is costed at 64 rows' MAC/s (near the peak)
PROMPT_OVERHEAD = "prompt_overhead_s"   # a device parameter: its fixed seconds per layer in the prompt's step,
                                        # where they differ from a decode step's (the roofline's overhead_s)


@dataclass(frozen=True)
class ProbeShape:
    """What to probe: the model's dimensions, the prompt's tokens (its GEMM rows), the decode's context."""

    config: LlmConfig
    rows: int
    context: int


Clock = Callable[[Callable[[], object], int], float]    # (fn, repeat) -> seconds of a typical call


@dataclass(frozen=True)
class StepProbe:
    """Fixed seconds per call, weight bytes per second, MAC/s of an executor (one torch thread, one CUDA
    GPU, one onnxruntime thread)."""

    call_s: float                   # fixed seconds per step-graph layer (a decode step)
    bytes_per_s: float
    macs_per_s: float
    prompt_call_s: float            # ... in the prompt's step


def typical_time(fn: Callable[[], object], repeat: int) -> float:
    """The median CPU seconds of this thread over ``repeat`` calls of ``fn``: a typical call, as the run's
    steps are (the median decode step is what is measured), not the luckiest, and not the time other
    processes took the core."""
    times = []
    for _ in range(repeat):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return statistics.median(times)


def cuda_time(fn: Callable[[], object], repeat: int) -> float:
    """The median wall seconds over ``repeat`` calls of ``fn``, the GPU synchronized before and after each
    (what a CUDA stage's step takes: it waits for its result before it sends it)."""
    import torch

    times = []
    for _ in range(repeat):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


@lru_cache(maxsize=4)
def probe_torch_cpu(shape: ProbeShape, repeat: int = 15) -> StepProbe:
    """Time on one thread: 1536 x 576 GEMVs and GEMMs of ``shape.rows`` rows streamed over ``STREAM_BYTES``
    of matrices (bytes/s, MAC/s), then a decode step and the prompt's step through blocks of the model's
    shapes (their fixed costs); each the median of ``repeat`` timings (``typical_time``)."""
    import torch

    with torch.no_grad(), as_a_rank():          # one thread, as a stage's worker computes (``torch_threads``)
        return _probe(shape, repeat, "cpu", typical_time)


@lru_cache(maxsize=4)
def probe_torch_cuda(shape: ProbeShape, repeat: int = 15) -> StepProbe:
    """``probe_torch_cpu``'s probe on this host's first CUDA GPU, as a ``gpu`` device's stage computes
    there (``runtime.llm_pipeline_worker.stage_device``), timed by ``cuda_time``."""
    import torch

    with torch.no_grad():
        return _probe(shape, repeat, "cuda", cuda_time)


@dataclass(frozen=True)
class ProbeEngine:
    """What an executor is timed on: ``streamed_s(rows, repeat)``, the seconds of one GEMV and of one
    ``rows``-row GEMM of ``GEMV_SHAPE`` over distinct matrices of ``STREAM_BYTES`` in all (none cached);
    ``block_step_s(shape, phase, repeat)``, the seconds per block of one step of ``phase`` through
    ``probe_blocks`` blocks of the model's shapes with constant weights, as the executor runs a stage."""

    streamed_s: Callable[[int, int], tuple[float, float]]
    block_step_s: Callable[[ProbeShape, Phase, int], float]


def probe_figures(shape: ProbeShape, repeat: int, engine: ProbeEngine) -> StepProbe:
    """An executor's figures at ``shape``: bytes/s and MAC/s from its streamed products, its fixed cost per
    layer in a decode step and in the prompt's from its block steps less the roofline's charge of them."""
    rows = min(max(shape.rows, 1), MAX_ROWS)
    gemv, gemm = engine.streamed_s(rows, repeat)
    n = GEMV_SHAPE[0] * GEMV_SHAPE[1]
    bytes_per_s, macs_per_s = n * 4 / gemv, rows * n / gemm
    fixed = []
    for phase in (Phase(1, max(1, shape.context)), Phase(rows, rows)):       # a decode step, the prompt's
        block = engine.block_step_s(shape, phase, repeat)
        fixed.append(max(block - _roofline_block_s(shape, bytes_per_s, macs_per_s, phase), 0.0) / layers_per_block())
    return StepProbe(fixed[0], bytes_per_s, macs_per_s, fixed[1])


def _probe(shape: ProbeShape, repeat: int, device: str, clock: Clock) -> StepProbe:
    """The torch executor's figures on ``device``, each timing by ``clock``."""
    return probe_figures(shape, repeat, ProbeEngine(lambda rows, r: _streamed_s(rows, r, device, clock),
                                                    lambda sh, ph, r: _block_step_s(sh, ph, r, device, clock)))


def _streamed_s(rows: int, repeat: int, device: str, clock: Clock) -> tuple[float, float]:
    """``ProbeEngine.streamed_s`` in torch on ``device``."""
    import torch
    from torch.nn import functional as F

    w = torch.full(GEMV_SHAPE, 0.01, device=device)
    stream = [w.clone() for _ in range(max(1, STREAM_BYTES // (w.numel() * 4)))]
    x, xs = torch.randn(1, GEMV_SHAPE[1], device=device), torch.randn(rows, GEMV_SHAPE[1], device=device)
    for m in stream[:3]:
        F.linear(x, m), F.linear(xs, m)
    gemv = clock(lambda: [F.linear(x, m) for m in stream], repeat) / len(stream)
    gemm = clock(lambda: [F.linear(xs, m) for m in stream], repeat) / len(stream)
    return gemv, gemm


def probe_blocks(cfg: LlmConfig) -> int:
    """How many blocks of ``cfg``'s shapes the fixed-cost probe runs: enough that their float32 weights
    stream from memory (``STREAM_BYTES``), at most ``MAX_BLOCKS``."""
    per_block = sum(4 * math.prod(s) for s in block_shapes(cfg).values())
    return max(1, min(MAX_BLOCKS, math.ceil(STREAM_BYTES / per_block)))


def probe_block_weights(cfg: LlmConfig, blocks: int) -> dict[str, np.ndarray]:
    """``blocks`` blocks of ``cfg``'s shapes with constant weights (about 0.02), by their checkpoint names;
    each tensor's constant its own (onnxruntime shares equal weights between nodes: 75 equal matrices streamed
    at 43 GB/s on one core, distinct ones at 15)."""
    shapes = [(block_tensor(i, r), s) for i in range(blocks) for r, s in block_shapes(cfg).items()]
    return {name: np.full(s, 0.02 + 1e-6 * k, np.float32) for k, (name, s) in enumerate(shapes)}


def block_shapes(cfg: LlmConfig) -> dict[str, tuple[int, ...]]:
    """A block's tensors by role, shaped as the runtime multiplies them (rows = outputs)."""
    d, kv, f = cfg.dim, cfg.kv_dim, cfg.ffn
    return {"attn_norm": (d,), "attn_q": (d, d), "attn_k": (kv, d), "attn_v": (kv, d), "attn_output": (d, d),
            "ffn_norm": (d,), "ffn_gate": (f, d), "ffn_up": (f, d), "ffn_down": (d, f)}


def _block_step_s(shape: ProbeShape, phase: Phase, repeat: int, device: str, clock: Clock) -> float:
    """Seconds of one block's step of ``phase``: its tokens through ``probe_blocks`` blocks of the model's
    shapes, per block (a decode step: one token at position ``phase.context - 1``; the prompt's: its rows
    from position 0)."""
    import torch

    from hetsplit.graph.llm.decoder import Block, RopeTables

    cfg, where = shape.config, torch.device(device)
    ctx = max(phase.tokens, min(phase.context, cfg.context))
    n = probe_blocks(cfg)
    rope = RopeTables(cfg.head_dim, cfg.rope_base, ctx, where)
    w = {name: torch.from_numpy(a).to(where) for name, a in probe_block_weights(cfg, n).items()}
    blocks = [Block(cfg, w, i, ctx, rope, device=where) for i in range(n)]
    x = torch.randn(phase.tokens, cfg.dim, device=where)
    pos = ctx - phase.tokens                 # the tokens fed come last: a decode step's at ctx - 1, a prompt's at 0

    def step() -> None:
        y = x
        for b in blocks:
            y = b(y, pos)
    step()
    return clock(step, repeat) / n


def _roofline_block_s(shape: ProbeShape, bytes_per_s: float, macs_per_s: float, phase: Phase) -> float:
    """What the roofline model charges one block's step of ``phase`` at these figures, without a fixed cost."""
    from hetsplit.costs.models.roofline import RooflineModel

    cfg, tensors = _one_block(shape.config)
    g = step_graph(cfg, tensors, phase, FLOAT32)
    dev = probe_device(Device("probe", "cpu", "probe", 1 << 30), StepProbe(0.0, bytes_per_s, macs_per_s, 0.0))
    t = RooflineModel(dev).layer_costs(g).time_s
    return float(np.sum([s for s, name in zip(t, g.names) if block_of(name) == 0]))


def _one_block(cfg: LlmConfig) -> tuple[LlmConfig, dict[str, StoredTensor]]:
    """``cfg`` cut to one block, with float32 tensors of its shapes (what ``step_graph`` costs)."""
    one = replace(cfg, blocks=1)
    shapes = {block_tensor(0, r): s for r, s in block_shapes(cfg).items()}
    shapes.update({"token_embd.weight": (cfg.vocab, cfg.dim), "output_norm.weight": (cfg.dim,),
                   "output.weight": (cfg.vocab, cfg.dim)})
    return one, {n: StoredTensor(n, s, "F32", 4 * math.prod(s)) for n, s in shapes.items()}


def layers_per_block() -> int:
    """How many layers ``graph.llm.step_graph`` gives one block (the block's fixed cost is spread over them)."""
    cfg, tensors = _one_block(LlmConfig("probe", 32, 1, 4, 2, 32, 16, 16))
    return sum(1 for n in step_graph(cfg, tensors, ONE_TOKEN).names if block_of(n) == 0)


def probe_device(device: Device, p: StepProbe) -> Device:
    """``device`` costed by the roofline model at the probe's figures (efficiencies 1: the figures are
    what was reached)."""
    params = {**device.params, "peak_macs": p.macs_per_s, "mem_bandwidth": p.bytes_per_s, "mem_efficiency": 1.0,
              "efficiency": {"default": 1.0, "gemm": 1.0, "matmul": 1.0}, "overhead_s": p.call_s,
              PROMPT_OVERHEAD: p.prompt_call_s,
              "power_active": device.params.get("power_active", 10.0)}
    return replace(device, model="roofline", params=params)

