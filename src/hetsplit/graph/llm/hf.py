"""A Hugging Face Llama checkpoint in: a folder with ``config.json``, ``*.safetensors`` weights and
``tokenizer.json``. Tensors are renamed to GGUF's names and Q/K rows reordered for RoPE on adjacent
pairs (as llama.cpp's converter does), so the rest of ``graph.llm`` treats both formats alike.
Safetensors are read and written directly (an 8-byte header length, a JSON header, raw little-endian
data; ``write_safetensors``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np

from hetsplit.errors import ModelError
from hetsplit.graph.llm.config import CheckpointTensors, LlmConfig, StoredTensor

DTYPES = {"F32": (np.float32, 4), "F16": (np.float16, 2), "BF16": (np.uint16, 2)}
ROLES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
         "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TOP = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
       "lm_head.weight": "output.weight"}


def write_safetensors(path: Path, tensors: dict[str, np.ndarray]) -> Path:
    """``tensors`` (float32 or float16, in the given order) as one safetensors file."""
    kinds = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16"}
    head: dict[str, Any] = {}
    at = 0
    for name, a in tensors.items():
        if a.dtype not in kinds:
            raise ModelError(f"{path}: tensor {name!r} is {a.dtype}; safetensors are written as float32 or float16")
        head[name] = {"dtype": kinds[a.dtype], "shape": list(a.shape), "data_offsets": [at, at + a.nbytes]}
        at += a.nbytes
    raw = json.dumps(head).encode()
    raw += b" " * (-len(raw) % 8)              # the data 8-byte aligned, as the format recommends
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)) + raw)
        for a in tensors.values():
            f.write(np.ascontiguousarray(a).astype(a.dtype.newbyteorder("<"), copy=False).tobytes())
    return path


def gguf_name(hf: str) -> str | None:
    """GGUF's name of a Hugging Face Llama tensor (None: not one the decoder reads)."""
    if hf in TOP:
        return TOP[hf]
    parts = hf.split(".")
    if hf.startswith("model.layers.") and hf.endswith(".weight") and len(parts) >= 5:
        role = ROLES.get(".".join(parts[3:-1]))
        return None if role is None else f"blk.{parts[2]}.{role}.weight"
    return None


def rope_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Q or K rows from HF's half-split RoPE layout to adjacent pairs (per head: 0, d/2, 1, d/2 + 1, ...)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _header(path: Path) -> tuple[dict[str, Any], int]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) < 8:
            raise ModelError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        try:
            head = json.loads(f.read(n))
        except (ValueError, UnicodeDecodeError):
            raise ModelError(f"{path}: not a safetensors file (bad header)") from None
    head.pop("__metadata__", None)
    return head, 8 + n


class HfModel(CheckpointTensors):
    """The same face as ``GgufModel``: ``config``, ``tensors`` (GGUF names), ``load``, ``tokenizer_file``."""

    def __init__(self, path: Path, config: LlmConfig, entries: dict[str, tuple[Path, int, dict[str, Any]]]):
        self.path, self.config, self._entries = path, config, entries
        self.tensors = {n: StoredTensor(n, tuple(e["shape"]), e["dtype"], e["data_offsets"][1] - e["data_offsets"][0])
                        for n, (_, _, e) in entries.items()}
        self.tokenizer_file = path / "tokenizer.json"

    def load(self, names: list[str]) -> dict[str, np.ndarray]:
        out = {}
        for n in names:
            if n not in self._entries:
                raise ModelError(f"{self.path}: no tensor {n!r}")
            file, base, e = self._entries[n]
            dtype, size = DTYPES[e["dtype"]]
            start, stop = e["data_offsets"]
            raw = np.fromfile(file, dtype=dtype, count=(stop - start) // size, offset=base + start)
            a = (raw.astype(np.uint32) << 16).view(np.float32) if e["dtype"] == "BF16" else raw.astype(np.float32)
            a = a.reshape(e["shape"])
            if n.endswith("attn_q.weight"):
                a = rope_rows(a, self.config.heads)
            elif n.endswith("attn_k.weight"):
                a = rope_rows(a, self.config.kv_heads)
            out[n] = np.ascontiguousarray(a, dtype=np.float32)
        return out


def read_hf(path: str | Path) -> HfModel:
    """A Hugging Face Llama folder; ModelError naming what is missing or unsupported."""
    path = Path(path)
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise ModelError(f"{path}: no config.json (a Hugging Face model folder has config.json and *.safetensors)")
    c = json.loads(cfg_file.read_text())
    if c.get("model_type") != "llama":
        raise ModelError(f"{cfg_file}: model_type {c.get('model_type')!r} is not supported (supported: llama)")
    entries: dict[str, tuple[Path, int, dict[str, Any]]] = {}   # a safetensors header entry
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise ModelError(f"{path}: no *.safetensors weights")
    for f in files:
        head, base = _header(f)
        for hf, e in head.items():
            name = gguf_name(hf)
            if name is None:
                continue
            if e["dtype"] not in DTYPES:
                raise ModelError(f"{f}: tensor {hf!r} has dtype {e['dtype']}; supported: {', '.join(DTYPES)}")
            entries[name] = (f, base, e)
    heads = int(c["num_attention_heads"])
    tied = bool(c.get("tie_word_embeddings", False)) or "output.weight" not in entries
    config = LlmConfig(name=str(c.get("_name_or_path") or path.name), dim=int(c["hidden_size"]),
                       blocks=int(c["num_hidden_layers"]), heads=heads,
                       kv_heads=int(c.get("num_key_value_heads", heads)), ffn=int(c["intermediate_size"]),
                       vocab=int(c["vocab_size"]), context=int(c.get("max_position_embeddings", 2048)),
                       rope_base=float(c.get("rope_theta", 10000.0)), eps=float(c.get("rms_norm_eps", 1e-6)),
                       tied=tied)
    model = HfModel(path, config, entries)
    missing = [n for i in range(config.blocks) for n in model.block_names(i) if n not in entries]
    missing += [n for n in ("token_embd.weight", "output_norm.weight") if n not in entries]
    if missing:
        raise ModelError(f"{path}: tensors missing for a llama model of {config.blocks} blocks: {missing[:4]}")
    return model
