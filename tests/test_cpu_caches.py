"""JEPA_CPU_CACHES sizes the kernels' blocks of rows (half the L2) and the items one encoder graph
runs (a quarter of the L3): speed only. The same encode under the smallest and the largest sizes,
in separate processes (the sizes are read once), gives the same float32 bits."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np

import jepa.demo

CODE = """
import sys, numpy as np, jepa
m = jepa.Model(sys.argv[1])
x = np.random.default_rng(3).standard_normal((8, 3, 1, 64, 64)).astype(np.float32)
np.save(sys.argv[2], m.context(threads=2).encode(x))
"""


def _encode(model: Path, out: Path, caches: str) -> np.ndarray:
    env = os.environ | {"JEPA_CPU_CACHES": caches}
    r = subprocess.run(
        [sys.executable, "-c", CODE, str(model), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    assert "refused" not in r.stderr, r.stderr
    return np.load(out)


def test_the_cache_sizes_change_no_bit(tmp_path: Path) -> None:
    model = tmp_path / "m.gguf"
    # 64 px / patch 8: 65 tokens an item (with the CLS), 8 items of 520 rows (the threads split
    # rows from 512); 96 wide. 4K caches run one graph per item and blocks of one row group.
    jepa.demo.write_demo_model(
        str(model), ftype="f32", embed_dim=96, n_layer=2, n_head=3, patch_size=8, img_size=64
    )
    tiny = _encode(model, tmp_path / "tiny.npy", "l1d=4K,l2=4K,l3=4K")
    huge = _encode(model, tmp_path / "huge.npy", "l2=4G,l3=4G")
    native = _encode(model, tmp_path / "native.npy", "")
    assert tiny.shape == huge.shape == native.shape == (8, 65, 96)
    for other in (huge, native):
        assert np.array_equal(tiny.view(np.uint32), other.view(np.uint32))


def test_a_refused_size_is_said_and_the_detected_sizes_run(tmp_path: Path) -> None:
    # Two items: the encoder asks for the L3 (one item reads no size).
    code = (
        "import sys, jepa, numpy as np; m = jepa.Model(sys.argv[1]); "
        "m.context(threads=1).encode(np.zeros((2, 3, 1, 64, 64), np.float32))"
    )
    model = tmp_path / "m.gguf"
    jepa.demo.write_demo_model(
        str(model), ftype="f32", embed_dim=32, n_layer=1, n_head=2, patch_size=8, img_size=64
    )
    env = os.environ | {"JEPA_CPU_CACHES": "l4=1M"}
    r = subprocess.run(
        [sys.executable, "-c", code, str(model)], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "JEPA_CPU_CACHES=l4=1M refused (unknown cache 'l4'" in r.stderr
