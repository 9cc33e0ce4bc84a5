"""Reading a GGUF checkpoint of the Llama family (``gguf`` package): its dimensions, its tensors as
stored (costed at their stored bytes) and, on request, tensors dequantized to float32 for compute.

Supported tensor types: F32, F16, Q4_0, Q4_1, Q8_0 (others are named as unsupported). GGUF keeps
llama.cpp's layout: Q and K rows are ordered for RoPE on adjacent pairs (``decoder`` rotates so).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import ModelError
from hetsplit.graph.llm.config import BLOCK_TENSORS, CheckpointTensors, LlmConfig, StoredTensor, block_tensor

ARCHITECTURES = ("llama",)
SUPPORTED_TYPES = ("F32", "F16", "Q4_0", "Q4_1", "Q8_0")


def _reader(path: Path) -> Any:
    import gguf

    try:
        return gguf.GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise ModelError(f"{path}: not a readable GGUF file ({exc})") from None


def _field(reader: Any, key: str, path: Path, default: Any = None) -> Any:
    f = reader.fields.get(key)
    if f is None:
        if default is None:
            raise ModelError(f"{path}: GGUF metadata has no {key!r}")
        return default
    return f.contents()


@dataclass
class GgufModel(CheckpointTensors):
    """A GGUF checkpoint: ``config``, ``tensors`` (name -> StoredTensor), the tokenizer's metadata."""

    path: Path
    config: LlmConfig
    tensors: dict[str, StoredTensor]
    tokenizer: dict[str, Any] = field(default_factory=dict)
    _reader: Any = None

    def load(self, names: list[str]) -> dict[str, np.ndarray]:
        """The named tensors dequantized to float32, shaped (rows, columns) as the model multiplies them."""
        import gguf

        if self._reader is None:
            self._reader = _reader(self.path)
        by_name = {t.name: t for t in self._reader.tensors}
        out = {}
        for n in names:
            t = by_name.get(n)
            if t is None:
                raise ModelError(f"{self.path}: no tensor {n!r}")
            a = gguf.quants.dequantize(t.data, t.tensor_type)
            out[n] = np.require(a.reshape(self.tensors[n].shape), np.float32, ["C", "W"])   # torch wants writable
        return out


def read_gguf(path: str | Path) -> GgufModel:
    """The checkpoint's dimensions and tensors (no weights read yet); ModelError for anything unsupported."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such GGUF file")
    r = _reader(path)
    arch = _field(r, "general.architecture", path)
    if arch not in ARCHITECTURES:
        raise ModelError(f"{path}: architecture {arch!r} is not supported (supported: {', '.join(ARCHITECTURES)})")
    tensors = {}
    for t in r.tensors:
        kind = t.tensor_type.name
        if kind not in SUPPORTED_TYPES:
            raise ModelError(f"{path}: tensor {t.name!r} has type {kind}; supported: {', '.join(SUPPORTED_TYPES)}")
        tensors[t.name] = StoredTensor(t.name, tuple(int(s) for s in reversed(t.shape.tolist())), kind,
                                       int(t.n_bytes))
    a = f"{arch}."
    emb = tensors.get("token_embd.weight")
    if emb is None:
        raise ModelError(f"{path}: no token embedding 'token_embd.weight'")
    heads = int(_field(r, a + "attention.head_count", path))
    config = LlmConfig(
        name=str(_field(r, "general.name", path, default=path.stem)), dim=int(_field(r, a + "embedding_length", path)),
        blocks=int(_field(r, a + "block_count", path)), heads=heads,
        kv_heads=int(_field(r, a + "attention.head_count_kv", path, default=heads)),
        ffn=int(_field(r, a + "feed_forward_length", path)), vocab=emb.shape[0],
        context=int(_field(r, a + "context_length", path)),
        rope_base=float(_field(r, a + "rope.freq_base", path, default=10000.0)),
        eps=float(_field(r, a + "attention.layer_norm_rms_epsilon", path)),
        tied="output.weight" not in tensors)
    want = [block_tensor(i, role) for i in range(config.blocks) for role in BLOCK_TENSORS] + ["output_norm.weight"]
    missing = [n for n in want if n not in tensors]
    if missing:
        raise ModelError(f"{path}: tensors missing for a {arch} model of {config.blocks} blocks: {missing[:4]}")
    tok = {k.split("tokenizer.ggml.")[1]: r.fields[k] for k in r.fields if k.startswith("tokenizer.ggml.")}
    return GgufModel(path, config, tensors, tok, r)
