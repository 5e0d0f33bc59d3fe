"""The families' published defaults, for checkpoints that do not carry them: the preprocessing
recipes (V-JEPA 2's at any crop), the encoder transformers' ViTModel builds when its config says
nothing more, and LeVJEPA's video encoder (what every LeVJEPA checkpoint fixes, its sizes aside)."""

from __future__ import annotations

from ..gguf.schema import Encoder, Preprocess

# The families' published recipes at 224 px, used when a checkpoint ships no preprocessor_config.json,
# at the model's own size (preprocess.sized).
HF_VIT_RECIPE = Preprocess(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), resize_short=224, crop=224)
IMAGENET_RECIPE = Preprocess(
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    resize_short=256,
    crop=224,
    resample="bicubic",
    resize_mode="shortest_edge",
)

# LeVJEPA's (MLO-lab/LeVJEPA notebooks/feature_visualization.ipynb `preprocess`): the short side to 224
# with Pillow bicubic, centre crop 224, x / 255 then ImageNet mean / std (jepa.media rounds the long side
# as the notebook does, for the family's video files).
LEVJEPA_RECIPE = Preprocess(
    mean=IMAGENET_RECIPE.mean,
    std=IMAGENET_RECIPE.std,
    resize_short=224,
    crop=224,
    resample="bicubic",
    resize_mode="shortest_edge",
)


def hf_vit_encoder(embed_dim: int, n_layer: int, n_head: int, patch_size: int, img_size: int) -> Encoder:
    """An encoder as transformers' ViTModel builds it by default (MLP 4x, LayerNorm eps 1e-12, exact GELU,
    a CLS token with a position slot): the demo model's, and LeWM's (stable_pretraining's vit_hf)."""
    return Encoder(embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, ffn_dim=4 * embed_dim,
                   patch_size=patch_size, img_size=img_size, ln_eps=1e-12, act="gelu_erf", cls_token=True)


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


def levjepa_encoder(embed_dim: int, n_layer: int, n_head: int, ffn_dim: int, patch_size: int, img_size: int,
                    n_frames: int, attn_mode: str, in_chans: int = 3, ln_eps: float = 1e-6) -> Encoder:
    """LeVJEPA's video encoder (MLO-lab/LeVJEPA module.py): a one-frame tubelet, a CLS token and no
    position table, tiled 3-D RoPE on the patch tokens, fused qkv with bias, exact GELU; attn_mode
    `block_causal` (the release) or `full`. The converter's and the random writer's."""
    return Encoder(embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, ffn_dim=ffn_dim,
                   patch_size=patch_size, img_size=img_size, in_chans=in_chans, ln_eps=ln_eps, act="gelu_erf",
                   cls_token=True, qkv_fused=True, pos_type="rope3d", tubelet_size=1, n_frames=n_frames,
                   attn_mode=attn_mode)
