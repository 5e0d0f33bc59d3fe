"""jepa-convert for V-JEPA 2: the three source layouts (HF VJEPA2Model, HF VJEPA2ForVideoClassification,
Meta .pt encoders), the file they write (keys, shapes, the f16 rule, labels, recipe), refusals, and the
Meta layout against transformers (the same network re-exported under Meta's names) and against the
shared bundle computed by Meta's own code (../shared/reference/vjepa2_ac)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_vjepa2_parity import BASE, assert_close, build_vjepa2, clip

import jepa
from jepa.convert import convert
from jepa.convert.cli import main as cli_main
from jepa.gguf.tensors import may_be_half

from conftest import AC_BUNDLE

REFERENCE = AC_BUNDLE
CFG: dict[str, Any] = dict(hidden_size=64, crop_size=32, frames_per_clip=4)


def assert_half_rule(dtypes: dict[str, str], some: set[str]) -> None:
    """Exactly the declaration's 16-bit matrices are F16 (these among them); the rest is F32."""
    half = {n for n, t in dtypes.items() if t == "F16"}
    assert half == {n for n in dtypes if may_be_half(n)} and some <= half
    assert set(dtypes.values()) == {"F16", "F32"}
    assert {"enc.patch_embed.weight", "enc.norm.weight", "enc.blk.0.attn_q.bias"}.isdisjoint(half)


def build_model(out_dir: Path, seed: int = 0, **config: Any) -> tuple[Path, Any]:
    """save_pretrained a tiny random VJEPA2Model (encoder + predictor, no head)."""
    import torch
    from transformers import VJEPA2Config, VJEPA2Model

    torch.manual_seed(seed)
    model = VJEPA2Model(VJEPA2Config(**(BASE | CFG | config)))
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.normal_(1.0, 0.2)
                mod.bias.normal_(0.0, 0.2)
    model.eval()
    model.save_pretrained(out_dir)
    return out_dir, model


def export_meta(hf_dir: Path, out: Path, *, key: str = "target_encoder", pos_embed: bool = True) -> Path:
    """Re-export a saved HF VJEPA2Model's encoder under Meta's names (fused qkv, module.backbone.)."""
    import torch
    from safetensors import safe_open

    with safe_open(str(hf_dir / "model.safetensors"), framework="pt") as f:
        hf = {k.removeprefix("vjepa2."): f.get_tensor(k) for k in f.keys()}  # noqa: SIM118
    enc = {
        "patch_embed.proj.weight": hf["encoder.embeddings.patch_embeddings.proj.weight"],
        "patch_embed.proj.bias": hf["encoder.embeddings.patch_embeddings.proj.bias"],
        "norm.weight": hf["encoder.layernorm.weight"],
        "norm.bias": hf["encoder.layernorm.bias"],
    }
    i = 0
    while f"encoder.layer.{i}.norm1.weight" in hf:
        s, d = f"encoder.layer.{i}.", f"blocks.{i}."
        for p in ("weight", "bias"):
            enc[f"{d}norm1.{p}"] = hf[f"{s}norm1.{p}"]
            enc[f"{d}norm2.{p}"] = hf[f"{s}norm2.{p}"]
            enc[f"{d}attn.qkv.{p}"] = torch.cat(
                [hf[f"{s}attention.{n}.{p}"] for n in ("query", "key", "value")]
            )
            enc[f"{d}attn.proj.{p}"] = hf[f"{s}attention.proj.{p}"]
            enc[f"{d}mlp.fc1.{p}"] = hf[f"{s}mlp.fc1.{p}"]
            enc[f"{d}mlp.fc2.{p}"] = hf[f"{s}mlp.fc2.{p}"]
        i += 1
    if pos_embed:  # the releases carry one; their RoPE encoders never read it
        enc["pos_embed"] = torch.zeros(1, 8, enc["norm.weight"].shape[0])
    state = {f"module.backbone.{k}": v.clone() for k, v in enc.items()}
    torch.save({key: state, "predictor": {"module.backbone.mask_tokens.0": torch.zeros(1)}, "epoch": 3}, out)
    return out


