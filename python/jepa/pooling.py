"""Pooling encoder tokens to one vector per item."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .errors import InvalidInputError

if TYPE_CHECKING:
    from .model import Model

POOL_MODES = ("mean", "cls", "none", "lewm")


def default_pool(model: Model) -> str:
    """LeWM's embedding for a LeWM file, else CLS when the model has one, else the mean of the
    patch tokens."""
    if model.world_model == "lewm":
        return "lewm"
    return "cls" if model.has_cls else "mean"


def pool(tokens: np.ndarray, mode: str | None, model: Model) -> np.ndarray:
    """tokens [B, N, D] -> [B, D] ('mean' over patch tokens, 'cls', 'lewm') or [B, N, D] ('none').

    'lewm' is a LeWM file's embedding: the CLS through the model's projector (what
    Context.lewm_embed returns, bit for bit), run on a context of the calling thread."""
    mode = mode or default_pool(model)
    if tokens.ndim != 3:
        raise InvalidInputError(f"pool expects tokens [B, N, D], got shape {list(tokens.shape)}")
    if mode == "none":
        return tokens
    if mode == "cls":
        if not model.has_cls:
            raise InvalidInputError(f"pool 'cls': the model ({model.info['family']}) has no CLS token")
        return np.ascontiguousarray(tokens[:, 0])
    if mode == "lewm":
        if model.world_model != "lewm":
            family = model.info["family"]
            raise InvalidInputError(f"pool 'lewm': the model ({family}) is not a LeWM world model")
        from .world import project_cls

        return project_cls(model, tokens[:, 0])
    if mode == "mean":
        # Mean over patch tokens only: CLS and registers carry no patch content.
        patches = tokens[:, model.n_prefix :]
        return patches.mean(axis=1, dtype=np.float32)
    raise InvalidInputError(f"unknown pool {mode!r}: use one of {', '.join(POOL_MODES)}")
