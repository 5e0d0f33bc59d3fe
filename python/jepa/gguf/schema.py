"""What a converter hands to the GGUF writer: the model's metadata, encoder hparams and preprocessing
recipe, and the tensor table those imply. The schema itself (every key, every tensor) is declared once
in keys.py and tensors.py, and docs/gguf.md is rendered from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .keys import FAMILIES, KEYS
from .tensors import ENCODER, Expected

SCHEMA_VERSION = 1
HALF_FTYPES = ("f16", "bf16")  # the ftypes that store the may_be_half matrices in 16 bits
FTYPES = ("f32", *HALF_FTYPES)  # what the writer writes (general.file_type: keys.FILE_TYPES)
ROPE_THETA = 10000.0  # V-JEPA 2's RoPE base


def _allowed(name: str) -> tuple[Any, ...]:
    found = [k.allowed for k in KEYS if k.name == name and k.allowed is not None]
    return found[0]


ACTS = _allowed("jepa.enc.act")
RESAMPLES = _allowed("jepa.pre.resample")
RESIZE_MODES = _allowed("jepa.pre.resize_mode")
POS_TYPES = _allowed("jepa.enc.pos_type")
ATTN_MODES = _allowed("jepa.enc.attn_mode")


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
    rope_theta: float = ROPE_THETA  # pos_type rope3d only
    # jepa.enc.attn_mode, written when the source says (LeVJEPA); None: not written, the loader's `full`
    attn_mode: str | None = None
    # V-JEPA 2.1: the interleaved RoPE interpolated onto rope_ref_grid (0: not), the modality vectors,
    # the tubelet-1 image embedding, and the levels' blocks (empty: one final norm).
    rope_layout: str = "tiled"
    rope_ref_grid: int = 0
    modality_embed: bool = False
    image_patch_embed: bool = False
    hier_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.act not in ACTS:
            raise ValueError(f"unsupported act={self.act}")
        if self.pos_type not in POS_TYPES:
            raise ValueError(f"unsupported pos_type={self.pos_type}")
        if self.pos_type == "rope3d" and self.n_registers:  # a CLS is not rotated (LeVJEPA)
            raise ValueError("unsupported pos_type=rope3d with register tokens")
        if self.attn_mode is not None and self.attn_mode not in ATTN_MODES:
            raise ValueError(f"unsupported attn_mode={self.attn_mode} (known: {', '.join(ATTN_MODES)})")
        if self.rope_layout not in ("tiled", "interleaved"):
            raise ValueError(f"unsupported rope_layout={self.rope_layout}")
        if list(self.hier_layers) != sorted(set(self.hier_layers)) or (
            self.hier_layers and self.hier_layers[-1] != self.n_layer - 1
        ):
            raise ValueError(f"unsupported hier_layers={list(self.hier_layers)} (ascending, the last block "
                             "last)")
        if self.n_head <= 0 or self.embed_dim % self.n_head:
            raise ValueError(f"unsupported n_head={self.n_head} (embed_dim={self.embed_dim})")
        if self.img_size % self.patch_size:
            raise ValueError(f"unsupported img_size={self.img_size} (patch_size={self.patch_size})")

    @property
    def n_patches(self) -> int:
        return (self.img_size // self.patch_size) ** 2

    def keys(self) -> dict[str, Any]:
        """jepa.enc.*, in the order every file has them."""
        out: dict[str, Any] = {f"jepa.enc.{k}": int(getattr(self, k)) for k in (
            "embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size", "n_frames",
            "in_chans", "n_registers")}
        out |= {"jepa.enc.ln_eps": float(self.ln_eps), "jepa.enc.act": self.act,
                "jepa.enc.pos_type": self.pos_type}
        out |= {f"jepa.enc.{k}": bool(getattr(self, k)) for k in ("cls_token", "qkv_fused", "layer_scale")}
        if self.attn_mode is not None:
            out["jepa.enc.attn_mode"] = self.attn_mode
        if self.modality_embed:
            out["jepa.enc.modality_embed"] = True
        if self.image_patch_embed:
            out["jepa.enc.image_patch_embed"] = True
        if self.hier_layers:
            out["jepa.enc.hier_layers"] = [int(v) for v in self.hier_layers]
        return out

    def rope_keys(self) -> dict[str, Any]:
        """The RoPE keys of a rope3d encoder (written after the recipe, as every file has them)."""
        if self.pos_type != "rope3d":
            return {}
        out: dict[str, Any] = {"jepa.enc.rope_freq_layout": self.rope_layout,
                               "jepa.enc.rope_theta": float(self.rope_theta)}
        if self.rope_ref_grid:
            out |= {"jepa.enc.rope_interpolate": True, "jepa.enc.rope_ref_grid": int(self.rope_ref_grid)}
        return out

    def table(self) -> dict[str, Expected]:
        """Every tensor this encoder may hold (tensors.ENCODER)."""
        d = self.embed_dim
        return ENCODER.table({
            "D": d, "F": self.ffn_dim, "R": self.n_registers, "n_layer": self.n_layer,
            "K": self.in_chans * self.tubelet_size * self.patch_size**2,
            "n_patches": (self.n_frames // self.tubelet_size) * (self.img_size // self.patch_size) ** 2,
            "cls_token": self.cls_token, "n_registers": self.n_registers, "registers": self.n_registers > 0,
            "pos_table": self.pos_type not in ("none", "rope3d"), "fused": self.qkv_fused,
            "separate": not self.qkv_fused, "layer_scale": self.layer_scale, "qkv_bias": True,
            "K1": self.in_chans * self.patch_size**2, "image_patch_embed": self.image_patch_embed,
            "modality_embed": self.modality_embed, "final_norm": not self.hier_layers,
            "hier": bool(self.hier_layers),
            "n_levels": len(self.hier_layers),
        })


@dataclass(frozen=True)
class Preprocess:
    mean: tuple[float, float, float]
    std: tuple[float, float, float]
    resize_short: int
    crop: int
    resample: str = "bilinear"
    resize_mode: str = "squash"
    rescale: float = 1.0 / 255.0

    def keys(self) -> dict[str, Any]:
        """jepa.pre.*, in the order every file has them."""
        return {
            "jepa.pre.mean": [float(v) for v in self.mean],
            "jepa.pre.std": [float(v) for v in self.std],
            "jepa.pre.rescale": float(self.rescale),
            "jepa.pre.resize_short": int(self.resize_short),
            "jepa.pre.crop": int(self.crop),
            "jepa.pre.resample": self.resample,
            "jepa.pre.resize_mode": self.resize_mode,
        }

    def __post_init__(self) -> None:
        if self.resample not in RESAMPLES:
            raise ValueError(f"unsupported resample={self.resample}")
        if self.resize_mode not in RESIZE_MODES:
            raise ValueError(f"unsupported resize_mode={self.resize_mode}")


def pred_keys(spec: object, names: str) -> dict[str, Any]:
    """jepa.pred.<name> for each space-separated name, valued by the spec's attribute of that name, in
    the given order (the order each kind's files have always had)."""
    return {f"jepa.pred.{n}": getattr(spec, n) for n in names.split()}
