"""A random-weight V-JEPA 2 file (jepa.family vjepa2): the video encoder, and optionally the masked
predictor and the attentive-pool head, their metadata from the converter's own specs
(convert/vjepa2_parts.py)."""

from __future__ import annotations

from pathlib import Path

from ..convert.recipes import vjepa2_recipe
from ..convert.vjepa2_parts import HeadSpec, PredictorSpec
from ..gguf.schema import Encoder, Meta
from ..gguf.writer import PartSpec
from .random_weights import write_random_file


# Sizes as keyword arguments, like the other random writers' (random_world.py says why).
def write_random_vjepa2(
    path: str | Path, *, embed_dim: int = 64, n_layer: int = 2, n_head: int = 2, ffn_dim: int | None = None,
    patch_size: int = 16, tubelet_size: int = 2, img_size: int = 32, n_frames: int = 4,
    predictor: dict[str, int] | None = None, head: dict[str, int] | None = None, seed: int = 0,
    ftype: str = "f32",
) -> str:
    """A random-weight V-JEPA 2 GGUF at any size, straight from numpy (no torch): for tests, benchmarks
    and demos. predictor: {embed_dim, n_layer, n_head, n_mask_tokens}; head: {n_classes, n_pool_layers}.
    Norm gains and biases are random too, so a wrong norm cannot hide."""
    f = ffn_dim or 4 * embed_dim
    enc = Encoder(
        embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, ffn_dim=f, patch_size=patch_size,
        img_size=img_size, cls_token=False, pos_type="rope3d", tubelet_size=tubelet_size, n_frames=n_frames,
    )
    pred = head_spec = None
    if predictor is not None:
        dp = predictor.get("embed_dim", embed_dim)
        pred = PredictorSpec(
            embed_dim=dp, n_layer=predictor.get("n_layer", 1), n_head=predictor.get("n_head", 1),
            ffn_dim=4 * dp, n_mask_tokens=predictor.get("n_mask_tokens", 2), out_dim=embed_dim,
            grid_size=img_size // patch_size, n_frames=n_frames, ln_eps=1e-6,
        )
    if head is not None:
        n_classes = head.get("n_classes", 4)
        head_spec = HeadSpec(
            embed_dim=embed_dim,
            n_pool_layers=head.get("n_pool_layers", 1),
            ffn_dim=4 * embed_dim,
            labels=tuple(f"class {i}" for i in range(n_classes)),
        )

    parts: list[PartSpec] = [p for p in (pred, head_spec) if p is not None]
    meta = Meta(family="vjepa2", name=f"random-vjepa2-{embed_dim}x{n_layer}", modality="video")
    return write_random_file(path, meta, enc, vjepa2_recipe(img_size), parts, seed, ftype)
