"""The GGUF writer's own checks: names and shapes against the hparams, the dtype rule, atomicity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jepa.convert.recipes import HF_VIT_RECIPE
from jepa.gguf.schema import Encoder, Meta
from jepa.gguf.tensors import may_be_half
from jepa.gguf.writer import write_gguf

ENC = Encoder(embed_dim=8, n_layer=1, n_head=2, ffn_dim=16, patch_size=4, img_size=8)
META = Meta(family="hfvit", name="t")


def _tensors(enc: Encoder = ENC, pos_rows: int = 5) -> dict[str, np.ndarray]:
    out = {n: np.zeros(e.shape, np.float32) for n, e in enc.table().items()}
    out["enc.pos_embed"] = np.zeros((pos_rows, enc.embed_dim), np.float32)
    return out


def test_writes_a_complete_set(tmp_path: Path, gguf_contents) -> None:
    g = gguf_contents(write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, _tensors().items()))
    assert g.shapes["enc.patch_embed.weight"] == (8, 48)
    assert g.keys["jepa.pre.resample"] == "bilinear"


def test_bad_shape_names_the_tensor(tmp_path: Path) -> None:
    t = _tensors() | {"enc.blk.0.ffn_up.weight": np.zeros((8, 8), np.float32)}
    with pytest.raises(ValueError, match=r"enc\.blk\.0\.ffn_up\.weight: got \[8, 8\], expected \[16, 8\]"):
        write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, t.items())
    assert list(tmp_path.iterdir()) == []


def test_unknown_and_missing(tmp_path: Path) -> None:
    t = _tensors() | {"enc.blk.0.attn_qkv.weight": np.zeros((24, 8), np.float32)}
    with pytest.raises(ValueError, match=r"enc\.blk\.0\.attn_qkv\.weight: not a tensor of this file"):
        write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, t.items())
    t = _tensors()
    del t["enc.norm.weight"]
    with pytest.raises(ValueError, match=r"missing tensor\(s\): enc\.norm\.weight"):
        write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, t.items())


def test_pos_rows(tmp_path: Path) -> None:
    write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, _tensors(pos_rows=4).items())  # no CLS slot
    with pytest.raises(ValueError, match=r"enc\.pos_embed: got \[6, 8\]"):
        write_gguf(tmp_path / "b.gguf", META, ENC, HF_VIT_RECIPE, _tensors(pos_rows=6).items())


def test_dtype_rule() -> None:
    assert may_be_half("enc.blk.11.attn_qkv.weight")
    assert may_be_half("enc.blk.0.ffn_down.weight")
    for name in ("enc.blk.0.attn_q.bias", "enc.blk.0.ln1.weight", "enc.patch_embed.weight", "enc.pos_embed",
                 "enc.cls_token", "enc.blk.0.ls1.weight", "enc.norm.weight"):
        assert not may_be_half(name), name


@pytest.mark.parametrize(("kwargs", "field"), [({"n_head": 3}, "n_head"), ({"act": "relu"}, "act"),
                                                ({"img_size": 10}, "img_size")])
def test_encoder_validation(kwargs: dict, field: str) -> None:
    base = dict(embed_dim=8, n_layer=1, n_head=2, ffn_dim=16, patch_size=4, img_size=8)
    with pytest.raises(ValueError, match=f"unsupported {field}="):
        Encoder(**(base | kwargs))


def test_unknown_ftype(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unsupported ftype=q4_0"):
        write_gguf(tmp_path / "a.gguf", META, ENC, HF_VIT_RECIPE, _tensors().items(), ftype="q4_0")
