"""A random-weight V-JEPA 2.1 file (jepa.family vjepa2_1): the encoder with its two patch embeddings,
modality vectors and level norms, and optionally its masked predictor (either input kind), with the
converter's own specs (convert/vjepa2_1.py's keys, convert/vjepa2_parts.py's predictor)."""

from __future__ import annotations

from pathlib import Path

from ..convert.recipes import vjepa2_recipe
from ..convert.vjepa2_1 import HIER_LAYERS
from ..convert.vjepa2_parts import PredictorSpec
from ..gguf.schema import Encoder, Meta
from ..gguf.writer import PartSpec
from .random_weights import write_random_file


def write_random_vjepa2_1(
    path: str | Path, *, embed_dim: int = 64, n_layer: int = 12, n_head: int = 2, ffn_dim: int | None = None,
    patch_size: int = 16, img_size: int = 32, n_frames: int = 4, predictor: dict[str, int] | None = None,
    seed: int = 0, ftype: str = "f32",
) -> str:
    """A random-weight V-JEPA 2.1 GGUF (no torch). n_layer: 12, 24, 40 or 48 (the depths upstream
    defines levels for). predictor: {embed_dim, n_layer, n_head, in_levels (1: B/L, 4: g/G), out_dim}."""
    if n_layer not in HIER_LAYERS:
        depths = sorted(HIER_LAYERS)
        raise ValueError(f"n_layer {n_layer}: V-JEPA 2.1's levels are defined for {depths} blocks")
    enc = Encoder(
        embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, ffn_dim=ffn_dim or 4 * embed_dim,
        patch_size=patch_size, img_size=img_size, ln_eps=1e-6, cls_token=False, qkv_fused=True,
        pos_type="rope3d", tubelet_size=2, n_frames=n_frames, rope_layout="interleaved",
        rope_ref_grid=256 // patch_size, modality_embed=True, image_patch_embed=True,
        hier_layers=HIER_LAYERS[n_layer],
    )
    parts: list[PartSpec] = []
    if predictor is not None:
        dp, levels = predictor.get("embed_dim", embed_dim), predictor.get("in_levels", 1)
        parts.append(PredictorSpec(
            embed_dim=dp, n_layer=predictor.get("n_layer", 1), n_head=predictor.get("n_head", 1),
            ffn_dim=4 * dp, n_mask_tokens=8, out_dim=predictor.get("out_dim", embed_dim * levels),
            grid_size=img_size // patch_size, n_frames=n_frames, ln_eps=1e-6, qkv_fused=True,
            enc_dim=embed_dim, in_levels=levels, modality_embed=True, proj_context=True,
            rope_freq_layout="interleaved",
        ))
    meta = Meta(family="vjepa2_1", name=f"random-vjepa2_1-{embed_dim}x{n_layer}", modality="video")
    return write_random_file(path, meta, enc, vjepa2_recipe(img_size), parts, seed, ftype)
