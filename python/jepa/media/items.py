"""Any item -> the model's input [C, T, H, W]: the one place that decides what an item is.

An item is a path, bytes, a PIL image or a uint8 [H, W, 3] array (an image, T = 1), a uint8
[T, H, W, 3] array or a list of frames (one clip), or a video file (path or bytes; `frames` frames
are sampled from it). Each frame is preprocessed on its own (frames may differ in size), then the
frames are stacked; a model with tubelet size k repeats the last frame until T is a multiple of k
(a still image stays one frame for a model with its own one-frame embedding, V-JEPA 2.1), and
LeVJEPA's video encoder takes a still image as `frames` (default: its n_frames) copies of it."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, cast

import numpy as np
from PIL import Image

from ..errors import InvalidInputError
from .budget import Budget
from .decode import NotAnImageError, check_pixels, decode_image, read_bytes
from .transform import preprocess_image
from .video import VIDEO_EXTENSIONS, NotAVideoError, load_video, sample_indices

if TYPE_CHECKING:
    from .._engine import ModelInfo

Frame: TypeAlias = str | os.PathLike[str] | bytes | bytearray | memoryview | Image.Image | np.ndarray
Item: TypeAlias = Frame | Sequence[Frame]

# The float arithmetic of each family's upstream pipeline (transform.NORMALIZE_MODES): transformers'
# V-JEPA 2 video processor and Meta's V-JEPA 2 code fold the 1/255 into mean and std; LeWM's eval
# transform is torchvision v2 ToDtype(scale=True); the rest are transformers' PIL processors.
_FAMILY_NORMALIZE = {"vjepa2": "fused", "vjepa2_1": "fused", "lewm": "rescale32"}


def _clip_model(info: ModelInfo) -> bool:
    """LeVJEPA's video encoder (family levjepa, modality video; the family's LeJEPA image release is
    timm's): its upstream recipe (MLO-lab/LeVJEPA's notebook `preprocess`) rounds the resized long side,
    round(w * 224 / short), where transformers truncates; and it reads a still image as a clip of the
    model's frames (`image.unsqueeze(2).repeat(1, 1, 16, 1, 1)`): under block-causal attention the CLS
    of one frame is not the CLS of sixteen."""
    return info.family == "levjepa" and info.modality == "video"


class HasInfo(Protocol):
    info: ModelInfo


def recipe_for(model: HasInfo) -> dict[str, Any]:
    """The model's preprocessing recipe (GGUF jepa.pre.*) with the arithmetic its family uses, as
    jepa.media.transform takes it (enums by the names the file spells them)."""
    info = model.info
    pre = info.preprocess
    return {
        "mean": pre.mean,
        "std": pre.std,
        "rescale": pre.rescale,
        "resize_short": pre.resize_short,
        "crop": pre.crop,
        "resize_mode": pre.resize_mode.name.lower(),
        "resample": pre.resample.name.lower(),
        "normalize": _FAMILY_NORMALIZE.get(info.family, "rescale64"),
        "resize_round": "round" if _clip_model(info) else "truncate",
    }


def _rgb_array(a: np.ndarray) -> Image.Image:
    if a.dtype != np.uint8 or a.ndim != 3 or a.shape[2] != 3:
        raise InvalidInputError(
            f"an image array must be uint8 RGB [H, W, 3], got {a.dtype} {list(a.shape)} "
            "(convert other layouts with PIL first)"
        )
    check_pixels(a.shape[1], a.shape[0])
    return Image.fromarray(np.ascontiguousarray(a))


def _frame(x: Frame, budget: Budget | None) -> Image.Image:
    """One frame of a clip, or one image, as an RGB PIL image."""
    if isinstance(x, np.ndarray):
        return _rgb_array(x)
    return decode_image(x, budget)


def _is_file_like(item: object) -> bool:
    return isinstance(item, str | os.PathLike | bytes | bytearray | memoryview)


def _from_file(
    item: Frame, as_video: bool | None, n_video: int, budget: Budget | None, plane: Plane
) -> tuple[list[Any], bool]:
    """(frames, is_clip) for a path or bytes. A video's frames come back preprocessed (`plane`
    runs on each as it is decoded, so full-resolution frames are never all held)."""
    if as_video is True:
        return load_video(item, n_video, budget=budget, transform=plane), True  # type: ignore[arg-type]
    if as_video is False:
        return [decode_image(item, budget)], False  # type: ignore[arg-type]
    if isinstance(item, str | os.PathLike):
        if os.path.splitext(os.fspath(item))[1].lower() in VIDEO_EXTENSIONS:
            return load_video(item, n_video, budget=budget, transform=plane), True
        item = read_bytes(item, budget)
    try:
        return [decode_image(item, budget)], False  # type: ignore[arg-type]
    except NotAnImageError:
        pass
    try:
        return load_video(item, n_video, budget=budget, transform=plane), True  # type: ignore[arg-type]
    except NotAVideoError as e:
        raise InvalidInputError(f"not an image or a video: Pillow cannot identify it, {e.reason}") from None


# A decoded video frame (uint8 [H, W, 3]) -> its preprocessed plane float32 [C, S, S].
Plane = Any


def _load(
    item: Item, as_video: bool | None, frames: int | None, n_video: int, budget: Budget | None, plane: Plane
) -> tuple[list[Any], bool]:
    """(frames, is_clip): the frames as RGB PIL images or uint8 arrays not yet preprocessed, or (a
    video's) float32 planes already preprocessed."""
    if isinstance(item, Image.Image):
        return [decode_image(item)], False
    if isinstance(item, np.ndarray):
        if item.ndim == 4:
            seq = list(item) if frames is None else [item[i] for i in sample_indices(len(item), frames)]
            if not seq:
                raise InvalidInputError("a clip needs at least one frame, got an empty array")
            return [_rgb_array(f) for f in seq], True
        return [_rgb_array(item)], False
    if _is_file_like(item):
        return _from_file(item, as_video, n_video, budget, plane)  # type: ignore[arg-type]
    if isinstance(item, Sequence):
        if as_video is False:
            raise InvalidInputError("a list of frames is one clip: it cannot be embedded with as_video=False")
        if len(item) == 0:
            raise InvalidInputError("a clip needs at least one frame, got an empty list")
        clip = cast(Sequence[Frame], item)  # bytes, a Sequence of ints, went to _from_file above
        picked = clip if frames is None else [clip[i] for i in sample_indices(len(clip), frames)]
        return [_frame(x, budget) for x in picked], True
    raise InvalidInputError(
        f"cannot embed a {type(item).__name__}: "
        "give a path, bytes, a PIL image, a uint8 array or a list of frames"
    )


def _check_frames(frames: int | None) -> None:
    if frames is not None and (isinstance(frames, bool) or not isinstance(frames, int) or frames < 1):
        raise InvalidInputError(f"frames must be a positive integer, got {frames!r}")


def prepare(
    item: Item,
    model: HasInfo,
    *,
    as_video: bool | None = None,
    frames: int | None = None,
    budget: Budget | None = None,
) -> np.ndarray:
    """Any item -> float32 [C, T, H, W] for `model`, preprocessed with its recipe.

    as_video: None decides by content (an image file is an image, a video file a clip, a list a clip);
    True reads a file as a video even when Pillow could open it (an animated GIF gives all its frames);
    False requires an image (a GIF gives its first frame). frames: how many frames to sample from a
    video or a list (default: all of a list, the model's n_frames from a video). budget: what the
    item may cost to read and decode (jepa.media.Budget), checked before the cost is paid."""
    _check_frames(frames)
    info = model.info
    n_video = frames or max(1, info.n_frames)
    recipe = recipe_for(model)

    def plane(rgb: np.ndarray) -> np.ndarray:
        return preprocess_image(_rgb_array(rgb), recipe)

    loaded, is_clip = _load(item, as_video, frames, n_video, budget, plane)
    if is_clip and len(loaded) > 1 and info.modality == "image":
        raise InvalidInputError(
            f"a clip of {len(loaded)} frames needs a video model; this is an image model "
            "(embed the frames as separate images, or sample one frame)"
        )
    if not is_clip and _clip_model(info):
        loaded = loaded * n_video  # a still image: the model's clip of it (one frame, preprocessed once)
    # A model with its own one-frame embedding (V-JEPA 2.1) takes a still image as T = 1.
    tubelet = 1 if len(loaded) == 1 and info.image_patch_embed else max(1, info.tubelet_size)
    if len(loaded) % tubelet:
        # Upstream V-JEPA repeats the last frame to fill the last tubelet.
        loaded = loaded + [loaded[-1]] * (tubelet - len(loaded) % tubelet)
    done: dict[int, np.ndarray] = {}  # a repeated frame is preprocessed once
    planes = []
    for f in loaded:
        if id(f) not in done:
            if isinstance(f, np.ndarray) and f.dtype == np.float32:
                done[id(f)] = f  # a video's frame, preprocessed as it was decoded
            else:
                done[id(f)] = preprocess_image(f if isinstance(f, Image.Image) else _rgb_array(f), recipe)
        planes.append(done[id(f)])
    if len(planes) == 1:
        return planes[0][:, None]  # one image: [C, 1, H, W] as a view, no copy (a plane is contiguous)
    return np.ascontiguousarray(np.stack(planes, axis=1))
