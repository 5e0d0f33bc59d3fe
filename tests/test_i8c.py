"""i8c, the project's own int8 type (int8 weights with one f32 scale per output channel, activations
quantized per row, one exact int32 sum over the whole of k): how jepa-quantize writes it, what the
loader refuses, and its accuracy tiers beside q8_0's on tiny models of every kind (docs/quantize.md).
Its bits on every kernel path are test_kernel_paths' (vit_i8c); the product against its scalar
definition is the native test_i8."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

import jepa
from jepa import world
from jepa.convert.quantize import SCALE_WHY, plan, quantize
from jepa.demo import write_demo_model

from conftest import AC_BUNDLE, LEWM_BUNDLE, golden

WIDE = dict(embed_dim=256, n_layer=2, n_head=4, img_size=32)


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_demo_model(tmp_path_factory.mktemp("i8c") / "wide.gguf", **WIDE)


@pytest.fixture(scope="module")
def demo_i8c(demo: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    out = tmp_path_factory.mktemp("i8c-out") / "wide-i8c.gguf"
    quantize(demo, out, "i8c")
    return str(out)


def test_a_matrix_is_int8_rows_and_their_scales(demo: str, demo_i8c: str) -> None:
    """Each converted matrix is ggml's i8 [out, in] plus `<name>_scale` f32 [out] with amax / 127 of
    each row; the values are round(w / scale); nothing else changes."""
    src = {t.name: t for t in gguf.GGUFReader(demo).tensors}
    out = {t.name: t for t in gguf.GGUFReader(demo_i8c).tensors}
    G = gguf.GGMLQuantizationType
    matrices = [n for n, t in out.items() if t.tensor_type == G.I8]
    assert matrices
    assert set(out) == set(src) | {n + "_scale" for n in matrices}
    for n in matrices:
        w = np.asarray(src[n].data, dtype=np.float32).reshape(out[n].data.shape)
        q = np.asarray(out[n].data).view(np.int8)
        scale = np.asarray(out[n + "_scale"].data)
        assert out[n + "_scale"].tensor_type == G.F32 and scale.shape == (w.shape[0],)
        np.testing.assert_array_equal(scale, (np.abs(w).max(1) / np.float32(127)).astype(np.float32))
        assert np.abs(q.astype(np.int32)).max() <= 127
        np.testing.assert_allclose(q * scale[:, None], w, atol=float(scale.max()) / 2 * 1.0001)
    steps = plan(demo, "i8c").steps
    assert sum(s.why == SCALE_WHY for s in steps) == len(matrices)


def test_batch_and_threads_give_the_same_bits(demo_i8c: str) -> None:
    m = jepa.Model(demo_i8c)
    x = np.random.default_rng(0).standard_normal((5, 3, 32, 32)).astype(np.float32)
    two = m.context(threads=2).encode(x)
    one = m.context(threads=1).encode(x)
    alone = np.concatenate([m.context(threads=2).encode(x[i : i + 1]) for i in range(5)])
    np.testing.assert_array_equal(two.view(np.uint32), one.view(np.uint32))
    np.testing.assert_array_equal(two.view(np.uint32), alone.view(np.uint32))


def test_tiers_beside_q8_0(tmp_path: Path, demo: str, demo_i8c: str, tiny_vjepa2_path: str) -> None:
    """Pooled cosine >= 0.999 against f32 (q8_0's tier), and within 1e-4 of q8_0's own; V-JEPA 2's
    classifier top-1 identical and its predictions at the same tier."""
    x = np.random.default_rng(1).standard_normal((8, 3, 32, 32)).astype(np.float32)
    quantize(demo, tmp_path / "q8.gguf", "q8_0")
    pooled = {}
    for name, path in (("f32", demo), ("q8_0", str(tmp_path / "q8.gguf")), ("i8c", demo_i8c)):
        m = jepa.Model(path)
        pooled[name] = jepa.pool(m.context().encode(x), "mean", m)
    cos_i8c, cos_q8 = _cos(pooled["i8c"], pooled["f32"]), _cos(pooled["q8_0"], pooled["f32"])
    assert cos_i8c >= 0.999, cos_i8c
    assert 1 - cos_i8c <= (1 - cos_q8) * 4 + 1e-4, (cos_i8c, cos_q8)
    quantize(tiny_vjepa2_path, tmp_path / "v2.gguf", "i8c")
    m32, m8 = jepa.Model(tiny_vjepa2_path), jepa.Model(str(tmp_path / "v2.gguf"))
    size = m32.info.img_size
    clips = np.random.default_rng(2).standard_normal((6, 3, m32.info.n_frames, size, size)).astype(np.float32)
    c32, c8 = m32.context(), m8.context()
    t32, t8 = c32.encode(clips), c8.encode(clips)
    assert _cos(t32.mean(1), t8.mean(1)) >= 0.999
    np.testing.assert_array_equal(c32.classify(t32)[0].argmax(1), c8.classify(t8)[0].argmax(1))
    ctx_ids, tgt_ids = np.arange(0, 9), np.arange(9, 18)
    assert _cos(c32.predict(t32, ctx_ids, tgt_ids), c8.predict(t8, ctx_ids, tgt_ids)) >= 0.999


@pytest.mark.torch
def test_world_model_tiers(tmp_path: Path, tiny_ac_path: str, tiny_lewm_path: str) -> None:
    """Rollout energies / costs of the bundles' candidates within 1e-2 relative, as q8_0's."""
    quantize(tiny_ac_path, tmp_path / "ac.gguf", "i8c")
    quantize(tiny_lewm_path, tmp_path / "lewm.gguf", "i8c")
    u8, acts = golden(AC_BUNDLE, "frames_u8"), golden(AC_BUNDLE, "rollout_actions")
    s = golden(AC_BUNDLE, "states")[0, 0]
    e = [jepa.rollout(jepa.Model(p).context(), u8[:1], acts, goal=u8[1], state=s)["energies"]
         for p in (tiny_ac_path, str(tmp_path / "ac.gguf"))]
    np.testing.assert_allclose(e[1], e[0], rtol=1e-2)
    lu8, cand = golden(LEWM_BUNDLE, "frames_u8"), golden(LEWM_BUNDLE, "cand_eval")[0]
    c = [world.rollout(jepa.Model(p).context(), lu8[:1], cand, goal=lu8[3])["costs"]
         for p in (tiny_lewm_path, str(tmp_path / "lewm.gguf"))]
    np.testing.assert_allclose(c[1], c[0], rtol=1e-2)


def _rewrite(src: str, dst: Path, drop: str = "", add_scale_to: str = "") -> None:
    """src copied to dst with one tensor left out, or a stray `_scale` tensor added beside another."""
    r = gguf.GGUFReader(src)
    w = gguf.GGUFWriter(str(dst), "jepa")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        sub = f.types[-1] if f.types[0] == gguf.GGUFValueType.ARRAY else None
        w.add_key_value(f.name, f.contents(), f.types[0], sub_type=sub)
    for t in r.tensors:
        if t.name == drop:
            continue
        shape = tuple(int(n) for n in reversed(t.shape.tolist()))
        data = np.asarray(t.data)
        if t.tensor_type == gguf.GGMLQuantizationType.I8:
            w.add_tensor(t.name, data.view(np.int8).reshape(shape))
        else:
            w.add_tensor(t.name, np.asarray(data, dtype=np.float32).reshape(shape))
        if t.name == add_scale_to:
            w.add_tensor(t.name + "_scale", np.ones(shape[0], np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_loader_refuses_a_matrix_without_its_scales_and_a_stray_scale(
    tmp_path: Path, demo: str, demo_i8c: str
) -> None:
    i8 = gguf.GGMLQuantizationType.I8
    name = next(t.name for t in gguf.GGUFReader(demo_i8c).tensors if t.tensor_type == i8)
    _rewrite(demo_i8c, tmp_path / "no-scale.gguf", drop=name + "_scale")
    with pytest.raises(jepa.ModelFileError, match=f"missing tensor {name}_scale"):
        jepa.Model(str(tmp_path / "no-scale.gguf"))
    _rewrite(demo, tmp_path / "stray.gguf", add_scale_to=name)
    with pytest.raises(jepa.ModelFileError, match=f"unexpected tensor {name}_scale"):
        jepa.Model(str(tmp_path / "stray.gguf"))


def test_ggml_path_and_the_smallest_cpu_run_i8c(demo_i8c: str, tmp_path: Path) -> None:
    """ggml has no product for int8 rows with scales: on JEPA_GEMM=ggml, and on a CPU below x86-64-v3
    (where the f32 products are ggml's), i8c runs the engine's own product (portable: the same
    products' bits, test_i8 on the ggml path), the rest of the graph ggml's ops as for every type
    there: close to the engine's path, not its bits."""
    x = np.random.default_rng(3).standard_normal((2, 3, 32, 32)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    here = jepa.Model(demo_i8c).context(threads=2).encode(x)
    code = (
        "import sys, numpy as np, jepa\n"
        f"x = np.load({str(tmp_path / 'x.npy')!r})\n"
        f"np.save(sys.argv[1], jepa.Model({demo_i8c!r}).context(threads=2).encode(x))\n"
    )
    for env in ({"JEPA_GEMM": "ggml"}, {"JEPA_CPU_FEATURES": "x86-64"}):
        out = tmp_path / "out.npy"
        r = subprocess.run([sys.executable, "-c", code, str(out)], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, (env, r.stderr[-2000:])
        got = np.load(out)
        assert got.shape == here.shape and np.isfinite(got).all(), env
        assert _cos(got.mean(1), here.mean(1)) > 0.9999, env
