"""The tokenizer a GGUF file carries (``tokenizer.ggml.*``), built with ``tokenizers``: byte-level BPE
(``model: gpt2``) from its tokens and merges; control tokens (type 3) are special (one token each). A
``tokenizer.json`` of whole words (``write_word_tokenizer``) names the token ids of a model that has no
vocabulary of its own (the zoo's random-weight decoders)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hetsplit.errors import ModelError

CONTROL = 3
# pre-tokenizers by ``tokenizer.ggml.pre``: SmolLM splits digits one by one before the byte-level split
DIGITS_FIRST = ("smollm",)


class Tokenizer:
    """Text <-> token ids; ``bos``/``eos`` ids where the file names them."""

    def __init__(self, tok: Any, bos: int | None, eos: int | None, add_bos: bool):
        self._tok, self.bos, self.eos, self.add_bos = tok, bos, eos, add_bos

    def encode(self, text: str) -> list[int]:
        ids = self._tok.encode(text, add_special_tokens=False).ids
        return ([self.bos] if self.add_bos and self.bos is not None else []) + list(ids)

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(list(ids), skip_special_tokens=False))


def _value(fields: dict[str, Any], key: str, default: Any = None) -> Any:
    f = fields.get(key)
    return default if f is None else f.contents()


def gguf_tokenizer(fields: dict[str, Any], where: str = "the GGUF file") -> Tokenizer:
    """The tokenizer of a GGUF file's ``tokenizer.ggml.*`` fields (keys without the prefix)."""
    from tokenizers import AddedToken, Tokenizer as HfTokenizer, decoders, models, pre_tokenizers

    kind = _value(fields, "model")
    if kind != "gpt2":
        raise ModelError(f"{where}: tokenizer model {kind!r} is not supported (supported: gpt2 byte-level BPE)")
    tokens = list(_value(fields, "tokens", []))
    merges = [tuple(m.split(" ", 1)) for m in _value(fields, "merges", [])]
    if not tokens or not merges:
        raise ModelError(f"{where}: the tokenizer has no tokens or no merges")
    tok = HfTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges, fuse_unk=False))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if _value(fields, "pre") in DIGITS_FIRST:
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    types = list(_value(fields, "token_type", []))
    special = [tokens[i] for i, t in enumerate(types) if t == CONTROL]
    if special:
        tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in special])
    bos, eos = _value(fields, "bos_token_id"), _value(fields, "eos_token_id")
    return Tokenizer(tok, None if bos is None else int(bos), None if eos is None else int(eos),
                     bool(_value(fields, "add_bos_token", False)))


def file_tokenizer(path: Path) -> Tokenizer:
    """A ``tokenizer.json`` (Hugging Face); its BOS is added when its post-processor adds it."""
    from tokenizers import Tokenizer as HfTokenizer

    if not path.is_file():
        raise ModelError(f"{path}: no tokenizer.json beside the model")
    tok = HfTokenizer.from_file(str(path))
    return Tokenizer(tok, None, None, False)


def write_word_tokenizer(path: Path, words: list[str]) -> Path:
    """A ``tokenizer.json`` whose token i is ``words[i]`` (whitespace-separated words, one id each; decoded
    joined by spaces); ``words[0]`` stands for an unknown word."""
    from tokenizers import Tokenizer as HfTokenizer, models, pre_tokenizers

    if not words or len(set(words)) != len(words) or any(not w or w.split() != [w] for w in words):
        raise ModelError(f"{path}: a word tokenizer needs distinct words without spaces")
    tok = HfTokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(words)}, unk_token=words[0]))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(path))
    return path
