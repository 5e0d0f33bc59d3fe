"""Memory-mapped weights (jepa.Model(path, mmap=True), the default on the CPU): the same bits as a
model read into memory of its own, the tensors used in place accounted for, and nothing kept after
the model is gone."""

from __future__ import annotations

import gc
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.convert.quantize import quantize

from conftest import bits

IMG = 32


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS in /proc/self/status")


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    from jepa.demo import write_demo_model

    d = tmp_path_factory.mktemp("mmap")
    # 256 wide: a q8_0 matrix is 68 KiB, over the engine's 64 KiB floor for using a tensor in place.
    shape = dict(embed_dim=256, n_layer=2, n_head=4, img_size=IMG)
    out = {ft: write_demo_model(d / f"vit-{ft}.gguf", ftype=ft, **shape) for ft in ("f32", "f16", "bf16")}
    out["q8_0"] = str(d / "vit-q8_0.gguf")
    quantize(out["f16"], out["q8_0"], "q8_0")
    return out


def _encode(model: jepa.Model) -> np.ndarray:
    x = np.random.default_rng(3).random((3, 3, 1, IMG, IMG), dtype=np.float32)
    return model.context(threads=2, max_batch=3).encode(x)


@pytest.mark.parametrize("ftype", ["f32", "f16", "bf16", "q8_0"])
def test_mapped_and_read_give_the_same_bits(files: dict[str, str], ftype: str) -> None:
    mapped, read = jepa.Model(files[ftype]), jepa.Model(files[ftype], mmap=False)
    assert np.array_equal(bits(_encode(mapped)), bits(_encode(read)))
    assert mapped.info.n_bytes == read.info.n_bytes
    assert read.info.n_bytes_mapped == 0
    assert 0 <= mapped.info.n_bytes_mapped <= mapped.info.n_bytes
    assert mapped.info.n_matmul_packed == read.info.n_matmul_packed


@pytest.mark.parametrize("ftype", ["f16", "q8_0"])
def test_what_is_mapped_is_what_the_engine_does_not_repack(files: dict[str, str], ftype: str) -> None:
    """Matrices the engine's own kernels repack (f16, and q8_0 for the int8 product) get memory of
    their own, and so do the small tensors (norms, biases: under 64 KiB), so such a file keeps next to
    nothing mapped; where ggml's products run (JEPA_GEMM=ggml) the matrices are used in place."""
    i = jepa.Model(files[ftype]).info
    patch_embed = i.patch_size**2 * i.in_chans * i.embed_dim * 4  # f32 in every file: repacked
    if i.n_matmul_packed:
        assert i.n_bytes_mapped < 0.2 * i.n_bytes
    else:
        assert i.n_bytes_mapped + patch_embed >= 0.9 * i.n_bytes, "unpacked matrices should be used in place"


def test_a_mapped_model_outlives_its_file_name(files: dict[str, str], tmp_path: Path) -> None:
    """The mapping holds the file: removing (or replacing by rename, as converters write) the name
    being served changes nothing for the loaded model."""
    path = tmp_path / "moved.gguf"
    shutil.copy(files["q8_0"], path)
    model = jepa.Model(path)
    want = _encode(jepa.Model(files["q8_0"], mmap=False))
    os.unlink(path)
    gc.collect()
    assert np.array_equal(bits(_encode(model)), bits(want))


def test_loading_and_freeing_gives_the_memory_back(files: dict[str, str]) -> None:
    """Load / encode / free cycles end near the RSS they started from (mappings unmapped, copies
    freed): what the registry's eviction relies on."""
    for _ in range(3):  # warm: allocator arenas, thread pools, the first graphs' caches
        _encode(jepa.Model(files["f32"]))
    gc.collect()
    base = _rss_kib()
    for _ in range(20):
        for ft in ("f32", "q8_0"):
            m = jepa.Model(files[ft])
            _encode(m)
            del m
    gc.collect()
    grown_mib = (_rss_kib() - base) / 1024
    size_mib = os.path.getsize(files["f32"]) / 2**20
    assert grown_mib < max(4.0, 2 * size_mib), f"RSS grew {grown_mib:.1f} MiB over 40 loads"


def test_a_truncated_file_is_refused_before_it_is_mapped(files: dict[str, str], tmp_path: Path) -> None:
    data = Path(files["q8_0"]).read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: len(data) - 100])
    with pytest.raises(jepa.JepaError, match="past the end of the file"):
        jepa.Model(cut)
