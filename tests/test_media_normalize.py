"""jepa.media.normalize looks bytes up in a per-channel table: the bits must be those of computing
every pixel with the upstream arithmetic (written out here, independently of the module)."""

from __future__ import annotations

import numpy as np
import pytest

from jepa import InvalidInputError
from jepa.media import NORMALIZE_MODES, normalize

RECIPES = [
    ((0.5, 0.5, 0.5), (0.5, 0.5, 0.5), 1 / 255),  # transformers' ViT / I-JEPA
    ((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), 1 / 255),  # ImageNet
    ((0.1, -0.2, 0.3), (0.7, 1.3, 0.01), 0.0125),  # odd values, a rescale that is not 1/255
    ((0.45,), (0.27,), 1 / 255),  # one value for every channel
]


def direct(
    pixels: np.ndarray, mode: str, mean: tuple[float, ...], std: tuple[float, ...], rescale: float
) -> np.ndarray:
    m = np.asarray(mean, np.float32)[:, None, None]
    s = np.asarray(std, np.float32)[:, None, None]
    chw = pixels.transpose(2, 0, 1)
    if mode == "rescale64":  # transformers' PIL processors
        out = (chw.astype(np.float64) * rescale).astype(np.float32)
        out = (out - m) / s
    elif mode == "rescale32":  # torchvision v2 ToDtype(scale=True) + Normalize
        out = (chw.astype(np.float32) * np.float32(rescale) - m) / s
    else:  # fused: 1/rescale folded into mean and std
        k = np.float32(1.0 / rescale)
        out = (chw.astype(np.float32) - m * k) / (s * k)
    return np.ascontiguousarray(out, dtype=np.float32)


def every_byte() -> np.ndarray:
    """Every byte value in every channel, channels shuffled apart, plus random pixels."""
    rng = np.random.default_rng(0)
    levels = np.stack([np.roll(np.arange(256, dtype=np.uint8), 37 * c) for c in range(3)], axis=-1)
    noise = rng.integers(0, 256, (256, 3), dtype=np.uint8)
    return np.concatenate([levels, noise]).reshape(16, 32, 3)


@pytest.mark.parametrize("mode", NORMALIZE_MODES)
@pytest.mark.parametrize(("mean", "std", "rescale"), RECIPES)
def test_table_gives_the_bits_of_the_arithmetic(mode: str, mean: tuple, std: tuple, rescale: float) -> None:
    px = every_byte()
    recipe = {"mean": mean, "std": std, "rescale": rescale, "normalize": mode}
    got = normalize(px, recipe)
    want = direct(px, mode, mean, std, rescale)
    assert got.dtype == np.float32 and got.shape == (3, 16, 32) and got.flags.c_contiguous
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    # a strided view (a crop) reads the same bytes
    crop = px[3:11, 5:29]
    np.testing.assert_array_equal(normalize(crop, recipe).view(np.uint32), got[:, 3:11, 5:29].view(np.uint32))


def test_other_dtypes_are_computed_directly() -> None:
    px = every_byte().astype(np.uint16)
    recipe = {"mean": (0.5, 0.5, 0.5), "std": (0.5, 0.5, 0.5), "rescale": 1 / 255}
    want = direct(px, "rescale64", (0.5,) * 3, (0.5,) * 3, 1 / 255)
    np.testing.assert_array_equal(normalize(px, recipe).view(np.uint32), want.view(np.uint32))


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="unknown normalize 'nope'"):
        normalize(every_byte(), {"mean": (0.5,) * 3, "std": (0.5,) * 3, "normalize": "nope"})
