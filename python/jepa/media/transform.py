"""Resize, crop and normalise one RGB image from a model's recipe (GGUF `jepa.pre.*`).

The geometry and the Pillow calls are those of transformers' PIL image processors: resize with Pillow
(the short side to `resize_short`, the long side `int(resize_short * long / short)`, or rounded where
the recipe's `resize_round` says so, then a centre crop with top = (h - crop) // 2), or squash to
crop × crop. The float arithmetic differs between the upstream pipelines in the last bit, so the recipe
names which one to reproduce (`normalize`, see NORMALIZE_MODES)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from PIL import Image

from ..errors import InvalidInputError
from .decode import check_pixels

_RESAMPLE = {"bilinear": Image.Resampling.BILINEAR, "bicubic": Image.Resampling.BICUBIC}

# How uint8 pixels become floats, each one upstream pipeline's exact order of operations:
#   rescale64: x = f32(f64(u8) * rescale); (x - mean) / std in f32 — transformers' PIL processors
#              (ViTImageProcessor here), and torchvision's ToTensor + Normalize (u8 / 255 in f32 is equal)
#   rescale32: x = f32(u8) * f32(rescale); (x - mean) / std in f32 — torchvision v2 ToDtype(scale=True)
#   fused:     (f32(u8) - mean * (1/rescale)) / (std * (1/rescale)) in f32 — transformers' torchvision
#              processors (the V-JEPA 2 video processor) and Meta's V-JEPA 2 transforms
NORMALIZE_MODES = ("rescale64", "rescale32", "fused")


def _rescale(recipe: Mapping[str, Any]) -> float:
    r = float(recipe.get("rescale", 1 / 255))
    # GGUF stores the factor as f32; upstream multiplies by the Python double 1/255.
    return 1 / 255 if np.float32(r) == np.float32(1 / 255) else r


def _output_size(width: int, height: int, recipe: Mapping[str, Any]) -> tuple[int, int]:
    """(width, height) after the resize."""
    mode = recipe.get("resize_mode", "shortest_edge")
    if mode == "squash":
        crop = int(recipe["crop"])
        return crop, crop
    if mode != "shortest_edge":
        raise InvalidInputError(f"unknown resize_mode {mode!r} in the model's preprocessing recipe")
    size = int(recipe["resize_short"])
    rounding = recipe.get("resize_round", "truncate")
    if rounding == "round":
        # LeVJEPA's notebook: scale = size / min(w, h), then round(w * scale), round(h * scale).
        scale = size / min(width, height)
        return round(width * scale), round(height * scale)
    if rounding != "truncate":
        raise InvalidInputError(f"unknown resize_round {rounding!r}: use truncate or round")
    # transformers' get_resize_output_image_size (torchvision's rule): truncate, do not round.
    if width <= height:
        return size, int(size * height / width)
    return int(size * width / height), size


def _center_crop(a: np.ndarray, crop: int) -> np.ndarray:
    """transformers' numpy center_crop on [H, W, C], zero padding included for a small image."""
    h, w = a.shape[:2]
    top, left = (h - crop) // 2, (w - crop) // 2
    if top >= 0 and left >= 0:
        return a[top : top + crop, left : left + crop]
    nh, nw = max(crop, h), max(crop, w)
    pt, pl = math.ceil((nh - h) / 2), math.ceil((nw - w) / 2)
    padded = np.zeros((nh, nw, a.shape[2]), a.dtype)
    padded[pt : pt + h, pl : pl + w] = a
    top, left = top + pt, left + pl
    return padded[max(0, top) : min(nh, top + crop), max(0, left) : min(nw, left + crop)]


