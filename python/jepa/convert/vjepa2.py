"""V-JEPA 2 (family vjepa2): video encoders with 3-D RoPE, the masked predictor and the attentive-pool
classifier head. One registered converter for three source layouts:

- HF `VJEPA2Model` (encoder + masked predictor) and `VJEPA2ForVideoClassification` (+ attentive pool
  and classifier; labels from id2label): config.json + safetensors, see vjepa2_hf.py;
- Meta's own .pt checkpoints (encoder only: fused qkv, `module.backbone.` prefixes), see vjepa2_meta.py.

What the layouts share is a leaf they both import: the predictor and head specs (vjepa2_parts.py) and
the V-JEPA 2 preprocessing recipe (recipes.vjepa2_recipe)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from ..gguf.writer import PartSpec
from . import vjepa2_hf, vjepa2_meta
from .base import Converter, register
from .source import TensorSource
from .vjepa2_parts import HeadSpec, PredictorSpec

# Meta's and HF's encoders: LayerNorm eps 1e-6, exact GELU, RoPE with the "tiled" layout, theta 1e4.


class Layout(Protocol):
    """One source layout of a V-JEPA 2 checkpoint."""

    source: TensorSource

    def encoder(self) -> Encoder: ...
    def predictor(self) -> PredictorSpec | None: ...
    def head(self) -> HeadSpec | None: ...
    def preprocess(self) -> Preprocess: ...
    def tensors(self) -> Iterator[tuple[str, np.ndarray]]: ...


def _open_layout(src: Path, options: Any) -> Layout:
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
    """Family vjepa2's two layouts behind one converter: HF's (vjepa2_hf) and Meta's .pt (vjepa2_meta),
    each a `Layout` that maps its own hparams, tensors and parts; this class picks one and forwards."""

    family = "vjepa2"
    modality = "video"

    @classmethod
    def detect(cls, src: Path) -> bool:
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
