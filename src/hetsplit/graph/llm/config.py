"""What a Llama-family checkpoint is: its dimensions and its tensors as stored."""

from __future__ import annotations

from dataclasses import dataclass

from hetsplit.errors import ModelError

# the tensors of one block, by role, as GGUF names them (``blk.<i>.<name>.weight``)
BLOCK_TENSORS = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm", "ffn_gate", "ffn_up",
                 "ffn_down")


@dataclass(frozen=True)
class LlmConfig:
    """The dimensions of a Llama-family decoder (grouped-query attention, RoPE, RMSNorm, SwiGLU)."""

    name: str
    dim: int
    blocks: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    context: int
    rope_base: float = 10000.0
    eps: float = 1e-5
    tied: bool = False              # the LM head is the token embedding

    def __post_init__(self) -> None:
        for key in ("dim", "blocks", "heads", "kv_heads", "ffn", "vocab", "context"):
            if getattr(self, key) < 1:
                raise ModelError(f"model {self.name!r}: {key} must be >= 1, got {getattr(self, key)}")
        if self.dim % self.heads:
            raise ModelError(f"model {self.name!r}: dim {self.dim} is not a multiple of {self.heads} heads")
        if self.heads % self.kv_heads:
            raise ModelError(f"model {self.name!r}: {self.heads} query heads are not a multiple of "
                             f"{self.kv_heads} KV heads")

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    @property
    def kv_dim(self) -> int:
        return self.kv_heads * self.head_dim

    def kv_bytes_per_position(self, blocks: int = 1, elem_bytes: int = 4) -> int:
        """Bytes of K and V one position adds to the cache of ``blocks`` blocks."""
        return 2 * self.kv_dim * elem_bytes * blocks


@dataclass(frozen=True)
class StoredTensor:
    """One tensor as the file stores it: its shape (rows = outputs, columns = inputs), its type, its bytes."""

    name: str
    shape: tuple[int, ...]
    qtype: str
    stored_bytes: int

    @property
    def elements(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


def block_tensor(i: int, role: str) -> str:
    return f"blk.{i}.{role}.weight"


class CheckpointTensors:
    """What a checkpoint reader (GGUF or Hugging Face) answers from its ``config`` and ``tensors`` (GGUF names)."""

    config: LlmConfig
    tensors: dict[str, StoredTensor]

    def stored_bytes(self, names: list[str] | None = None) -> int:
        return sum(t.stored_bytes for n, t in self.tensors.items() if names is None or n in names)

    def block_names(self, i: int) -> list[str]:
        return [block_tensor(i, r) for r in BLOCK_TENSORS]

    def head_name(self) -> str:
        return "token_embd.weight" if self.config.tied else "output.weight"
