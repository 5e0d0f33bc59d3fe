"""Random-weight LeVJEPA video encoders (family levjepa, modality video): a GGUF file straight from numpy,
and the Hugging Face directory the converter reads (model.safetensors with `encoder.*` keys +
config.json in the training code's spellings), so conversion is tested without torch or a download."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..convert.preprocess import sized
from ..convert.recipes import LEVJEPA_RECIPE, levjepa_encoder
from ..gguf.schema import Meta
from .random_weights import write_random_file


# Sizes as keyword arguments, like the other random writers'.
def write_random_levjepa(
    path: str | Path, *, embed_dim: int = 64, n_layer: int = 2, n_head: int = 2, ffn_dim: int | None = None,
    patch_size: int = 16, img_size: int = 32, n_frames: int = 4, attn_mode: str = "block_causal",
    seed: int = 0, ftype: str = "f32",
) -> str:
    """A random-weight LeVJEPA GGUF at any size (the release: 1024 wide, 24 layers, 16 heads, 224 px,
    16 frames), through the converter's own encoder and recipe. Norm gains and biases are random too."""
    ffn = ffn_dim or 4 * embed_dim
    enc = levjepa_encoder(embed_dim, n_layer, n_head, ffn, patch_size, img_size, n_frames, attn_mode)
    meta = Meta(family="levjepa", name=f"random-levjepa-{embed_dim}x{n_layer}", modality="video")
    return write_random_file(path, meta, enc, sized(LEVJEPA_RECIPE, img_size), [], seed, ftype)


def levjepa_state_dict(embed_dim: int = 64, depth: int = 2, mlp_ratio: int = 4, patch_size: int = 16,
                       in_chans: int = 3, seed: int = 0) -> dict[str, np.ndarray]:
    """An upstream `VisionTransformer` state dict (video, tubelet 1, RoPE: no pos_embed) under `encoder.`,
    float32, in module.py's shapes: 1 + 2 + 12 x depth + 2 tensors."""
    rng = np.random.default_rng(seed)
    d, f = embed_dim, mlp_ratio * embed_dim

    def r(*shape: int, scale: float = 0.05) -> np.ndarray:
        return (scale * rng.standard_normal(shape)).astype(np.float32)

    def gain(n: int) -> np.ndarray:
        return (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)

    fan_in = in_chans * patch_size**2
    sd = {"cls_token": r(1, 1, d, scale=0.5),
          "patch_embed.proj.weight": r(d, in_chans, 1, patch_size, patch_size, scale=fan_in**-0.5),
          "patch_embed.proj.bias": r(d)}
    for i in range(depth):
        b = f"blocks.{i}."
        for name, (n_out, n_in) in {"attn.qkv": (3 * d, d), "attn.proj": (d, d), "mlp.fc1": (f, d),
                                    "mlp.fc2": (d, f)}.items():
            sd[f"{b}{name}.weight"], sd[f"{b}{name}.bias"] = r(n_out, n_in, scale=n_in**-0.5), r(n_out)
        for norm in ("norm1", "norm2"):
            sd[f"{b}{norm}.weight"], sd[f"{b}{norm}.bias"] = gain(d), r(d)
    sd["norm.weight"], sd["norm.bias"] = gain(d), r(d)
    return {f"encoder.{k}": v for k, v in sd.items()}


def write_levjepa_hf_dir(
    out: str | Path, *, embed_dim: int = 64, depth: int = 2, num_heads: int = 2, patch_size: int = 16,
    img_size: int = 32, num_frames: int = 4, attn_mode: str = "block_causal", seed: int = 0,
    config: dict[str, Any] | None = None, drop: tuple[str, ...] = (),
) -> Path:
    """A LeVJEPA HF directory as the release ships it (model.safetensors + config.json), random.
    config: fields to add or override (a value None removes the field); drop: tensors to leave out
    (their names under `encoder.`)."""
    from safetensors.numpy import save_file  # the convert extra: only for this writer

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    sd = levjepa_state_dict(embed_dim, depth, patch_size=patch_size, seed=seed)
    save_file({k: v for k, v in sd.items() if k not in drop}, str(out / "model.safetensors"))
    cfg: dict[str, Any] = {
        "model_type": "levjepa", "architectures": ["LeVJEPAModel"], "embed_dim": embed_dim, "depth": depth,
        "num_heads": num_heads, "mlp_ratio": 4, "patch_size": patch_size, "tubelet_size": 1, "in_chans": 3,
        "img_size": img_size, "num_frames": num_frames, "attn_mode": attn_mode, "use_rope": True,
        "qkv_bias": True,
    }
    for k, v in (config or {}).items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (out / "config.json").write_text(json.dumps(cfg, indent=2))
    return out
