"""jepa-convert on V-JEPA 2.1 .pt checkpoints (the reference bundle's two kinds): what the file holds,
that it is what docs/gguf.md documents, the flags and defaults, and forged checkpoints refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_doc import check_file_against_doc

import jepa
from jepa.convert import convert

from conftest import REFERENCE_DIR
from numpy_reference import read_gguf

BUNDLE = REFERENCE_DIR / "vjepa2_1"
pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    out = tmp_path_factory.mktemp("v21") / "bl.gguf"
    return read_gguf(convert(BUNDLE / "checkpoint_bl.pt", out, n_head=1, pred_n_head=1, img_size=64))


def test_the_file(converted: tuple[dict[str, Any], dict[str, np.ndarray]]) -> None:
    keys, t = converted
    assert keys["jepa.family"] == "vjepa2_1" and keys["jepa.modality"] == "video"
    assert (keys["jepa.enc.rope_freq_layout"], keys["jepa.enc.rope_interpolate"]) == ("interleaved", True)
    assert keys["jepa.enc.rope_ref_grid"] == 16  # upstream: 256 px / patch 16
    assert list(keys["jepa.enc.hier_layers"]) == [2, 5, 8, 11]
    assert keys["jepa.enc.modality_embed"] and keys["jepa.enc.image_patch_embed"]
    assert t["enc.patch_embed.weight"].shape == (64, 3 * 2 * 16 * 16)
    assert t["enc.patch_embed_img.weight"].shape == (64, 3 * 16 * 16)
    assert "enc.norm.weight" not in t and "enc.hier_norm.3.weight" in t
    # The predictor: B/L's Linear input, 8 mask tokens, modality vectors, the context projection.
    assert (keys["jepa.pred.kind"], keys["jepa.pred.rope_freq_layout"], keys["jepa.pred.out_dim"]) == (
        "masked", "interleaved", 96)
    assert keys["jepa.pred.modality_embed"] and keys["jepa.pred.proj_context"]
    assert "jepa.pred.in_levels" not in keys  # one level: the key is left out, as in V-JEPA 2 files
    assert (keys["jepa.pred.n_mask_tokens"], keys["jepa.pred.grid_size"]) == (8, 4)
    assert t["pred.embed.weight"].shape == (32, 64) and t["pred.mask_tokens"].shape == (8, 32)
    assert t["pred.proj.weight"].shape == t["pred.proj_context.weight"].shape == (96, 32)
    assert t["pred.mod_embed_img"].shape == (32,)
    assert (keys["jepa.pre.crop"], keys["jepa.pre.resize_short"]) == (64, 73)  # V-JEPA 2's recipe at 64 px


def test_the_file_is_what_gguf_md_documents(converted: tuple[dict[str, Any], dict[str, np.ndarray]]) -> None:
    scopes = {"every file", "image and video files", "rope3d encoder", "family vjepa2_1", "every predictor",
              "masked predictor", "masked predictor / ac predictor"}
    check_file_against_doc(*converted, scopes, "Encoder", ("enc.",))
    check_file_against_doc(*converted, scopes, "Masked predictor", ("pred.",))


def test_auto_detection_the_heads_by_width_and_f16(tmp_path: Path) -> None:
    """Without config.json or --n-head the heads come from the width's released model; the bundle's
    widths are none, so the converter says what to pass, for the encoder and for the predictor."""
    with pytest.raises(ValueError, match="embed_dim=32 without a head count: pass --n-head"):
        convert(BUNDLE / "checkpoint_gg.pt", tmp_path / "x.gguf")
    with pytest.raises(ValueError, match="without a head count: pass --pred-n-head"):
        convert(BUNDLE / "checkpoint_gg.pt", tmp_path / "x.gguf", n_head=2)
    out = convert(BUNDLE / "checkpoint_gg.pt", tmp_path / "gg.gguf", n_head=2, pred_n_head=2, ftype="f16")
    keys, t = read_gguf(out)
    assert keys["jepa.family"] == "vjepa2_1"
    assert keys["jepa.enc.n_head"] == 2 and keys["jepa.pred.n_head"] == 2
    assert keys["jepa.pred.in_levels"] == 4 and keys["jepa.pred.out_dim"] == 128  # g/G: the four levels in
    assert t["pred.embed.0.weight"].shape == (32, 128) and t["pred.embed.2.weight"].shape == (32, 32)
    assert t["pred.blk.0.attn_qkv.weight"].dtype == np.float16
    assert keys["jepa.enc.img_size"] == 384 and keys["jepa.enc.n_frames"] == 64  # the released clip
    assert t["enc.blk.0.attn_qkv.weight"].dtype == np.float16
    assert t["enc.patch_embed_img.weight"].dtype == np.float32 and t["enc.mod_embed_img"].dtype == np.float32
    assert jepa.Model(str(tmp_path / "gg.gguf")).info.family == "vjepa2_1"


def _forged(tmp_path: Path, edit: Any, part: str = "ema_encoder") -> Path:
    import torch

    ckpt = torch.load(BUNDLE / "checkpoint_bl.pt", weights_only=True)
    edit(ckpt[part])
    out = tmp_path / "forged.pt"
    torch.save(ckpt, out)
    return out


def _drop(*names: str) -> Any:
    def edit(sd: dict[str, Any]) -> None:
        for n in names:
            del sd["module.backbone." + n]
    return edit


def _set(name: str, shape: tuple[int, ...]) -> Any:
    def edit(sd: dict[str, Any]) -> None:
        import torch

        sd["module.backbone." + name] = torch.zeros(shape)
    return edit


@pytest.mark.parametrize(("edit", "message"), [
    (_drop("norms_block.3.weight", "norms_block.3.bias"), "norms_block: 3 levels, V-JEPA 2.1 has 4"),
    (_set("patch_embed_img.proj.weight", (64, 3, 2, 16, 16)),
     r"patch_embed_img.proj.weight: got \[64, 3, 2, 16, 16\]"),
    (_set("img_mod_embed", (1, 2, 64)), r"img_mod_embed: got \[1, 2, 64\], expected \[1, 1, 64\]"),
    (_set("blocks.0.attn.extra", (3,)), "blocks.0.attn.extra"),  # an unmapped tensor is never dropped
    (_drop(*[f"blocks.11.{n}.{w}" for n in ("norm1", "attn.qkv", "attn.proj", "norm2", "mlp.fc1", "mlp.fc2")
             for w in ("weight", "bias")]), "unsupported depth 11"),
])
def test_forged_checkpoints_are_refused_by_name(tmp_path: Path, edit: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        convert(_forged(tmp_path, edit), tmp_path / "x.gguf", family="vjepa2_1", n_head=1, pred_n_head=1)


@pytest.mark.parametrize(("edit", "message"), [
    (_set("predictor_embed.weight", (32, 128)),
     r"predictor_embed.weight: got \[32, 128\], expected \[32, 64\]"),
    (_set("mask_tokens.3", (1, 2, 32)), r"mask_tokens.3: got \[1, 2, 32\]"),
    (_drop("predictor_proj_context.weight", "predictor_proj_context.bias"), "predictor_proj_context.weight"),
    (_set("predictor_blocks.0.extra", (3,)), "predictor_blocks.0.extra"),
])
def test_forged_predictors_are_refused_by_name(tmp_path: Path, edit: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        convert(_forged(tmp_path, edit, "predictor"), tmp_path / "x.gguf", n_head=1, pred_n_head=1)


def test_a_file_without_an_encoder(tmp_path: Path) -> None:
    import torch

    torch.save({"predictor": {}}, tmp_path / "p.pt")
    with pytest.raises(ValueError, match="no encoder state dict"):
        convert(tmp_path / "p.pt", tmp_path / "x.gguf", family="vjepa2_1", n_head=1, pred_n_head=1)
