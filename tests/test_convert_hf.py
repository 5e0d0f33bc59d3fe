"""Converting HF ViTModel / IJepaModel checkpoints written by save_pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from jepa.convert import convert
from jepa.convert.cli import main

pytestmark = pytest.mark.transformers


def _load(path: Path) -> dict[str, np.ndarray]:
    with safe_open(str(path), framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a Mapping


def _rewrite(src: Path, fn) -> None:
    path = src / "model.safetensors"
    save_file(fn(_load(path)), str(path), metadata={"format": "pt"})


def _edit_config(src: Path, **changes) -> None:
    path = src / "config.json"
    cfg = json.loads(path.read_text())
    cfg.update(changes)
    path.write_text(json.dumps(cfg))


def test_vit_keys_shapes_values(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, model = hf_model("vit", hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6)
    g = gguf_contents(convert(src, tmp_path / "m.gguf"))
    k = g.keys
    assert k["general.architecture"] == "jepa"
    assert (k["jepa.family"], k["jepa.modality"], k["jepa.schema_version"]) == ("hfvit", "image", 1)
    assert k["general.name"] == src.name
    enc = {key[len("jepa.enc."):]: v for key, v in k.items() if key.startswith("jepa.enc.")}
    assert enc == {
        "embed_dim": 64, "n_layer": 2, "n_head": 4, "ffn_dim": 128, "patch_size": 16, "tubelet_size": 1,
        "img_size": 32, "n_frames": 1, "in_chans": 3, "n_registers": 0, "ln_eps": pytest.approx(1e-6),
        "act": "gelu_tanh", "pos_type": "learned", "cls_token": True, "qkv_fused": False,
        "layer_scale": False,
    }
    assert k["jepa.head.kind"] == "none"
    # The HF ViT recipe at the model's size (config.json's image_size: no preprocessor_config.json).
    assert (k["jepa.pre.resize_mode"], k["jepa.pre.resize_short"], k["jepa.pre.crop"]) == ("squash", 32, 32)
    assert k["jepa.pre.mean"] == pytest.approx([0.5] * 3)

    sd = {n: t.detach().numpy() for n, t in model.state_dict().items()}
    assert g.shapes["enc.pos_embed"] == (5, 64)
    assert g.shapes["enc.patch_embed.weight"] == (64, 3 * 16 * 16)
    np.testing.assert_array_equal(g.arrays["enc.patch_embed.weight"],
                                  sd["embeddings.patch_embeddings.projection.weight"].reshape(64, -1))
    np.testing.assert_array_equal(g.arrays["enc.cls_token"], sd["embeddings.cls_token"].reshape(-1))
    np.testing.assert_array_equal(g.arrays["enc.blk.1.attn_k.weight"], sd["layers.1.attention.k_proj.weight"])
    np.testing.assert_array_equal(g.arrays["enc.blk.0.ffn_down.bias"], sd["layers.0.mlp.fc2.bias"])
    np.testing.assert_array_equal(g.arrays["enc.blk.0.ln2.weight"], sd["layers.0.layernorm_after.weight"])
    np.testing.assert_array_equal(g.arrays["enc.norm.bias"], sd["layernorm.bias"])
    assert len(g.shapes) == 4 + 2 * 16 + 2
    assert set(g.dtypes.values()) == {"F32"}


def test_ijepa_has_no_cls(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, _ = hf_model("ijepa", patch_size=14, image_size=28)
    g = gguf_contents(convert(src, tmp_path / "m.gguf"))
    assert g.keys["jepa.family"] == "ijepa"
    assert g.keys["jepa.enc.cls_token"] is False
    assert g.keys["jepa.enc.act"] == "gelu_erf"
    assert g.keys["jepa.enc.ln_eps"] == pytest.approx(1e-12)
    assert "enc.cls_token" not in g.shapes
    assert g.shapes["enc.pos_embed"] == (4, 64)
    assert g.shapes["enc.patch_embed.weight"] == (64, 3 * 14 * 14)


def test_f16_rule(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    g = gguf_contents(convert(src, tmp_path / "m.gguf", ftype="f16"))
    assert g.keys["general.file_type"] == 1
    half = {n for n, t in g.dtypes.items() if t == "F16"}
    mats = ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up", "ffn_down")
    assert half == {f"enc.blk.0.{m}.weight" for m in mats}
    assert all(t == "F32" for n, t in g.dtypes.items() if n not in half)


def test_no_qkv_bias(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, _ = hf_model("vit", qkv_bias=False, num_hidden_layers=1)
    g = gguf_contents(convert(src, tmp_path / "m.gguf"))
    assert "enc.blk.0.attn_q.weight" in g.shapes
    assert not {"enc.blk.0.attn_q.bias", "enc.blk.0.attn_k.bias", "enc.blk.0.attn_v.bias"} & set(g.shapes)
    assert "enc.blk.0.attn_out.bias" in g.shapes


def test_pooler_skipped_and_prefix_stripped(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    _rewrite(src, lambda sd: {"vit." + k: v for k, v in sd.items()}
             | {"vit.pooler.dense.weight": np.zeros((64, 64), np.float32),
                "vit.pooler.dense.bias": np.zeros(64, np.float32)})
    g = gguf_contents(convert(src, tmp_path / "m.gguf"))
    assert not any("pooler" in n for n in g.shapes)
    assert "enc.blk.0.attn_q.weight" in g.shapes


def test_transformers5_module_names(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, model = hf_model("vit", num_hidden_layers=1)
    save_file({n: t.detach().numpy().copy() for n, t in model.state_dict().items()},
              str(src / "model.safetensors"))
    g = gguf_contents(convert(src, tmp_path / "m.gguf"))
    np.testing.assert_array_equal(g.arrays["enc.blk.0.attn_out.weight"],
                                  model.state_dict()["layers.0.attention.o_proj.weight"].numpy())


def test_preprocessor_config(hf_model, gguf_contents, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    (src / "preprocessor_config.json").write_text(json.dumps({
        "do_resize": True, "size": {"shortest_edge": 40}, "do_center_crop": True,
        "crop_size": {"height": 32, "width": 32}, "resample": 3, "image_mean": [0.1, 0.2, 0.3],
        "image_std": [0.4, 0.5, 0.6], "rescale_factor": 0.5, "image_processor_type": "BitImageProcessor",
    }))
    k = gguf_contents(convert(src, tmp_path / "m.gguf")).keys
    assert k["jepa.pre.resize_mode"] == "shortest_edge"
    assert (k["jepa.pre.resize_short"], k["jepa.pre.crop"]) == (40, 32)
    assert k["jepa.pre.resample"] == "bicubic"
    assert k["jepa.pre.mean"] == pytest.approx([0.1, 0.2, 0.3])
    assert k["jepa.pre.std"] == pytest.approx([0.4, 0.5, 0.6])
    assert k["jepa.pre.rescale"] == 0.5


def test_missing_tensor(hf_model, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    _rewrite(src, lambda sd: {k: v for k, v in sd.items() if "intermediate.dense.weight" not in k})
    with pytest.raises(ValueError, match=r"missing source tensor 'encoder\.layer\.0\.intermediate\.dense\."):
        convert(src, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


def test_unmapped_tensor(hf_model, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    _rewrite(src, lambda sd: sd | {"classifier.weight": np.zeros((10, 64), np.float32)})
    with pytest.raises(ValueError, match=r"unmapped source tensor\(s\): classifier\.weight"):
        convert(src, tmp_path / "m.gguf")
    assert list(tmp_path.glob("*.gguf*")) == []


def test_extra_layer_is_unmapped(hf_model, tmp_path: Path) -> None:
    src, _ = hf_model("vit", num_hidden_layers=2)
    _edit_config(src, num_hidden_layers=1)
    with pytest.raises(ValueError, match=r"unmapped source tensor\(s\): encoder\.layer\.1\."):
        convert(src, tmp_path / "m.gguf")


@pytest.mark.parametrize(("field", "value"), [("hidden_act", "relu"), ("image_size", [32, 48])])
def test_unsupported_field(hf_model, tmp_path: Path, field: str, value: object) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    _edit_config(src, **{field: value})
    with pytest.raises(ValueError, match=rf"unsupported {field}="):
        convert(src, tmp_path / "m.gguf")


def test_family_mismatch(hf_model, tmp_path: Path) -> None:
    src, _ = hf_model("ijepa", num_hidden_layers=1)
    with pytest.raises(ValueError, match="unsupported model_type=ijepa for family hfvit"):
        convert(src, tmp_path / "m.gguf", family="hfvit")


def test_cli(hf_model, gguf_contents, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, _ = hf_model("vit", num_hidden_layers=1)
    (src / "README.md").write_text("---\nlicense: apache-2.0\ntags: [vision]\n---\n# tiny\n")
    out = tmp_path / "cli.gguf"
    assert main(["--src", str(src), "--out", str(out), "--ftype", "f16", "--name", "tiny vit",
                 "--source-url", "https://example.org/tiny"]) == 0
    k = gguf_contents(out).keys
    assert (k["general.name"], k["general.license"], k["general.file_type"]) == ("tiny vit", "apache-2.0", 1)
    assert k["general.source_url"] == "https://example.org/tiny"
    assert "wrote" in capsys.readouterr().out

    assert main(["--src", str(tmp_path / "nope"), "--out", str(out)]) == 1
    assert "jepa-convert: error:" in capsys.readouterr().err

