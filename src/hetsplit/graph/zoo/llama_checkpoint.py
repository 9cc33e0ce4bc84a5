"""The zoo's TinyLlama (``graph.zoo.transformer.TinyLlama``) as a Hugging Face Llama folder, so that the
LLM program (``graph.llm``: read, plan, split, decode, verify) runs it like any real checkpoint.

The folder holds ``config.json`` (the module's dimensions; tied embedding and LM head; RMSNorm eps and
RoPE base as the module computes them; its sequence length as the context), ``model.safetensors``
(float32, Hugging Face's tensor names; the zoo's RoPE is Hugging Face's half-split one, so Q and K are
written as they are and ``graph.llm.hf`` reorders them as for any HF checkpoint) and a ``tokenizer.json``
of one word per id (``t0``, ``t1``, ...: the random-weight model has no vocabulary of its own), so a
prompt of token ids is a text too (``prompt_text``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hetsplit.errors import ModelError
from hetsplit.graph.llm.hf import write_safetensors
from hetsplit.graph.llm.tokenizer import write_word_tokenizer
from hetsplit.graph.zoo.transformer import ROPE_THETA, LlamaBlock, TinyLlama

WORD = "t{}"
# Hugging Face's name of each block tensor, by the zoo block's attribute
BLOCK_NAMES = {"attention_norm": "input_layernorm", "wq": "self_attn.q_proj", "wk": "self_attn.k_proj",
               "wv": "self_attn.v_proj", "wo": "self_attn.o_proj", "ffn_norm": "post_attention_layernorm",
               "w1": "mlp.gate_proj", "w3": "mlp.up_proj", "w2": "mlp.down_proj"}


def prompt_text(ids: list[int]) -> str:
    """The text the checkpoint's tokenizer encodes to ``ids``."""
    return " ".join(WORD.format(i) for i in ids)


def hf_config(module: TinyLlama, name: str) -> dict[str, Any]:
    """config.json of ``module``."""
    vocab, dim = module.tok_embeddings.weight.shape
    first = module.layers[0]
    assert isinstance(first, LlamaBlock)
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "_name_or_path": name,
            "hidden_size": int(dim), "intermediate_size": int(first.w1.weight.shape[0]),
            "num_attention_heads": int(first.heads), "num_key_value_heads": int(first.heads),
            "num_hidden_layers": len(module.layers), "vocab_size": int(vocab),
            "max_position_embeddings": int(module.cos.shape[0]), "rms_norm_eps": float(module.norm.eps),
            "rope_theta": ROPE_THETA, "tie_word_embeddings": True, "torch_dtype": "float32"}


def hf_tensors(module: TinyLlama) -> dict[str, np.ndarray]:
    """``module``'s weights by Hugging Face Llama name (the tied LM head once, as the embedding)."""
    def f32(p: torch.Tensor) -> np.ndarray:
        return p.detach().cpu().float().numpy()

    out = {"model.embed_tokens.weight": f32(module.tok_embeddings.weight)}
    for i, block in enumerate(module.layers):
        for attr, hf in BLOCK_NAMES.items():
            out[f"model.layers.{i}.{hf}.weight"] = f32(getattr(block, attr).weight)
    out["model.norm.weight"] = f32(module.norm.weight)
    return out


def write_llama_checkpoint(module: TinyLlama, folder: str | Path, name: str = "tinyllama") -> Path:
    """Write ``module`` as a Hugging Face Llama folder (created if needed); the folder."""
    if not isinstance(module, TinyLlama):
        raise ModelError(f"a Llama checkpoint is written from the zoo's TinyLlama, not {type(module).__name__}")
    if module.output.weight.data_ptr() != module.tok_embeddings.weight.data_ptr():
        raise ModelError(f"{name}: the LM head is not the embedding; the checkpoint is written tied")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = hf_config(module, name)
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    write_safetensors(folder / "model.safetensors", hf_tensors(module))
    write_word_tokenizer(folder / "tokenizer.json", [WORD.format(i) for i in range(config["vocab_size"])])
    return folder
