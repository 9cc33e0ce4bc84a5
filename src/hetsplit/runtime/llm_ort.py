"""The onnxruntime executor of an LLM stage: ``OrtDecoder`` computes what ``graph.llm.decoder.Decoder``
computes (same constructor, same ``forward``), on onnxruntime's CPU provider with one thread, from the
ONNX graphs of ``graph.llm.onnx_blocks``.

A stage of one device runs as few sessions as its weights allow (``SESSION_BYTES`` of float32 weights
each: protobuf's 2 GiB bounds one graph): consecutive blocks, the embedding and the head in one call,
no message between them. A member of a tensor-parallel stage runs each block's halves as sessions of
their own, the stage's all-reduce (``reduce``) between them, as the torch decoder's blocks do. Each block's
KV cache lives here, (capacity, kv_heads, head_dim) per stream: a call reads its first P positions
(contiguous, no copy) and the T positions it returns are written after them."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetsplit.errors import ModelError, RuntimeFailure
from hetsplit.graph.llm.decoder import HEAD, Reduce, RopeTables, StageSpec, no_reduce, stage_weights
from hetsplit.graph.llm.load import LlmModel
from hetsplit.graph.llm.onnx_blocks import attention_graph, block_weights, ffn_graph, head_graph, run_graph
from hetsplit.graph.llm.shares import TensorShare

SESSION_BYTES = 1 << 30


def ort_session(model: Any) -> Any:
    """A one-thread CPU session of an ONNX model built in memory (as the mapping runtime's segments run),
    loaded from a file of this process's own, its weights beside it as external data: onnxruntime maps
    them, where from bytes it keeps the parsed model's copy beside its own (SmolLM2-135M: 1.26 GiB held for
    621 MiB of weights, 0.53 GiB from the file). The files go once the session holds them."""
    import onnx
    import onnxruntime as ort

    from hetsplit.costs.profiler.ort_timing import session_options

    with tempfile.TemporaryDirectory(prefix="hetsplit-ort-") as folder:
        path = Path(folder) / "stage.onnx"
        onnx.save_model(model, str(path), save_as_external_data=True, location="stage.weights", size_threshold=1024)
        try:
            return ort.InferenceSession(str(path), session_options(1), providers=["CPUExecutionProvider"])
        except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own kinds
            raise RuntimeFailure(f"onnxruntime cannot load the stage's graph {model.graph.name}: {exc}") from None


class Caches:
    """Per stream, per block of the stage: its K and V cache, (capacity, kv_heads, head_dim)."""

    def __init__(self, blocks: range, capacity: int, kv_heads: int, head_dim: int, streams: int):
        shape = (capacity, kv_heads, head_dim)
        self.streams = [{i: (np.zeros(shape, np.float32), np.zeros(shape, np.float32)) for i in blocks}
                        for _ in range(streams)]
        self.capacity = capacity

    def feeds(self, stream: int, blocks: range, pos: int) -> dict[str, np.ndarray]:
        """The inputs of ``blocks``' first ``pos`` cached positions."""
        out = {}
        for i in blocks:
            k, v = self.streams[stream][i]
            out[f"past_k.{i}"], out[f"past_v.{i}"] = k[:pos], v[:pos]
        return out

    def keep(self, stream: int, block: int, pos: int, k: np.ndarray, v: np.ndarray) -> None:
        ck, cv = self.streams[stream][block]
        ck[pos:pos + k.shape[0]], cv[pos:pos + v.shape[0]] = k, v


class Call:
    """One session and the blocks whose caches it reads and extends."""

    def __init__(self, model: Any, blocks: range):
        self.session, self.blocks = ort_session(model), blocks
        self.names = [o.name for o in self.session.get_outputs()]

    def __call__(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.names, self.session.run(self.names, feeds)))


