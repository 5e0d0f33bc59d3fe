"""Converting timm-layout ViT safetensors (the LeJEPA release layout), re-exported from a tiny HF ViT."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from jepa.convert import convert

pytestmark = pytest.mark.transformers


def _timm(hf_model, timm_export, tmp_path: Path, **config) -> tuple[Path, dict[str, np.ndarray]]:
    hf_dir, _ = hf_model("vit", **config)
    out_dir = tmp_path / "timm"
    out_dir.mkdir()
    path = timm_export(hf_dir, out_dir / "model.safetensors")
    with safe_open(str(path), framework="np") as f:
        return path, {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a Mapping


def test_timm_layout(hf_model, timm_export, gguf_contents, tmp_path: Path) -> None:
    path, sd = _timm(hf_model, timm_export, tmp_path, hidden_size=96, num_attention_heads=2)
    cfg = {"architecture": "vit_tiny_patch16_224", "model_args": {"num_heads": 2}}
    (path.parent / "config.json").write_text(json.dumps(cfg))
    g = gguf_contents(convert(path.parent, tmp_path / "m.gguf"))  # the directory: auto-detected
    k = g.keys
    assert (k["jepa.family"], k["jepa.enc.qkv_fused"], k["jepa.enc.cls_token"]) == ("levjepa", True, True)
    assert (k["jepa.enc.embed_dim"], k["jepa.enc.n_head"], k["jepa.enc.n_layer"]) == (96, 2, 2)
    assert (k["jepa.enc.img_size"], k["jepa.enc.patch_size"], k["jepa.enc.ffn_dim"]) == (32, 16, 128)
    assert k["jepa.enc.ln_eps"] == pytest.approx(1e-6)
    # timm's ImageNet recipe at the position table's size (crop_pct 0.875: short side 36 for 32).
    assert (k["jepa.pre.resize_short"], k["jepa.pre.crop"], k["jepa.pre.resample"]) == (36, 32, "bicubic")
    assert k["jepa.pre.mean"] == pytest.approx([0.485, 0.456, 0.406])
    assert g.shapes["enc.blk.1.attn_qkv.weight"] == (3 * 96, 96)
    assert g.shapes["enc.pos_embed"] == (5, 96)
    np.testing.assert_array_equal(g.arrays["enc.blk.1.attn_qkv.bias"], sd["backbone.blocks.1.attn.qkv.bias"])
    np.testing.assert_array_equal(g.arrays["enc.patch_embed.weight"],
                                  sd["backbone.patch_embed.proj.weight"].reshape(96, -1))


@pytest.mark.parametrize(("flag", "width", "expected"), [(None, 64, None), (4, 64, 4), (None, 192, 3)])
def test_head_count(hf_model, timm_export, gguf_contents, tmp_path: Path,
                    flag: int | None, width: int, expected: int | None) -> None:
    path, _ = _timm(hf_model, timm_export, tmp_path, hidden_size=width, num_attention_heads=4,
                    num_hidden_layers=1)
    if expected is None:
        with pytest.raises(ValueError, match=r"unsupported embed_dim=64 .*--n-head"):
            convert(path, tmp_path / "m.gguf", n_head=flag)
    else:
        g = gguf_contents(convert(path, tmp_path / "m.gguf", n_head=flag))
        assert g.keys["jepa.enc.n_head"] == expected


def test_layer_scale_registers_no_prefix(hf_model, timm_export, gguf_contents, tmp_path: Path) -> None:
    path, sd = _timm(hf_model, timm_export, tmp_path, num_hidden_layers=1)
    rng = np.random.default_rng(0)
    sd = {k.removeprefix("backbone."): v for k, v in sd.items()}
    sd["reg_token"] = rng.standard_normal((1, 4, 64)).astype(np.float32)
    sd["pos_embed"] = sd["pos_embed"][:, 1:]  # no_embed_class: prefix tokens carry no position
    sd["blocks.0.ls1.gamma"] = rng.standard_normal(64).astype(np.float32)
    sd["blocks.0.ls2.gamma"] = rng.standard_normal(64).astype(np.float32)
    save_file(sd, str(path))
    g = gguf_contents(convert(path, tmp_path / "m.gguf", n_head=4))
    assert (g.keys["jepa.enc.n_registers"], g.keys["jepa.enc.layer_scale"]) == (4, True)
    assert g.shapes["enc.reg_tokens"] == (4, 64)
    assert g.shapes["enc.pos_embed"] == (4, 64)
    np.testing.assert_array_equal(g.arrays["enc.blk.0.ls2.weight"], sd["blocks.0.ls2.gamma"])


def test_bf16_source(hf_model, timm_export, gguf_contents, tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file as save_torch

    path, sd = _timm(hf_model, timm_export, tmp_path, num_hidden_layers=1)
    save_torch({k: torch.from_numpy(v).bfloat16() for k, v in sd.items()}, str(path))
    g = gguf_contents(convert(path, tmp_path / "m.gguf", n_head=4))
    want = torch.from_numpy(sd["backbone.blocks.0.mlp.fc1.weight"]).bfloat16().float().numpy()
    np.testing.assert_array_equal(g.arrays["enc.blk.0.ffn_up.weight"], want)


@pytest.mark.parametrize("extra", ["head.weight", "fc_norm.weight", "blocks.0.attn.q_norm.weight"])
def test_refuses_what_is_not_the_encoder(hf_model, timm_export, tmp_path: Path, extra: str) -> None:
    path, sd = _timm(hf_model, timm_export, tmp_path, num_hidden_layers=1)
    save_file(sd | {"backbone." + extra: np.ones(64, np.float32)}, str(path))
    unmapped = r"unmapped source tensor\(s\): backbone\.blocks"
    match = unmapped if extra.startswith("blocks") else "unsupported head="
    with pytest.raises(ValueError, match=match):
        convert(path, tmp_path / "m.gguf", n_head=4)


def test_missing_block_tensor(hf_model, timm_export, tmp_path: Path) -> None:
    path, sd = _timm(hf_model, timm_export, tmp_path, num_hidden_layers=1)
    del sd["backbone.blocks.0.attn.proj.weight"]
    save_file(sd, str(path))
    with pytest.raises(ValueError, match=r"missing source tensor 'blocks\.0\.attn\.proj\.weight'"):
        convert(path, tmp_path / "m.gguf", n_head=4)
