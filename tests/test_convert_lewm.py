"""jepa-convert --family lewm on the reference bundle: keys, the tensor table, the two folds, strict
mapping, and the converted file alone reproducing the upstream goldens through the numpy reference."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf_doc import check_file_against_doc

from jepa.convert import convert
from jepa.convert.cli import main
from jepa.planning import lewm_cost, lewm_rollout

from conftest import LEWM_BUNDLE
from numpy_reference import assert_agrees, assert_rel_close, lewm_from_gguf, read_gguf

LEWM = LEWM_BUNDLE
pytestmark = pytest.mark.torch

# Source module -> GGUF tensor, for everything copied as is (the folds are checked on their own).
COPIED = {
    "encoder.embeddings.patch_embeddings.projection.bias": "enc.patch_embed.bias",
    "encoder.layernorm.weight": "enc.norm.weight",
    "encoder.layernorm.bias": "enc.norm.bias",
    "projector.net.3.weight": "enc.proj.2.weight",
    "projector.net.3.bias": "enc.proj.2.bias",
    "predictor.transformer.norm.weight": "pred.norm.weight",
    "predictor.transformer.norm.bias": "pred.norm.bias",
    "pred_proj.net.3.weight": "pred.proj.2.weight",
    "pred_proj.net.3.bias": "pred.proj.2.bias",
    "action_encoder.embed.2.weight": "pred.action_embed.2.weight",
    "action_encoder.embed.2.bias": "pred.action_embed.2.bias",
}
VIT_BLOCK = {"layernorm_before": "ln1", "attention.attention.query": "attn_q",
             "attention.attention.key": "attn_k", "attention.attention.value": "attn_v",
             "attention.output.dense": "attn_out", "layernorm_after": "ln2", "intermediate.dense": "ffn_up",
             "output.dense": "ffn_down"}
PRED_BLOCK = {"adaLN_modulation.1": "adaln", "attn.norm": "ln1", "attn.to_qkv": "attn_qkv",
              "attn.to_out.0": "attn_out", "mlp.net.0": "ln2", "mlp.net.1": "ffn_up", "mlp.net.4": "ffn_down"}
for _i in range(2):
    for _s, _d in VIT_BLOCK.items():
        for _p in ("weight", "bias"):
            COPIED[f"encoder.encoder.layer.{_i}.{_s}.{_p}"] = f"enc.blk.{_i}.{_d}.{_p}"
    for _s, _d in PRED_BLOCK.items():
        for _p in ("weight", "bias"):
            if _s != "attn.to_qkv" or _p == "weight":
                COPIED[f"predictor.transformer.layers.{_i}.{_s}.{_p}"] = f"pred.blk.{_i}.{_d}.{_p}"
RESHAPED = {"encoder.embeddings.patch_embeddings.projection.weight": "enc.patch_embed.weight",
            "encoder.embeddings.cls_token": "enc.cls_token",
            "encoder.embeddings.position_embeddings": "enc.pos_embed",
            "predictor.pos_embedding": "pred.pos_embed"}
FOLDED = {f"{m}.net.{n}" for m in ("projector", "pred_proj")
          for n in ("0.weight", "0.bias", "1.weight", "1.bias", "1.running_mean", "1.running_var")}
FOLDED |= {f"action_encoder.{n}.{p}" for n in ("patch_embed", "embed.0") for p in ("weight", "bias")}
Converted = tuple[dict[str, Any], dict[str, np.ndarray]]


def g(name: str) -> np.ndarray:
    return np.load(LEWM / f"{name}.npy")


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> Converted:
    out = tmp_path_factory.mktemp("lewm") / "lewm.gguf"
    assert main(["--family", "lewm", "--src", str(LEWM), "--out", str(out)]) == 0
    return read_gguf(out)


@pytest.fixture(scope="module")
def state() -> dict[str, Any]:
    import torch

    return torch.load(LEWM / "weights.pt", weights_only=True)


def _copy_bundle(dst: Path, sd: dict[str, Any] | None = None, **config_edits: dict[str, Any]) -> Path:
    import torch

    dst.mkdir(parents=True, exist_ok=True)
    cfg = json.loads((LEWM / "config.json").read_text())
    for section, edits in config_edits.items():
        for k, v in edits.items():
            if v is None:
                cfg[section].pop(k, None)
            else:
                cfg[section][k] = v
    (dst / "config.json").write_text(json.dumps(cfg))
    if sd is None:
        shutil.copy(LEWM / "weights.pt", dst / "weights.pt")
    else:
        torch.save(sd, dst / "weights.pt")
    return dst


def test_keys(converted: Converted) -> None:
    keys, _ = converted
    assert (keys["jepa.family"], keys["jepa.modality"], keys["jepa.head.kind"]) == ("lewm", "image", "none")
    enc = {k[len("jepa.enc."):]: v for k, v in keys.items() if k.startswith("jepa.enc.")}
    assert enc == {"embed_dim": 64, "n_layer": 2, "n_head": 2, "ffn_dim": 256, "patch_size": 14,
                   "tubelet_size": 1, "img_size": 56, "n_frames": 1, "in_chans": 3, "n_registers": 0,
                   "ln_eps": pytest.approx(1e-12), "act": "gelu_erf", "pos_type": "learned",
                   "cls_token": True, "qkv_fused": False, "layer_scale": False, "proj_act": "gelu_erf"}
    pred = {k[len("jepa.pred."):]: v for k, v in keys.items() if k.startswith("jepa.pred.")}
    assert pred == {"kind": "lewm", "embed_dim": 64, "n_layer": 2, "n_head": 4, "head_dim": 32,
                    "ffn_dim": 256, "n_frames": 3, "action_dim": 10, "frame_causal": True,
                    "ln_eps": pytest.approx(1e-5), "adaln_eps": pytest.approx(1e-6), "act": "gelu_erf",
                    "qkv_bias": False, "action_act": "silu", "proj_act": "gelu_erf"}
    pre = (keys["jepa.pre.resize_mode"], keys["jepa.pre.crop"], keys["jepa.pre.resample"])
    assert pre == ("squash", 56, "bilinear")
    assert keys["jepa.pre.mean"] == pytest.approx([0.485, 0.456, 0.406])


def test_every_source_tensor_maps(converted: Converted, state: dict[str, Any]) -> None:
    _, t = converted
    sd = {k: v.numpy() for k, v in state.items()}
    dropped = {k for k in sd if k.endswith("num_batches_tracked")}
    assert set(sd) == set(COPIED) | set(RESHAPED) | FOLDED | dropped  # the table covers the file
    for src, dst in COPIED.items():
        np.testing.assert_array_equal(t[dst], sd[src], err_msg=dst)
    for src, dst in RESHAPED.items():
        np.testing.assert_array_equal(t[dst].reshape(-1), sd[src].reshape(-1), err_msg=dst)
    assert t["enc.patch_embed.weight"].shape == (64, 3 * 14 * 14) and t["enc.pos_embed"].shape == (17, 64)
    assert "pred.blk.0.attn_qkv.bias" not in t  # to_qkv has no bias
    made = {f"{p}.0.{w}" for p in ("enc.proj", "pred.proj", "pred.action_embed") for w in ("weight", "bias")}
    assert set(t) == set(COPIED.values()) | set(RESHAPED.values()) | made
    assert all(a.dtype == np.float32 for a in t.values())


def test_batchnorm_fold_equals_the_eval_batchnorm(converted: Converted, state: dict[str, Any]) -> None:
    import torch

    _, t = converted
    x = np.random.default_rng(0).standard_normal((256, 64))
    for src, dst in (("projector", "enc.proj.0"), ("pred_proj", "pred.proj.0")):
        lin, bn = torch.nn.Linear(64, 256).double(), torch.nn.BatchNorm1d(256).double().eval()
        lin.load_state_dict({k: state[f"{src}.net.0.{k}"].double() for k in ("weight", "bias")})
        stats = ("weight", "bias", "running_mean", "running_var", "num_batches_tracked")
        bn.load_state_dict({k: state[f"{src}.net.1.{k}"] for k in stats})
        with torch.no_grad():
            want = bn(lin(torch.from_numpy(x))).numpy()
        got = x.astype(np.float32) @ t[f"{dst}.weight"].T + t[f"{dst}.bias"]  # float32 throughout
        assert np.abs(got - want).max() / np.abs(want).max() < 1e-6, dst


def test_conv1d_fold_equals_the_embedder_front(converted: Converted, state: dict[str, Any]) -> None:
    import torch

    _, t = converted
    x = np.random.default_rng(1).standard_normal((4, 7, 10))  # [B, T, A]
    conv, lin = torch.nn.Conv1d(10, 10, 1).double(), torch.nn.Linear(10, 256).double()
    conv.load_state_dict({k: state[f"action_encoder.patch_embed.{k}"].double() for k in ("weight", "bias")})
    lin.load_state_dict({k: state[f"action_encoder.embed.0.{k}"].double() for k in ("weight", "bias")})
    with torch.no_grad():
        want = lin(conv(torch.from_numpy(x).permute(0, 2, 1)).permute(0, 2, 1)).numpy()
    got = x.astype(np.float32) @ t["pred.action_embed.0.weight"].T + t["pred.action_embed.0.bias"]
    assert np.abs(got - want).max() / np.abs(want).max() < 1e-6


def test_the_file_alone_reproduces_the_goldens(converted: Converted) -> None:
    m = lewm_from_gguf(*converted)
    pixels, emb = g("pixels")[0], g("emb")[0]
    assert m.encoder is not None
    assert_agrees(m.encoder(pixels[:3]), g("enc_tokens"), "enc_tokens")
    assert_agrees(m.embed(pixels[:3]), emb, "emb")
    assert_agrees(m.embed(pixels[3:]), g("goal_emb")[0], "goal_emb")
    assert_agrees(m.action_embed(g("actions")), g("act_emb"), "act_emb")
    assert_agrees(m.predict_raw(g("emb"), g("actions")), g("pred_raw"), "pred_raw")
    assert_agrees(m.predict(g("emb"), g("actions")), g("pred"), "pred")
    assert_agrees(lewm_rollout(m.predict, emb[:1], g("cand_eval")[0]), g("rollout_h1")[0], "rollout_h1")
    assert_agrees(lewm_rollout(m.predict, emb, g("cand_hist")[0]), g("rollout_h3")[0], "rollout_h3")
    assert_rel_close(lewm_cost(m.predict, emb[:1], g("goal_emb")[0, 0], g("cand_eval")[0]), g("cost_eval")[0])


def test_the_file_is_what_gguf_md_documents(converted: Converted) -> None:
    scopes = {"every file", "image and video files", "every predictor", "lewm predictor", "family lewm"}
    check_file_against_doc(*converted, scopes, "LeWM projector and predictor", ("pred.", "enc.proj."))


def test_auto_detection_and_f16(tmp_path: Path) -> None:
    out = convert(LEWM, tmp_path / "auto.gguf", ftype="f16")
    keys, t = read_gguf(out)
    assert keys["jepa.family"] == "lewm"
    assert t["pred.blk.0.ffn_up.weight"].dtype == np.float16
    assert t["enc.blk.0.attn_q.weight"].dtype == np.float16
    assert t["pred.blk.0.adaln.bias"].dtype == np.float32 and t["pred.pos_embed"].dtype == np.float32


def test_forged_tensor_is_named(tmp_path: Path, state: dict[str, Any]) -> None:
    import torch

    sd = dict(state)
    sd["predictor.transformer.forged.weight"] = torch.zeros(3)
    src = _copy_bundle(tmp_path / "forged", sd)
    with pytest.raises(ValueError, match=r"unmapped source tensor\(s\): predictor\.transformer\.forged\."):
        convert(src, tmp_path / "x.gguf", family="lewm")
    sd = {k: v for k, v in state.items() if k != "pred_proj.net.3.bias"}
    with pytest.raises(ValueError, match=r"missing source tensor 'pred_proj\.net\.3\.bias'"):
        convert(_copy_bundle(tmp_path / "missing", sd), tmp_path / "y.gguf", family="lewm")
    assert not (tmp_path / "x.gguf").exists() and not (tmp_path / "y.gguf").exists()


def test_config_sizes_must_match_the_weights(tmp_path: Path) -> None:
    src = _copy_bundle(tmp_path / "a", encoder={"hidden_size": 32})
    with pytest.raises(ValueError, match=r"unsupported encoder\.hidden_size=32: the weights have 64"):
        convert(src, tmp_path / "a.gguf", family="lewm")
    # Published configs give only size/patch/image: the tiny defaults (192 wide) then apply.
    bare = dict.fromkeys(("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"))
    with pytest.raises(ValueError, match=r"unsupported encoder\.hidden_size=192: the weights have 64"):
        convert(_copy_bundle(tmp_path / "b", encoder=bare), tmp_path / "b.gguf", family="lewm")
    with pytest.raises(ValueError, match="heads x dim_head"):
        convert(_copy_bundle(tmp_path / "c", predictor={"heads": 2}), tmp_path / "c.gguf", family="lewm")
    with pytest.raises(ValueError, match="unsupported predictor hidden_dim=128"):
        convert(_copy_bundle(tmp_path / "d", predictor={"hidden_dim": 128}), tmp_path / "d.gguf",
                family="lewm")


def test_layernorm_projector_is_refused(tmp_path: Path, state: dict[str, Any]) -> None:
    bn_stats = ("running_mean", "running_var", "num_batches_tracked")
    sd = {k: v for k, v in state.items() if not (k.startswith("projector.net.1.") and k.endswith(bn_stats))}
    with pytest.raises(ValueError, match="unsupported projector norm_fn \\(a LayerNorm"):
        convert(_copy_bundle(tmp_path / "ln", sd), tmp_path / "ln.gguf", family="lewm")
