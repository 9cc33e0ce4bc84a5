"""A tiny Llama GGUF the tests write themselves (``gguf.GGUFWriter``): random weights, 2 blocks, a
small byte-level BPE vocabulary, tensors stored in every supported type (Q8_0, Q4_0, Q4_1, F16, F32)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

DIM, HEADS, KV_HEADS, FFN, BLOCKS, CONTEXT = 64, 4, 2, 96, 2, 128
MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("Ġ", "a"), ("e", "r"), ("o", "n"), ("Ġ", "s")]
SPECIAL = ["<s>", "</s>"]


def byte_chars() -> list[str]:
    """GPT-2's printable character for each byte, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocabulary() -> list[str]:
    return SPECIAL + byte_chars() + ["".join(m) for m in MERGES]


def write_tiny_gguf(path: Path, seed: int = 0, tied: bool = False, blocks: int = BLOCKS, dim: int = DIM,
                    ffn: int = FFN) -> Path:
    """Write the tiny model to ``path``; its tensor types cycle through Q8_0, Q4_0, Q4_1, F16 (norms F32).
    ``dim`` and ``ffn`` widen it (a step long enough to be timed: the device emulation's tests)."""
    import gguf

    rng = np.random.default_rng(seed)
    tokens = vocabulary()
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(blocks)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(dim)
    w.add_feed_forward_length(ffn)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(len(tokens))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([3] * len(SPECIAL) + [1] * (len(tokens) - len(SPECIAL)))
    w.add_token_merges([" ".join(m) for m in MERGES])
    w.add_bos_token_id(0)
    w.add_eos_token_id(1)
    kinds = [gguf.GGMLQuantizationType.Q8_0, gguf.GGMLQuantizationType.Q4_0, gguf.GGMLQuantizationType.Q4_1,
             gguf.GGMLQuantizationType.F16]
    count = [0]

    def matrix(name: str, rows: int, cols: int, scale: float) -> None:
        a = (rng.standard_normal((rows, cols)) * scale).astype(np.float32)
        kind = kinds[count[0] % len(kinds)]
        count[0] += 1
        if kind == gguf.GGMLQuantizationType.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            q = gguf.quants.quantize(a, kind)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=kind)

    def norm(name: str, n: int) -> None:
        w.add_tensor(name, (1.0 + 0.1 * rng.standard_normal(n)).astype(np.float32))

    kv = dim // HEADS * KV_HEADS
    matrix("token_embd.weight", len(tokens), dim, 1.0)
    for i in range(blocks):
        p = f"blk.{i}."
        norm(p + "attn_norm.weight", dim)
        matrix(p + "attn_q.weight", dim, dim, dim ** -0.5)
        matrix(p + "attn_k.weight", kv, dim, dim ** -0.5)
        matrix(p + "attn_v.weight", kv, dim, dim ** -0.5)
        matrix(p + "attn_output.weight", dim, dim, dim ** -0.5)
        norm(p + "ffn_norm.weight", dim)
        matrix(p + "ffn_gate.weight", ffn, dim, dim ** -0.5)
        matrix(p + "ffn_up.weight", ffn, dim, dim ** -0.5)
        matrix(p + "ffn_down.weight", dim, ffn, ffn ** -0.5)
    norm("output_norm.weight", dim)
    if not tied:
        matrix("output.weight", len(tokens), dim, dim ** -0.5)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
