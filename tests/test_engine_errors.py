"""Bad input from Python: every mistake is the right jepa.*Error subclass with a useful message, and
the model and context keep working afterwards.

The native side of bad model files is tests/native/test_gguf_fuzz.cpp."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import jepa

from conftest import model_and_context

IMG, PATCH, DIM = 32, 16, 192  # conftest's tiny_vit: 1 + 2 x 2 = 5 tokens


model, ctx = model_and_context("tiny_vit_path", threads=1)


@pytest.fixture(scope="module")
def reference(ctx: jepa.Context) -> np.ndarray:
    return ctx.encode(_images(2))


def _images(b: int = 1, c: int = 3, h: int = IMG, w: int = IMG) -> np.ndarray:
    rng = np.random.default_rng(0)
    return rng.standard_normal((b, c, h, w)).astype(np.float32)


def _still_works(ctx: jepa.Context, reference: np.ndarray) -> None:
    out = ctx.encode(_images(2))
    assert out.view(np.uint32).tobytes() == reference.view(np.uint32).tobytes()


BAD_INPUTS: list[tuple[str, Callable[[], object], type[jepa.JepaError], tuple[str, ...]]] = [
    ("float64", lambda: _images().astype(np.float64), jepa.InvalidInputError, ("float32", "float64")),
    ("float16", lambda: _images().astype(np.float16), jepa.InvalidInputError, ("float32", "float16")),
    ("int32", lambda: np.zeros((1, 3, IMG, IMG), np.int32), jepa.InvalidInputError, ("float32", "int32")),
    ("uint8", lambda: np.zeros((1, 3, IMG, IMG), np.uint8), jepa.InvalidInputError, ("float32", "uint8")),
    ("a python int", lambda: 3, jepa.InvalidInputError, ("numpy array", "int")),
    ("a nested list", lambda: _images().tolist(), jepa.InvalidInputError, ("numpy array", "list")),
    ("3-D", lambda: _images()[0], jepa.InvalidInputError, (f"[3, {IMG}, {IMG}]",)),
    ("2-D", lambda: _images()[0, 0], jepa.InvalidInputError, (f"[{IMG}, {IMG}]",)),
    ("6-D", lambda: _images()[:, :, None, None], jepa.InvalidInputError, (f"[1, 3, 1, 1, {IMG}, {IMG}]",)),
    ("4 channels", lambda: _images(c=4), jepa.InvalidInputError, ("3 channels", "4")),
    ("1 channel", lambda: _images(c=1), jepa.InvalidInputError, ("3 channels", "1")),
    ("channels last", lambda: _images().transpose(0, 2, 3, 1).copy(), jepa.InvalidInputError, ()),
    (
        "H not a multiple of the patch",
        lambda: _images(h=IMG - PATCH // 2),
        jepa.InvalidInputError,
        (f"{IMG - PATCH // 2}x{IMG}", f"patch size {PATCH}"),
    ),
    (
        "W not a multiple of the patch",
        lambda: _images(w=IMG + PATCH // 2),
        jepa.InvalidInputError,
        (f"{IMG}x{IMG + PATCH // 2}", f"patch size {PATCH}"),
    ),
    ("smaller than a patch", lambda: _images(h=4, w=4), jepa.InvalidInputError, ("4x4",)),
    (
        "a clip of 2 frames for an image model",
        lambda: np.zeros((1, 3, 2, IMG, IMG), np.float32),
        jepa.InvalidInputError,
        ("T = 1", "2"),
    ),
]


@pytest.mark.parametrize(("what", "make", "cls", "needles"), BAD_INPUTS, ids=[b[0] for b in BAD_INPUTS])
def test_encode_refuses_bad_input(
    ctx: jepa.Context,
    reference: np.ndarray,
    what: str,
    make: Callable[[], object],
    cls: type[jepa.JepaError],
    needles: tuple[str, ...],
) -> None:
    with pytest.raises(cls) as info:
        ctx.encode(make())  # type: ignore[arg-type]
    msg = str(info.value)
    for n in needles:
        assert n in msg, f"{what}: {msg!r} lacks {n!r}"
    assert info.value.status == cls.status
    _still_works(ctx, reference)


def test_invalid_input_is_also_a_value_error(ctx: jepa.Context) -> None:
    # Callers that know nothing of jepa can still catch bad input as ValueError.
    with pytest.raises(ValueError, match="float32"):
        ctx.encode(_images().astype(np.float64))


def test_non_native_grid_is_refused(ctx: jepa.Context, reference: np.ndarray) -> None:
    # A learned position table covers the native grid only: a bigger image is refused, naming both sizes.
    with pytest.raises((jepa.UnsupportedError, jepa.InvalidInputError)) as info:
        ctx.encode(_images(h=2 * IMG, w=2 * IMG))
    msg = str(info.value)
    assert f"{2 * IMG}x{2 * IMG}" in msg and f"{IMG}x{IMG}" in msg, msg
    _still_works(ctx, reference)


def test_empty_batch_is_refused(ctx: jepa.Context, reference: np.ndarray) -> None:
    with pytest.raises(jepa.InvalidInputError, match="dimension"):
        ctx.encode(np.zeros((0, 3, IMG, IMG), np.float32))
    _still_works(ctx, reference)


def test_empty_batch_message_is_not_stale(ctx: jepa.Context) -> None:
    with pytest.raises(jepa.InvalidInputError):
        ctx.encode(_images(c=4))  # leaves "expected 3 channels, got 4" as the thread's engine message
    with pytest.raises(jepa.InvalidInputError) as info:
        ctx.encode(np.zeros((0, 3, IMG, IMG), np.float32))
    assert "channels" not in str(info.value), str(info.value)


def test_channels_last_names_the_channels(ctx: jepa.Context) -> None:
    with pytest.raises(jepa.InvalidInputError, match="channels"):
        ctx.encode(_images().transpose(0, 2, 3, 1).copy())


def test_non_contiguous_input_is_accepted(ctx: jepa.Context, reference: np.ndarray) -> None:
    # Strided views are made contiguous, not refused, and give the same bits.
    x = _images(2)
    wide = np.zeros((2, 3, IMG, 2 * IMG), np.float32)
    wide[..., ::2] = x
    out = ctx.encode(wide[..., ::2])
    assert out.view(np.uint32).tobytes() == reference.view(np.uint32).tobytes()


def test_nan_input_is_refused(ctx: jepa.Context, reference: np.ndarray) -> None:
    # A NaN would turn the whole output into NaN without a word: refused by name (issue 10;
    # tests/test_library_hardening.py covers every call), and nothing sticks.
    x = _images()
    x[0, 0, 0, 0] = np.nan
    with pytest.raises(jepa.InvalidInputError, match="non-finite") as info:
        ctx.encode(x)
    assert info.value.param == "pixels"
    _still_works(ctx, reference)


@pytest.mark.parametrize(
    ("device", "cls", "needle"),
    [
        ("gpu", jepa.InvalidInputError, "unknown device"),
        ("CPU", jepa.InvalidInputError, "unknown device"),
        ("", jepa.InvalidInputError, "unknown device"),
        ("cpu:0", jepa.InvalidInputError, "cpu:0"),
        ("cuda:x", jepa.InvalidInputError, "cuda:x"),
        ("cuda:-1", jepa.InvalidInputError, "cuda:-1"),
        (0, jepa.InvalidInputError, "device must be a string"),
    ],
)
def test_bad_device(tiny_vit_path: str, device: object, cls: type[jepa.JepaError], needle: str) -> None:
    with pytest.raises(cls, match=None) as info:
        jepa.Model(tiny_vit_path, device=device)  # type: ignore[arg-type]
    assert needle in str(info.value)


def test_cuda_device_without_cuda(tiny_vit_path: str) -> None:
    # The test command builds the CPU engine (.ci/gpu_check.sh builds CUDA and runs the parity suites).
    with pytest.raises(jepa.UnsupportedError, match="CUDA"):
        jepa.Model(tiny_vit_path, device="cuda")


def test_default_device_from_environment(tiny_vit_path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # JEPA_DEVICE names the device a Model loads on when none is given (.ci/gpu_check.sh uses it).
    monkeypatch.setenv("JEPA_DEVICE", "cpu")
    assert jepa.Model(tiny_vit_path).device == "cpu"
    monkeypatch.setenv("JEPA_DEVICE", "tpu:0")
    with pytest.raises(jepa.InvalidInputError, match="tpu:0"):
        jepa.Model(tiny_vit_path)
    # An explicit device wins over the environment; None means "the default".
    assert jepa.Model(tiny_vit_path, device="cpu").device == "cpu"
    with pytest.raises(jepa.InvalidInputError, match="tpu:0"):
        jepa.Model(tiny_vit_path, device=None)
    monkeypatch.delenv("JEPA_DEVICE")
    assert jepa.Model(tiny_vit_path).device == "cpu"


@pytest.mark.parametrize("threads", [-(2**40), 2**40, 100_000])
def test_bad_thread_count(model: jepa.Model, threads: int) -> None:
    # Out of range for the engine (or for a C int): an error, not a wrap-around or a crash.
    with pytest.raises((jepa.InvalidInputError, OverflowError, TypeError)):
        model.context(threads=threads)


@pytest.mark.parametrize("max_batch", [0, -1, 100_000])
def test_bad_max_batch(model: jepa.Model, max_batch: int) -> None:
    with pytest.raises(jepa.InvalidInputError, match="max_batch"):
        model.context(max_batch=max_batch)


def _garbage(tmp: Path) -> Path:
    p = tmp / "garbage.gguf"
    p.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    return p


def _empty(tmp: Path) -> Path:
    p = tmp / "empty.gguf"
    p.write_bytes(b"")
    return p


def _truncated(tmp: Path, src: str) -> Path:
    data = Path(src).read_bytes()
    p = tmp / "truncated.gguf"
    p.write_bytes(data[: len(data) // 2])
    return p


def _text(tmp: Path) -> Path:
    p = tmp / "model.txt"
    p.write_text("not a model\n")
    return p


@pytest.mark.parametrize(
    ("what", "make", "needle"),
    [
        ("missing", lambda tmp, src: tmp / "no-such.gguf", "no-such.gguf"),
        ("a directory", lambda tmp, src: tmp, "not a regular file"),
        ("empty", lambda tmp, src: _empty(tmp), "empty.gguf"),
        ("garbage after the magic", lambda tmp, src: _garbage(tmp), "garbage.gguf"),
        ("text", lambda tmp, src: _text(tmp), "model.txt"),
        ("truncated in the data", _truncated, "past the end"),
    ],
)
def test_bad_model_file(
    tmp_path: Path,
    tiny_vit_path: str,
    ctx: jepa.Context,
    reference: np.ndarray,
    what: str,
    make: Callable[[Path, str], Path],
    needle: str,
) -> None:
    path = make(tmp_path, tiny_vit_path)
    with pytest.raises(jepa.ModelFileError) as info:
        jepa.Model(path)
    assert needle in str(info.value), f"{what}: {info.value}"
    assert info.value.status == jepa.ModelFileError.status
    # A refused file leaves the process, and models loaded before it, working.
    _still_works(ctx, reference)
    assert jepa.Model(tiny_vit_path).info.embed_dim == DIM


def test_path_types(tmp_path: Path, tiny_vit_path: str) -> None:
    # str and PathLike work; bytes or None are a clear error, not a crash.
    assert jepa.Model(Path(tiny_vit_path)).info.embed_dim == DIM
    for bad in (None, 3):
        with pytest.raises((TypeError, jepa.JepaError)):
            jepa.Model(bad)  # type: ignore[arg-type]


def test_errors_after_many_failures(ctx: jepa.Context, reference: np.ndarray, tmp_path: Path) -> None:
    # Hundreds of refusals in a row leak nothing that breaks the next good call.
    bad_file = _text(tmp_path)
    for _ in range(200):
        with pytest.raises(jepa.InvalidInputError):
            ctx.encode(_images(c=2))
        with pytest.raises(jepa.ModelFileError):
            jepa.Model(bad_file)
    _still_works(ctx, reference)


def test_kernel_scratch_failure_is_a_resource_error(wide_vit_path: str) -> None:
    # A kernel that cannot get its scratch memory computes nothing; the call is refused with
    # ResourceLimitError and the process keeps working. JEPA_SCRATCH_LIMIT_BYTES caps one allocation
    # (read once per process, hence the subprocess): a 224 px model's attention needs more than 4 KB.
    code = f"""
