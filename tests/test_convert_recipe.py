"""The preprocessing recipe a converter writes is one the model's own encoder takes: without a
preprocessor_config.json it comes from the model's size (config.json's image_size, the position
table's grid), and a processor config whose output the encoder refuses is refused naming the file and
both sizes, for every family that reads one (HF ViT / I-JEPA, timm LeJEPA, V-JEPA 2 HF)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.convert import convert
from jepa.convert.cli import main
from jepa.convert.preprocess import sized
from jepa.convert.recipes import HF_VIT_RECIPE, IMAGENET_RECIPE
from jepa.gguf.keys import recipe_conflict
from jepa.gguf.schema import Preprocess
from jepa.pipeline import embed

BIG = {  # a processor config for 224 px, as ViTImageProcessor().save_pretrained writes it
    "do_normalize": True, "do_rescale": True, "do_resize": True, "image_mean": [0.5, 0.5, 0.5],
    "image_processor_type": "ViTImageProcessor", "image_std": [0.5, 0.5, 0.5], "resample": 2,
    "rescale_factor": 0.00392156862745098, "size": {"height": 224, "width": 224},
}


def _image() -> np.ndarray:
    return np.random.default_rng(0).integers(0, 256, (45, 60, 3), dtype=np.uint8)


def _pre(k: dict[str, object]) -> tuple[object, ...]:
    return (k["jepa.pre.resize_mode"], k["jepa.pre.resize_short"], k["jepa.pre.crop"])


def _serves(path: str) -> np.ndarray:
    """One image through the model's own recipe and encoder (what every request does)."""
    return embed(jepa.Model(path).context(threads=1), [_image()])


# -- the rule (numpy only) --------------------------------------------------------------------


def _keys(img: int, crop: int, pos_type: str = "learned", patch: int = 16) -> dict[str, object]:
    return {"jepa.family": "hfvit", "jepa.enc.img_size": img, "jepa.enc.patch_size": patch,
            "jepa.enc.pos_type": pos_type, "jepa.pre.crop": crop}


def test_the_rule() -> None:
    assert recipe_conflict(_keys(32, 32)) is None
    why = recipe_conflict(_keys(32, 224))
    assert why is not None and "224x224 px" in why and "32x32 px" in why and "position table" in why
    assert recipe_conflict(_keys(32, 224, "sincos2d")) is not None
    assert recipe_conflict(_keys(32, 48, "rope3d")) is None  # RoPE positions follow any grid
    why = recipe_conflict(_keys(32, 40, "rope3d"))
    assert why is not None and "patch size 16" in why
    assert recipe_conflict({"jepa.family": "bert"}) is None


def test_family_recipes_at_a_size() -> None:
    assert sized(HF_VIT_RECIPE, 32) == Preprocess(
        mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5), resize_short=32, crop=32)
    r = sized(IMAGENET_RECIPE, 32)  # timm's crop_pct 0.875: short side 256 for 224
    assert (r.resize_mode, r.resize_short, r.crop, r.resample, r.mean) == (
        "shortest_edge", 36, 32, "bicubic", IMAGENET_RECIPE.mean)
    assert sized(IMAGENET_RECIPE, 224) == IMAGENET_RECIPE


# -- HF ViT / I-JEPA ----------------------------------------------------------------------------


