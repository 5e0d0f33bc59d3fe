"""A model file changed under the running process (jepa.Model.file_changed, csrc/src/weights.h): the
file truncated in place (`cp new.gguf model.gguf` truncates first: a read of the mapping past the new
end was a SIGBUS that killed the process), rewritten in place at the same size (a hybrid of old and new
weights), truncated while graphs run, or replaced by rename (the right way). Each runs in a child
process, so a regression that kills it fails the test instead of the suite."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jepa.convert.quantize import quantize
from jepa.demo import write_demo_model

CHILD = r"""
import os, shutil, sys, threading, time
import numpy as np
import jepa

src, path, case = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.copy(src, path)
model = jepa.Model(path)
assert model.info.n_bytes_mapped > 0, "nothing is used in place from the mapping"
ctx = model.context(threads=2)
x = np.random.default_rng(0).standard_normal((2, 3, 32, 32)).astype(np.float32)
want = ctx.encode(x)
assert model.file_changed() is None

def refused():
    try:
        ctx.encode(x)
    except jepa.ModelFileError as exc:
        return str(exc)
    return None

if case == "truncate":
    os.truncate(path, 4096)
    why = refused()
    assert why and "changed under the running process" in why and "size went from" in why, why
    assert "by rename" in why, why
    assert "size went from" in model.file_changed()
elif case == "rewrite":
    with open(path, "r+b") as f:  # same size, other bytes in the middle
        f.seek(os.path.getsize(path) // 2)
        f.write(b"\x7f" * 4096)
    os.utime(path, ns=(0, 10**9))  # a timestamp of its own: not within one clock tick of the load
    why = refused()
    assert why and "rewritten in place" in why, why
elif case == "truncate-while-running":
    # Graphs run back to back while the file is cut: each either returns the old bits or is refused;
    # whatever a graph computed while its pages vanished is never returned.
    stop, seen = threading.Event(), {"ok": 0, "refused": 0}
    def work():
        while not stop.is_set():
            try:
                got = ctx.encode(x)
                assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
                seen["ok"] += 1
            except jepa.ModelFileError:
                seen["refused"] += 1
    t = threading.Thread(target=work)
    t.start()
    time.sleep(0.3)
    os.truncate(path, 4096)
    time.sleep(0.3)
    stop.set()
    t.join()
    assert seen["ok"] > 0 and seen["refused"] > 0, seen
    assert model.file_changed() is not None
elif case == "rename":
    fresh = path + ".new"
    shutil.copy(src, fresh)
    os.replace(fresh, path)
    assert model.file_changed() is None
    got = ctx.encode(x)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
else:
    raise SystemExit(f"unknown case {case}")
# The process lives on; a model loaded again from a good file serves.
shutil.copy(src, path)
again = jepa.Model(path).context(threads=2).encode(x)
assert np.array_equal(again.view(np.uint32), want.view(np.uint32))
print("survived", case)
"""


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("changed")
    # 256 wide: the q4_0 matrices (36 KiB) are used in place from the mapping, as are the f32 tables.
    f16 = write_demo_model(d / "vit-f16.gguf", ftype="f16", embed_dim=256, n_layer=2, n_head=4, img_size=32)
    q4 = str(d / "vit-q4_0.gguf")
    quantize(f16, q4, "q4_0")
    f32 = write_demo_model(d / "vit-f32.gguf", embed_dim=256, n_layer=2, n_head=4, img_size=32)
    return {"f32": f32, "q4_0": q4}


# What is used in place from the mapping: q4_0 matrices (ggml's products) on any path; every f32 matrix
# on ggml's products (the engine's own kernels repack f32 and q8_0 matrices into memory of their own,
# leaving nothing mapped).
FILES = {"q4_0": ("q4_0", {}), "f32-ggml": ("f32", {"JEPA_GEMM": "ggml"})}


@pytest.mark.parametrize("case", ["truncate", "rewrite", "truncate-while-running", "rename"])
@pytest.mark.parametrize("which", list(FILES))
def test_a_changed_file_is_refused_and_the_process_lives(
    files: dict[str, str], tmp_path: Path, case: str, which: str
) -> None:
    ftype, env = FILES[which]
    path = tmp_path / "model.gguf"
    cmd = [sys.executable, "-c", CHILD, files[ftype], str(path), case]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert r.returncode == 0, f"exit {r.returncode} (SIGBUS is -7)\n{r.stdout}\n{r.stderr}"
    assert f"survived {case}" in r.stdout
