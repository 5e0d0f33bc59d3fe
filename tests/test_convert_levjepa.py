"""Converting LeVJEPA's Hugging Face layout (model.safetensors with `encoder.*` + config.json, model_type
levjepa): the reference bundle's checkpoint (MLO-lab/LeVJEPA's VisionTransformer, random weights) and
random directories from jepa.testing (numpy only, no torch), read back with the GGUF reader: the keys
the engine reads, every tensor mapped, auto-detection beside the timm layout of the same family, and
the refusals, each naming its field or tensor."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors import safe_open

from jepa.convert import convert
from jepa.convert.base import pick
from jepa.convert.cli import main as convert_main
from jepa.convert.levjepa_hf import LeVJEPAHF
from jepa.convert.timm_vit import TimmViT
from jepa.gguf.keys import FILE_TYPES
from jepa.testing.random_levjepa import write_levjepa_hf_dir

from conftest import REFERENCE_DIR, read_gguf

BUNDLE = REFERENCE_DIR / "levjepa"
IMAGENET_MEAN, IMAGENET_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]


def _upstream(path: Path) -> dict[str, np.ndarray]:
    with safe_open(str(path / "model.safetensors"), framework="np") as f:
        return {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 - safe_open is not a Mapping


@pytest.fixture(scope="module")
def bundle_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return Path(convert(BUNDLE, tmp_path_factory.mktemp("levjepa") / "levjepa.gguf"))


def test_the_bundle_converts_to_the_contract(bundle_file: Path) -> None:
    k = read_gguf(bundle_file).keys
    hp = json.loads((BUNDLE / "hparams.json").read_text())["constructor_all_args"]
    assert (k["jepa.family"], k["jepa.modality"]) == ("levjepa", "video")
    expected = {
        "embed_dim": hp["embed_dim"],
        "n_layer": hp["depth"],
        "n_head": hp["num_heads"],
        "ffn_dim": hp["mlp_ratio"] * hp["embed_dim"],
        "patch_size": 16,
        "tubelet_size": 1,
        "img_size": hp["img_size"],
        "n_frames": hp["num_frames"],
        "in_chans": 3,
        "n_registers": 0,
        "cls_token": True,
        "qkv_fused": True,
        "layer_scale": False,
        "act": "gelu_erf",
        "pos_type": "rope3d",
        "rope_freq_layout": "tiled",
        "attn_mode": "block_causal",
    }
    assert {name: k[f"jepa.enc.{name}"] for name in expected} == expected
    assert k["jepa.enc.ln_eps"] == pytest.approx(1e-6)
    assert k["jepa.enc.rope_theta"] == 10000.0
    # The notebook's recipe at the model's size: short side = crop, bicubic, x / 255, ImageNet statistics.
    pre = (k["jepa.pre.resize_mode"], k["jepa.pre.resize_short"], k["jepa.pre.crop"])
    assert pre == ("shortest_edge", 64, 64)
    assert k["jepa.pre.resample"] == "bicubic"
    assert k["jepa.pre.mean"] == pytest.approx(IMAGENET_MEAN)
    assert k["jepa.pre.std"] == pytest.approx(IMAGENET_STD)
    assert k["jepa.pre.rescale"] == pytest.approx(1 / 255)
    assert k["jepa.head.kind"] == "none" and "jepa.pred.kind" not in k


def test_every_tensor_is_the_upstream_one(bundle_file: Path) -> None:
    g, sd = read_gguf(bundle_file), _upstream(BUNDLE)
    d, depth = 128, 2
    assert len(sd) == 1 + 2 + 12 * depth + 2 == len(g.arrays)  # 293 at the release's depth 24
    assert "enc.pos_embed" not in g.arrays and set(g.dtypes.values()) == {"F32"}
    w = sd["encoder.patch_embed.proj.weight"]
    assert w.shape == (d, 3, 1, 16, 16)
    np.testing.assert_array_equal(g.arrays["enc.patch_embed.weight"], w.reshape(d, 3 * 16 * 16))  # C, T, H, W
    np.testing.assert_array_equal(g.arrays["enc.patch_embed.bias"], sd["encoder.patch_embed.proj.bias"])
    np.testing.assert_array_equal(g.arrays["enc.cls_token"], sd["encoder.cls_token"].reshape(d))
    names = {
        "ln1": "norm1",
        "attn_qkv": "attn.qkv",
        "attn_out": "attn.proj",
        "ln2": "norm2",
        "ffn_up": "mlp.fc1",
        "ffn_down": "mlp.fc2",
    }
    for i in range(depth):
        for ours, theirs in names.items():
            for p in ("weight", "bias"):
                np.testing.assert_array_equal(
                    g.arrays[f"enc.blk.{i}.{ours}.{p}"], sd[f"encoder.blocks.{i}.{theirs}.{p}"]
                )
    assert g.shapes["enc.blk.0.attn_qkv.weight"] == (3 * d, d)  # rows q; k; v, each head-major
    for p in ("weight", "bias"):
        np.testing.assert_array_equal(g.arrays[f"enc.norm.{p}"], sd[f"encoder.norm.{p}"])


def test_detected_among_the_family_layouts(tmp_path: Path, timm_file: Path) -> None:
    assert pick(BUNDLE) is LeVJEPAHF and pick(BUNDLE, "levjepa") is LeVJEPAHF
    assert pick(timm_file) is TimmViT and pick(timm_file, "levjepa") is TimmViT
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"no converter recognises this checkpoint among family levjepa's"):
        pick(tmp_path / "empty", "levjepa")


@pytest.fixture
def timm_file(tmp_path: Path) -> Path:
    """A timm-layout file (LeJEPA's): the other levjepa layout, detected by its `blocks.0.attn.qkv`."""
    from safetensors.numpy import save_file

    sd = {k.removeprefix("encoder."): v for k, v in _upstream(BUNDLE).items()}
    sd["patch_embed.proj.weight"] = sd["patch_embed.proj.weight"][:, :, 0]
    sd["pos_embed"] = np.zeros((1, 17, 128), np.float32)
    path = tmp_path / "timm" / "model.safetensors"
    path.parent.mkdir()
    save_file(sd, str(path))
    return path


def test_hf_spellings_and_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spelled = {
        "embed_dim": None,
        "depth": None,
        "num_heads": None,
        "mlp_ratio": None,
        "img_size": None,
        "num_frames": None,
        "in_chans": None,
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "intermediate_size": 256,
        "image_size": [48, 48],
        "frames_per_clip": 8,
        "num_channels": 3,
        "layer_norm_eps": 1e-6,
        "hidden_act": "gelu",
        "torch_dtype": "float32",
        "transformers_version": "4.57.0",
        "auto_map": {"AutoModel": "modeling_levjepa.LeVJEPAModel"},
        "drop_path_rate": 0.0,
        "token_drop_rate": 0.95,
        "attn_mode": "full",
    }
    src = write_levjepa_hf_dir(tmp_path / "hf", embed_dim=64, img_size=48, config=spelled)
    assert convert_main(["--src", str(src), "--out", str(tmp_path / "m.gguf"), "--ftype", "bf16"]) == 0
    assert "wrote" in capsys.readouterr().out
    k, dtypes = _keys_and_dtypes(tmp_path / "m.gguf")
    assert (k["jepa.enc.embed_dim"], k["jepa.enc.n_head"], k["jepa.enc.ffn_dim"]) == (64, 4, 256)
    assert (k["jepa.enc.img_size"], k["jepa.enc.n_frames"], k["jepa.enc.attn_mode"]) == (48, 8, "full")
    assert k["general.file_type"] == FILE_TYPES["bf16"] and k["general.name"] == "hf"
    assert dtypes["enc.blk.0.attn_qkv.weight"] == "BF16" and dtypes["enc.patch_embed.weight"] == "F32"
    assert dtypes["enc.cls_token"] == dtypes["enc.blk.0.attn_qkv.bias"] == "F32"


def _keys_and_dtypes(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """A file's keys and tensor types (read_gguf's arrays have no bf16)."""
    import gguf

    r = gguf.GGUFReader(path)
    keys = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    return keys, {t.name: t.tensor_type.name for t in r.tensors}


@pytest.mark.parametrize("ftype", ["f32", "f16"])
def test_file_types(tmp_path: Path, ftype: str) -> None:
    g = read_gguf(convert(BUNDLE, tmp_path / "m.gguf", ftype=ftype))
    assert g.dtypes["enc.blk.1.ffn_up.weight"] == ftype.upper()
    assert g.dtypes["enc.blk.1.ffn_up.bias"] == g.dtypes["enc.norm.weight"] == "F32"


# (config fields to change, the refusal)
REFUSED: dict[str, tuple[dict[str, Any], str]] = {
    "attn_mode": ({"attn_mode": "causal"}, r"unsupported attn_mode=causal \(known: full, block_causal\)"),
    "attn_mode missing": ({"attn_mode": None}, r"attn_mode is missing"),
    "use_rope": ({"use_rope": False}, r"unsupported use_rope=False"),
    "qkv_bias": ({"qkv_bias": False}, r"unsupported qkv_bias=False"),
    "tubelet": ({"tubelet_size": 2}, r"unsupported tubelet_size=2"),
    "silu": ({"use_SiLU": True}, r"unsupported use_SiLU=True"),
    "act": ({"hidden_act": "silu"}, r"unsupported hidden_act=silu"),
    "unknown": ({"num_registers": 4}, r"unsupported field num_registers=4: not a setting"),
    "depth": ({"depth": 3}, r"depth=3 disagrees with the tensors \(2 blocks\)"),
    "width": ({"embed_dim": 96}, r"embed_dim=96 disagrees with the tensors \(cls_token is 64 wide\)"),
    "mlp": ({"mlp_ratio": 2}, r"mlp_ratio=2 disagrees with the tensors"),
    "patch": ({"patch_size": 8}, r"patch_size=8 disagrees with the tensors"),
    "two spellings": ({"hidden_size": 32}, r"embed_dim=64 and hidden_size=32 disagree"),
    "heads": ({"num_heads": 16}, r"unsupported num_heads=16 \(embed_dim 64: 3-D RoPE needs an even head"),
    "no heads": ({"num_heads": None}, r"num_heads is missing"),
    "img": ({"img_size": 40}, r"unsupported img_size=40 \(patch_size=16\)"),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_refusals(tmp_path: Path, case: str) -> None:
    config, match = REFUSED[case]
    src = write_levjepa_hf_dir(tmp_path / "hf", config=config)
    with pytest.raises(ValueError, match=match):
        convert(src, tmp_path / "m.gguf")
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize(
    ("drop", "match"),
    [
        ("encoder.blocks.1.mlp.fc2.bias", r"missing source tensor 'blocks.1.mlp.fc2.bias'"),
        ("encoder.cls_token", r"missing source tensor 'cls_token'"),
        ("encoder.norm.weight", r"missing source tensor 'norm.weight'"),
    ],
)
def test_a_missing_tensor_is_named(tmp_path: Path, drop: str, match: str) -> None:
    src = write_levjepa_hf_dir(tmp_path / "hf", drop=(drop,))
    with pytest.raises(ValueError, match=match):
        convert(src, tmp_path / "m.gguf")


def _extra_tensor(sd: dict[str, np.ndarray]) -> None:
    sd["encoder.pos_embed"] = np.zeros((1, 9, 64), np.float32)


def _short_qkv(sd: dict[str, np.ndarray]) -> None:
    sd["encoder.blocks.1.attn.qkv.weight"] = sd["encoder.blocks.1.attn.qkv.weight"][:128]


def _image_patch_embed(sd: dict[str, np.ndarray]) -> None:
    sd["encoder.patch_embed.proj.weight"] = sd["encoder.patch_embed.proj.weight"][:, :, 0]


@pytest.mark.parametrize(
    ("forge", "match"),
    [
        (_extra_tensor, r"unmapped source tensor\(s\): encoder.pos_embed"),
        (_short_qkv, r"attn_qkv\.weight: got \[128, 64\], expected \[192, 64\]"),
        (_image_patch_embed, r"a Conv3d \[D, C, 1, P, P\] is expected"),
    ],
    ids=["extra-tensor", "wrong-block-shape", "image-layout"],
)
def test_a_forged_state_dict_is_refused_naming_the_tensor(
    forge: Callable[[dict[str, np.ndarray]], None], match: str, tmp_path: Path
) -> None:
    from safetensors.numpy import save_file

    src = write_levjepa_hf_dir(tmp_path / "hf")
    sd = _upstream(src)
    forge(sd)
    save_file(sd, str(src / "model.safetensors"))
    with pytest.raises(ValueError, match=match):
        convert(src, tmp_path / "m.gguf")
