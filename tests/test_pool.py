"""jepa.pool: mean over patch tokens only, cls, none; clear errors otherwise."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.demo import write_demo_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> jepa.Model:
    path: Path = tmp_path_factory.mktemp("pool") / "vit.gguf"
    write_demo_model(str(path), embed_dim=32, n_layer=1, n_head=2, patch_size=16, img_size=32, seed=1)
    return jepa.Model(path)


def test_modes(model: jepa.Model) -> None:
    tokens = np.arange(2 * 5 * 32, dtype=np.float32).reshape(2, 5, 32)
    assert jepa.default_pool(model) == "cls"
    np.testing.assert_array_equal(jepa.pool(tokens, "cls", model), tokens[:, 0])
    np.testing.assert_array_equal(jepa.pool(tokens, None, model), tokens[:, 0])
    # The CLS token is not a patch: the mean skips it.
    np.testing.assert_array_equal(jepa.pool(tokens, "mean", model), tokens[:, 1:].mean(axis=1))
    assert jepa.pool(tokens, "none", model) is tokens
    assert jepa.pool(tokens, "mean", model).dtype == np.float32


def test_errors(model: jepa.Model) -> None:
    with pytest.raises(jepa.InvalidInputError, match="unknown pool"):
        jepa.pool(np.zeros((1, 5, 32), np.float32), "max", model)
    with pytest.raises(jepa.InvalidInputError, match=r"\[B, N, D\]"):
        jepa.pool(np.zeros((5, 32), np.float32), "mean", model)