@pytest.mark.transformers
def test_vjepa2model_file(tmp_path: Path, gguf_contents) -> None:
    src, _ = build_model(tmp_path / "hf")
    g = gguf_contents(convert(src, tmp_path / "m.gguf", ftype="f16"))
    k = g.keys
    assert (k["jepa.family"], k["jepa.modality"], k["jepa.enc.pos_type"]) == ("vjepa2", "video", "rope3d")
    assert (k["jepa.enc.rope_freq_layout"], k["jepa.enc.tubelet_size"], k["jepa.enc.n_frames"]) == (
        "tiled",
        2,
        4,
    )
    assert (k["jepa.pred.kind"], k["jepa.pred.n_mask_tokens"], k["jepa.pred.grid_size"]) == ("masked", 10, 2)
    assert k["jepa.head.kind"] == "none"
    assert "enc.pos_embed" not in g.shapes
    assert g.shapes["enc.patch_embed.weight"] == (64, 3 * 2 * 16 * 16)  # the 5-D Conv3d, flattened
    assert g.shapes["pred.mask_tokens"] == (10, 64)
    # The dtype rule: matrices f16; the patch embedding, norms, biases and mask tokens f32.
    assert_half_rule(g.dtypes, {"enc.blk.0.attn_q.weight", "pred.embed.weight", "pred.proj.weight",
                                "pred.blk.1.ffn_up.weight"})
    # Recipe without a processor config: short side 256/224 x crop, centre crop, bilinear, ImageNet.
    assert (k["jepa.pre.resize_short"], k["jepa.pre.crop"], k["jepa.pre.resample"]) == (36, 32, "bilinear")
    info = jepa.Model(tmp_path / "m.gguf").info
    assert info.pred_kind == jepa.PredictorKind.MASKED and info.head_kind == jepa.HeadKind.NONE
    assert info.pred_grid_size == 2


@pytest.mark.transformers
def test_vjepa2model_encoder_parity(tmp_path: Path) -> None:
    src, model = build_model(tmp_path / "hf", hidden_size=96, num_attention_heads=3)
    x = clip(CFG)
    got = jepa.Model(convert(src, tmp_path / "m.gguf")).context(threads=2).encode(x)
    import torch

    with torch.no_grad():
        ref = model(pixel_values_videos=torch.from_numpy(x).permute(0, 2, 1, 3, 4), skip_predictor=True)
    assert_close("VJEPA2Model encoder f32", got, ref.last_hidden_state.numpy())


@pytest.mark.transformers
def test_classifier_labels_head_and_recipe(tmp_path: Path, gguf_contents) -> None:
    names = ["Pushing something", "Dropping something", "Holding", "Waving", "Tearing", "Opening", "Closing"]
    src, _ = build_vjepa2(tmp_path / "hf", **CFG, id2label=dict(enumerate(names)))
    (src / "video_preprocessor_config.json").write_text(
        json.dumps(
            {
                "crop_size": {"height": 32, "width": 32},
                "do_center_crop": True,
                "do_normalize": True,
                "do_rescale": True,
                "do_resize": True,
                "image_mean": [0.485, 0.456, 0.406],
                "image_std": [0.229, 0.224, 0.225],
                "resample": 2,
                "rescale_factor": 1 / 255,
                "size": {"shortest_edge": 40},
                "video_processor_type": "VJEPA2VideoProcessor",
            }
        )
    )
    g = gguf_contents(convert(src, tmp_path / "c.gguf", ftype="f16"))
    k = g.keys
    assert (k["jepa.head.kind"], k["jepa.head.n_classes"], k["jepa.head.n_pool_layers"]) == (
        "attentive_pool",
        7,
        2,
    )
    assert list(k["jepa.head.labels"]) == names
    assert k["jepa.pre.resize_short"] == 40 and k["jepa.pre.crop"] == 32
    assert g.shapes["head.query"] == (1, 64) and g.dtypes["head.query"] == "F32"
    assert_half_rule(g.dtypes, {"head.cls.weight", "head.xattn.q.weight", "head.xattn.ffn_down.weight",
                                "head.blk.1.attn_out.weight"})
    m = jepa.Model(tmp_path / "c.gguf")
    assert m.labels == names and m.info.n_classes == 7 and m.has_head and m.has_predictor


@pytest.mark.transformers
def test_unmapped_tensor_is_an_error(tmp_path: Path) -> None:
    from safetensors.numpy import load_file, save_file

    src, _ = build_model(tmp_path / "hf")
    tensors = load_file(str(src / "model.safetensors"))
    tensors["encoder.extra.weight"] = np.zeros((2, 2), np.float32)
    save_file(tensors, str(src / "model.safetensors"))
    with pytest.raises(ValueError, match=r"unmapped source tensor\(s\): encoder\.extra\.weight"):
        convert(src, tmp_path / "m.gguf")


