"""What a converter hands to the GGUF writer: the model's metadata, encoder hparams and preprocessing
recipe (schema v1, see GGUF-SCHEMA.md), and the tensor names and shapes those imply."""

from __future__ import annotations

import re
from dataclasses import dataclass

SCHEMA_VERSION = 1
# ggml file-type ids written to general.file_type (llama.cpp's LLAMA_FTYPE_*: MOSTLY_F16 1, MOSTLY_BF16 32).
FTYPES: dict[str, int] = {"f32": 0, "f16": 1, "bf16": 32}
HALF_FTYPES = ("f16", "bf16")  # the ftypes that store the may_be_half matrices in 16 bits
FAMILIES = ("hfvit", "ijepa", "levjepa", "vjepa2", "lewm")
ACTS = ("gelu_erf", "gelu_tanh")
RESAMPLES = ("bilinear", "bicubic")
RESIZE_MODES = ("shortest_edge", "squash")

# Only these 2-D matrices may be f16 or bf16; everything else stays f32 (the loader refuses other files).
_BLOCK_MATS = r"blk\.\d+\.(attn_q|attn_k|attn_v|attn_qkv|attn_out|ffn_up|ffn_down)"
_HALF_OK = re.compile(
    rf"^(enc\.{_BLOCK_MATS}|pred\.({_BLOCK_MATS}|embed|proj)|head\.({_BLOCK_MATS}|xattn\.(q|k|v|ffn_up|ffn_down)|cls))"
    r"\.weight$"
)


def may_be_half(name: str) -> bool:
    return _HALF_OK.match(name) is not None


@dataclass(frozen=True)
class Meta:
    family: str
    name: str
    description: str = ""
    license: str = ""
    source_url: str = ""
    modality: str = "image"

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"unsupported family={self.family}")


@dataclass(frozen=True)
class Encoder:
    embed_dim: int
    n_layer: int
    n_head: int
    ffn_dim: int
    patch_size: int
    img_size: int
    in_chans: int = 3
    n_registers: int = 0
    ln_eps: float = 1e-6
    act: str = "gelu_erf"
    cls_token: bool = True
    qkv_fused: bool = False
    layer_scale: bool = False
    pos_type: str = "learned"
    tubelet_size: int = 1
    n_frames: int = 1

    def __post_init__(self) -> None:
        if self.act not in ACTS:
            raise ValueError(f"unsupported act={self.act}")
        if self.n_head <= 0 or self.embed_dim % self.n_head:
            raise ValueError(f"unsupported n_head={self.n_head} (embed_dim={self.embed_dim})")
        if self.img_size % self.patch_size:
            raise ValueError(f"unsupported img_size={self.img_size} (patch_size={self.patch_size})")

    @property
    def n_patches(self) -> int:
        return (self.img_size // self.patch_size) ** 2


@dataclass(frozen=True)
class Preprocess:
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize_short: int
    crop: int
    resample: str = "bilinear"
    resize_mode: str = "squash"
    rescale: float = 1.0 / 255.0

    def __post_init__(self) -> None:
        if self.resample not in RESAMPLES:
            raise ValueError(f"unsupported resample={self.resample}")
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(f"unsupported resize_mode={self.resize_mode}")


# The families' published recipes, used when a checkpoint ships no preprocessor_config.json.
HF_VIT_RECIPE = Preprocess(mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), resize_short=224, crop=224)
IMAGENET_RECIPE = Preprocess(
    mean=(0.485, 0.456, 0.406),
    std=(0.229, 0.224, 0.225),
    resize_short=256,
    crop=224,
    resample="bicubic",
    resize_mode="shortest_edge",
)


def expected_shapes(enc: Encoder) -> dict[str, tuple[tuple[int, ...], bool]]:
    """name -> (numpy shape, required) for every tensor an encoder with these hparams may hold.

    enc.pos_embed is left out: its row count depends on whether the source table has a CLS slot."""
    d, f = enc.embed_dim, enc.ffn_dim
    pix = enc.in_chans * enc.tubelet_size * enc.patch_size**2
    out: dict[str, tuple[tuple[int, ...], bool]] = {
        "enc.patch_embed.weight": ((d, pix), True),
        "enc.patch_embed.bias": ((d,), False),
        "enc.norm.weight": ((d,), True),
        "enc.norm.bias": ((d,), False),
    }
    if enc.cls_token:
        out["enc.cls_token"] = ((d,), True)
    if enc.n_registers:
        out["enc.reg_tokens"] = ((enc.n_registers, d), True)
    for i in range(enc.n_layer):
        b = f"enc.blk.{i}."
        mats = {"attn_out": (d, d), "ffn_up": (f, d), "ffn_down": (d, f)}
        if enc.qkv_fused:
            mats["attn_qkv"] = (3 * d, d)
        else:
            mats.update(attn_q=(d, d), attn_k=(d, d), attn_v=(d, d))
        for m, shape in mats.items():
            out[f"{b}{m}.weight"] = (shape, True)
            out[f"{b}{m}.bias"] = ((shape[0],), False)
        for n in ("ln1", "ln2"):
            out[f"{b}{n}.weight"] = ((d,), True)
            out[f"{b}{n}.bias"] = ((d,), False)
        if enc.layer_scale:
            out[f"{b}ls1.weight"] = ((d,), True)
            out[f"{b}ls2.weight"] = ((d,), True)
    return out


def pos_rows_allowed(enc: Encoder) -> tuple[int, ...]:
    """Rows enc.pos_embed may have: one per patch, plus a CLS slot when the source table has one.

    Registers never carry a position; a RoPE encoder (pos_type rope3d) has no table at all."""
    if enc.pos_type == "rope3d":
        return ()
    p = enc.n_patches
    return (p, p + 1) if enc.cls_token else (p,)
