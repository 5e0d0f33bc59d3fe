"""jepa.media preprocessing against the upstream processors, on real photographs (scikit-image's).

Bit for bit: the uint8 pixels after resize and crop, and the float32 pixel_values (compared as
uint32 bit patterns). transformers' ViTImageProcessor needs torchvision for its default backend;
without it (here) it is ViTImageProcessorPil, which is the class used below."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import skimage.data
from PIL import Image

import jepa
from jepa import media

from conftest import bits

pytestmark = pytest.mark.transformers

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
F32_RESCALE = float(np.float32(1 / 255))  # what a GGUF file gives back for jepa.pre.rescale

# I-JEPA / hfvit / LeWM encoders: squash to 224, bilinear, mean = std = 0.5.
SQUASH = {"resize_mode": "squash", "resize_short": 224, "crop": 224, "resample": "bilinear",
          "mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "rescale": F32_RESCALE}  # fmt: skip
# LeJEPA: short side 256, centre crop 224, bicubic, ImageNet statistics.
SHORT = {"resize_mode": "shortest_edge", "resize_short": 256, "crop": 224, "resample": "bicubic",
         "mean": IMAGENET_MEAN, "std": IMAGENET_STD, "rescale": F32_RESCALE}  # fmt: skip
# A crop larger than the resize: the processor pads with zeros.
PADDED = {**SHORT, "resize_short": 200, "crop": 224, "resample": "bilinear"}
# V-JEPA 2 (as the converter writes it): short side int(256 * 256 / 224), crop 256, bilinear, ImageNet.
VJEPA2 = {**SHORT, "resize_short": int(256 * 256 / 224), "crop": 256, "resample": "bilinear"}
RECIPES = {"squash": SQUASH, "shortest_edge": SHORT, "padded": PADDED}


def photos() -> dict[str, np.ndarray]:
    coffee, rocket = skimage.data.coffee(), skimage.data.rocket()
    return {
        "astronaut": skimage.data.astronaut(),  # 512x512
        "chelsea": skimage.data.chelsea(),  # 300x451 landscape
        "coffee_portrait": np.ascontiguousarray(coffee.transpose(1, 0, 2)),  # 600x400
        "rocket": rocket,  # 427x640
        "rocket_odd": rocket[13:270, 5:390],  # odd sizes
        "tall_strip": coffee[:, 290:301],  # 400x11, extreme aspect
        "tiny": coffee[200:207, 300:305],  # 7x5, upsampled
        "one_pixel": coffee[100:101, 100:101],
        "at_crop_size": skimage.data.astronaut()[100:324, 150:374],  # 224x224: squash is an identity
        "at_short_size": coffee[:256, :380],  # short side 256: the shortest_edge resize is an identity
    }


def processor(recipe: dict[str, Any], **over: Any) -> Any:
    from transformers import ViTImageProcessorPil
    from transformers.image_utils import PILImageResampling

    resample = {"bilinear": PILImageResampling.BILINEAR, "bicubic": PILImageResampling.BICUBIC}
    if recipe["resize_mode"] == "squash":
        geometry: dict[str, Any] = {
            "size": {"height": recipe["crop"], "width": recipe["crop"]},
            "do_center_crop": False,
        }
    else:
        geometry = {
            "size": {"shortest_edge": recipe["resize_short"]},
            "do_center_crop": True,
            "crop_size": {"height": recipe["crop"], "width": recipe["crop"]},
        }
    kw = dict(
        resample=resample[recipe["resample"]], image_mean=list(recipe["mean"]), image_std=list(recipe["std"])
    )
    return ViTImageProcessorPil(**geometry, **kw, **over)



def test_vit_image_processor_is_the_pil_backend_here() -> None:
    from transformers import ViTImageProcessor, ViTImageProcessorPil

    assert ViTImageProcessor is ViTImageProcessorPil  # else the comparison below is with another backend


@pytest.mark.parametrize("recipe_name", sorted(RECIPES))
@pytest.mark.parametrize("photo_name", sorted(photos()))
def test_pixels_and_pixel_values_bit_exact(recipe_name: str, photo_name: str) -> None:
    recipe = RECIPES[recipe_name]
    img = Image.fromarray(photos()[photo_name])
    ours_u8 = media.resize_crop(img, recipe)
    ref_u8 = processor(recipe, do_rescale=False, do_normalize=False)(img, return_tensors="np").pixel_values[0]
    assert ref_u8.dtype == np.uint8
    assert np.array_equal(ours_u8.transpose(2, 0, 1), ref_u8)

    ours = media.preprocess_image(img, recipe)
    ref = processor(recipe)(img, return_tensors="np").pixel_values[0]
    assert ours.shape == ref.shape == (3, recipe["crop"], recipe["crop"])
    assert np.array_equal(bits(ours), bits(ref))


def _mode_images() -> dict[str, Image.Image]:
    rgb = Image.fromarray(skimage.data.chelsea()[60:190, 100:280])
    rng = np.random.default_rng(0)
    alpha = Image.fromarray(rng.integers(0, 256, rgb.size[::-1], dtype=np.uint8))
    rgba = rgb.copy()
    rgba.putalpha(alpha)
    pal = rgb.convert("P", palette=Image.Palette.ADAPTIVE)
    pal.info["transparency"] = 3
    deep = Image.fromarray(np.asarray(rgb.convert("L")).astype(np.uint16) * 3)  # I;16, values past 255
    return {
        "L": rgb.convert("L"),
        "LA": rgba.convert("LA"),
        "RGBA": rgba,
        "P": rgb.convert("P", palette=Image.Palette.ADAPTIVE),
        "P_transparency": pal,
        "CMYK": rgb.convert("CMYK"),
        "I;16": deep,
        "1": rgb.convert("1"),
    }


@pytest.mark.parametrize("mode", sorted(_mode_images()))
def test_modes_convert_like_the_processor(mode: str) -> None:
    img = _mode_images()[mode]
    assert img.mode == mode.split("_")[0]
    ref = processor(SHORT)(img, do_convert_rgb=True, return_tensors="np").pixel_values[0]
    ours = media.preprocess_image(media.decode_image(img), SHORT)
    assert np.array_equal(bits(ours), bits(ref))


@pytest.mark.torch
@pytest.mark.parametrize("photo_name", ["astronaut", "chelsea", "coffee_portrait", "rocket_odd"])
def test_vjepa2_video_processor_arithmetic(photo_name: str) -> None:
    """transformers' VJEPA2VideoProcessor cannot run here (it needs torchvision, which does not import
    beside this CPU torch), so this test re-types its documented arithmetic in torch:
    shortest_edge int(256·256/224) = 292 -> centre crop 256 at int((h - 256) / 2.0), bilinear, then
    TorchvisionBackend.rescale_and_normalize, which folds 1/255 into ImageNet mean and std and runs
    torchvision's normalize: (x - mean·255) / (std·255) in float32.

    The float arithmetic must match bit for bit. The resize cannot, exactly: torchvision resizes uint8
    with torch's antialiased kernel, whose int16 weights round differently from Pillow's 22-bit ones
    (measured: at most 1 level apart on about 0.1 % of values). Pillow is the reference we keep."""
    import torch

    # A stand-in model: ModelInfo's two fields recipe_for reads, the enums by the names VJEPA2 spells.
    enums = {"resize_mode": jepa.ResizeMode, "resample": jepa.Resample}
    pre = SimpleNamespace(**VJEPA2 | {k: e.__members__[VJEPA2[k].upper()] for k, e in enums.items()})
    vjepa2 = SimpleNamespace(info=SimpleNamespace(family="vjepa2", preprocess=pre))

    recipe = media.recipe_for(vjepa2)
    assert recipe["normalize"] == "fused" and recipe["resize_short"] == 292
    frame = photos()[photo_name]
    img = Image.fromarray(frame)

    # Geometry and resize, as torchvision's resize(uint8, antialias=True) + center_crop.
    h, w = frame.shape[:2]
    new = (292, int(292 * w / h)) if h <= w else (int(292 * h / w), 292)
    t = torch.from_numpy(frame).permute(2, 0, 1)[None].contiguous()
    resized = torch.nn.functional.interpolate(t, size=new, mode="bilinear", antialias=True)[0]
    top, left = int((new[0] - 256) / 2.0), int((new[1] - 256) / 2.0)
    ref_u8 = resized[:, top : top + 256, left : left + 256].numpy()
    ours_u8 = media.resize_crop(img, recipe).transpose(2, 0, 1)
    diff = np.abs(ours_u8.astype(int) - ref_u8.astype(int))
    assert diff.max() <= 1 and (diff > 0).mean() < 0.005

    # Normalisation: bit for bit, on the same uint8 pixels.
    rescale_factor = 1 / 255
    mean = torch.tensor(IMAGENET_MEAN) * (1.0 / rescale_factor)
    std = torch.tensor(IMAGENET_STD) * (1.0 / rescale_factor)
    ref = torch.from_numpy(np.ascontiguousarray(ours_u8)).to(torch.float32)
    ref = ref.sub_(mean[:, None, None]).div_(std[:, None, None]).numpy()
    assert np.array_equal(bits(media.preprocess_image(img, recipe)), bits(ref))


@pytest.mark.torch
def test_rescale32_is_torchvision_v2_to_dtype() -> None:
    """LeWM's eval transform: ToDtype(float32, scale=True) = x.to(float32).mul_(1/255), then Normalize."""
    import torch

    img = Image.fromarray(photos()["chelsea"])
    recipe = {**SQUASH, "normalize": "rescale32", "mean": IMAGENET_MEAN, "std": IMAGENET_STD}
    u8 = media.resize_crop(img, recipe).transpose(2, 0, 1)
    x = torch.from_numpy(np.ascontiguousarray(u8)).to(torch.float32).mul_(1.0 / 255)
    ref = x.sub_(torch.tensor(IMAGENET_MEAN)[:, None, None]).div_(torch.tensor(IMAGENET_STD)[:, None, None])
    assert np.array_equal(bits(media.preprocess_image(img, recipe)), bits(ref.numpy()))


def test_the_three_arithmetics_differ_in_the_last_bit() -> None:
    """Why the recipe names its arithmetic: on real pixels the three orders of operations disagree."""
    img = Image.fromarray(photos()["astronaut"])
    out = {m: bits(media.preprocess_image(img, {**SHORT, "normalize": m})) for m in media.NORMALIZE_MODES}
    assert not np.array_equal(out["rescale64"], out["fused"])
    assert not np.array_equal(out["rescale64"], out["rescale32"])
