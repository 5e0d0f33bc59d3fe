"""The library against hostile input (issue 10): every string a GGUF file holds is checked as UTF-8
by the loader, a path with a NUL byte is refused, NaN / infinity inputs are refused by every engine
call naming the argument, and a call whose output would pass the context's max_output_bytes is
refused before its output is allocated. Each is a JepaError subclass, never a crash or a
UnicodeDecodeError."""

from __future__ import annotations

import contextlib
import os
import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa import _engine
from jepa.testing.random_world import write_random_ac, write_random_lewm

from conftest import model_and_context

model, ctx = model_and_context("tiny_vit_path", threads=1)


# ---- strings from the file -----------------------------------------------------------------------


def _gguf_string_at(data: bytes, key: str) -> int:
    """Offset of the bytes of string value `key` (GGUF v3: key length u64, key, type i32 = 8,
    value length u64, value)."""
    k = key.encode()
    at = data.index(struct.pack("<Q", len(k)) + k + struct.pack("<i", 8))
    return at + 8 + len(k) + 4 + 8


def _forged(src: str, tmp_path: Path, edit: Callable[[bytearray], None]) -> str:
    b = bytearray(Path(src).read_bytes())
    edit(b)
    out = tmp_path / "forged.gguf"
    out.write_bytes(bytes(b))
    return str(out)


def _bad_value(key: str) -> Callable[[bytearray], None]:
    def edit(b: bytearray) -> None:
        b[_gguf_string_at(bytes(b), key)] = 0xFF  # never valid in UTF-8
    return edit


def _bad_label(b: bytearray) -> None:
    b[bytes(b).index(b"class 3") + 6] = 0xC3  # a lead byte with no continuation


def _bad_key_name(b: bytearray) -> None:
    at = bytes(b).index(b"general.name")
    b[at + len("general.nam")] = 0xFE


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (_bad_value("general.name"), "general.name"),
        (_bad_value("jepa.family"), "jepa.family"),
        (_bad_value("jepa.modality"), "jepa.modality"),
        (_bad_value("jepa.pre.resample"), "jepa.pre.resample"),
        (_bad_label, "jepa.head.labels[3]"),
        (_bad_key_name, "general.nam\\xfe"),
    ],
    ids=["general.name", "jepa.family", "jepa.modality", "jepa.pre.resample", "a label", "a key's name"],
)
def test_a_string_that_is_not_utf8_is_a_model_file_error_naming_it(
    tiny_vjepa2_path: str, tmp_path: Path, edit: Callable[[bytearray], None], needle: str
) -> None:
    path = _forged(tiny_vjepa2_path, tmp_path, edit)
    with pytest.raises(jepa.ModelFileError, match="UTF-8") as info:
        jepa.Model(path)
    assert needle in str(info.value)


def test_messages_are_text_whatever_the_bytes_of_the_path(tmp_path: Path) -> None:
    """A message quotes the path (and ggml's reasons quote the file): it reaches Python as text."""
    bad = os.fsencode(tmp_path) + b"/caf\xe9.gguf"
    with pytest.raises(jepa.ModelFileError, match=r"caf\\xe9\.gguf: No such file"):
        jepa.Model(bad)  # type: ignore[arg-type]


def test_a_path_with_a_nul_byte_is_refused(tiny_vit_path: str) -> None:
    """Before: the part before the NUL was loaded."""
    with pytest.raises(jepa.InvalidInputError, match="NUL") as info:
        jepa.Model(tiny_vit_path + "\0.anything")
    assert info.value.param == "path"


# ---- non-finite inputs -------------------------------------------------------------------------------

NON_FINITE = [np.nan, np.inf, -np.inf]


@pytest.mark.parametrize("value", NON_FINITE, ids=["nan", "inf", "-inf"])
def test_non_finite_pixels_are_refused(ctx: jepa.Context, value: float) -> None:
    x = np.zeros((3, 3, 32, 32), np.float32)
    x[2, 1, 5, 7] = value
    with pytest.raises(jepa.InvalidInputError, match=r"non-finite .*item 2") as info:
        ctx.encode(x)
    assert info.value.param == "pixels"
    assert np.isfinite(ctx.encode(np.zeros((1, 3, 32, 32), np.float32))).all()  # the context still works


def test_non_finite_tokens_are_refused_by_classify_and_predict(tiny_vjepa2_path: str) -> None:
    m = jepa.Model(tiny_vjepa2_path)
    c = m.context(threads=1)
    tokens = c.encode(np.zeros((1, 3, 4, 48, 48), np.float32))
    tokens[0, 3, 5] = np.nan
    with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
        c.classify(tokens)
    assert info.value.param == "tokens"
    with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
        c.predict(tokens, np.arange(4), np.arange(4, 8))
    assert info.value.param == "tokens"


@pytest.fixture(scope="module")
def lewm(tmp_path_factory: pytest.TempPathFactory) -> jepa.Context:
    path = write_random_lewm(
        tmp_path_factory.mktemp("lewm") / "lewm.gguf", enc_dim=32, enc_layers=1, enc_heads=2, patch_size=8,
        img_size=16, embed_dim=32, n_layer=1, n_head=2, head_dim=16, ffn_dim=64, proj_hidden=64,
    )
    return jepa.Model(path).context(threads=1)


