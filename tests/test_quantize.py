"""jepa-quantize: ggml's quantization through the engine, on tiny models of every family.

Byte identity with the converter's own f16 / bf16 files; every key and label carried; the dtype
rule; the k-quants' per-tensor fallback; peak memory about one tensor; and the parity tiers
(docs/quantize.md): q8_0 pooled cosine >= 0.999 and classifier top-1 identical, AC / LeWM q8_0
rollout energies within 1e-2 relative. Below 8 bits the figures are reported by
tools/bench/engine.py, not held to a bar here."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import gguf
import numpy as np
import pytest

import jepa
from jepa import world
from jepa.cli.quantize import main
from jepa.convert.quantize import TYPES, plan, quantize
from jepa.demo import write_demo_model
from jepa.gguf import tensors as gguf_tensors
from jepa.gguf.keys import FILE_TYPES
from jepa.testing.random_vjepa2 import write_random_vjepa2

from conftest import AC_BUNDLE, LEWM_BUNDLE, TINY_VJEPA2, TINY_VJEPA2_PARTS, golden

WIDE = dict(embed_dim=256, n_layer=2, n_head=4, img_size=32)  # 256-wide rows: the k-quants apply


def _fields(path: str | Path) -> dict[str, object]:
    r = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


def _types(path: str | Path) -> dict[str, str]:
    return {t.name: t.tensor_type.name for t in gguf.GGUFReader(path).tensors}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(len(a), -1).astype(np.float64), b.reshape(len(b), -1).astype(np.float64)
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())


@pytest.fixture(scope="module")
def demo32(tmp_path_factory: pytest.TempPathFactory) -> str:
    return write_demo_model(tmp_path_factory.mktemp("q") / "wide.gguf", **WIDE)


@pytest.mark.parametrize("half", ["f16", "bf16"])
def test_half_from_f32_equals_the_converters_half_byte_for_byte(tmp_path: Path, half: str) -> None:
    for name, write in (
        ("demo", lambda p, ft: write_demo_model(p, **WIDE, ftype=ft)),
        ("vjepa2", lambda p, ft: write_random_vjepa2(p, **TINY_VJEPA2, **TINY_VJEPA2_PARTS, ftype=ft)),
    ):
        f32, want = write(tmp_path / f"{name}32.gguf", "f32"), write(tmp_path / f"{name}{half}.gguf", half)
        out = tmp_path / f"{name}-q{half}.gguf"
        quantize(f32, out, half)
        assert out.read_bytes() == Path(want).read_bytes(), name


def test_keys_labels_and_the_dtype_rule(tmp_path: Path, tiny_vjepa2_path: str) -> None:
    out = tmp_path / "q8.gguf"
    quantize(tiny_vjepa2_path, out, "q8_0")
    before, after = _fields(tiny_vjepa2_path), _fields(out)
    assert list(after) == list(before)  # every key, in order
    assert after.pop("general.file_type") == FILE_TYPES["q8_0"]
    before.pop("general.file_type")
    assert after == before  # labels included
    assert jepa.Model(str(out)).labels == jepa.Model(tiny_vjepa2_path).labels
    types = _types(out)
    steps = {st.name: st for st in plan(tiny_vjepa2_path, "q8_0").steps}
    for name, t in types.items():
        # Only the 2-D weight matrices change type; one whose rows no q8_0 block divides (the
        # predictor's 48-wide rows) stays f32, and the plan says so.
        if not gguf_tensors.may_be_half(name):
            assert t == "F32", name
        elif steps[name].shape[-1] % 32 == 0:
            assert t == "Q8_0", name
        else:
            assert t == "F32" and "fit no block" in steps[name].why, name
    assert any(t == "Q8_0" for t in types.values())


def test_k_quant_fallback_is_per_tensor_and_said(tmp_path: Path) -> None:
    # A 64-wide model: rows of 64 and 192 fit no 256-value block and fall back to q4_0, saying why;
    # ffn_down's rows of 256 take q4_k itself.
    path = write_demo_model(tmp_path / "narrow.gguf", embed_dim=64, n_layer=1, n_head=2, img_size=32)
    matrices = [st for st in plan(path, "q4_k").steps if gguf_tensors.may_be_half(st.name)]
    assert matrices
    for st in matrices:
        if st.shape[-1] % 256 == 0:
            assert (st.target, st.why) == ("q4_k", ""), st
        else:
            assert st.target == "q4_0" and "256-value blocks: q4_0" in st.why, st
    assert {st.target for st in matrices} == {"q4_k", "q4_0"}


def test_keep_and_dry_run(tmp_path: Path, demo32: str, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "never.gguf"
    assert main([demo32, str(out), "--type", "q4_k", "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert not out.exists() and "MiB ->" in text and "q4_k" in text
    p = plan(demo32, "q8_0", keep=["enc.blk.0.*"])
    kept = {s.name for s in p.steps if s.why == "kept (--keep)"}
    assert kept and all(n.startswith("enc.blk.0.") for n in kept)
    quantize(demo32, out, "q8_0", keep=["enc.blk.0.*"])
    assert out.stat().st_size == p.out_bytes  # the plan's size is the file's


def test_peak_memory_is_about_one_tensor(tmp_path: Path) -> None:
    path = write_demo_model(tmp_path / "big.gguf", embed_dim=512, n_layer=4, n_head=4, img_size=32)
    largest = max(int(t.n_bytes) for t in gguf.GGUFReader(path).tensors)
    total = Path(path).stat().st_size
    tracemalloc.start()
    try:
        quantize(path, tmp_path / "big-q8.gguf", "q8_0")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 3 * largest < total / 4, (peak, largest, total)


def test_refusals(tmp_path: Path, demo32: str, capsys: pytest.CaptureFixture[str]) -> None:
    q8 = tmp_path / "q8.gguf"
    quantize(demo32, q8, "q8_0")
    with pytest.raises(jepa.UnsupportedError, match="already q8_0"):
        quantize(q8, tmp_path / "again.gguf", "q4_0")
    with pytest.raises(jepa.InvalidInputError, match="another file"):
        quantize(demo32, demo32, "q8_0")
    with pytest.raises(jepa.InvalidInputError, match="unknown --type"):
        plan(demo32, "q3_k")
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(Path(demo32).read_bytes()[:1000])
    assert main([str(broken), str(tmp_path / "x.gguf"), "--type", "q8_0"]) == 2
    assert f"jepa-quantize: error: {broken}: truncated: " in capsys.readouterr().err
    assert not (tmp_path / "x.gguf").exists()


def test_every_type_loads_and_runs(tmp_path: Path, demo32: str) -> None:
    """Each type loads and encodes; batched rows equal single rows bit for bit (ggml's quantized
    products quantize each activation row on its own)."""
    x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    ref = jepa.Model(demo32)
    base = jepa.pool(ref.context(threads=2).encode(x), "mean", ref)
    for t in TYPES:
        out = tmp_path / f"{t}.gguf"
        quantize(demo32, out, t)
        m = jepa.Model(str(out))
        assert m.info.file_type == FILE_TYPES[t]
        ctx = m.context(threads=2)
        tokens = ctx.encode(x)
        single = np.concatenate([ctx.encode(x[i : i + 1]) for i in range(3)])
        np.testing.assert_array_equal(tokens.view(np.uint32), single.view(np.uint32), err_msg=t)
        assert _cos(jepa.pool(tokens, "mean", m), base) > 0.99, t  # the 4-bit floor; tiers below


def test_q8_0_tiers_vit_and_vjepa2(tmp_path: Path, demo32: str, tiny_vjepa2_path: str) -> None:
    x = np.random.default_rng(1).standard_normal((4, 3, 32, 32)).astype(np.float32)
    q8 = quantize(demo32, tmp_path / "vit-q8.gguf", "q8_0")
    a, b = jepa.Model(demo32), jepa.Model(str(tmp_path / "vit-q8.gguf"))
    assert q8.type == "q8_0"
    assert (
        _cos(jepa.pool(a.context().encode(x), "mean", a), jepa.pool(b.context().encode(x), "mean", b))
        >= 0.999
    )
    # V-JEPA 2 with its head and masked predictor: pooled cosine, top-1, predictions.
    quantize(tiny_vjepa2_path, tmp_path / "v2-q8.gguf", "q8_0")
    m32, m8 = jepa.Model(tiny_vjepa2_path), jepa.Model(str(tmp_path / "v2-q8.gguf"))
    size = m32.info.img_size
    clips = np.random.default_rng(2).standard_normal((6, 3, m32.info.n_frames, size, size)).astype(np.float32)
    c32, c8 = m32.context(), m8.context()
    t32, t8 = c32.encode(clips), c8.encode(clips)
    assert _cos(t32.mean(1), t8.mean(1)) >= 0.999
    l32, _ = c32.classify(t32)
    l8, _ = c8.classify(t8)
    np.testing.assert_array_equal(l32.argmax(1), l8.argmax(1))
    ctx_ids, tgt_ids = np.arange(0, 9), np.arange(9, 18)
    assert _cos(c32.predict(t32, ctx_ids, tgt_ids), c8.predict(t8, ctx_ids, tgt_ids)) >= 0.999


@pytest.mark.torch
def test_q8_0_tiers_world_models(tmp_path: Path, tiny_ac_path: str, tiny_lewm_path: str) -> None:
    """Rollout energies / costs of the bundles' candidates within 1e-2 relative at q8_0."""
    quantize(tiny_ac_path, tmp_path / "ac-q8.gguf", "q8_0")
    quantize(tiny_lewm_path, tmp_path / "lewm-q8.gguf", "q8_0")
    # V-JEPA 2-AC: from the bundle's frames and pose.
    u8, s, acts = (
        golden(AC_BUNDLE, "frames_u8"),
        golden(AC_BUNDLE, "states")[0, 0],
        golden(AC_BUNDLE, "rollout_actions"),
    )
    e = [
        jepa.rollout(jepa.Model(p).context(), u8[:1], acts, goal=u8[1], state=s)["energies"]
        for p in (tiny_ac_path, str(tmp_path / "ac-q8.gguf"))
    ]
    np.testing.assert_allclose(e[1], e[0], rtol=1e-2)
    # LeWM: costs of the eval candidates from one history frame to the goal frame.
    lu8, cand = golden(LEWM_BUNDLE, "frames_u8"), golden(LEWM_BUNDLE, "cand_eval")[0]
    c = [
        world.rollout(jepa.Model(p).context(), lu8[:1], cand, goal=lu8[3])["costs"]
        for p in (tiny_lewm_path, str(tmp_path / "lewm-q8.gguf"))
    ]
    np.testing.assert_allclose(c[1], c[0], rtol=1e-2)


