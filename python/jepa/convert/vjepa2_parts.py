"""What V-JEPA 2's source layouts share (vjepa2_hf.py, vjepa2_meta.py), and the AC predictor too: the
masked predictor's and the attentive-pool head's specs, their keys and their tensor tables from the
schema's declaration (jepa.gguf.tensors.MASKED / HEAD). A leaf: it imports no converter."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..gguf import tensors as gguf_tensors
from ..gguf.schema import ROPE_THETA, pred_keys
from ..gguf.tensors import Expected


class RopePredictor:
    """What the masked and the AC predictor share: V-JEPA 2's blocks (exact GELU, tiled 3-D RoPE) and a
    head width of embed_dim / n_head."""

    embed_dim: int
    n_head: int
    act = "gelu_erf"
    rope_freq_layout = "tiled"
    rope_theta = ROPE_THETA

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.n_head


@dataclass(frozen=True)
class PredictorSpec(RopePredictor):
    """The masked predictor (jepa.pred.*); V-JEPA 2.1's with its extras (levels in, modality vectors,
    a context projection, its own output width, interleaved RoPE)."""

    embed_dim: int
    n_layer: int
    n_head: int
    ffn_dim: int
    n_mask_tokens: int
    out_dim: int  # V-JEPA 2: the encoder's width (the predictor reads and predicts encoder tokens)
    grid_size: int
    n_frames: int
    ln_eps: float
    qkv_fused: bool = False
    enc_dim: int = 0  # the encoder's width when out_dim is not it (V-JEPA 2.1); 0: out_dim
    in_levels: int = 1
    modality_embed: bool = False
    proj_context: bool = False
    rope_freq_layout: str = "tiled"

    def __post_init__(self) -> None:
        if self.n_head <= 0 or self.embed_dim % self.n_head:
            raise ValueError(f"unsupported pred n_head={self.n_head} (pred embed_dim={self.embed_dim})")
        hd = self.embed_dim // self.n_head
        if hd % 2 or hd < 6:
            raise ValueError(f"unsupported pred head_dim={hd} (3-D RoPE needs an even head_dim >= 6)")

    kind = "masked"

    def keys(self) -> dict[str, Any]:
        out = pred_keys(self, "kind embed_dim n_layer n_head head_dim ffn_dim n_mask_tokens out_dim "
                              "grid_size n_frames ln_eps act rope_freq_layout rope_theta")
        # V-JEPA 2.1's keys, written only where they say something (V-JEPA 2 files stay as they were).
        extras = {"in_levels": self.in_levels != 1, "modality_embed": self.modality_embed,
                  "proj_context": self.proj_context}
        return out | pred_keys(self, " ".join(k for k, on in extras.items() if on))

    def table(self) -> dict[str, Expected]:
        return gguf_tensors.MASKED.table({
            "D": self.enc_dim or self.out_dim, "W": self.out_dim, "L": self.in_levels, "Dp": self.embed_dim,
            "Fp": self.ffn_dim, "M": self.n_mask_tokens, "n_layer": self.n_layer, "fused": self.qkv_fused,
            "separate": not self.qkv_fused, "qkv_bias": True, "one_level": self.in_levels == 1,
            "levels": self.in_levels > 1, "pred_modality": self.modality_embed,
            "proj_context": self.proj_context,
        })


@dataclass(frozen=True)
class HeadSpec:
    """The attentive-pool classifier (jepa.head.*)."""

    embed_dim: int
    n_pool_layers: int
    ffn_dim: int
    labels: tuple[str, ...]

    def keys(self) -> dict[str, Any]:
        return {
            "jepa.head.kind": "attentive_pool",
            "jepa.head.n_classes": len(self.labels),
            "jepa.head.n_pool_layers": self.n_pool_layers,
            "jepa.head.labels": list(self.labels),
        }

    def table(self) -> dict[str, Expected]:
        return gguf_tensors.HEAD.table({
            "D": self.embed_dim, "F": self.ffn_dim, "C": len(self.labels),
            "n_pool_layers": self.n_pool_layers, "fused": False, "separate": True,
            "qkv_bias": True,
        })
