"""Context.encode_memory: the compute buffer one encode of a shape takes, measured without computing,
is the number max_graph_bytes is checked against (an encode fits exactly at it and is refused one byte
under), stops growing at max_batch (the batch runs in chunks), and shows what block-causal attention by
key ranges saves where scores are materialised (ggml's attention, flash off): a clip's score work is
the frames' triangle, not the square."""

from __future__ import annotations

import numpy as np
import pytest

import jepa
from jepa.testing.random_levjepa import write_random_levjepa

T, S = 4, 32  # frames, pixels per side (patch 16: 2 x 2 patches a frame)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    d = tmp_path_factory.mktemp("encode-memory")
    return {mode: write_random_levjepa(d / f"{mode}.gguf", n_frames=T, img_size=S, attn_mode=mode)
            for mode in ("block_causal", "full")}  # fmt: skip


def test_max_graph_bytes_is_checked_against_it(files: dict[str, str]) -> None:
    model = jepa.Model(files["block_causal"])
    shape = [1, 3, T, S, S]
    need = model.context(threads=1).encode_memory(shape)
    assert need > 0
    x = np.zeros(shape, np.float32)
    assert model.context(threads=1, max_graph_bytes=need).encode(x).shape == (1, 1 + T * 4, 64)
    with pytest.raises(jepa.ResourceLimitError, match="compute buffer"):
        model.context(threads=1, max_graph_bytes=need - 1).encode(x)


def test_it_stops_growing_at_max_batch(files: dict[str, str]) -> None:
    ctx = jepa.Model(files["block_causal"]).context(threads=1, max_batch=2)
    one, two, five = (ctx.encode_memory([b, 3, T, S, S]) for b in (1, 2, 5))
    assert one < two == five


def test_block_causal_materialises_the_triangle(files: dict[str, str]) -> None:
    """Flash off: ggml's attention keeps each group's scores. The block-causal clip keeps the CLS row
    over every token and frame f's rows over f + 1 frames, about half the square: at 64 frames (257
    tokens) the scores outweigh the rest of a block."""
    shape = [1, 3, 64, S, S]
    causal = jepa.Model(files["block_causal"]).context(threads=1, flash_attn=0).encode_memory(shape)
    full = jepa.Model(files["full"]).context(threads=1, flash_attn=0).encode_memory(shape)
    assert causal < 0.75 * full, (causal, full)


def test_a_bad_shape_is_refused(files: dict[str, str]) -> None:
    ctx = jepa.Model(files["block_causal"]).context(threads=1)
    with pytest.raises(jepa.InvalidInputError, match="multiple of the patch size"):
        ctx.encode_memory([1, 3, T, 30, 30])
    with pytest.raises(jepa.InvalidInputError, match="bad shape"):
        ctx.encode_memory([0, 3, T, S, S])
    with pytest.raises(jepa.InvalidInputError, match=r"\[B, C, T, H, W\]"):
        ctx.encode_memory([1, 3, S])
    assert ctx.encode_memory([1, 3, S, S]) > 0  # an image: a 1-frame clip