def test_the_default_output_is_a_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Counts by type, the sizes and their ratio, and each reason a weight matrix is not converted
    as asked on one line naming at most a handful of them; the table only with --verbose."""
    path = write_demo_model(tmp_path / "narrow.gguf", embed_dim=64, n_layer=2, n_head=2, img_size=32)
    n = len(gguf.GGUFReader(path).tensors)
    out = tmp_path / "q4k.gguf"
    assert main([path, str(out), "--type", "q4_k", "--keep", "enc.blk.1.*"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) <= 8, lines  # before: the whole table, one line per tensor (n + 2)
    assert not any(line.startswith("tensor ") for line in lines), lines
    p = plan(path, "q4_k", ["enc.blk.1.*"])
    kept = [s for s in p.steps if s.why == "kept (--keep)"]
    fell = [s for s in p.steps if s.target == "q4_0"]
    assert kept and fell
    assert f"tensors by type: {n} f32 -> " in lines[0] and "q4_k" in lines[0] and "q4_0" in lines[0], lines
    fixed = sum(s.source == s.target and not s.why for s in p.steps)
    assert f"  {fixed} tensors are not weight matrices" in lines[1], lines
    (keep_line,) = [line for line in lines if line.startswith("  kept (--keep): ")]
    assert keep_line.startswith(f"  kept (--keep): {len(kept)} tensors, {kept[0].name}, "), keep_line
    assert keep_line.endswith(f"and {len(kept) - 3} more"), keep_line
    assert any("do not fit q4_k's 256-value blocks: q4_0: " in line for line in lines), lines
    assert lines[-2].startswith(f"{len(p.steps) - fixed - len(kept)} of {n} tensors converted to q4_k; ")
    assert "MiB ->" in lines[-2] and lines[-2].endswith("x)") and lines[-1] == f"wrote {out}"

    assert main([path, "--type", "q4_k", "--dry-run", "--verbose"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("tensor ") and all(any(line.startswith(s.name + " ") for line in table)
                                                  for s in p.steps)
    assert table[-1].startswith(f"{len(p.steps) - fixed} of {n} tensors converted to q4_k; ")
    assert main([path, "--type", "q4_k", "--dry-run"]) == 0
    summary = capsys.readouterr().out.splitlines()
    assert len(summary) <= 8 and summary[0].startswith("tensors by type: "), summary


def _names(path: str) -> list[str]:
    return [t.name for t in gguf.GGUFReader(path).tensors]


def _quantize_in_child(*argv: str) -> tuple[int, str]:
    """jepa-quantize in a child process: a hang fails the test (timeout) instead of the run."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "jepa.cli.quantize", *argv], capture_output=True, text=True,
                       timeout=60)
    return r.returncode, r.stderr


