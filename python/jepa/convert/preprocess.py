"""The preprocessing recipe from a checkpoint's preprocessor_config.json (transformers' image
processors), else the family's published recipe at the model's own size; either way one the model's
encoder takes (gguf_keys.recipe_conflict), or the conversion is refused naming the file."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from .gguf_keys import recipe_conflict
from .schema import Encoder, Preprocess

log = logging.getLogger("jepa.convert")

# PIL resample ids as transformers stores them.
_RESAMPLE = {2: "bilinear", 3: "bicubic", "bilinear": "bilinear", "bicubic": "bicubic"}


def _square(field: str, size: Any) -> int:
    if isinstance(size, int):
        return size
    h, w = size.get("height"), size.get("width")
    if h is None or h != w:
        raise ValueError(f"unsupported {field}={size}")
    return int(h)


def _triple(field: str, v: Any) -> tuple[float, float, float]:
    vals = [float(v)] * 3 if isinstance(v, (int, float)) else [float(x) for x in v]
    if len(vals) != 3:
        raise ValueError(f"unsupported {field}={v}")
    return (vals[0], vals[1], vals[2])


def recipe_from_processor(cfg: dict[str, Any], default: Preprocess) -> Preprocess:
    """Map an image-processor config (ViTImageProcessor, BitImageProcessor, ...) onto our recipe.

    size {height, width} -> squash to that size; size {shortest_edge} -> resize the short side,
    then centre-crop to crop_size. Missing fields fall back to `default`."""
    if not cfg.get("do_resize", True):
        raise ValueError("unsupported do_resize=False (the encoder needs a fixed input size)")
    size = cfg.get("size")
    if size is None:
        resize_mode, resize_short, crop = default.resize_mode, default.resize_short, default.crop
    elif isinstance(size, dict) and "shortest_edge" in size:
        if not cfg.get("do_center_crop", False):
            raise ValueError("unsupported do_center_crop=False with size.shortest_edge")
        resize_mode, resize_short = "shortest_edge", int(size["shortest_edge"])
        crop = _square("crop_size", cfg.get("crop_size", resize_short))
    else:
        resize_mode = "squash"
        resize_short = crop = _square("size", size)
        if cfg.get("do_center_crop", False) and _square("crop_size", cfg.get("crop_size", crop)) != crop:
            raise ValueError(f"unsupported crop_size={cfg['crop_size']} after a squash resize")

    resample = cfg.get("resample", default.resample)
    if resample not in _RESAMPLE:
        raise ValueError(f"unsupported resample={resample}")

    if cfg.get("do_normalize", True):
        mean = _triple("image_mean", cfg.get("image_mean", default.mean))
        std = _triple("image_std", cfg.get("image_std", default.std))
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    rescale = float(cfg.get("rescale_factor", default.rescale)) if cfg.get("do_rescale", True) else 1.0
    return Preprocess(
        mean=mean,
        std=std,
        resize_short=resize_short,
        crop=crop,
        resample=_RESAMPLE[resample],
        resize_mode=resize_mode,
        rescale=rescale,
    )


def sized(recipe: Preprocess, size: int) -> Preprocess:
    """A family's recipe for a model whose native side is `size`: its mean, std, interpolation and
    resize mode, cropped to `size`, its short side scaled as the family's is (256 for 224 in a
    shortest_edge recipe, timm's crop_pct 0.875)."""
    if recipe.resize_mode == "squash":
        return replace(recipe, resize_short=size, crop=size)
    return replace(recipe, resize_short=int(size * recipe.resize_short / recipe.crop), crop=size)


def load_recipe(
    src: Path,
    enc: Encoder,
    family: Preprocess,
    size_from: str,
    names: Sequence[str] = ("preprocessor_config.json",),
) -> Preprocess:
    """The first of `names` beside the checkpoint when there is one (its missing fields from the
    family's recipe), else the family's recipe `sized` to the model (`size_from` says where its size
    came from, for the log line). A processor config whose output the encoder refuses is an error
    naming the file and both sizes: converting it would write a file that refuses every request."""
    default = sized(family, enc.img_size)
    for name in names:
        path = (src if src.is_dir() else src.parent) / name
        if path.is_file():
            pre = recipe_from_processor(json.loads(path.read_text()), default)
            why = recipe_conflict(enc.keys() | pre.keys())
            if why:
                raise ValueError(f"{path}: {why}; fix its size / crop_size, or remove it to use the "
                                 f"model's own size ({enc.img_size} px)")
            log.info("preprocessing recipe from %s (%d px)", name, pre.crop)
            return pre
    log.info("preprocessing recipe: %d px from %s, the family's mean, std and interpolation (no %s)",
             enc.img_size, size_from, " or ".join(names))
    return default