def session_groups(blocks: range, block_bytes: int, budget: int) -> list[range]:
    """``blocks`` cut into runs of consecutive blocks of at most ``budget`` bytes each (one block at least)."""
    groups, start = [], blocks.start
    per = max(1, budget // max(1, block_bytes))
    while start < blocks.stop:
        groups.append(range(start, min(blocks.stop, start + per)))
        start = groups[-1].stop
    return groups


class OrtDecoder:
    """``graph.llm.decoder.Decoder`` on onnxruntime's CPU provider: a stage (or the whole model) and its KV
    caches; ``forward(ids or hidden, pos)`` takes and returns torch tensors on the CPU."""

    def __init__(self, model: LlmModel, spec: StageSpec, capacity: int,
                 weights: dict[str, np.ndarray] | None = None, share: TensorShare | None = None, streams: int = 1):
        cfg = model.config
        if capacity > cfg.context:
            raise ModelError(f"{capacity} positions exceed the model's context of {cfg.context}")
        w = {n: t.numpy() for n, t in stage_weights(model, spec, share, weights).items()}
        self.cfg, self.spec, self.share = cfg, spec, share
        blocks = range(spec.first, spec.stop)
        kv_heads = share.size("kv_heads") if share is not None else cfg.kv_heads
        self.caches = Caches(blocks, capacity, kv_heads, cfg.head_dim, streams)
        rope = RopeTables(cfg.head_dim, cfg.rope_base, capacity)
        self.cos, self.sin = rope.cos.numpy(), rope.sin.numpy()
        embedding, norm, output = (w.get("token_embd.weight") if spec.embed else None,
                                   w.get("output_norm.weight"), w.get(HEAD))
        self.calls: list[Call] = []
        self.halves: list[tuple[Call | None, Call | None]] = []
        self.head: Call | None = None
        self.embedding: np.ndarray | None = None
        if share is None:
            block_bytes = sum(a.nbytes for n, a in w.items() if n.startswith(f"blk.{spec.first}."))
            groups = session_groups(blocks, block_bytes, SESSION_BYTES)
            for k, group in enumerate(groups):
                head = k == len(groups) - 1 and spec.head
                self.calls.append(Call(run_graph(cfg, w, group, embedding if k == 0 else None, norm if head else None,
                                                 output if head else None), group))
        else:
            self.embedding = embedding
            for i in blocks:
                bw = block_weights(w, i)
                self.halves.append((Call(attention_graph(cfg, bw, i, kv_heads), range(i, i + 1)) if kv_heads else None,
                                    Call(ffn_graph(cfg, bw, i), range(0)) if share.size("ffn") else None))
            if spec.head and norm is not None and output is not None:
                self.head = Call(head_graph(cfg, norm, output), range(0))

    def positions(self, pos: int, t: int) -> dict[str, np.ndarray]:
        """RoPE's cos and sin and the causal mask of ``t`` tokens at ``pos``."""
        if pos + t > self.caches.capacity:
            raise ModelError(f"position {pos + t} is beyond the KV cache's {self.caches.capacity} positions")
        mask = np.zeros((t, pos + t), np.float32)
        if t > 1:
            mask[np.triu_indices(t, pos + 1, pos + t)] = -np.inf
        angles = (t, 1, self.cfg.head_dim // 2, 1)
        return {"cos": self.cos[pos:pos + t].reshape(angles), "sin": self.sin[pos:pos + t].reshape(angles),
                "mask": mask}

    def forward(self, x: torch.Tensor, pos: int, every_position: bool = False, reduce: Reduce = no_reduce,
                stream: int = 0) -> torch.Tensor:
        """``Decoder.forward``: token ids (T,) on an embedding stage, else the hidden state (T, dim); the hidden
        state out, or on the head stage the logits of the last position (every position's with
        ``every_position``)."""
        h = x.numpy()
        t = h.shape[0]
        at = self.positions(pos, t)
        keep = np.arange(t, dtype=np.int64) if every_position else np.array([t - 1], np.int64)
        if self.calls:
            for k, call in enumerate(self.calls):
                feeds = {**at, **self.caches.feeds(stream, call.blocks, pos),
                         ("ids" if k == 0 and self.spec.embed else "x"): h}
                if k == len(self.calls) - 1 and self.spec.head:
                    feeds["keep"] = keep
                h = self._run(call, feeds, stream, pos)
            return torch.from_numpy(h)
        if self.embedding is not None:
            h = self.embedding[h]
        for i, (att, ffn) in zip(range(self.spec.first, self.spec.stop), self.halves):
            part = self._run(att, {**at, **self.caches.feeds(stream, att.blocks, pos), "x": h}, stream, pos) \
                if att is not None else np.zeros_like(h)
            h = h + reduce(torch.from_numpy(part)).numpy()
            part = self._run(ffn, {"x": h}, stream, pos) if ffn is not None else np.zeros_like(h)
            h = h + reduce(torch.from_numpy(part)).numpy()
        if self.head is not None:
            h = self._run(self.head, {"x": h, "keep": keep}, stream, pos)
        return torch.from_numpy(h)

    def _run(self, call: Call, feeds: dict[str, np.ndarray], stream: int, pos: int) -> np.ndarray:
        out = call(feeds)
        for i in call.blocks:
            self.caches.keep(stream, i, pos, out[f"new_k.{i}"], out[f"new_v.{i}"])
        return out["y"]


