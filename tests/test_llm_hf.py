"""A Hugging Face Llama folder (config.json, safetensors, tokenizer.json) reads as the same model as a GGUF."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hetsplit.errors import ModelError
from hetsplit.graph.llm.decoder import greedy
from hetsplit.graph.llm.gguf_file import read_gguf
from hetsplit.graph.llm.hf import TOP, read_hf, write_safetensors
from hetsplit.graph.llm.load import model_tokenizer, read_model

HF_ROLE = {"attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
           "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}


def half_split(w: np.ndarray, heads: int) -> np.ndarray:
    """GGUF's adjacent-pair Q/K rows back to Hugging Face's half-split layout."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.fixture(scope="module")
def hf_folder(tiny_gguf, tmp_path_factory):
    g = read_gguf(tiny_gguf)
    c = g.config
    w = g.load(list(g.tensors))
    out = {}
    back = {v: k for k, v in TOP.items()}
    for name, a in w.items():
        if name in back:
            out[back[name]] = a
            continue
        _, i, role, _ = name.split(".")
        a = half_split(a, c.heads) if role == "attn_q" else half_split(a, c.kv_heads) if role == "attn_k" else a
        out[f"model.layers.{i}.{HF_ROLE[role]}.weight"] = a
    folder = tmp_path_factory.mktemp("hf")
    write_safetensors(folder / "model.safetensors", out)
    (folder / "config.json").write_text(json.dumps({
        "model_type": "llama", "hidden_size": c.dim, "num_hidden_layers": c.blocks, "num_attention_heads": c.heads,
        "num_key_value_heads": c.kv_heads, "intermediate_size": c.ffn, "vocab_size": c.vocab,
        "max_position_embeddings": c.context, "rope_theta": c.rope_base, "rms_norm_eps": c.eps,
        "tie_word_embeddings": False}))
    model_tokenizer(g)._tok.save(str(folder / "tokenizer.json"))
    return folder


def test_a_hf_folder_gives_the_ggufs_config_tokens_and_logits(tiny_gguf, hf_folder):
    g, h = read_gguf(tiny_gguf), read_model(hf_folder)
    assert h.config.dim == g.config.dim and h.config.kv_heads == g.config.kv_heads and not h.config.tied
    assert h.stored_bytes() > g.stored_bytes()                   # float32 against quantized
    assert model_tokenizer(h).encode("the cat sat") == model_tokenizer(g).encode("the cat sat")
    tokens_g, logits_g = greedy(g, [4, 8, 15, 16], 5)
    tokens_h, logits_h = greedy(h, [4, 8, 15, 16], 5)
    assert tokens_h == tokens_g and torch.allclose(logits_h, logits_g, atol=1e-5)


def test_a_folder_that_is_not_a_llama_is_refused(tmp_path):
    with pytest.raises(ModelError, match="config.json"):
        read_hf(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ModelError, match="gpt2"):
        read_hf(tmp_path)


@pytest.mark.processes
def test_a_hf_folder_generates_split_over_two_processes(hf_folder):
    from hetsplit.cluster import load_cluster
    from hetsplit.workflow.generate import GenerateOptions, generate

    r = generate(hf_folder, load_cluster("local"), GenerateOptions("the cat", tokens=4, stages=2, verify=True))
    assert r.verify["ok"] and len(r.tokens) == 4
