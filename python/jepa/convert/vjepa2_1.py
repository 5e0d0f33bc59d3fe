"""Meta's V-JEPA 2.1 .pt checkpoints (facebookresearch/vjepa2, app/vjepa_2_1): encoder and predictor.

The file is a dict of state dicts, read as upstream's `src/hub/backbones.py::_make_vjepa2_1_model`
reads it: the encoder from `ema_encoder` (ViT-B/L, distilled from ViT-G) or `target_encoder`
(ViT-g/G), keys cleaned of `module.` and `backbone.`. Which of the two when a file holds both: the one
whose predictor it was trained with, told by the predictor's input (a Linear from the final level:
B/L, `ema_encoder`; an MLP from the 4-level concat: g/G, `target_encoder`).

Layout: `patch_embed.proj` (Conv3d, tubelet 2) and `patch_embed_img.proj` (Conv3d, tubelet 1, the
path a one-frame input takes), `video_mod_embed` / `img_mod_embed` [1, 1, D] added after the
embedding, `blocks.{i}` as timm's (fused qkv, rows q;k;v), and `norms_block.{0..3}`: one LayerNorm
per level after the blocks `HIER_LAYERS[depth]`, the last one the output (no final `norm`). RoPE is
3-D with the interleaved frequency layout, rows and columns interpolated onto the pretraining grid
(256 px / patch). The preprocessing is V-JEPA 2's (short side crop·256/224, centre crop, bilinear,
ImageNet statistics; upstream's eval transforms did not change).

The predictor (`predictor`, keys cleaned the same way): `predictor_embed` (a Linear from the final
level, B/L; `predictor_embed.{0,2}`, Linear(4D, D) -> GELU -> Linear(D, Dp) from the four levels side by
side, g/G), `mask_tokens.{0..7}` [1, 1, Dp], `video_mod_embed` / `img_mod_embed` [1, 1, Dp] added to
every token, `predictor_blocks.{i}` (the encoder's block layout), `predictor_norm`, `predictor_proj` and
`predictor_proj_context` (targets and context rows out, the teacher's width or 4D). Its RoPE is the
interleaved layout on the native grid (img_size / patch), not interpolated.

Head counts and clip size come from a config.json beside the file (`num_heads`, `pred_num_heads`,
`img_size` / `crop_size`, `num_frames`), else --n-head / --pred-n-head / --img-size, else the released
widths' heads (encoder B 768: 12, L 1024: 16, g 1408: 22, G 1664: 26; predictor 384: 12, V-JEPA 2's
layout), 384 px and 64 frames. Needs torch (read with weights_only=True)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf.schema import Encoder, Preprocess
from ..gguf.writer import PartSpec
from .base import Config, Converter, beside, read_json, register, resolve_n_head
from .recipes import vjepa2_recipe
from .source import TensorSource
from .timm_vit import timm_block, timm_sizes
from .vjepa2_meta import (
    ArraySource,
    clean_key,
    meta_encoder,
    probe_checkpoint,
    state_arrays,
    torch_load,
)
from .vjepa2_parts import PredictorSpec

log = logging.getLogger("jepa.convert")

ENCODER_KEYS = ("ema_encoder", "target_encoder")
# upstream VisionTransformer: the blocks after which norms_block[k] reads the residual stream.
HIER_LAYERS = {12: (2, 5, 8, 11), 24: (5, 11, 17, 23), 40: (9, 19, 29, 39), 48: (11, 23, 37, 47)}
_HEADS_BY_WIDTH = {768: 12, 1024: 16, 1408: 22, 1664: 26}
_PRED_HEADS_BY_WIDTH = {384: 12}
PRED = "predictor."  # the predictor's tensors in the one source, beside the encoder's
MARKERS = ("patch_embed_img.proj.weight", "norms_block.0.weight")  # what no V-JEPA 2 encoder has


def is_vjepa2_1_state(state: dict[str, Any]) -> bool:
    names = {clean_key(str(k)) for k in state}
    return all(m in names for m in MARKERS)


def _encoder_state(ckpt: Any, path: Path) -> tuple[str, dict[str, Any]]:
    if not isinstance(ckpt, dict):
        raise ValueError(f"{path}: not a checkpoint dict")
    found = [k for k in ENCODER_KEYS if isinstance(ckpt.get(k), dict)]
    if not found:
        raise ValueError(f"{path}: no encoder state dict (looked for {', '.join(ENCODER_KEYS)})")
    if len(found) > 1:
        pred = ckpt.get("predictor")
        names = [clean_key(str(k)) for k in pred] if isinstance(pred, dict) else []
        multi = any(n.startswith("predictor_embed.0.") for n in names)
        found = ["target_encoder" if multi else "ema_encoder"]
    return found[0], ckpt[found[0]]


def _vector(a: np.ndarray, name: str, d: int) -> np.ndarray:
    if a.size != d:
        raise ValueError(f"{name}: got {list(a.shape)}, expected [1, 1, {d}]")
    return a.reshape(d)


@register
class VJEPA2_1(Converter):
    """A V-JEPA 2.1 .pt, recognised by its encoder's V-JEPA 2.1 tensors (MARKERS): that encoder and,
    when the file holds it, the masked predictor."""

    family = "vjepa2_1"
    modality = "video"

    @classmethod
    def detect(cls, src: Path) -> bool:
        state = probe_checkpoint(src, lambda ckpt: _encoder_state(ckpt, src)[1])
        return state is not None and is_vjepa2_1_state(state)

    def open_source(self) -> TensorSource:
        ckpt = torch_load(self.src)
        key, state = _encoder_state(ckpt, self.src)
        if not is_vjepa2_1_state(state):
            raise ValueError(f"{self.src}: {key} is no V-JEPA 2.1 encoder (no {' / '.join(MARKERS)})")
        pred = ckpt.get("predictor")
        tables = [(key, state, "")] + ([("predictor", pred, PRED)] if isinstance(pred, dict) and pred else [])
        arrays = state_arrays(self.src, tables)
        self.has_predictor = len(tables) > 1
        log.info("%s: the encoder from %s%s", self.src, key, ", the predictor" if self.has_predictor else "")
        cfg = beside(self.src, "config.json")
        self.config = read_json(cfg) or Config(cfg, {})
        return ArraySource(arrays, self.src)

    def _cfg(self, *keys: str) -> int | None:
        return self.config.first_positive(*keys)

    def _n_head(self, d: int) -> int:
        found = self._cfg("num_heads", "n_head", "num_attention_heads")
        return resolve_n_head(found, self.options.n_head, d, _HEADS_BY_WIDTH)

    def hparams(self) -> Encoder:
        s = self.source
        shape = s.shape("patch_embed.proj.weight")
        img = s.shape("patch_embed_img.proj.weight")
        if len(shape) != 5 or shape[3] != shape[4]:
            raise ValueError(f"patch_embed.proj.weight: got {list(shape)}, a Conv3d [D, C, t, P, P] is "
                             "expected")
        d, chans, t, p, _ = shape
        if tuple(img) != (d, chans, 1, p, p):
            raise ValueError(f"patch_embed_img.proj.weight: got {list(img)}, expected {[d, chans, 1, p, p]}")
        sizes = timm_sizes(s, self._n_head)
        depth = sizes["n_layer"]
        if depth not in HIER_LAYERS:
            raise ValueError(f"unsupported depth {depth}: V-JEPA 2.1's levels are defined for 12, 24, 40, "
                             "48 blocks")
        n_levels = s.count("norms_block.{i}.weight")
        if n_levels != len(HIER_LAYERS[depth]):
            raise ValueError(f"norms_block: {n_levels} levels, V-JEPA 2.1 has {len(HIER_LAYERS[depth])}")
        img_size = self.options.img_size or self._cfg("img_size", "crop_size") or 384
        return meta_encoder(
            sizes, p, img_size, chans, t, self._cfg("num_frames", "frames_per_clip") or 64,
            rope_layout="interleaved",
            rope_ref_grid=(256 if p == 16 else 252) // p,  # upstream: 256 / 16, 252 / 14
            modality_embed=True,
            image_patch_embed=True,
            hier_layers=HIER_LAYERS[depth],
        )

    def predictor(self) -> PredictorSpec | None:
        s = self.source  # opens the checkpoint: has_predictor is known from then on
        if not self.has_predictor:
            return None
        enc = self.hparams()
        d = enc.embed_dim
        dp = s.shape(f"{PRED}mask_tokens.0")[-1]
        levels = s.has(f"{PRED}predictor_embed.0.weight")
        if levels:
            w0, w2 = s.shape(f"{PRED}predictor_embed.0.weight"), s.shape(f"{PRED}predictor_embed.2.weight")
            in_levels, rest = divmod(w0[1], d)
            want0, want2 = (d, len(enc.hier_layers) * d), (dp, d)
            if rest or tuple(w0) != want0 or tuple(w2) != want2:
                raise ValueError(f"predictor_embed: got {list(w0)} and {list(w2)}, expected {list(want0)} "
                                 f"and {list(want2)} (Linear(4D, D), GELU, Linear(D, Dp))")
        else:
            in_levels = 1
            got = s.shape(f"{PRED}predictor_embed.weight")
            if tuple(got) != (dp, d):
                raise ValueError(f"predictor_embed.weight: got {list(got)}, expected {[dp, d]}")
        found = self._cfg("pred_num_heads", "predictor_num_heads")
        n_head = resolve_n_head(found, self.options.pred_n_head, dp, _PRED_HEADS_BY_WIDTH, "--pred-n-head")
        return PredictorSpec(
            embed_dim=dp,
            n_layer=s.count(PRED + "predictor_blocks.{i}.norm1.weight"),
            n_head=n_head,
            ffn_dim=s.shape(f"{PRED}predictor_blocks.0.mlp.fc1.weight")[0],
            n_mask_tokens=s.count(PRED + "mask_tokens.{i}"),
            out_dim=s.shape(f"{PRED}predictor_proj.weight")[0],
            grid_size=enc.img_size // enc.patch_size,
            n_frames=enc.n_frames,
            ln_eps=1e-6,
            qkv_fused=True,
            enc_dim=d,
            in_levels=in_levels,
            modality_embed=True,
            proj_context=True,
            rope_freq_layout="interleaved",
        )

    def parts(self) -> list[PartSpec]:
        pred = self.predictor()
        return [pred] if pred is not None else []

    def preprocess(self) -> Preprocess:
        return vjepa2_recipe(self.hparams().img_size)

    def default_name(self) -> str:
        return self.src.stem

    def tensors(self) -> Iterator[tuple[str, np.ndarray]]:
        enc, s = self.hparams(), self.source
        d = enc.embed_dim
        embeds = (("enc.patch_embed", "patch_embed.proj"), ("enc.patch_embed_img", "patch_embed_img.proj"))
        for dst, src in embeds:
            w = s.take(f"{src}.weight")
            yield f"{dst}.weight", w.reshape(w.shape[0], -1)  # [D, C, t, P, P] -> [D, C*t*P*P]
            if s.has(f"{src}.bias"):
                yield f"{dst}.bias", s.take(f"{src}.bias")
        yield "enc.mod_embed_video", _vector(s.take("video_mod_embed"), "video_mod_embed", d)
        yield "enc.mod_embed_img", _vector(s.take("img_mod_embed"), "img_mod_embed", d)
        for i in range(enc.n_layer):
            yield from timm_block(s, f"blocks.{i}", f"enc.blk.{i}")
        for k in range(len(enc.hier_layers)):
            yield f"enc.hier_norm.{k}.weight", s.take(f"norms_block.{k}.weight")
            yield f"enc.hier_norm.{k}.bias", s.take(f"norms_block.{k}.bias")
        pred = self.predictor()
        if pred is not None:
            yield from self._predictor_tensors(pred)

    def _predictor_tensors(self, pred: PredictorSpec) -> Iterator[tuple[str, np.ndarray]]:
        s, dp = self.source, pred.embed_dim
        if pred.in_levels > 1:
            yield from s.linear("pred.embed.0", f"{PRED}predictor_embed.0")
            yield from s.linear("pred.embed.2", f"{PRED}predictor_embed.2")
        else:
            yield from s.linear("pred.embed", f"{PRED}predictor_embed")
        tokens = [_vector(s.take(f"{PRED}mask_tokens.{i}"), f"mask_tokens.{i}", dp)
                  for i in range(pred.n_mask_tokens)]
        yield "pred.mask_tokens", np.stack(tokens)
        mods = (("pred.mod_embed_video", "video_mod_embed"), ("pred.mod_embed_img", "img_mod_embed"))
        for dst, src in mods:
            yield dst, _vector(s.take(PRED + src), f"predictor {src}", dp)
        for i in range(pred.n_layer):
            yield from timm_block(s, f"{PRED}predictor_blocks.{i}", f"pred.blk.{i}")
        yield from s.linear("pred.norm", f"{PRED}predictor_norm")
        yield from s.linear("pred.proj", f"{PRED}predictor_proj")
        yield from s.linear("pred.proj_context", f"{PRED}predictor_proj_context")
