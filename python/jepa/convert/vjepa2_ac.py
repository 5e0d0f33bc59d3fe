"""V-JEPA 2-AC (converter family vjepa2_ac; the file says jepa.family vjepa2, jepa.pred.kind ac): Meta's
`vjepa2-ac-vitg.pt` layout, `{"encoder": ..., "predictor": ...}` with `module.backbone.` prefixes, read
with torch.load(weights_only=True). One GGUF holds the encoder and the action-conditioned predictor.

The encoder goes through the Meta .pt encoder mapping of vjepa2_meta.py. The predictor
(`VisionTransformerPredictorAC`): `predictor_embed` (D -> Dp), `action_encoder` / `state_encoder`
(7 -> Dp), `predictor_blocks.{i}` (the encoder's block names, fused qkv), `predictor_norm`,
`predictor_proj` (Dp -> D). `extrinsics_encoder` is skipped: every release runs with
use_extrinsics=False and never reads it. Anything else unmapped is an error.

Widths, depths, MLP widths, patch and tubelet come from the tensor shapes. The head width cannot be
read from them: it is 64 in every released V-JEPA 2 (--head-dim otherwise), which gives both head
counts; the image size is the released 256 unless --img-size says otherwise. The predictor's
frame-causal mask covers num_frames / tubelet = 32 latent frames (upstream's num_frames 64)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf import tensors as gguf_tensors
from ..gguf.schema import Encoder, Meta, Preprocess, pred_keys
from ..gguf.tensors import Expected
from ..gguf.writer import PartSpec
from .base import Converter, readme_license, register
from .source import TensorSource
from .timm_vit import timm_block
from .vjepa2_meta import (
    ArraySource,
    MetaLayout,
    clean_key,
    probe_checkpoint,
    state_arrays,
    torch_load,
)
from .vjepa2_parts import RopePredictor

FILE_FAMILY = "vjepa2"  # the converter family is vjepa2_ac; the file is a V-JEPA 2 with an AC predictor
HEAD_DIM = 64  # every released V-JEPA 2 / 2-AC
IMG_SIZE = 256
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
LN_EPS = 1e-6  # vit_ac_predictor: partial(nn.LayerNorm, eps=1e-6)
NORM_REPS_EPS = 1e-5  # WorldModel's F.layer_norm of the latents
COND_ORDER = "action,state"
_SKIPPED = ("extrinsics_encoder.weight", "extrinsics_encoder.bias")


@dataclass(frozen=True)
class ACSpec(RopePredictor):
    """The action-conditioned predictor: jepa.pred.* and the tensors they imply."""

    embed_dim: int  # Dp
    out_dim: int  # D, the encoder's width: the predictor reads and predicts encoder tokens
    n_layer: int
    n_head: int
    ffn_dim: int
    action_dim: int
    state_dim: int
    grid_size: int  # patches per side at the native image size
    n_frames: int  # latent frames the frame-causal mask covers
    qkv_bias: bool

    kind = "ac"
    n_cond_tokens = 2
    cond_order = COND_ORDER
    normalize_reps = True
    norm_reps_eps = NORM_REPS_EPS
    frame_causal = True
    ln_eps = LN_EPS

    def keys(self) -> dict[str, Any]:
        return pred_keys(self, "kind embed_dim out_dim n_layer n_head head_dim ffn_dim action_dim state_dim "
                               "n_cond_tokens cond_order normalize_reps norm_reps_eps frame_causal n_frames "
                               "grid_size ln_eps act qkv_bias rope_freq_layout rope_theta")

    def table(self) -> dict[str, Expected]:
        return gguf_tensors.AC.table({
            "D": self.out_dim, "Dp": self.embed_dim, "Fp": self.ffn_dim, "A": self.action_dim,
            "S": self.state_dim, "n_layer": self.n_layer, "fused": True, "separate": False,
            "qkv_bias": self.qkv_bias,
        })


def _predictor_state(ckpt: Any, path: Path) -> dict[str, Any] | None:
    pred = ckpt.get("predictor") if isinstance(ckpt, dict) else None
    if not isinstance(pred, dict) or not any(clean_key(str(k)) == "action_encoder.weight" for k in pred):
        return None
    return pred


@register
class VJEPA2AC(Converter):
    family = "vjepa2_ac"

    @classmethod
    def detect(cls, src: Path) -> bool:
        return probe_checkpoint(src, lambda ckpt: _predictor_state(ckpt, src)) is not None

    def open_source(self) -> TensorSource:
        o = self.options
        self.head_dim = o.head_dim or HEAD_DIM
        ckpt = torch_load(self.src)
        pred = _predictor_state(ckpt, self.src)
        if pred is None:
            raise ValueError(f"{self.src}: no V-JEPA 2-AC predictor (a 'predictor' state dict with "
                             "action_encoder.weight)")
        arrays = state_arrays(self.src, [("the predictor state dict", pred, "")])
        self.pred_source = ArraySource(arrays, self.src)
        width = self._encoder_width(ckpt)
        if width % self.head_dim:
            raise ValueError(f"unsupported head_dim={self.head_dim} (encoder width {width})")
        n_head = width // self.head_dim
        if o.n_head is not None and o.n_head != n_head:
            raise ValueError(f"unsupported n_head={o.n_head}: head_dim {self.head_dim} gives {n_head}")
        self.layout = MetaLayout(self.src, n_head)
        return self.layout.source

    def _encoder_width(self, ckpt: Any) -> int:
        enc = ckpt.get("encoder") if isinstance(ckpt, dict) else None
        for k, v in (enc or {}).items():
            if clean_key(str(k)) == "patch_embed.proj.weight":
                return int(v.shape[0])
        raise ValueError(f"{self.src}: no encoder patch_embed.proj.weight (a V-JEPA 2-AC checkpoint has "
                         "'encoder' and 'predictor' state dicts)")

    def hparams(self) -> Encoder:
        return dataclasses.replace(self.layout.encoder(), img_size=self.options.img_size or IMG_SIZE)

    def spec(self) -> ACSpec:
        s, enc = self.pred_source, self.hparams()
        dp, d = s.shape("predictor_embed.weight")
        if d != enc.embed_dim:
            raise ValueError(f"unsupported predictor_embed input width {d} (encoder width {enc.embed_dim})")
        if dp % self.head_dim or (self.head_dim % 2) or self.head_dim < 6:
            raise ValueError(f"unsupported head_dim={self.head_dim} for predictor width {dp}")
        n_layer = s.count("predictor_blocks.{i}.norm1.weight")
        if s.has("predictor_blocks.0.mlp.fc3.weight"):
            raise ValueError("unsupported predictor mlp=SwiGLU (use_silu=True); released predictors use GELU")
        return ACSpec(
            embed_dim=dp,
            out_dim=s.shape("predictor_proj.weight")[0],
            n_layer=n_layer,
            n_head=dp // self.head_dim,
            ffn_dim=s.shape("predictor_blocks.0.mlp.fc1.weight")[0],
            action_dim=s.shape("action_encoder.weight")[1],
            state_dim=s.shape("state_encoder.weight")[1],
            grid_size=enc.img_size // enc.patch_size,
            n_frames=enc.n_frames // enc.tubelet_size,
            qkv_bias=s.has("predictor_blocks.0.attn.qkv.bias"),
        )

    def preprocess(self) -> Preprocess:
        # The AC world model's transform resizes the whole frame to the crop size (random_resized_crop
        # with scale and ratio 1), then normalises with the ImageNet statistics.
        size = self.hparams().img_size
        return Preprocess(mean=IMAGENET_MEAN, std=IMAGENET_STD, resize_short=size, crop=size,
                          resample="bilinear", resize_mode="squash")

    def meta(self) -> Meta:
        o = self.options
        return Meta(family=FILE_FAMILY, name=o.name or self.default_name(), description=o.description or "",
                    license=o.license or readme_license(self.src) or "", source_url=o.source_url or "",
                    modality="video")

    def default_name(self) -> str:
        return self.src.stem

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        yield from self.layout.tensors()
        s, spec = self.pred_source, self.spec()
        for dst, src in (("pred.embed", "predictor_embed"), ("pred.action_embed", "action_encoder"),
                         ("pred.state_embed", "state_encoder")):
            yield from s.linear(dst, src, bias=True)
        for i in range(spec.n_layer):
            yield from timm_block(s, f"predictor_blocks.{i}", f"pred.blk.{i}")
        for dst, src in (("pred.norm", "predictor_norm"), ("pred.proj", "predictor_proj")):
            yield from s.linear(dst, src, bias=True)
        for name in _SKIPPED:
            if s.has(name):
                s.skip(name)

    def checked_tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        yield from super().checked_tensors()
        left = self.pred_source.unused()
        if left:
            raise ValueError(f"unmapped source tensor(s): {', '.join('predictor.' + n for n in left)}")

    def parts(self) -> list[PartSpec]:
        return [self.spec()]