def test_bad_inputs_are_one_line_naming_what(tmp_path: Path, demo32: str) -> None:
    """Before: a string key that is not UTF-8 was a UnicodeDecodeError traceback (gguf-py decodes
    when the key is copied), a tensor name that is not UTF-8 named no tensor, a FIFO input hung."""
    import os

    from gguf_forge import with_bad_string, with_bad_tensor_name

    cases = {
        with_bad_string(demo32, tmp_path / "name.gguf", "general.name"):
            "metadata key general.name: not valid UTF-8 (byte 0xff at offset 0)",
        with_bad_string(demo32, tmp_path / "family.gguf", "jepa.family"):
            "metadata key jepa.family: not valid UTF-8 (byte 0xff at offset 0)",
        with_bad_tensor_name(demo32, tmp_path / "tensor.gguf", "enc.norm.weight"):
            f'tensor #{_names(demo32).index("enc.norm.weight")} ("\\xffnc.norm.weight"): the tensor\'s name '
            "is not valid UTF-8",
    }
    os.mkfifo(tmp_path / "pipe.gguf")
    cases[str(tmp_path / "pipe.gguf")] = "not a regular file"
    cases[str(tmp_path)] = "not a regular file"
    cases[str(tmp_path / "missing.gguf")] = "cannot open: No such file or directory"
    for src, why in cases.items():
        rc, err = _quantize_in_child(src, str(tmp_path / "out.gguf"), "--type", "q8_0")
        assert rc == 2 and err == f"jepa-quantize: error: {src}: {why}\n", err
        assert not (tmp_path / "out.gguf").exists()


def test_an_unwritable_output_is_one_line(
    tmp_path: Path, demo32: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: IsADirectoryError, FileExistsError, FileNotFoundError or PermissionError tracebacks,
    and the directory case only after the whole conversion."""
    import os
    import tempfile

    (tmp_path / "file").write_text("x")
    cases = {
        str(tmp_path): "is a directory",
        str(tmp_path / "file" / "out.gguf"): f"{tmp_path / 'file'} is not a directory",
        str(tmp_path / "file" / "sub" / "out.gguf"): f"{tmp_path / 'file'} is not a directory",
        "/proc/no/such/out.gguf": "cannot create the directory /proc/no: ",  # ENOENT, or EACCES unless root
    }
    for dst, why in cases.items():
        assert main([demo32, dst, "--type", "q8_0"]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"jepa-quantize: error: {dst}: {why}") and err.count("\n") == 1, err

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)  # as root, chmod cannot refuse a write
    dst = tmp_path / "ro" / "out.gguf"
    assert main([demo32, str(dst), "--type", "q8_0"]) == 2
    assert capsys.readouterr().err == f"jepa-quantize: error: {dst}: cannot write in {dst.parent}: " \
                                      "Permission denied\n"
    assert os.listdir(tmp_path / "ro") == []