import numpy as np, jepa
m = jepa.Model({wide_vit_path!r})
if not m.info.matmul.startswith("jepa: "):
    print("ggml")  # no engine kernels on this CPU: nothing allocates scratch
    raise SystemExit(0)
x = np.zeros((2, 3, 224, 224), np.float32)
for threads in (2, 1):  # twice, on fresh contexts: each call a clean refusal, never a crash
    try:
        m.context(threads=threads).encode(x)
    except jepa.ResourceLimitError as e:
        print("refused:", e)
print("alive")
"""
    env = {**os.environ, "JEPA_SCRATCH_LIMIT_BYTES": "4096"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    if r.stdout.startswith("ggml"):
        return
    assert r.stdout.count("refused:") == 2 and "scratch" in r.stdout, r.stdout
    assert r.stdout.strip().endswith("alive")


def test_what_the_model_lacks_is_the_engines_refusal(ctx: jepa.Context) -> None:
    """A plain ViT has no head, no masked predictor and no world model: each call is refused by the
    engine itself (the Python layer does not repeat the check), as UnsupportedError."""
    tokens = ctx.encode(_images())
    with pytest.raises(jepa.UnsupportedError, match="no classifier head"):
        ctx.classify(tokens)
    with pytest.raises(jepa.UnsupportedError, match="no masked predictor"):
        ctx.predict(tokens, [0], [1])
    with pytest.raises(jepa.UnsupportedError, match="not a world model"):
        ctx.world_latents(tokens)
    with pytest.raises(jepa.UnsupportedError, match="not a world model"):
        ctx.world_predict(tokens, np.zeros((len(tokens), 1, 7), np.float32))
    with pytest.raises(jepa.UnsupportedError, match="not a world model"):
        jepa.rollout(ctx, _images()[0], np.zeros((1, 2, 7), np.float32))


def test_context_settings_go_through_the_engine(model: jepa.Model) -> None:
    """threads and max_batch are set through the engine's own calls (which refuse a bad value);
    the byte caps are fixed when the context is made."""
    ctx = model.context(threads=1, max_batch=4)
    ctx.threads, ctx.max_batch = 2, 8
    assert (ctx.threads, ctx.max_batch) == (2, 8)
    with pytest.raises(jepa.InvalidInputError, match="max_batch"):
        ctx.max_batch = 0
    assert ctx.max_batch == 8
    with pytest.raises(AttributeError, match="fixed"):
        ctx.max_graph_bytes = 1
