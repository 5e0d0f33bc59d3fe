"""V-JEPA 2 clips batch like images: n clips in one call give what n single calls give, bit for bit on
the CPU (float32 bit patterns, not a tolerance) — for encode, classify and predict, with and without
flash attention, across thread counts, max_batch chunks and max_graph_bytes splits. Long clips run
flash attention by default (auto) and a graph-memory cap refuses with a message instead of exhausting memory.

The suite's tiny V-JEPA 2 (conftest: tiny_vjepa2_path, random weights from numpy, no torch)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.testing.random_vjepa2 import write_random_vjepa2

from conftest import TINY_VJEPA2, TINY_VJEPA2_PARTS

pytestmark = pytest.mark.every_path

SIZE, FRAMES = TINY_VJEPA2["img_size"], TINY_VJEPA2["n_frames"]
DIM, CLASSES = TINY_VJEPA2["embed_dim"], TINY_VJEPA2_PARTS["head"]["n_classes"]


@pytest.fixture(scope="module")
def model(tiny_vjepa2_path: str) -> jepa.Model:
    return jepa.Model(tiny_vjepa2_path)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).tobytes()


def clips(n: int, frames: int = FRAMES, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, frames, SIZE, SIZE)).astype(np.float32)


@pytest.mark.parametrize("flash", [False, True])
@pytest.mark.parametrize("frames", [FRAMES, FRAMES + 1])  # an odd count repeats the last frame
def test_encode_batched_equals_single(model: jepa.Model, flash: bool, frames: int) -> None:
    x = clips(3, frames)
    ctx = model.context(threads=2, flash_attn=flash)
    batched = ctx.encode(x)
    for i in range(3):
        assert bits(batched[i]) == bits(ctx.encode(x[i : i + 1])[0]), f"item {i}"


@pytest.mark.parametrize("flash", [False, True])
def test_classify_batched_equals_single(model: jepa.Model, flash: bool) -> None:
    ctx = model.context(threads=2, flash_attn=flash)
    tokens = ctx.encode(clips(3))
    logits, pooled = ctx.classify(tokens)
    assert logits.shape == (3, CLASSES) and pooled.shape == (3, DIM)
    for i in range(3):
        one_logits, one_pooled = ctx.classify(tokens[i : i + 1])
        assert bits(logits[i]) == bits(one_logits[0]), f"item {i}"
        assert bits(pooled[i]) == bits(one_pooled[0]), f"item {i}"


@pytest.mark.parametrize("flash", [False, True])
def test_predict_batched_equals_single(model: jepa.Model, flash: bool) -> None:
    ctx = model.context(threads=2, flash_attn=flash)
    tokens = ctx.encode(clips(3))
    n = tokens.shape[1]
    rng = np.random.default_rng(5)
    perms = np.stack([rng.permutation(n) for _ in range(3)]).astype(np.int32)
    ctx_ids, tgt_ids = perms[:, : n // 2], perms[:, n // 2 :]
    batched = ctx.predict(tokens, ctx_ids, tgt_ids)
    assert batched.shape == (3, n - n // 2, DIM)
    for i in range(3):
        one = ctx.predict(tokens[i : i + 1], ctx_ids[i : i + 1], tgt_ids[i : i + 1])
        assert bits(batched[i]) == bits(one[0]), f"item {i}"


def test_threads_and_chunks_do_not_change_bits(model: jepa.Model) -> None:
    x = clips(3)
    ref = model.context(threads=2).encode(x)
    ref_logits, _ = model.context(threads=2).classify(ref)
    ids = np.arange(ref.shape[1], dtype=np.int32)
    ref_pred = model.context(threads=2).predict(ref, ids[::2], ids[1::2])
    for kw in (
        {"threads": 1},
        {"threads": 3},
        {"threads": 2, "max_batch": 2},
        {"threads": 2, "max_batch": 1},
    ):
        ctx = model.context(**kw)
        tokens = ctx.encode(x)
        assert bits(tokens) == bits(ref), kw
        assert bits(ctx.classify(tokens)[0]) == bits(ref_logits), kw
        assert bits(ctx.predict(tokens, ids[::2], ids[1::2])) == bits(ref_pred), kw


def test_graph_cap_splits_the_batch_with_the_same_bits(model: jepa.Model) -> None:
    x = clips(4)
    ref = model.context(threads=2).encode(x)
    # Find a cap that holds one clip's graph but not four.
    lo, hi = 1 << 10, 1 << 30
    while hi - lo > 1 << 12:
        mid = (lo + hi) // 2
        try:
            model.context(threads=2, max_graph_bytes=mid).encode(x[:1])
            hi = mid
        except jepa.ResourceLimitError:
            lo = mid
    capped = model.context(threads=2, max_graph_bytes=hi)
    assert bits(capped.encode(x)) == bits(ref)
    with pytest.raises(jepa.ResourceLimitError, match="compute buffer"):
        model.context(threads=2, max_graph_bytes=lo).encode(x[:1])


def test_long_clip_uses_flash_and_fits_a_cap(tmp_path: Path) -> None:
    # 64 frames at 256 px: 32 x 16 x 16 = 8192 tokens (V-JEPA 2's longest native clip). The plain
    # path's score matrix alone is 8192^2 x 2 heads x 4 B = 512 MiB; flash attention needs none.
    path = write_random_vjepa2(tmp_path / "long.gguf", embed_dim=32, n_layer=1, n_head=2, ffn_dim=32,
                               img_size=256, n_frames=64, seed=1)
    m = jepa.Model(path)
    x = np.random.default_rng(0).standard_normal((1, 3, 64, 256, 256)).astype(np.float32)
    cap = 256 << 20
    with pytest.raises(jepa.ResourceLimitError, match=r"compute buffer, over the context's limit"):
        m.context(threads=2, flash_attn=False, max_graph_bytes=cap).encode(x)
    auto = m.context(threads=2, max_graph_bytes=cap).encode(x)  # auto: flash everywhere
    assert auto.shape == (1, 8192, 32)
    assert bits(auto) == bits(m.context(threads=2, flash_attn=True).encode(x))
    assert np.isfinite(auto).all()
