"""Pooling encoder tokens to one vector per item."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import InvalidInputError

if TYPE_CHECKING:
    from .model import Model

POOL_MODES = ("mean", "cls", "none")


def default_pool(model: Model) -> str:
    """CLS when the model has one, else the mean of the patch tokens."""
    return "cls" if model.has_cls else "mean"


def pool(tokens: np.ndarray, mode: str | None, model: Model) -> np.ndarray:
    """tokens [B, N, D] -> [B, D] ('mean' over patch tokens, 'cls') or [B, N, D] ('none')."""
    mode = mode or default_pool(model)
    if tokens.ndim != 3:
        raise InvalidInputError(f"pool expects tokens [B, N, D], got shape {list(tokens.shape)}")
    if mode == "none":
        return tokens
    if mode == "cls":
        if not model.has_cls:
            raise InvalidInputError(f"pool 'cls': the model ({model.info['family']}) has no CLS token")
        return np.ascontiguousarray(tokens[:, 0])
    if mode == "mean":
        # Mean over patch tokens only: CLS and registers carry no patch content.
        patches = tokens[:, model.n_prefix :]
        return patches.mean(axis=1, dtype=np.float32)
    raise InvalidInputError(f"unknown pool {mode!r}: use one of {', '.join(POOL_MODES)}")
