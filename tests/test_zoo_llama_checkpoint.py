"""The zoo's TinyLlama written as a Hugging Face Llama folder reads back as the same model: the LLM
decoder's logits on it are the torch module's, its tokenizer's words are its token ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from hetsplit.errors import ModelError
from hetsplit.graph.llm.decoder import Decoder, StageSpec
from hetsplit.graph.llm.hf import read_hf, write_safetensors
from hetsplit.graph.llm.load import model_tokenizer
from hetsplit.graph.zoo.llama_checkpoint import prompt_text, write_llama_checkpoint
from hetsplit.graph.zoo.transformer import TinyLlama

VOCAB, E, F, HEADS, LAYERS, SEQ = 100, 64, 128, 4, 2, 16


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    torch.manual_seed(0)
    module = TinyLlama(VOCAB, E, F, HEADS, LAYERS, SEQ).eval()
    with torch.no_grad():                      # norms away from 1, so a misplaced norm weight shows
        for p in module.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    return module, write_llama_checkpoint(module, tmp_path_factory.mktemp("zoo") / "tiny", "tiny")


def test_the_decoder_on_the_checkpoint_gives_the_modules_logits(tiny):
    module, folder = tiny
    model = read_hf(folder)
    c = model.config
    assert (c.dim, c.ffn, c.heads, c.kv_heads, c.blocks, c.vocab, c.context) == (E, F, HEADS, HEADS, LAYERS, VOCAB, SEQ)
    assert c.tied and (c.eps, c.rope_base) == (1e-5, 10000.0) and "output.weight" not in model.tensors
    tokens = torch.randint(0, VOCAB, (SEQ,), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = module(tokens[None])[0]
    got = Decoder(model, StageSpec.whole(c), SEQ).forward(tokens, 0, every_position=True)
    assert float((got - want).abs().max()) <= 1e-4
    # a decode step against the cache gives the last position's logits too
    dec = Decoder(model, StageSpec.whole(c), SEQ)
    dec.forward(tokens[:-1], 0)
    assert float((dec.forward(tokens[-1:], SEQ - 1)[0] - want[-1]).abs().max()) <= 1e-4


def test_the_tokenizer_names_each_token_id_by_one_word(tiny):
    _, folder = tiny
    tok = model_tokenizer(read_hf(folder))
    assert tok.encode(prompt_text([3, 99, 0, 42])) == [3, 99, 0, 42]
    assert tok.decode([7, 8]) == "t7 t8"


def test_safetensors_are_written_aligned_with_their_dtypes(tmp_path):
    a, b = np.arange(6, dtype=np.float16).reshape(2, 3), np.full(3, 2.5, np.float32)
    raw = write_safetensors(tmp_path / "x.safetensors", {"a": a, "b": b}).read_bytes()
    n = int.from_bytes(raw[:8], "little")
    head = json.loads(raw[8:8 + n])
    assert n % 8 == 0 and head["a"] == {"dtype": "F16", "shape": [2, 3], "data_offsets": [0, 12]}
    assert head["b"] == {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}
    assert np.array_equal(np.frombuffer(raw, np.float16, 6, 8 + n), a.ravel())
    assert np.array_equal(np.frombuffer(raw, np.float32, 3, 8 + n + 12), b)
    with pytest.raises(ModelError, match="int64"):
        write_safetensors(tmp_path / "y.safetensors", {"c": np.zeros(2, np.int64)})


def test_only_a_tied_tinyllama_is_written(tmp_path):
    module = TinyLlama(VOCAB, E, F, HEADS, 1, SEQ)
    module.output.weight = torch.nn.Parameter(module.output.weight.detach().clone())
    with pytest.raises(ModelError, match="not the embedding"):
        write_llama_checkpoint(module, tmp_path / "untied")
    with pytest.raises(ModelError, match="Linear"):
        write_llama_checkpoint(torch.nn.Linear(2, 2), tmp_path / "linear")   # type: ignore[arg-type]


def test_plan_takes_the_checkpoint_folder_as_generate_does(tiny, tmp_path, capsys):
    import json

    from hetsplit.cli.main import main

    _, folder = tiny
    cluster = tmp_path / "c.yaml"
    cluster.write_text("format: hetsplit.cluster/1\nname: two\ndevices:\n"
                       "  - {name: a, kind: cpu, memory: 1GiB, peak_macs: 4e9/s, mem_bandwidth: 4GB/s, power_active: 5W}\n"
                       "  - {name: b, kind: cpu, memory: 1GiB, peak_macs: 1e9/s, mem_bandwidth: 1GB/s, power_active: 5W}\n"
                       "links:\n  default: {name: net, bandwidth: 1GB/s, latency: 10us}\n")
    assert main(["plan", str(folder), "--cluster", str(cluster), "--prompt-tokens", "4", "--tokens", "4", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best_single"]["device"] == "a" and doc["alone"]["b"]["s_per_token"] > doc["alone"]["a"]["s_per_token"]
    assert (doc["prompt_tokens"], doc["new_tokens"]) == (4, 4)
