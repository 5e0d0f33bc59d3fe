"""LeVJEPA's input pipeline in jepa.media and its pooling, on stand-in models (only the fields prepare and
pool read, so no engine is needed): the notebook's recipe (MLO-lab/LeVJEPA
notebooks/feature_visualization.ipynb `preprocess`: Pillow bicubic short side 224 with round(w * scale),
centre crop at (w - 224) // 2, x / 255, ImageNet mean / std) bit for bit, the reference bundle's inputs
from its uint8 frames bit for bit, and a still image read as a clip of the model's frames."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa import media
from jepa.pooling import check_pool, pool

from conftest import REFERENCE_DIR, bits

BUNDLE = REFERENCE_DIR / "levjepa"
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def model(size: int = 224, modality: str = "video", n_frames: int = 16, family: str = "levjepa") -> Any:
    """A LeVJEPA model stand-in: the ModelInfo fields prepare and pool read, the recipe as the converter
    writes it (jepa.pre.*: short side = crop = size, bicubic, ImageNet statistics)."""
    pre = SimpleNamespace(resize_mode=jepa.ResizeMode.SHORTEST_EDGE, resize_short=size, crop=size,
                          resample=jepa.Resample.BICUBIC, mean=IMAGENET_MEAN, std=IMAGENET_STD,
                          rescale=float(np.float32(1 / 255)))
    info = SimpleNamespace(family=family, modality=modality, tubelet_size=1, n_frames=n_frames,
                           image_patch_embed=False, preprocess=pre)
    return SimpleNamespace(info=info, has_cls=True, n_prefix=1, world_model=None)


def photos() -> dict[str, np.ndarray]:
    coffee, rocket = skimage.data.coffee(), skimage.data.rocket()
    return {
        "astronaut": skimage.data.astronaut(),  # 512x512
        "chelsea": skimage.data.chelsea(),  # 300x451: 451 * 224 / 300 = 336.75, rounded 337 (truncated 336)
        "coffee_portrait": np.ascontiguousarray(coffee.transpose(1, 0, 2)),  # 600x400
        "rocket": rocket,  # 427x640
        "rocket_odd": rocket[13:270, 5:390],  # odd sizes
        "tiny": coffee[200:207, 300:305],  # 7x5, upsampled
        "at_size": coffee[:224, :300],  # short side 224 already
    }


def notebook_preprocess(img: Image.Image) -> np.ndarray:
    """The notebook's `preprocess`, line for line (torch, as it runs): (3, 224, 224) float32."""
    import torch

    mean, std = torch.tensor([0.485, 0.456, 0.406]), torch.tensor([0.229, 0.224, 0.225])
    w, h = img.size
    scale = 224 / min(w, h)
    img = img.resize((round(w * scale), round(h * scale)), Image.BICUBIC)
    w, h = img.size
    left, top = (w - 224) // 2, (h - 224) // 2
    img = img.crop((left, top, left + 224, top + 224))
    x = torch.from_numpy(np.array(img.convert("RGB"))).float().div_(255)
    x = x.permute(2, 0, 1)
    return ((x - mean[:, None, None]) / std[:, None, None]).numpy()


@pytest.mark.torch
@pytest.mark.parametrize("photo_name", sorted(photos()))
def test_the_notebook_recipe_bit_for_bit(photo_name: str) -> None:
    img = Image.fromarray(photos()[photo_name])
    ref = notebook_preprocess(img)
    ours = media.prepare(img, model(), as_video=False)
    assert ours.shape == (3, 16, 224, 224)
    for t in (0, 15):
        assert np.array_equal(bits(ours[:, t]), bits(ref)), (photo_name, t)