@pytest.fixture(scope="module")
def ac(tmp_path_factory: pytest.TempPathFactory) -> jepa.Context:
    path = write_random_ac(
        tmp_path_factory.mktemp("ac") / "ac.gguf", embed_dim=32, n_layer=1, n_head=2, enc_dim=32, n_frames=4,
    )
    return jepa.Model(path).context(threads=1)


def test_non_finite_world_inputs_are_refused_by_name(lewm: jepa.Context, ac: jepa.Context) -> None:
    i = lewm.model.info
    tokens = np.zeros((2, lewm.model.n_tokens(), i.embed_dim), np.float32)
    tokens[1, 0, 0] = np.inf
    with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
        lewm.world_latents(tokens)
    assert info.value.param == "tokens"

    z = np.zeros((1, 2, i.wm_embed_dim), np.float32)
    a = np.zeros((1, 2, i.pred_action_dim), np.float32)
    for name, arrays in (("latents", (z, a)), ("actions", (z, a))):
        bad = [arr.copy() for arr in arrays]
        bad[0 if name == "latents" else 1][0, 1, 0] = np.nan
        with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
            lewm.world_predict(bad[0], bad[1])
        assert info.value.param == name
    assert np.isfinite(lewm.world_predict(z, a)).all()

    j = ac.model.info
    hw = j.pred_grid_size**2
    za = np.zeros((1, 2 * hw, j.embed_dim), np.float32)
    aa = np.zeros((1, 2, j.pred_action_dim), np.float32)
    sa = np.zeros((1, 2, j.pred_state_dim), np.float32)
    sa[0, 1, 3] = -np.inf
    with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
        ac.world_predict(za, aa, sa)
    assert info.value.param == "states"


# ---- output sizes -------------------------------------------------------------------------------------


def test_the_default_cap_is_a_quarter_of_memory() -> None:
    mem = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for f in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            v = Path(f).read_text().strip()
        except OSError:
            continue
        if v.isdigit() and len(v) < 19:
            mem = min(mem, int(v))
    assert _engine.context_default_params().max_output_bytes == max(mem // 4, 64 << 20)
    assert jepa.model.CONTEXT_DEFAULTS.max_output_bytes == _engine.context_default_params().max_output_bytes


def test_a_negative_cap_is_refused(model: jepa.Model) -> None:
    with pytest.raises(jepa.InvalidInputError, match="max_output_bytes") as info:
        model.context(max_output_bytes=-1)
    assert info.value.param == "max_output_bytes"


def _peak_bytes(call: Callable[[], object]) -> int:
    """Peak bytes Python and numpy allocated during call() (numpy reports to tracemalloc)."""
    tracemalloc.start()
    try:
        with contextlib.suppress(jepa.ResourceLimitError):
            call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_an_output_over_the_cap_is_refused_before_it_is_allocated(model: jepa.Model) -> None:
    x = np.zeros((64, 3, 32, 32), np.float32)
    out_bytes = 64 * model.n_tokens() * model.embed_dim * 4
    small = model.context(threads=1, max_output_bytes=out_bytes - 1)
    with pytest.raises(jepa.ResourceLimitError, match="max_output_bytes") as info:
        small.encode(x)
    assert info.value.param == "max_output_bytes" and str(out_bytes) in str(info.value)
    assert _peak_bytes(lambda: small.encode(x)) < out_bytes // 4
    # At the cap exactly, it runs; 0 is no cap.
    assert model.context(threads=1, max_output_bytes=out_bytes).encode(x).nbytes == out_bytes
    assert model.context(threads=1, max_output_bytes=0).encode(x).nbytes == out_bytes


def test_a_huge_target_count_is_refused_before_the_output_is_allocated(tiny_vjepa2_path: str) -> None:
    """A million target ids (4 MB of int32) would ask for a 256 MB prediction; over a 64 MB cap it
    is refused, allocating next to nothing."""
    m = jepa.Model(tiny_vjepa2_path)
    c = m.context(threads=1, max_output_bytes=64 << 20)
    tokens = np.zeros((1, 8, m.embed_dim), np.float32)
    targets = np.zeros((1, 1_000_000), np.int32)
    with pytest.raises(jepa.ResourceLimitError, match="predict: the output would take") as info:
        c.predict(tokens, np.arange(8), targets, gathered=True)
    assert info.value.param == "max_output_bytes"
    assert _peak_bytes(lambda: c.predict(tokens, np.arange(8), targets, gathered=True)) < 32 << 20


def test_world_outputs_are_capped(lewm: jepa.Context) -> None:
    i = lewm.model.info
    z = np.zeros((4, 2, i.wm_embed_dim), np.float32)
    a = np.zeros((4, 2, i.pred_action_dim), np.float32)
    one = z.nbytes
    capped = lewm.model.context(threads=1, max_output_bytes=one)
    assert capped.world_predict(z, a).nbytes == one  # one output fits
    with pytest.raises(jepa.ResourceLimitError, match="world_predict") as info:
        capped.world_predict(z, a, taps=True)  # three do not
    assert info.value.param == "max_output_bytes"
    tokens = np.zeros((4, lewm.model.n_tokens(), i.embed_dim), np.float32)
    tiny = lewm.model.context(threads=1, max_output_bytes=4 * i.wm_embed_dim * 4 - 4)
    with pytest.raises(jepa.ResourceLimitError, match="world_latents"):
        tiny.world_latents(tokens)
