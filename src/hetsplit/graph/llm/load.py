"""One entry for both checkpoint formats: a ``.gguf`` file or a Hugging Face folder, and its tokenizer."""

from __future__ import annotations

from pathlib import Path

from hetsplit.errors import ModelError
from hetsplit.graph.llm.gguf_file import GgufModel, read_gguf
from hetsplit.graph.llm.hf import HfModel, read_hf
from hetsplit.graph.llm.tokenizer import Tokenizer, file_tokenizer, gguf_tokenizer

LlmModel = GgufModel | HfModel


def is_checkpoint(path: str | Path) -> bool:
    """Whether ``path`` names an LLM checkpoint ``read_model`` reads: a .gguf file, or a folder with a
    config.json (a Hugging Face one)."""
    p = Path(path)
    return p.suffix == ".gguf" or (p.is_dir() and (p / "config.json").is_file())


def read_model(path: str | Path) -> LlmModel:
    """A GGUF file, or a folder with config.json and safetensors."""
    p = Path(path)
    if p.is_dir():
        return read_hf(p)
    if p.suffix == ".gguf" or p.is_file():
        return read_gguf(p)
    raise ModelError(f"{p}: no such model (a .gguf file or a Hugging Face folder)")


def model_tokenizer(model: LlmModel) -> Tokenizer:
    if isinstance(model, HfModel):
        return file_tokenizer(model.tokenizer_file)
    return gguf_tokenizer(model.tokenizer, str(model.path))
