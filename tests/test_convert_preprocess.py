"""Mapping transformers image-processor configs onto the GGUF preprocessing recipe."""

from __future__ import annotations

import pytest

from jepa.convert.preprocess import recipe_from_processor
from jepa.convert.recipes import HF_VIT_RECIPE, IMAGENET_RECIPE

VIT_PROCESSOR = {  # what ViTImageProcessor().save_pretrained writes
    "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "ViTImageProcessor", "image_std": [0.5, 0.5, 0.5], "resample": 2,
    "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224},
}


def test_vit_processor_is_the_hf_recipe() -> None:
    assert recipe_from_processor(VIT_PROCESSOR, IMAGENET_RECIPE) == HF_VIT_RECIPE


def test_shortest_edge_then_crop() -> None:
    cfg = {"size": {"shortest_edge": 292}, "do_center_crop": True, "crop_size": {"height": 256, "width": 256},
           "resample": 3, "image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}
    r = recipe_from_processor(cfg, HF_VIT_RECIPE)
    assert (r.resize_mode, r.resize_short, r.crop, r.resample) == ("shortest_edge", 292, 256, "bicubic")
    assert r.mean == pytest.approx((0.485, 0.456, 0.406))


def test_defaults_and_switches() -> None:
    r = recipe_from_processor({}, IMAGENET_RECIPE)
    assert r == IMAGENET_RECIPE
    r = recipe_from_processor({"do_normalize": False, "do_rescale": False}, HF_VIT_RECIPE)
    assert (r.mean, r.std, r.rescale) == ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), 1.0)


@pytest.mark.parametrize(("cfg", "field"), [
    ({"resample": 0}, "resample"),
    ({"size": {"height": 224, "width": 256}}, "size"),
    ({"do_resize": False}, "do_resize"),
    ({"size": {"shortest_edge": 256}}, "do_center_crop"),
    ({"image_mean": [0.5, 0.5]}, "image_mean"),
])
def test_unsupported(cfg: dict, field: str) -> None:
    with pytest.raises(ValueError, match=f"unsupported {field}="):
        recipe_from_processor(cfg, HF_VIT_RECIPE)
