"""The families' published defaults, for checkpoints that do not carry them: the preprocessing
recipes (V-JEPA 2's at any crop) and the encoder transformers' ViTModel builds when its config says
nothing more."""

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