@pytest.mark.transformers
@pytest.mark.parametrize("key", ["target_encoder", "encoder"])
def test_meta_pt_encoder_parity(key: str, tmp_path: Path, gguf_contents) -> None:
    src, model = build_model(tmp_path / "hf", hidden_size=96, num_attention_heads=3)
    pt = export_meta(src, tmp_path / "vitx.pt", key=key)
    with pytest.raises(ValueError, match="--n-head"):  # width 96 is no standard size
        convert(pt, tmp_path / "m.gguf")
    (tmp_path / "config.json").write_text(json.dumps({"num_heads": 3, "img_size": 32, "num_frames": 4}))
    path = convert(pt, tmp_path / "m.gguf")  # auto-detected as a Meta V-JEPA 2 encoder
    g = gguf_contents(path)
    assert (
        g.keys["jepa.enc.qkv_fused"] and g.keys["jepa.enc.img_size"] == 32 and "enc.pos_embed" not in g.shapes
    )
    assert "pred.embed.weight" not in g.shapes  # the encoder only
    x = clip(CFG)
    got = jepa.Model(path).context(threads=2).encode(x)
    import torch

    with torch.no_grad():
        ref = model(pixel_values_videos=torch.from_numpy(x).permute(0, 2, 1, 3, 4), skip_predictor=True)
    assert_close(f"Meta .pt ({key}) encoder f32", got, ref.last_hidden_state.numpy())


@pytest.mark.torch
def test_meta_pt_refusals(tmp_path: Path) -> None:
    import torch

    pt = tmp_path / "x.pt"
    torch.save({"target_encoder": {"module.backbone.blocks.0.norm1.weight": torch.zeros(4)}}, pt)
    with pytest.raises(ValueError, match="recognise"):  # no patch embedding: nothing claims it
        convert(pt, tmp_path / "m.gguf")
    with pytest.raises(ValueError, match=r"missing source tensor 'patch_embed\.proj\.weight'"):
        convert(pt, tmp_path / "m.gguf", family="vjepa2", n_head=1)
    state = {
        "patch_embed.proj.weight": torch.zeros(8, 3, 2, 16, 16),
        "blocks.0.norm1.weight": torch.zeros(8),
        "blocks.0.mlp.fc3.weight": torch.zeros(8, 8),
    }
    torch.save({"encoder": state}, pt)
    with pytest.raises(ValueError, match="SwiGLU"):
        convert(pt, tmp_path / "m.gguf", family="vjepa2", n_head=1)


@pytest.mark.torch
def test_meta_reference_bundle(tmp_path: Path) -> None:
    """Meta's own encoder outputs (enc_raw: each frame duplicated into one tubelet, as the AC pipeline
    encodes; enc_video4: a 4-frame clip, so the time axis rotates) from checkpoint.pt's encoder."""
    from jepa.convert.vjepa2 import VJEPA2

    pt = REFERENCE / "checkpoint.pt"
    assert not VJEPA2.detect(pt)  # an action-conditioned file: family vjepa2_ac's, not ours
    out = tmp_path / "enc.gguf"
    assert (
        cli_main(
            ["--src", str(pt), "--out", str(out), "--family", "vjepa2", "--n-head", "2", "--img-size", "96"]
        )
        == 0
    )
    m = jepa.Model(out)
    assert m.info.img_size == 96 and not m.has_predictor
    ctx = m.context(threads=2)
    clip_in = np.load(REFERENCE / "input_clip.npy")  # [1, 3, 2, 96, 96]

    # enc_raw: frames go in as separate one-frame items; the engine fills the tubelet with the frame.
    frames = np.ascontiguousarray(clip_in[0].transpose(1, 0, 2, 3)[:, :, None])  # [2, 3, 1, 96, 96]
    got = ctx.encode(frames).reshape(1, -1, 128)
    assert_close("Meta reference enc_raw", got, np.load(REFERENCE / "enc_raw.npy"))
    video4 = np.ascontiguousarray(clip_in[:, :, [0, 1, 1, 0]])
    assert_close("Meta reference enc_video4", ctx.encode(video4), np.load(REFERENCE / "enc_video4.npy"))
