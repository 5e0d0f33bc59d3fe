"""jepa.pool: mean over patch tokens only, cls, none; clear errors otherwise."""

from __future__ import annotations

import numpy as np
import pytest

import jepa


@pytest.fixture(scope="module")
def model(tiny_vit_path: str) -> jepa.Model:
    return jepa.Model(tiny_vit_path)


def test_modes(model: jepa.Model) -> None:
    d = model.embed_dim
    tokens = np.arange(2 * 5 * d, dtype=np.float32).reshape(2, 5, d)
    assert jepa.default_pool(model) == "cls"
    np.testing.assert_array_equal(jepa.pool(tokens, "cls", model), tokens[:, 0])
    np.testing.assert_array_equal(jepa.pool(tokens, None, model), tokens[:, 0])
    # The CLS token is not a patch: the mean skips it.
    np.testing.assert_array_equal(jepa.pool(tokens, "mean", model), tokens[:, 1:].mean(axis=1))
    assert jepa.pool(tokens, "none", model) is tokens
    assert jepa.pool(tokens, "mean", model).dtype == np.float32


def test_errors(model: jepa.Model) -> None:
    with pytest.raises(jepa.InvalidInputError, match="unknown pool"):
        jepa.pool(np.zeros((1, 5, model.embed_dim), np.float32), "max", model)
    with pytest.raises(jepa.InvalidInputError, match=r"\[B, N, D\]"):
        jepa.pool(np.zeros((5, model.embed_dim), np.float32), "mean", model)
