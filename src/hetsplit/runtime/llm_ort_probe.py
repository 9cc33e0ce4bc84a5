"""What this machine's CPU does for an LLM's step on the onnxruntime executor (``runtime.llm_ort``): the
torch probe's measurements (``costs.llm_probe``: streamed products for bytes/s and MAC/s, then steps
through blocks of the model's shapes for the fixed cost per layer), each run as onnxruntime runs a stage,
one thread, its CPU time the median of its repeats."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from hetsplit.costs.llm_probe import (GEMV_SHAPE, STREAM_BYTES, ProbeEngine, ProbeShape, StepProbe, probe_block_weights,
                                      probe_blocks, probe_figures, typical_time)
from hetsplit.graph.llm.onnx_blocks import FLOAT, GraphBuilder, linear, run_graph
from hetsplit.graph.llm.step_graph import Phase
from hetsplit.runtime.llm_ort import ort_session


def streamed_s(rows: int, repeat: int) -> tuple[float, float]:
    """``ProbeEngine.streamed_s`` on onnxruntime: one graph of independent products of its input by distinct
    matrices, run with one row and with ``rows``."""
    out_dim, in_dim = GEMV_SHAPE
    count = max(1, STREAM_BYTES // (out_dim * in_dim * 4))
    g = GraphBuilder("streamed")
    x = g.input("x", FLOAT, ["R", in_dim])
    for k in range(count):
        w = np.full(GEMV_SHAPE, 0.01 + 1e-6 * k, np.float32)     # each its own (``probe_block_weights``)
        g.output(f"y{k}", linear(g, x, w, f"w{k}"), ["R", out_dim])
    session = ort_session(g.model())
    rng = np.random.default_rng(0)
    times = []
    for n in (1, rows):
        feed = {"x": rng.standard_normal((n, in_dim)).astype(np.float32)}
        session.run(None, feed)
        times.append(typical_time(lambda: session.run(None, feed), repeat) / count)
    return times[0], times[1]


def block_step_s(shape: ProbeShape, phase: Phase, repeat: int) -> float:
    """``ProbeEngine.block_step_s`` on onnxruntime: one step of ``phase`` through ``probe_blocks`` blocks in
    one session (as a stage of one device runs), per block."""
    cfg = shape.config
    n = probe_blocks(cfg)
    session = ort_session(run_graph(cfg, probe_block_weights(cfg, n), range(n), None, None, None))
    ctx = max(phase.tokens, min(phase.context, cfg.context))
    t, past = phase.tokens, ctx - phase.tokens      # the tokens fed come last, as the torch probe's
    rng = np.random.default_rng(0)
    angles = rng.standard_normal((t, 1, cfg.head_dim // 2, 1)).astype(np.float32)
    feed = {"x": rng.standard_normal((t, cfg.dim)).astype(np.float32), "cos": angles, "sin": angles,
            "mask": np.triu(np.full((t, past + t), -np.inf, np.float32), past + 1)}
    cache = np.zeros((past, cfg.kv_heads, cfg.head_dim), np.float32)
    feed.update({f"past_{kv}.{i}": cache for i in range(n) for kv in "kv"})
    session.run(None, feed)
    return typical_time(lambda: session.run(None, feed), repeat) / n


@lru_cache(maxsize=4)
def probe_ort_cpu(shape: ProbeShape, repeat: int = 15) -> StepProbe:
    """``costs.llm_probe.probe_torch_cpu``'s probe on onnxruntime's CPU provider, one thread."""
    return probe_figures(shape, repeat, ProbeEngine(streamed_s, block_step_s))