def test_the_long_side_is_rounded_for_the_video_layout_only() -> None:
    chelsea = Image.fromarray(skimage.data.chelsea())  # 451 x 300
    assert media.recipe_for(model())["resize_round"] == "round"
    image_model = model(modality="image")  # LeJEPA's timm release: the family's image layout, timm's recipe
    assert media.recipe_for(image_model)["resize_round"] == "truncate"
    ours = media.resize_crop(chelsea, media.recipe_for(model()))
    rounded = np.asarray(chelsea.resize((337, 224), Image.BICUBIC))[:, 56:280]
    truncated = np.asarray(chelsea.resize((336, 224), Image.BICUBIC))[:, 56:280]
    assert np.array_equal(ours, rounded) and not np.array_equal(ours, truncated)
    assert np.array_equal(media.resize_crop(chelsea, media.recipe_for(image_model)), truncated)


def test_the_bundle_inputs_from_its_uint8_frames() -> None:
    """input_clip / input_image / input_wide: the bundle's own arithmetic (x / 255, ImageNet), which the
    family's default (rescale64) reproduces bit for bit; at the model's 64 px the resize is the identity."""
    m = model(size=64, n_frames=4)
    clip = media.prepare(np.load(BUNDLE / "frames_u8.npy")[0], m)
    assert np.array_equal(bits(clip), bits(np.load(BUNDLE / "input_clip.npy")[0]))
    future = media.prepare(np.load(BUNDLE / "frames_future_u8.npy")[0], m)
    assert np.array_equal(bits(future), bits(np.load(BUNDLE / "input_future.npy")[0]))
    still = media.prepare(np.load(BUNDLE / "image_u8.npy")[0], m)  # repeated to the model's 4 frames
    image = np.load(BUNDLE / "input_image.npy")[0]
    assert still.shape == (3, 4, 64, 64)
    assert np.array_equal(bits(still), bits(np.repeat(image[:, None], 4, axis=1)))
    wide = np.load(BUNDLE / "wide_u8.npy")[0]  # 64 x 96: normalised alone (the recipe would crop it)
    planes = np.stack([media.normalize(f, media.recipe_for(m)) for f in wide], axis=1)
    assert np.array_equal(bits(planes), bits(np.load(BUNDLE / "input_wide.npy")[0]))


def test_a_still_image_is_a_clip_of_the_model_frames() -> None:
    photo = skimage.data.coffee()[100:260, 150:350]
    one = media.preprocess_image(Image.fromarray(photo), media.recipe_for(model(size=32)))
    for n_frames, frames, expected in ((16, None, 16), (4, None, 4), (16, 3, 3)):
        x = media.prepare(photo, model(size=32, n_frames=n_frames), frames=frames)
        assert x.shape == (3, expected, 32, 32) and x.flags.c_contiguous
        assert all(np.array_equal(bits(x[:, t]), bits(one)) for t in range(expected))
    # The family's image layout (LeJEPA) and other video models keep their own rule.
    assert media.prepare(photo, model(size=32, modality="image", n_frames=1)).shape == (3, 1, 32, 32)
    vjepa2 = model(size=32, family="vjepa2")
    vjepa2.info.tubelet_size = 2
    assert media.prepare(photo, vjepa2).shape[1] == 2


def test_a_clip_keeps_its_frames() -> None:
    frames = np.random.default_rng(0).integers(0, 256, (5, 40, 48, 3), dtype=np.uint8)
    assert media.prepare(frames, model(size=32)).shape == (3, 5, 32, 32)  # tubelet 1: no repeat
    assert media.prepare(list(frames[:2]), model(size=32)).shape == (3, 2, 32, 32)


def test_the_pool_is_the_cls_by_default() -> None:
    m = model()
    tokens = np.random.default_rng(1).standard_normal((2, 1 + 8, 16)).astype(np.float32)
    assert check_pool(m, None) == "cls"
    assert np.array_equal(bits(pool(tokens, None, m)), bits(tokens[:, 0]))
    assert np.array_equal(bits(pool(tokens, "cls", m)), bits(tokens[:, 0]))
    assert np.array_equal(bits(pool(tokens, "mean", m)), bits(tokens[:, 1:].mean(axis=1, dtype=np.float32)))
    with pytest.raises(jepa.InvalidInputError, match="lewm"):
        check_pool(m, "lewm")
