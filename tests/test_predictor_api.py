"""Context.predict (the masked predictor) from Python: the id forms it takes (one list for the batch or
one per item; gathered context rows), the grid and mask-token options, and what it refuses.

The suite's tiny V-JEPA 2 (conftest: tiny_vjepa2_path, random weights from numpy, no torch)."""

from __future__ import annotations

import numpy as np
import pytest

import jepa

from conftest import TINY_VJEPA2

pytestmark = pytest.mark.every_path

SIZE, FRAMES = TINY_VJEPA2["img_size"], TINY_VJEPA2["n_frames"]  # grid 2 x 3 x 3 = 18 tokens


@pytest.fixture(scope="module")
def model(tiny_vjepa2_path: str) -> jepa.Model:
    return jepa.Model(tiny_vjepa2_path)


@pytest.fixture(scope="module")
def tokens(model: jepa.Model) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal((2, 3, FRAMES, SIZE, SIZE)).astype(np.float32)
    return model.context(threads=2).encode(x)


def bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).view(np.uint32).tobytes()


def test_info(model: jepa.Model) -> None:
    i = model.info
    assert model.has_predictor and model.has_head
    assert (i.pred_embed_dim, i.pred_n_layer, i.pred_n_head, i.pred_n_mask_tokens) == (
        48,
        2,
        2,
        4,
    )
    assert i.pred_grid_size == 3 and i.pos_type == jepa.PosType.ROPE3D and i.tubelet_size == 2


def test_id_forms_agree(model: jepa.Model, tokens: np.ndarray) -> None:
    ctx = model.context(threads=2)
    c, t = np.array([0, 4, 8, 9, 17, 12]), np.array([1, 16, 5])
    shared = ctx.predict(tokens, c, t)
    assert shared.shape == (2, 3, 64)
    per_item = ctx.predict(tokens, np.stack([c, c]).astype(np.int64), np.stack([t, t]).astype(np.uint16))
    assert bits(shared) == bits(per_item)
    gathered = ctx.predict(np.ascontiguousarray(tokens[:, c]), c, t, gathered=True)
    assert bits(shared) == bits(gathered)
    # Each target's row does not depend on where it sits among the targets.
    swapped = ctx.predict(tokens, c, t[::-1].copy())
    assert np.allclose(swapped[:, ::-1], shared, rtol=0, atol=1e-5)


def test_options_change_the_answer(model: jepa.Model, tokens: np.ndarray) -> None:
    ctx = model.context(threads=2)
    c, t = np.arange(0, 18, 2), np.arange(1, 18, 2)
    base = ctx.predict(tokens, c, t)
    assert bits(ctx.predict(tokens, c, t, mask_index=5)) == bits(base)  # 5 mod 4 == 1, the default
    assert np.abs(ctx.predict(tokens, c, t, mask_index=0) - base).max() > 1e-3
    # The same ids on another grid are other positions (9 x 2 instead of 3 x 3).
    assert np.abs(ctx.predict(tokens, c, t, grid=(9, 2)) - base).max() > 1e-3
    assert bits(ctx.predict(tokens, c, t, grid=(3, 3))) == bits(base)


def test_refusals(model: jepa.Model, tokens: np.ndarray, tiny_vjepa2_encoder_path: str) -> None:
    ctx = model.context(threads=2)
    c, t = np.array([0, 1, 2]), np.array([3])
    with pytest.raises(jepa.InvalidInputError, match="out of range"):
        ctx.predict(tokens, np.array([0, 18]), t)
    with pytest.raises(jepa.InvalidInputError, match="out of range") as e:
        ctx.predict(tokens, np.array([-1, 2]), t)
    assert e.value.param == "context_ids"
    with pytest.raises(jepa.InvalidInputError, match="out of range") as e:
        ctx.predict(tokens, c, np.array([1 << 24]))  # the engine's id range, named by the engine
    assert e.value.param == "target_ids"
    with pytest.raises(jepa.InvalidInputError, match="integer"):
        ctx.predict(tokens, np.array([0.0, 1.0]), t)
    with pytest.raises(jepa.InvalidInputError, match="3 rows for a batch of 2"):
        ctx.predict(tokens, np.zeros((3, 2), np.int32), t)
    with pytest.raises(jepa.InvalidInputError, match="gathered tokens have 18 rows"):
        ctx.predict(tokens, c, t, gathered=True)
    with pytest.raises(jepa.InvalidInputError, match="width 32"):
        ctx.predict(np.zeros((1, 4, 32), np.float32), c, t)
    with pytest.raises(jepa.InvalidInputError, match="float32"):
        ctx.predict(tokens.astype(np.float64), c, t)
    with pytest.raises(jepa.InvalidInputError, match="bad grid"):
        ctx.predict(tokens, c, t, grid=(-1, 3))
    bare = jepa.Model(tiny_vjepa2_encoder_path).context(threads=2)
    with pytest.raises(jepa.UnsupportedError, match="no masked predictor"):
        bare.predict(tokens, c, t)
