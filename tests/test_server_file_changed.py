"""A served model's file replaced under a running jepa-server: by rename (the right way), rewritten in
place at the same size, or truncated in place and then written again (what `cp new.gguf model.gguf`
does). The server never dies (the engine's SIGBUS guard, csrc/src/weights.h), never answers from a
changed file, and serves the new file on a later request: -m models and --models-dir models alike."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_server_support import assert_envelope, decode_embeddings, http, image_item, server_process

from jepa.convert.quantize import quantize
from jepa.demo import write_demo_model

ITEM = image_item(3, (40, 40))


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two q4_0 models of the same shape and size but other weights (ggml's products: used in place from
    the mapping, where the engine's own kernels would repack them)."""
    d = tmp_path_factory.mktemp("changed")
    out = {}
    for seed in (1, 2):
        f16 = write_demo_model(d / f"f16-{seed}.gguf", ftype="f16", embed_dim=256, n_layer=2, n_head=4,
                               img_size=32, seed=seed)
        quantize(f16, str(d / f"q4-{seed}.gguf"), "q4_0")
        out[f"v{seed}"] = d / f"q4-{seed}.gguf"
    assert out["v1"].stat().st_size == out["v2"].stat().st_size
    return out


def by_rename(src: Path, dst: Path) -> None:
    tmp = dst.parent / f".{dst.name}.tmp"
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def in_place(src: Path, dst: Path) -> None:
    with open(src, "rb") as fi, open(dst, "r+b") as fo:
        fo.write(fi.read())
    t = time.time() + 5  # a timestamp of its own: not within one clock tick of the load
    os.utime(dst, (t, t))


def vector(url: str, model: str) -> np.ndarray | None:
    r = http(url + "/v1/embeddings", "POST", {"input": ITEM, "model": model})
    if r.status == 503:
        err = assert_envelope(r, 503)
        assert err["code"] in ("model_file_changed", "model_load_failed"), err
        assert "Retry-After" in r.headers or "retry-after" in {k.lower() for k in r.headers}, r.headers
        return None
    assert r.status == 200, r.body
    return decode_embeddings(r.json())[0]


def settle(url: str, model: str, tries: int = 40) -> np.ndarray:
    """The first vector served after the change (503s with Retry-After meanwhile)."""
    for _ in range(tries):
        v = vector(url, model)
        if v is not None:
            return v
        time.sleep(0.25)
    raise AssertionError("the new file was never served")


def served_new(url: str, model: str, old: np.ndarray, seconds: float = 10.0) -> np.ndarray:
    """The vector once the new file serves: a replacement by rename is seen within the registry's
    REPLACED_CHECK_S (the old file's answers until then are right: its mapping is intact)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        v = vector(url, model)
        if v is not None and not np.array_equal(bits(v), bits(old)):
            return v
        time.sleep(0.2)
    raise AssertionError("the new file was never served")


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, np.float32).view(np.uint32)


@pytest.mark.parametrize("how", [by_rename, in_place], ids=["rename", "in-place"])
@pytest.mark.parametrize("layout", ["-m", "--models-dir"])
def test_a_replaced_file_is_served_new_and_the_server_lives(
    files: dict[str, Path], tmp_path: Path, how: Callable[[Path, Path], None], layout: str
) -> None:
    served = tmp_path / "models" / "m.gguf"
    served.parent.mkdir()
    shutil.copyfile(files["v1"], served)
    args = ("-m", str(served)) if layout == "-m" else ("--models-dir", str(served.parent))
    with server_process(*args, "--port", "0") as s:
        old = settle(s.url, "m")
        how(files["v2"], served)
        new = served_new(s.url, "m", old)
        again = vector(s.url, "m")
        assert again is not None and np.array_equal(bits(again), bits(new))
        assert http(s.url + "/health").status == 200
        assert s.proc is not None and s.proc.poll() is None


def test_a_file_truncated_then_written_is_refused_then_served(files: dict[str, Path], tmp_path: Path) -> None:
    served = tmp_path / "m.gguf"
    shutil.copyfile(files["v1"], served)
    with server_process("-m", str(served), "--port", "0") as s:
        old = settle(s.url, "m")
        os.truncate(served, 4096)  # what cp does first: before, the next request killed the server (SIGBUS)
        assert vector(s.url, "m") is None  # 503 with Retry-After, never an answer from the cut file
        assert http(s.url + "/health").status == 200
        with open(files["v2"], "rb") as fi, open(served, "r+b") as fo:
            fo.write(fi.read())
        served_new(s.url, "m", old)
        assert s.proc is not None and s.proc.poll() is None