@pytest.mark.transformers
@pytest.mark.parametrize("kind", ["vit", "ijepa"])
def test_no_processor_config_gives_the_models_size(
    kind: str, hf_model, gguf_contents, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    src, _ = hf_model(kind, num_hidden_layers=1)  # image_size 32, patch 16
    assert not (src / "preprocessor_config.json").exists()
    with caplog.at_level(logging.INFO, logger="jepa.convert"):
        out = convert(src, tmp_path / "m.gguf")
    k = gguf_contents(out).keys
    assert _pre(k) == ("squash", 32, 32)
    assert (k["jepa.pre.mean"], k["jepa.pre.std"]) == (pytest.approx([0.5] * 3), pytest.approx([0.5] * 3))
    assert k["jepa.pre.resample"] == "bilinear"
    assert [r.getMessage() for r in caplog.records] == [
        "preprocessing recipe: 32 px from config.json's image_size, the family's mean, std and "
        "interpolation (no preprocessor_config.json)"
    ]
    assert _serves(out).shape == (1, 64)  # before: UnsupportedError on every request (a 224 px recipe)


@pytest.mark.transformers
def test_a_contradicting_processor_config_is_refused(hf_model, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    (src / "preprocessor_config.json").write_text(json.dumps(BIG))
    with pytest.raises(ValueError) as err:
        convert(src, tmp_path / "m.gguf")
    msg = str(err.value)
    assert msg.startswith(f"{src / 'preprocessor_config.json'}: ")
    assert "224x224 px" in msg and "32x32 px" in msg and "does not interpolate positions" in msg
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.transformers
def test_a_matching_processor_config_is_taken(hf_model, gguf_contents, tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    cfg = BIG | {"size": {"shortest_edge": 40}, "do_center_crop": True, "resample": 3,
                 "crop_size": {"height": 32, "width": 32}, "image_mean": [0.1, 0.2, 0.3]}
    (src / "preprocessor_config.json").write_text(json.dumps(cfg))
    with caplog.at_level(logging.INFO, logger="jepa.convert"):
        out = convert(src, tmp_path / "m.gguf")
    k = gguf_contents(out).keys
    assert _pre(k) == ("shortest_edge", 40, 32)
    assert k["jepa.pre.mean"] == pytest.approx([0.1, 0.2, 0.3])
    assert [r.getMessage() for r in caplog.records] == [
        "preprocessing recipe from preprocessor_config.json (32 px)"]
    assert _serves(out).shape == (1, 64)


@pytest.mark.transformers
def test_cli_says_where_the_recipe_came_from(hf_model, tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    assert main(["--src", str(src), "--out", str(tmp_path / "m.gguf")]) == 0
    err = capsys.readouterr().err
    assert ("jepa-convert: preprocessing recipe: 32 px from config.json's image_size, the family's mean, std "
            "and interpolation (no preprocessor_config.json)\n") in err
    (src / "preprocessor_config.json").write_text(json.dumps(BIG))
    assert main(["--src", str(src), "--out", str(tmp_path / "n.gguf")]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"jepa-convert: error: {src / 'preprocessor_config.json'}: ")
    assert "224x224 px" in err and "32x32 px" in err
    assert not (tmp_path / "n.gguf").exists()


@pytest.mark.transformers
def test_no_family_writes_a_contradicting_file(hf_model, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The converter's last check before writing, whatever a family's preprocess() returns."""
    from jepa.convert.hf_vit import HFViTModel

    src, _ = hf_model("vit", num_hidden_layers=1)
    monkeypatch.setattr(HFViTModel, "preprocess", lambda self: HF_VIT_RECIPE)  # 224 px for a 32 px model
    with pytest.raises(ValueError, match=r"224x224 px .* 32x32 px"):
        convert(src, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


# -- timm (LeJEPA) ------------------------------------------------------------------------------


@pytest.mark.transformers
def test_timm_recipe_from_the_position_table(hf_model, timm_export, gguf_contents, tmp_path: Path) -> None:
    hf_dir, _ = hf_model("vit", num_hidden_layers=1, num_attention_heads=2)
    (tmp_path / "timm").mkdir()
    path = timm_export(hf_dir, tmp_path / "timm" / "model.safetensors")
    out = convert(path.parent, tmp_path / "m.gguf", n_head=2)
    k = gguf_contents(out).keys
    assert _pre(k) == ("shortest_edge", 36, 32)
    assert (k["jepa.pre.resample"], k["jepa.pre.mean"]) == ("bicubic", pytest.approx([0.485, 0.456, 0.406]))
    assert _serves(out).shape == (1, 64)
    (path.parent / "preprocessor_config.json").write_text(json.dumps(BIG))
    with pytest.raises(ValueError, match=r"preprocessor_config\.json: .*224x224 px.*32x32 px"):
        convert(path.parent, tmp_path / "n.gguf", n_head=2)
    assert not (tmp_path / "n.gguf").exists()


# -- V-JEPA 2 (HF): RoPE takes any multiple of the patch size -----------------------------------


@pytest.mark.transformers
def test_vjepa2_processor_config(gguf_contents, tmp_path: Path) -> None:
    from test_vjepa2_convert import build_model

    src, _ = build_model(tmp_path / "hf", num_hidden_layers=1, pred_num_hidden_layers=1)  # crop_size 32
    video = {"do_resize": True, "size": {"shortest_edge": 54}, "do_center_crop": True,
             "crop_size": {"height": 48, "width": 48}, "image_mean": [0.485, 0.456, 0.406],
             "image_std": [0.229, 0.224, 0.225], "resample": 2}
    (src / "video_preprocessor_config.json").write_text(json.dumps(video))
    k = gguf_contents(convert(src, tmp_path / "m.gguf")).keys
    assert (k["jepa.enc.img_size"], k["jepa.pre.resize_short"], k["jepa.pre.crop"]) == (32, 54, 48)
    (src / "video_preprocessor_config.json").write_text(json.dumps(video | {"crop_size": 40}))
    with pytest.raises(ValueError) as err:
        convert(src, tmp_path / "n.gguf")
    msg = str(err.value)
    assert msg.startswith(f"{src / 'video_preprocessor_config.json'}: ") and "40x40 px" in msg
    assert "patch size 16" in msg
    assert not (tmp_path / "n.gguf").exists()
