"""The input pipeline: decode images and videos, resize / crop / normalise them exactly as the upstream
processors do, and turn any item into model input. Stateless and re-entrant: the CLI, `jepa.embed` and
the server's thread pool all call these same functions.

    decode_image(src)                 -> PIL.Image.Image (RGB)
    preprocess_image(img, recipe)     -> float32 [C, H, W]
    load_video(src, n_frames)         -> list of uint8 [H, W, 3]
    prepare(item, model, ...)         -> float32 [C, T, H, W], what `Context.encode` takes (stacked)
    Budget(...)                       what one caller may read and decode (bytes, pixels), checked first

Needs the `media` extra (Pillow, PyAV)."""

from __future__ import annotations

from .budget import Budget
from .decode import IMAGE_EXTENSIONS, IMAGE_FORMATS, decode_image, open_regular, read_bytes
from .items import prepare, recipe_for
from .transform import NORMALIZE_MODES, normalize, preprocess_image, resize_crop
from .video import CONTAINERS, VIDEO_EXTENSIONS, load_video, sample_indices

# The largest image (width × height, also a video frame or a resized image) the pipeline accepts.
# Settable: `jepa.media.MAX_PIXELS = n`; read at each call. The default is Pillow's own bomb limit.
MAX_PIXELS: int = 89_478_485

__all__ = [
    "CONTAINERS",
    "IMAGE_EXTENSIONS",
    "IMAGE_FORMATS",
    "MAX_PIXELS",
    "NORMALIZE_MODES",
    "VIDEO_EXTENSIONS",
    "Budget",
    "decode_image",
    "load_video",
    "normalize",
    "open_regular",
    "prepare",
    "preprocess_image",
    "read_bytes",
    "recipe_for",
    "resize_crop",
    "sample_indices",
]
