"""`jepa-convert --ftype bf16`: the half-class matrices as bfloat16, rounded to nearest even from f32.

The writer's bits are checked against a scalar reference written out case by case (ties, overflow,
subnormals, NaN), against torch's own f32 -> bf16 cast for every non-NaN value, and in the file the
engine reads; a converted tiny HF ViT then loads and pools within cosine 0.9999 of the f32 file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

import jepa
from jepa.convert import convert
from jepa.convert.cli import main as convert_main
from jepa.convert.recipes import HF_VIT_RECIPE
from jepa.gguf.keys import FILE_TYPES
from jepa.gguf.schema import Encoder, Meta
from jepa.gguf.tensors import may_be_half
from jepa.gguf.writer import bf16_bits_to_f32, f32_to_bf16_bits, write_gguf

pytestmark = pytest.mark.every_path


def _ref_bits(u: int) -> int:
    """bf16 bits of the f32 with bit pattern u, written out the long way (no shared code with the writer)."""
    sign, exp, man = u >> 31, (u >> 23) & 0xFF, u & 0x7FFFFF
    if exp == 0xFF and man:  # NaN: keep sign and the top payload bits, force the quiet bit
        return (u >> 16) | 0x0040
    hi, lo = u >> 16, u & 0xFFFF  # the kept half and the dropped half
    if lo > 0x8000 or (lo == 0x8000 and hi & 1):  # above the tie, or a tie with an odd kept half
        hi += 1  # may carry into the exponent: the largest finite values round up to infinity
    assert hi >> 15 == sign  # never carries into the sign (a carry out of the exponent is a NaN, handled)
    return hi


CASES = {  # f32 bit pattern -> bf16 bits
    0x3F800000: 0x3F80,  # 1.0
    0x3F808000: 0x3F80,  # 1 + 2^-8: a tie, kept half even -> down
    0x3F818000: 0x3F82,  # 1 + 3 * 2^-8: a tie, kept half odd -> up
    0x3F808001: 0x3F81,  # just above the tie -> up
    0x3F807FFF: 0x3F80,  # just below the tie -> down
    0xBF818000: 0xBF82,  # negative ties round the magnitude the same way
    0x80000000: 0x8000,  # -0.0
    0x7F7FFFFF: 0x7F80,  # the largest finite f32 rounds to +inf
    0xFF7FFFFF: 0xFF80,  # and its negative to -inf
    0x7F7F7FFF: 0x7F7F,  # below the overflow tie: stays finite
    0x7F800000: 0x7F80,  # +inf
    0xFF800000: 0xFF80,  # -inf
    0x7FC00000: 0x7FC0,  # the canonical quiet NaN
    0xFFC00000: 0xFFC0,  # a negative quiet NaN keeps its sign
    0x7F800001: 0x7FC0,  # a signalling NaN whose payload is all in the dropped half: still a NaN, not inf
    0x7FFFFFFF: 0x7FFF,  # a NaN whose rounding would carry: no carry
    0x7FA12345: 0x7FE1,  # payload's top bits kept, quiet bit set
    0x00008000: 0x0000,  # subnormal tie, even -> down (no flush to zero, no flush from it)
    0x00018000: 0x0002,  # subnormal tie, odd -> up
    0x007FFFFF: 0x0080,  # the largest subnormal rounds up to the smallest normal
}


def test_reference_cases() -> None:
    for u, want in CASES.items():
        assert _ref_bits(u) == want, hex(u)
    got = f32_to_bf16_bits(np.array(list(CASES), np.uint32).view(np.float32))
    assert got.dtype == np.uint16
    assert [hex(int(b)) for b in got] == [hex(w) for w in CASES.values()]


def test_random_patterns_match_the_reference_and_torch() -> None:
    import torch

    rng = np.random.default_rng(0)
    u = rng.integers(0, 2**32, 20_000, dtype=np.uint64).astype(np.uint32)
    # Plenty of exact ties and NaNs among them (a uniform draw rarely hits either).
    u[:2000] = (u[:2000] & np.uint32(0xFFFF0000)) | np.uint32(0x8000)
    u[2000:2500] = (u[2000:2500] | np.uint32(0x7F800000)) & np.uint32(0xFFFFFFFF)
    got = f32_to_bf16_bits(u.view(np.float32))
    want = np.array([_ref_bits(int(v)) for v in u], np.uint16)
    assert np.array_equal(got, want)
    # torch's cast is round-to-nearest-even too; it canonicalises NaNs, so compare the rest.
    finite = ~np.isnan(u.view(np.float32))
    t = torch.from_numpy(u.view(np.float32)[finite].copy()).to(torch.bfloat16).view(torch.int16).numpy()
    assert np.array_equal(got[finite], t.view(np.uint16))
    nan_back = bf16_bits_to_f32(got[~finite])
    assert np.isnan(nan_back).all()
    assert np.array_equal(np.signbit(nan_back), np.signbit(u.view(np.float32)[~finite]))


def test_every_bf16_value_round_trips() -> None:
    bits = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16)
    back = f32_to_bf16_bits(bf16_bits_to_f32(bits))
    # Every pattern comes back unchanged, except signalling NaNs, which come back quiet.
    signalling = ((bits & 0x7F80) == 0x7F80) & ((bits & 0x7F) != 0) & ((bits & 0x40) == 0)
    assert np.array_equal(back[~signalling], bits[~signalling])
    assert np.array_equal(back[signalling], bits[signalling] | 0x40)


ENC = Encoder(embed_dim=8, n_layer=1, n_head=2, ffn_dim=16, patch_size=4, img_size=8)


def test_the_file_holds_those_bits(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    tensors: dict[str, np.ndarray] = {}
    for n, e in ENC.table().items():
        tensors[n] = rng.standard_normal(e.shape).astype(np.float32)  # enc.pos_embed: 4 patches + CLS
    special = np.array(list(CASES), np.uint32).view(np.float32)
    up = tensors["enc.blk.0.ffn_up.weight"].reshape(-1)
    up[: special.size] = special  # ties, overflow, subnormals and NaNs in a bf16 matrix
    path = write_gguf(tmp_path / "b.gguf", Meta(family="hfvit", name="t"), ENC, HF_VIT_RECIPE,
                      tensors.items(), ftype="bf16")
    r = gguf.GGUFReader(path)
    assert int(r.fields["general.file_type"].contents()) == FILE_TYPES["bf16"] == 32
    seen = 0
    for t in r.tensors:
        src = tensors[t.name]
        if may_be_half(t.name):
            assert t.tensor_type == gguf.GGMLQuantizationType.BF16, t.name
            bits = np.frombuffer(np.asarray(t.data).tobytes(), "<u2").reshape(src.shape)
            want = np.array([_ref_bits(int(v)) for v in src.view(np.uint32).reshape(-1)], np.uint16)
            assert np.array_equal(bits.reshape(-1), want), t.name
            seen += 1
        else:
            assert t.tensor_type == gguf.GGMLQuantizationType.F32, t.name
            assert np.array_equal(np.asarray(t.data).reshape(src.shape), src), t.name
    assert seen == 6  # q, k, v, out, up, down


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))


def test_converted_vit_loads_and_pools_close_to_f32(tmp_path: Path, hf_model: Any) -> None:
    src, _ = hf_model("vit", hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                      intermediate_size=128, image_size=32, patch_size=16)
    files = {ft: convert(src, tmp_path / f"{ft}.gguf", ftype=ft) for ft in ("f32", "bf16")}
    assert Path(files["bf16"]).stat().st_size < Path(files["f32"]).stat().st_size
    x = np.random.default_rng(2).standard_normal((3, 3, 32, 32)).astype(np.float32)
    out = {}
    for ft, p in files.items():
        m = jepa.Model(p)
        assert int(m.info.file_type) == FILE_TYPES[ft]
        out[ft] = (m.context(threads=1).encode(x), m)
    (t32, m32), (t16, m16) = out["f32"], out["bf16"]
    assert not np.array_equal(t32, t16)  # the matrices really are rounded
    cos = _cos(jepa.pool(t16, "mean", m16), jepa.pool(t32, "mean", m32))
    assert cos.min() >= 0.9999, cos


def test_cli_bf16(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "demo-bf16.gguf"
    assert convert_main(["--demo", "--out", str(out), "--ftype", "bf16"]) == 0
    r = gguf.GGUFReader(out)
    types = {t.name: t.tensor_type.name for t in r.tensors}
    assert {n for n, ty in types.items() if ty == "BF16"} == {n for n in types if may_be_half(n)}
    assert int(jepa.Model(str(out)).info.file_type) == 32

