"""The preprocessing recipe from a checkpoint's preprocessor_config.json (transformers' image
processors), else the family's published recipe at the model's own size; either way one the model's
encoder takes (jepa.gguf.keys.recipe_conflict), or the conversion is refused naming the file."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..gguf.keys import recipe_conflict
from ..gguf.schema import Encoder, Preprocess
from .base import Config, read_json

log = logging.getLogger("jepa.convert")

# PIL resample ids as transformers stores them.
_RESAMPLE = {2: "bilinear", 3: "bicubic", "bilinear": "bilinear", "bicubic": "bicubic"}


def _square(cfg: Config, key: str, default: int) -> int:
    """A size given as n or {height, width} (equal)."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, dict):
        return cfg.integer(key, lo=1)
    size = cfg.section(key)
    h, w = size.integer("height", lo=1), size.integer("width", lo=1)
    if h != w:
        raise ValueError(f"{cfg.path}: unsupported {key}={json.dumps(v)} (only square sizes)")
    return h


def _triple(cfg: Config, key: str, default: tuple[float, float, float]) -> tuple[float, float, float]:
    """Three numbers (a per-channel mean or std), or one for all three."""
    v = cfg.get(key)
    if v is None:
        return default
    if not isinstance(v, list):
        return (cfg.number(key),) * 3
    if len(v) != 3:
        raise ValueError(f"{cfg.path}: unsupported {key}={json.dumps(v)[:60]} (one number per RGB channel)")
    vals = [Config(cfg.path, {f"{key}[{i}]": x}).number(f"{key}[{i}]") for i, x in enumerate(v)]
    return (vals[0], vals[1], vals[2])


def recipe_from_processor(cfg: Mapping[str, Any], default: Preprocess) -> Preprocess:
    """Map an image-processor config (ViTImageProcessor, BitImageProcessor, ...) onto our recipe.

    size {height, width} -> squash to that size; size {shortest_edge} -> resize the short side,
    then centre-crop to crop_size. Missing fields fall back to `default`. A Config names its file in
    every refusal (a plain mapping is named preprocessor_config.json)."""
    c = cfg if isinstance(cfg, Config) else Config(Path("preprocessor_config.json"), cfg)
    if not c.flag("do_resize", True):
        raise ValueError(f"{c.path}: unsupported do_resize=False (the encoder needs a fixed input size)")
    size = c.get("size")
    if size is None:
        resize_mode, resize_short, crop = default.resize_mode, default.resize_short, default.crop
    elif isinstance(size, dict) and "shortest_edge" in size:
        if not c.flag("do_center_crop", False):
            raise ValueError(f"{c.path}: unsupported do_center_crop=False with size.shortest_edge")
        resize_mode, resize_short = "shortest_edge", c.section("size").integer("shortest_edge", lo=1)
        crop = _square(c, "crop_size", resize_short)
    else:
        resize_mode = "squash"
        resize_short = crop = _square(c, "size", default.crop)
        if c.flag("do_center_crop", False) and _square(c, "crop_size", crop) != crop:
            raise ValueError(f"{c.path}: unsupported crop_size={json.dumps(c['crop_size'])} after a squash "
                             "resize")

    resample = c.get("resample", default.resample)
    if isinstance(resample, bool) or not isinstance(resample, int | str) or resample not in _RESAMPLE:
        raise ValueError(f"{c.path}: unsupported resample={json.dumps(resample)[:60]} (known: 2 or "
                         "\"bilinear\", 3 or \"bicubic\")")

    if c.flag("do_normalize", True):
        mean = _triple(c, "image_mean", default.mean)
        std = _triple(c, "image_std", default.std)
    else:
        mean, std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)
    rescale = c.number("rescale_factor", default.rescale) if c.flag("do_rescale", True) else 1.0
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
            pre = recipe_from_processor(read_json(path) or Config(path, {}), default)
            why = recipe_conflict(enc.keys() | pre.keys())
            if why:
                raise ValueError(f"{path}: {why}; fix its size / crop_size, or remove it to use the "
                                 f"model's own size ({enc.img_size} px)")
            log.info("preprocessing recipe from %s (%d px)", name, pre.crop)
            return pre
    log.info("preprocessing recipe: %d px from %s, the family's mean, std and interpolation (no %s)",
             enc.img_size, size_from, " or ".join(names))
    return default
