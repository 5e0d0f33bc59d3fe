"""Random-weight world-model GGUFs at any size, straight from numpy (no torch): for tests and for
tools/bench/world.py, which times the world models at their released dimensions.

`write_random_ac` writes a V-JEPA 2-AC file (jepa.family vjepa2, jepa.pred.kind ac) and
`write_random_lewm` a LeWM file (jepa.family lewm). The metadata comes from the converters' own
specs (`ACSpec` in convert/vjepa2_ac.py, `LeWMSpec` in convert/lewm.py), the tensors from the
schema's declaration (jepa.gguf.tensors), and the file goes through the same writer (jepa.gguf.writer),
so a random file is laid out exactly like a converted one. Norm gains and biases are random too, so
a wrong norm cannot hide."""

from __future__ import annotations

from pathlib import Path

from ..convert.lewm import IMAGENET_MEAN as LEWM_MEAN
from ..convert.lewm import IMAGENET_STD as LEWM_STD
from ..convert.lewm import LeWMSpec
from ..convert.recipes import hf_vit_encoder
from ..convert.vjepa2_ac import FILE_FAMILY as AC_FAMILY
from ..convert.vjepa2_ac import IMAGENET_MEAN as AC_MEAN
from ..convert.vjepa2_ac import IMAGENET_STD as AC_STD
from ..convert.vjepa2_ac import ACSpec
from ..gguf.schema import Encoder, Meta, Preprocess
from .random_weights import write_random_file


def _squash(mean: tuple[float, float, float], std: tuple[float, float, float], size: int) -> Preprocess:
    """Both world models' transform: the whole frame resized to the native size, bilinear."""
    return Preprocess(mean=mean, std=std, resize_short=size, crop=size, resample="bilinear",
                      resize_mode="squash")


# The random writers (write_random_ac, write_random_lewm, write_random_vjepa2, write_random_bert,
# demo.write_demo_model) each take their sizes as plain keyword arguments with that model's defaults,
# because tests and tools/bench/world.py call them by name; their bodies share write_random_file.
def write_random_ac(
    path: str | Path, *, embed_dim: int = 64, n_layer: int = 2, n_head: int = 2, ffn_dim: int | None = None,
    enc_dim: int = 64, enc_layers: int = 1, enc_heads: int = 1, enc_ffn_dim: int | None = None,
    patch_size: int = 16, tubelet_size: int = 2, img_size: int = 32, n_frames: int = 64,
    action_dim: int = 7, seed: int = 0, ftype: str = "f32",
) -> str:
    """A random V-JEPA 2-AC GGUF. The released model is embed_dim 1024, n_layer 24, n_head 16,
    ffn_dim 4096 on a ViT-g encoder (enc_dim 1408, 40 layers, 22 heads of 64, MLP 6144, 256 px,
    patch 16, tubelet 2, 64 frames); the encoder depth is free here (the predictor only needs its
    width), so a benchmark of the predictor can keep the file small with enc_layers=1."""
    enc = Encoder(
        embed_dim=enc_dim, n_layer=enc_layers, n_head=enc_heads, ffn_dim=enc_ffn_dim or 4 * enc_dim,
        patch_size=patch_size, img_size=img_size, cls_token=False, qkv_fused=True, pos_type="rope3d",
        tubelet_size=tubelet_size, n_frames=n_frames,
    )
    spec = ACSpec(
        embed_dim=embed_dim, out_dim=enc_dim, n_layer=n_layer, n_head=n_head,
        ffn_dim=ffn_dim or 4 * embed_dim, action_dim=action_dim, state_dim=action_dim,
        grid_size=img_size // patch_size, n_frames=n_frames // tubelet_size, qkv_bias=True,
    )
    meta = Meta(family=AC_FAMILY, name=f"random-vjepa2-ac-{embed_dim}x{n_layer}", modality="video")
    return write_random_file(path, meta, enc, _squash(AC_MEAN, AC_STD, img_size), [spec], seed, ftype)


def write_random_lewm(
    path: str | Path, *, enc_dim: int = 192, enc_layers: int = 12, enc_heads: int = 3, patch_size: int = 14,
    img_size: int = 224, embed_dim: int = 192, n_layer: int = 6, n_head: int = 16, head_dim: int = 64,
    ffn_dim: int = 2048, n_frames: int = 3, action_dim: int = 10, proj_hidden: int = 2048, seed: int = 0,
    ftype: str = "f32",
) -> str:
    """A random LeWM GGUF; the defaults are the published model (config/train/model/lewm.yaml with
    vit_hf's `tiny`: ViT 192 wide, 12 layers, 3 heads, patch 14 at 224 px; projectors 192 -> 2048 ->
    192; predictor 6 adaLN-zero blocks, 16 heads x 64, MLP 2048, a 3-frame window; PushT's actions
    5 x 2 = 10)."""
    enc = hf_vit_encoder(enc_dim, enc_layers, enc_heads, patch_size, img_size)
    spec = LeWMSpec(
        embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, head_dim=head_dim, ffn_dim=ffn_dim,
        n_frames=n_frames, action_dim=action_dim, action_hidden=4 * embed_dim, enc_width=enc_dim,
        proj_hidden=proj_hidden, pred_proj_hidden=proj_hidden,
    )
    meta = Meta(family="lewm", name=f"random-lewm-{embed_dim}x{n_layer}")
    return write_random_file(path, meta, enc, _squash(LEWM_MEAN, LEWM_STD, img_size), [spec], seed, ftype)
