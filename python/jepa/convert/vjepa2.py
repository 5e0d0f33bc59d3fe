"""V-JEPA 2 (family vjepa2): video encoders with 3-D RoPE, the masked predictor and the attentive-pool
classifier head. One registered converter for three source layouts:

- HF `VJEPA2Model` (encoder + masked predictor) and `VJEPA2ForVideoClassification` (+ attentive pool
  and classifier; labels from id2label): config.json + safetensors, see vjepa2_hf.py;
- Meta's own .pt checkpoints (encoder only: fused qkv, `module.backbone.` prefixes), see vjepa2_meta.py.

What the layouts share lives here: the predictor and head specs (their keys, and their tensor tables
from the schema's declaration, gguf_tensors.MASKED / HEAD), and the V-JEPA 2 preprocessing recipe
(short side 256/224 x crop, centre crop, bilinear, ImageNet)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..gguf import tensors as gguf_tensors
from ..gguf.schema import ROPE_THETA, Encoder, Preprocess, pred_keys
from ..gguf.tensors import Expected
from ..gguf.writer import PartSpec
from .base import Converter, register
from .source import TensorSource

# Meta's and HF's encoders: LayerNorm eps 1e-6, exact GELU, RoPE with the "tiled" layout, theta 1e4.


def vjepa2_recipe(crop: int) -> Preprocess:
    """The upstream video processor: short side int(crop * 256 / 224), centre crop, bilinear, ImageNet."""
    return Preprocess(
        mean=(0.485, 0.456, 0.406),
        std=(0.229, 0.224, 0.225),
        resize_short=int(crop * 256 / 224),
        crop=crop,
        resample="bilinear",
        resize_mode="shortest_edge",
    )


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
    """The masked predictor (jepa.pred.*)."""

    embed_dim: int
    n_layer: int
    n_head: int
    ffn_dim: int
    n_mask_tokens: int
    out_dim: int  # the encoder's width: the predictor reads and predicts encoder tokens
    grid_size: int
    n_frames: int
    ln_eps: float
    qkv_fused: bool = False

    def __post_init__(self) -> None:
        if self.n_head <= 0 or self.embed_dim % self.n_head:
            raise ValueError(f"unsupported pred n_head={self.n_head} (pred embed_dim={self.embed_dim})")
        hd = self.embed_dim // self.n_head
        if hd % 2 or hd < 6:
            raise ValueError(f"unsupported pred head_dim={hd} (3-D RoPE needs an even head_dim >= 6)")

    kind = "masked"

    def keys(self) -> dict[str, Any]:
        return pred_keys(self, "kind embed_dim n_layer n_head head_dim ffn_dim n_mask_tokens out_dim "
                               "grid_size n_frames ln_eps act rope_freq_layout rope_theta")

    def table(self) -> dict[str, Expected]:
        return gguf_tensors.MASKED.table({
            "D": self.out_dim, "Dp": self.embed_dim, "Fp": self.ffn_dim, "M": self.n_mask_tokens,
            "n_layer": self.n_layer, "fused": self.qkv_fused, "separate": not self.qkv_fused,
            "qkv_bias": True,
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


class Layout(Protocol):
    """One source layout of a V-JEPA 2 checkpoint."""

    source: TensorSource

    def encoder(self) -> Encoder: ...
    def predictor(self) -> PredictorSpec | None: ...
    def head(self) -> HeadSpec | None: ...
    def preprocess(self) -> Preprocess: ...
    def tensors(self) -> Iterator[tuple[str, np.ndarray]]: ...


def _open_layout(src: Path, options: Any) -> Layout:
    from . import vjepa2_hf, vjepa2_meta

    if vjepa2_hf.detect(src):
        return vjepa2_hf.HFLayout(src)
    if src.is_file() and src.suffix.lower() in vjepa2_meta.SUFFIXES:
        # Also a V-JEPA 2-AC file when asked for by --family vjepa2: its encoder alone.
        return vjepa2_meta.MetaLayout(src, options.n_head, getattr(options, "img_size", None))
    raise ValueError(
        f"{src}: neither an HF V-JEPA 2 checkpoint (config.json with model_type vjepa2) nor a "
        "Meta V-JEPA 2 .pt checkpoint"
    )


@register
class VJEPA2(Converter):
    family = "vjepa2"
    modality = "video"

    @classmethod
    def detect(cls, src: Path) -> bool:
        from . import vjepa2_hf, vjepa2_meta

        return vjepa2_hf.detect(src) or vjepa2_meta.detect(src)

    def open_source(self) -> TensorSource:
        self.layout = _open_layout(self.src, self.options)
        return self.layout.source

    def hparams(self) -> Encoder:
        return self.layout.encoder()

    def preprocess(self) -> Preprocess:
        return self.layout.preprocess()

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        return self.layout.tensors()

    def default_name(self) -> str:
        return self.src.stem if self.src.is_file() else super().default_name()

    def parts(self) -> list[PartSpec]:
        return [p for p in (self.layout.predictor(), self.layout.head()) if p is not None]