def resize_crop(img: Image.Image, recipe: Mapping[str, Any]) -> np.ndarray:
    """An RGB PIL image -> uint8 [crop, crop, 3], the bytes upstream hands to the normalisation."""
    if img.mode != "RGB":
        raise InvalidInputError(f"resize_crop expects an RGB image, got mode {img.mode!r} (use decode_image)")
    resample = _RESAMPLE.get(str(recipe.get("resample", "bilinear")))
    if resample is None:
        raise InvalidInputError(
            f"unknown resample {recipe.get('resample')!r} in the model's preprocessing recipe"
        )
    width, height = img.size
    check_pixels(width, height)
    out_w, out_h = _output_size(width, height, recipe)
    check_pixels(out_w, out_h, "resized image")
    a = np.asarray(img.resize((out_w, out_h), resample=resample))
    if recipe.get("resize_mode", "shortest_edge") == "shortest_edge":
        a = _center_crop(a, int(recipe["crop"]))
    return a


def _arithmetic(chw: np.ndarray, mode: str, mean: np.ndarray, std: np.ndarray, rescale: float) -> np.ndarray:
    """The recipe's float arithmetic on [C, ...] pixels: each upstream pipeline's exact order of
    operations (NORMALIZE_MODES); mean and std are float32 [C, 1, 1]."""
    if mode == "rescale64":
        x = (chw.astype(np.float64) * rescale).astype(np.float32)
        return (x - mean) / std
    if mode == "rescale32":
        x = chw.astype(np.float32) * np.float32(rescale)
        return (x - mean) / std
    if mode == "fused":
        k = np.float32(1.0 / rescale)
        return (chw.astype(np.float32) - mean * k) / (std * k)
    raise InvalidInputError(f"unknown normalize {mode!r}: use one of {', '.join(NORMALIZE_MODES)}")


@functools.lru_cache(maxsize=64)
def _table(
    mode: str, mean: tuple[float, ...], std: tuple[float, ...], rescale: float, channels: int
) -> np.ndarray:
    """float32 [channels, 256]: what _arithmetic gives each byte value in each channel. The
    arithmetic is elementwise IEEE float math, so an entry holds exactly the bits the same operations
    give that byte anywhere in an image; normalize then looks values up instead of computing them."""
    levels = np.broadcast_to(np.arange(256, dtype=np.uint8), (channels, 1, 256))
    m = np.asarray(mean, np.float32)[:, None, None]
    s = np.asarray(std, np.float32)[:, None, None]
    table = np.ascontiguousarray(_arithmetic(levels, mode, m, s, rescale)[:, 0], dtype=np.float32)
    table.flags.writeable = False
    return table


def normalize(pixels: np.ndarray, recipe: Mapping[str, Any]) -> np.ndarray:
    """uint8 [H, W, C] -> float32 [C, H, W] in the recipe's arithmetic (NORMALIZE_MODES).

    Each output value depends only on its byte and its channel, so uint8 pixels go through a
    256-entry table per channel built with that same arithmetic (bit for bit what computing every
    pixel gives, several times faster); other dtypes are computed directly."""
    mode = str(recipe.get("normalize", "rescale64"))
    mean = np.asarray(recipe["mean"], np.float32)
    std = np.asarray(recipe["std"], np.float32)
    rescale = _rescale(recipe)
    table = None
    if pixels.dtype == np.uint8 and pixels.ndim == 3:
        table = _table(mode, tuple(mean.tolist()), tuple(std.tolist()), rescale, pixels.shape[2])
    if table is None or table.shape[0] != pixels.shape[2]:  # not bytes, or channels broadcast oddly
        out = _arithmetic(pixels.transpose(2, 0, 1), mode, mean[:, None, None], std[:, None, None], rescale)
        return np.ascontiguousarray(out, dtype=np.float32)
    h, w, channels = pixels.shape
    out = np.empty((channels, h, w), np.float32)
    for c in range(channels):
        np.take(table[c], pixels[:, :, c], out=out[c], mode="clip")  # a byte is always in range
    return out


def preprocess_image(img: Image.Image, recipe: Mapping[str, Any]) -> np.ndarray:
    """An RGB PIL image -> float32 [3, crop, crop], equal to the upstream processor's pixel_values."""
    return normalize(resize_crop(img, recipe), recipe)
