"""The demo model: deterministic, schema-complete, cached atomically, and usable by the engine."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from jepa import demo
from jepa.convert.cli import main


def test_same_seed_same_bytes_other_seed_differs(tmp_path: Path) -> None:
    a = Path(demo.write_demo_model(tmp_path / "a.gguf", seed=3))
    b = Path(demo.write_demo_model(tmp_path / "b.gguf", seed=3))
    c = Path(demo.write_demo_model(tmp_path / "c.gguf", seed=4))
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_keys_and_tensors(tmp_path: Path, gguf_contents) -> None:
    g = gguf_contents(demo.write_demo_model(tmp_path / "d.gguf"))
    k = g.keys
    assert k["general.architecture"] == "jepa"
    assert k["general.name"] == demo.DEMO_NAME
    assert "not a trained model" in k["general.description"]
    assert (k["jepa.family"], k["jepa.schema_version"], k["general.file_type"]) == ("hfvit", 1, 0)
    assert (k["jepa.enc.embed_dim"], k["jepa.enc.n_layer"], k["jepa.enc.n_head"]) == (192, 4, 3)
    assert k["jepa.enc.cls_token"] is True
    assert g.shapes["enc.pos_embed"] == (197, 192)
    assert g.shapes["enc.patch_embed.weight"] == (192, 3 * 16 * 16)
    assert len(g.shapes) == 4 + 4 * 16 + 2
    assert set(g.dtypes.values()) == {"F32"}
    for name, arr in g.arrays.items():
        assert np.isfinite(arr).all(), name
    gains = g.arrays["enc.blk.0.ln1.weight"]
    assert 0.8 < gains.mean() < 1.2 and gains.std() > 0


def test_f16_only_matrices(tmp_path: Path, gguf_contents) -> None:
    g = gguf_contents(demo.write_demo_model(tmp_path / "h.gguf", ftype="f16", n_layer=1))
    half = {n for n, t in g.dtypes.items() if t == "F16"}
    assert half == {f"enc.blk.0.{m}.weight" for m in ("attn_q", "attn_k", "attn_v", "attn_out", "ffn_up",
                                                        "ffn_down")}
    assert g.keys["general.file_type"] == 1


def test_other_sizes(tmp_path: Path, gguf_contents) -> None:
    g = gguf_contents(demo.write_demo_model(tmp_path / "s.gguf", embed_dim=64, n_head=2, n_layer=1,
                                            patch_size=14, img_size=56))
    assert g.shapes["enc.pos_embed"] == (17, 64)
    assert (g.keys["jepa.pre.crop"], g.keys["jepa.enc.patch_size"]) == (56, 14)


def test_cached_path_concurrent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JEPA_CACHE_DIR", str(tmp_path / "cache"))
    paths: list[str] = []
    threads = [threading.Thread(target=lambda: paths.append(demo.demo_model_path())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(paths)) == 1
    path = Path(paths[0])
    assert path == tmp_path / "cache" / demo.DEMO_VERSION / demo.DEMO_FILE
    assert [p.name for p in path.parent.iterdir()] == [demo.DEMO_FILE]  # no temp files left over
    assert path.read_bytes() == Path(demo.write_demo_model(tmp_path / "fresh.gguf")).read_bytes()


def test_engine_encodes_demo(tmp_path: Path) -> None:
    import jepa

    m = jepa.Model(demo.write_demo_model(tmp_path / "e.gguf"))
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    tok = m.context(threads=2).encode(x)
    assert tok.shape == (2, 197, 192)
    assert np.isfinite(tok).all()
    assert tok.std(axis=1).mean() > 1e-3  # tokens differ from one another
    assert not np.allclose(tok[0], tok[1])  # and depend on the input


def test_cli_demo(gguf_contents, tmp_path: Path) -> None:
    out = tmp_path / "demo.gguf"
    assert main(["--demo", "--out", str(out), "--ftype", "f16", "--seed", "5"]) == 0
    same = demo.write_demo_model(tmp_path / "same.gguf", seed=5, ftype="f16")
    assert out.read_bytes() == Path(same).read_bytes()
