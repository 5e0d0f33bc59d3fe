"""Pooling encoder tokens to one vector per item."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from .errors import InvalidInputError
from .world_kinds import kind_pool

if TYPE_CHECKING:
    from .model import Model

POOL_MODES = ("mean", "cls", "none", "lewm")


class ContextLike(Protocol):
    """What pooling needs of a jepa.Context: its model, and the projector for 'lewm'."""

    @property
    def model(self) -> Model: ...

    def world_latents(self, tokens: np.ndarray) -> np.ndarray: ...


def default_pool(model: Model) -> str:
    """A text model's own pooling (its file says it); LeWM's embedding for a LeWM file, else CLS when
    the model has one, else the mean of the patch tokens."""
    if model.info.modality == "text":
        from .text import POOL_NAMES

        return POOL_NAMES[model.info.pooling]
    if (own := kind_pool(model)) is not None:  # the world kind's own embedding (LeWM's)
        return own
    return "cls" if model.has_cls else "mean"


def pool_modes(model: Model) -> tuple[str, ...]:
    """The pool modes this model takes, in POOL_MODES' order (a text model: its tokens' poolings):
    what /health and /info advertise, each one check_pool accepts."""
    if model.info.modality == "text":
        from .text import TEXT_POOLS

        return tuple(TEXT_POOLS)
    return tuple(
        m for m in POOL_MODES
        if (m != "cls" or model.has_cls) and (m != "lewm" or kind_pool(model) == m)
    )


def check_pool(model: Model, mode: str | None) -> str:
    """The pool mode to use for `model` (the default when None), refused before any compute is
    spent: the one place a pool mode is validated (jepa.embed, the server's request parser)."""
    mode = mode or default_pool(model)
    if mode not in POOL_MODES:
        raise InvalidInputError(f"unknown pool {mode!r}: use one of {', '.join(POOL_MODES)}", param="pool")
    if mode == "cls" and not model.has_cls:
        raise InvalidInputError(f"pool 'cls': the model ({model.info.family}) has no CLS token", param="pool")
    if mode == "lewm" and kind_pool(model) != mode:
        raise InvalidInputError(
            f"pool 'lewm': the model ({model.info.family}) is not a LeWM world model", param="pool"
        )
    return mode


def pool(tokens: np.ndarray, mode: str | None, source: Model | ContextLike) -> np.ndarray:
    """tokens [B, N, D] -> [B, D] ('mean' over patch tokens, 'cls', 'lewm') or [B, N, D] ('none').

    `source` is the Model, or the Context the tokens came from. 'lewm' is a LeWM file's embedding:
    the CLS through the model's projector (Context.world_latents, bit for bit), so it runs on the
    network and needs the Context."""
    model = cast("Model", getattr(source, "model", source))  # a Context carries its model
    mode = check_pool(model, mode)
    if tokens.ndim != 3:
        got = list(tokens.shape)
        raise InvalidInputError(f"pool expects tokens [B, N, D], got shape {got}", param="tokens")
    if mode == "none":
        return tokens
    if mode == "cls":
        return np.ascontiguousarray(tokens[:, 0])
    if mode == "lewm":
        if source is model:
            raise InvalidInputError(
                "pool 'lewm' runs the model's projector: pass the Context, not the Model", param="pool"
            )
        return cast(ContextLike, source).world_latents(np.ascontiguousarray(tokens[:, :1]))[:, 0]
    # mean: over patch tokens only, CLS and registers carry no patch content.
    patches = tokens[:, model.n_prefix :]
    return patches.mean(axis=1, dtype=np.float32)
