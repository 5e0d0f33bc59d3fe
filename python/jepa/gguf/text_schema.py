"""What a text converter hands to the GGUF writer (family bert): the encoder's widths, its tables'
sizes, the pooling and the tokenizer, and the tensor table those imply (tensors.TEXT)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import POOLINGS
from .tensors import TEXT, Expected

TEXT_ACTS = ("gelu_erf", "gelu_tanh")
LAYOUTS = ("BertModel", "XLMRobertaModel")


@dataclass(frozen=True)
class TextEncoder:
    embed_dim: int
    n_layer: int
    n_head: int
    ffn_dim: int
    vocab_size: int
    n_positions: int
    n_token_types: int
    pooling: str
    max_seq_len: int
    tokenizer: str  # tokenizer.json, as the file will carry it
    normalize: bool = False
    pos_offset: int = 0
    ln_eps: float = 1e-12
    act: str = "gelu_erf"
    layout: str = "BertModel"

    def __post_init__(self) -> None:
        if self.pooling not in POOLINGS:
            raise ValueError(f"unsupported pooling={self.pooling} (expected one of: {', '.join(POOLINGS)})")
        if self.act not in TEXT_ACTS:
            raise ValueError(f"unsupported act={self.act}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unsupported layout={self.layout}")
        if self.n_head <= 0 or self.embed_dim % self.n_head:
            raise ValueError(f"unsupported n_head={self.n_head} (embed_dim={self.embed_dim})")
        if not 1 <= self.max_seq_len <= self.n_positions - self.pos_offset:
            raise ValueError(
                f"unsupported max_seq_len={self.max_seq_len}: the position table takes "
                f"{self.n_positions - self.pos_offset} tokens "
                f"({self.n_positions} rows from offset {self.pos_offset})"
            )

    def keys(self) -> dict[str, Any]:
        """jepa.enc.* and jepa.text.*, in the order every text file has them."""
        return {
            "jepa.enc.embed_dim": self.embed_dim,
            "jepa.enc.n_layer": self.n_layer,
            "jepa.enc.n_head": self.n_head,
            "jepa.enc.ffn_dim": self.ffn_dim,
            "jepa.enc.ln_eps": float(self.ln_eps),
            "jepa.enc.act": self.act,
            "jepa.text.pooling": self.pooling,
            "jepa.text.normalize": bool(self.normalize),
            "jepa.text.max_seq_len": self.max_seq_len,
            "jepa.text.pos_offset": self.pos_offset,
            "jepa.text.layout": self.layout,
            "jepa.text.tokenizer": self.tokenizer,
        }

    def table(self) -> dict[str, Expected]:
        return TEXT.table(
            {
                "D": self.embed_dim,
                "F": self.ffn_dim,
                "V": self.vocab_size,
                "P": self.n_positions,
                "Tt": self.n_token_types,
                "n_layer": self.n_layer,
            }
        )
