"""jepa-convert --family vjepa2_ac on the reference checkpoint: keys, the tensor table, strict
mapping, the flags, and the converted file alone reproducing Meta's goldens through the numpy
reference (encoder, predictor, rollout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_doc import check_file_against_doc

from jepa.convert import convert
from jepa.convert.cli import main
from jepa.planning import ac_rollout

from conftest import AC_BUNDLE
from numpy_reference import ac_from_gguf, assert_agrees, assert_rel_close, read_gguf

AC = AC_BUNDLE
CKPT = AC / "checkpoint.pt"
pytestmark = pytest.mark.torch
HW = 36
Converted = tuple[dict[str, Any], dict[str, np.ndarray]]

PRED = {"predictor_embed": "pred.embed", "action_encoder": "pred.action_embed",
        "state_encoder": "pred.state_embed", "predictor_norm": "pred.norm", "predictor_proj": "pred.proj"}
BLOCK = {"norm1": "ln1", "attn.qkv": "attn_qkv", "attn.proj": "attn_out", "norm2": "ln2", "mlp.fc1": "ffn_up",
         "mlp.fc2": "ffn_down"}


def g(name: str) -> np.ndarray:
    return np.load(AC / f"{name}.npy")


def _clean(sd: dict[str, Any]) -> dict[str, np.ndarray]:
    return {k.removeprefix("module.backbone."): v.numpy() for k, v in sd.items()}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    out = tmp_path_factory.mktemp("ac") / "ac.gguf"
    assert main(["--family", "vjepa2_ac", "--src", str(CKPT), "--img-size", "96", "--out", str(out)]) == 0
    return read_gguf(out)


@pytest.fixture(scope="module")
def ckpt() -> dict[str, Any]:
    import torch

    return torch.load(CKPT, weights_only=True)


def test_keys(converted: Converted) -> None:
    keys, _ = converted
    assert (keys["jepa.family"], keys["jepa.modality"], keys["jepa.head.kind"]) == ("vjepa2", "video", "none")
    names = ("embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size",
             "pos_type", "cls_token", "qkv_fused", "rope_freq_layout")
    enc = {k: keys[f"jepa.enc.{k}"] for k in names}
    assert enc == {"embed_dim": 128, "n_layer": 2, "n_head": 2, "ffn_dim": 256, "patch_size": 16,
                   "tubelet_size": 2, "img_size": 96, "pos_type": "rope3d", "cls_token": False,
                   "qkv_fused": True, "rope_freq_layout": "tiled"}
    pred = {k[len("jepa.pred."):]: v for k, v in keys.items() if k.startswith("jepa.pred.")}
    assert pred == {"kind": "ac", "embed_dim": 128, "out_dim": 128, "n_layer": 2, "n_head": 2,
                    "head_dim": 64, "ffn_dim": 512, "action_dim": 7, "state_dim": 7, "n_cond_tokens": 2,
                    "cond_order": "action,state", "normalize_reps": True,
                    "norm_reps_eps": pytest.approx(1e-5), "frame_causal": True, "n_frames": 32,
                    "grid_size": 6, "ln_eps": pytest.approx(1e-6), "act": "gelu_erf", "qkv_bias": True,
                    "rope_freq_layout": "tiled", "rope_theta": 10000.0}
    pre = (keys["jepa.pre.resize_mode"], keys["jepa.pre.crop"], keys["jepa.pre.resample"])
    assert pre == ("squash", 96, "bilinear")


def test_every_source_tensor_maps(converted: Converted, ckpt: dict[str, Any]) -> None:
    _, t = converted
    pred, enc = _clean(ckpt["predictor"]), _clean(ckpt["encoder"])
    want: dict[str, np.ndarray] = {}
    for src, dst in PRED.items():
        for p in ("weight", "bias"):
            want[f"{dst}.{p}"] = pred.pop(f"{src}.{p}")
    for i in range(2):
        for src, dst in BLOCK.items():
            for p in ("weight", "bias"):
                want[f"pred.blk.{i}.{dst}.{p}"] = pred.pop(f"predictor_blocks.{i}.{src}.{p}")
                want[f"enc.blk.{i}.{dst}.{p}"] = enc.pop(f"blocks.{i}.{src}.{p}")
    assert set(pred) == {"extrinsics_encoder.weight", "extrinsics_encoder.bias"}  # unused upstream: skipped
    w = enc.pop("patch_embed.proj.weight")
    want["enc.patch_embed.weight"] = w.reshape(len(w), -1)  # [D, C, t, P, P] -> [D, C*t*P*P]
    want["enc.patch_embed.bias"] = enc.pop("patch_embed.proj.bias")
    want["enc.norm.weight"], want["enc.norm.bias"] = enc.pop("norm.weight"), enc.pop("norm.bias")
    assert enc == {}
    assert set(t) == set(want)
    for name, ref in want.items():
        np.testing.assert_array_equal(t[name], ref, err_msg=name)


def test_the_file_alone_reproduces_the_goldens(converted: Converted) -> None:
    wm = ac_from_gguf(*converted)
    assert wm.encoder is not None
    clip = g("input_clip")
    z = wm.encode_frames(clip[0].transpose(1, 0, 2, 3))
    assert_agrees(z[:1], g("z_ctx"), "z_ctx")
    assert_agrees(z[1:], g("z_goal"), "z_goal")
    assert_agrees(wm.encoder(clip[:, :, [0, 1, 1, 0]]), g("enc_video4"), "enc_video4")
    en, acts, states = g("enc_norm"), g("ctx_actions"), g("ctx_states")
    taps: dict[str, np.ndarray] = {}
    assert_agrees(wm.predictor(en, acts[:, :2], states[:, :2], taps), g("pred_ctx2"), "pred_ctx2")
    assert_agrees(taps["block0_in"], g("pred_ctx2_block0_in"), "block0_in")
    assert_agrees(taps["block0_out"], g("pred_ctx2_block0_out"), "block0_out")
    z3 = np.concatenate([en[:, :HW], en[:, HW:], en[:, :HW]], axis=1)
    assert_agrees(wm.predict(z3, acts, states), g("pred_ctx3"), "pred_ctx3")
    out = ac_rollout(wm.predict, g("z_ctx")[0], g("states")[0, 0], g("rollout_actions"), g("z_goal")[0],
                     return_latents=True)
    assert_agrees(out["latents"], g("rollout_latents"), "rollout_latents")
    assert_rel_close(out["energies"], g("rollout_energy"), "rollout_energy")
    np.testing.assert_array_equal(out["states"], g("rollout_poses"))


def test_the_file_is_what_gguf_md_documents(converted: Converted) -> None:
    scopes = {"every file", "image and video files", "rope3d encoder", "every predictor", "ac predictor"}
    check_file_against_doc(*converted, scopes, "Action-conditioned predictor", ("pred.",))


def test_defaults_and_flags(tmp_path: Path) -> None:
    keys, t = read_gguf(convert(CKPT, tmp_path / "d.gguf"))  # auto-detected as vjepa2_ac
    assert keys["jepa.pred.kind"] == "ac"
    assert (keys["jepa.enc.img_size"], keys["jepa.pred.grid_size"]) == (256, 16)  # the released size
    keys, _ = read_gguf(convert(CKPT, tmp_path / "h.gguf", family="vjepa2_ac", img_size=96, head_dim=32))
    assert (keys["jepa.enc.n_head"], keys["jepa.pred.n_head"], keys["jepa.pred.head_dim"]) == (4, 4, 32)
    with pytest.raises(ValueError, match="unsupported head_dim=48"):
        convert(CKPT, tmp_path / "x.gguf", family="vjepa2_ac", head_dim=48)
    with pytest.raises(ValueError, match="unsupported n_head=3"):
        convert(CKPT, tmp_path / "y.gguf", family="vjepa2_ac", n_head=3)
    keys, t = read_gguf(convert(CKPT, tmp_path / "f.gguf", family="vjepa2_ac", img_size=96, ftype="f16"))
    assert t["pred.blk.0.attn_qkv.weight"].dtype == np.float16 and t["pred.proj.weight"].dtype == np.float16
    assert t["pred.action_embed.weight"].dtype == np.float32 and t["pred.norm.weight"].dtype == np.float32


@pytest.mark.parametrize("part", ["predictor", "encoder"])
def test_forged_tensor_is_named(tmp_path: Path, ckpt: dict[str, Any], part: str) -> None:
    import torch

    forged = {k: dict(v) for k, v in ckpt.items()}
    forged[part]["module.backbone.forged_tensor.weight"] = torch.zeros(2)
    torch.save(forged, tmp_path / "forged.pt")
    with pytest.raises(ValueError, match=r"unmapped source tensor\(s\): .*forged_tensor\.weight"):
        convert(tmp_path / "forged.pt", tmp_path / "x.gguf", family="vjepa2_ac", img_size=96)
    assert not (tmp_path / "x.gguf").exists()


def test_an_encoder_only_checkpoint_is_refused(tmp_path: Path, ckpt: dict[str, Any]) -> None:
    import torch

    torch.save({"encoder": ckpt["encoder"]}, tmp_path / "enc.pt")
    with pytest.raises(ValueError, match="no V-JEPA 2-AC predictor"):
        convert(tmp_path / "enc.pt", tmp_path / "x.gguf", family="vjepa2_ac")
