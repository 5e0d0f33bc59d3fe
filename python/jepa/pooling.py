"""Pooling: one concept for every model, as llama.cpp's llama_pooling_type. The engine's enum
(jepa_pooling_type, jepa.Pooling), its one spelling table (POOLINGS), the modes each kind of model
takes, the one check (check_pool), and pooling an encoder's tokens to one vector per item. A text
model's pooling runs inside the engine (jepa.text); an image or video model's here."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

import numpy as np

from ._engine import Pooling
from .errors import InvalidInputError
from .world_kinds import kind_pool

if TYPE_CHECKING:
    from .model import Model

# The one spelling of every pooling (the engine's jepa_pooling_type), as requests, files, /health and
# /info write it.
POOLINGS: dict[str, Pooling] = {
    "mean": Pooling.MEAN,
    "cls": Pooling.CLS,
    "none": Pooling.NONE,
    "lewm": Pooling.LEWM,
    "last_token": Pooling.LAST,
    "levels": Pooling.LEVELS,
}
POOL_NAMES = {v: k for k, v in POOLINGS.items()}
POOL_MODES = tuple(POOLINGS)
# The modes a model of each kind may take, in the order /health lists them: image and video models
# pool patch tokens (a LeWM file also through its projector, a V-JEPA 2.1 file every level of them),
# text models pool their tokens.
MEDIA_POOL_MODES = ("mean", "cls", "none", "lewm", "levels")
TEXT_POOL_MODES = ("cls", "mean", "last_token")


class ContextLike(Protocol):
    """What pooling needs of a jepa.Context: its model, and the projector for 'lewm'."""

    @property
    def model(self) -> Model: ...

    def world_latents(self, tokens: np.ndarray) -> np.ndarray: ...


def default_pool(model: Model) -> str:
    """A text model's own pooling (its file says it); LeWM's embedding for a LeWM file, else CLS when
    the model has one, else the mean of the patch tokens."""
    if model.info.modality == "text":
        return POOL_NAMES[model.info.pooling]
    if (own := kind_pool(model)) is not None:  # the world kind's own embedding (LeWM's)
        return own
    return "cls" if model.has_cls else "mean"


def pool_modes(model: Model) -> tuple[str, ...]:
    """The pool modes this model takes, in the order /health and /info advertise them: each one
    check_pool accepts."""
    return tuple(m for m in _modes_of(model) if _refusal(model, m) is None)


def check_pool(model: Model, mode: str | None) -> str:
    """The pool mode to use for `model` (the default when None), refused before any compute is
    spent: the one place a pool mode is validated (jepa.embed, jepa.text, jepa-embed, the server)."""
    if mode is None:
        return default_pool(model)
    reason = _refusal(model, mode)
    if reason is not None:
        raise InvalidInputError(reason, param="pool")
    return mode


def _modes_of(model: Model) -> tuple[str, ...]:
    return TEXT_POOL_MODES if model.info.modality == "text" else MEDIA_POOL_MODES


def _refusal(model: Model, mode: str) -> str | None:
    """Why `model` cannot pool by `mode`, or None."""
    modes = _modes_of(model)
    if mode not in POOLINGS:
        return f"unknown pool {mode!r}: use one of {', '.join(pool_modes(model))}"
    if mode not in modes:
        modality = model.info.modality
        article = "an" if modality[:1] in "aeiou" else "a"
        return f"pool {mode!r}: {article} {modality} model pools by {', '.join(pool_modes(model))}"
    if modes is TEXT_POOL_MODES:  # the engine pools a text's tokens: every text mode applies
        return None
    if mode == "cls" and not model.has_cls:
        return f"pool 'cls': the model ({model.info.family}) has no CLS token"
    if mode == "lewm" and kind_pool(model) != mode:
        return f"pool 'lewm': the model ({model.info.family}) is not a LeWM world model"
    if mode == "levels" and model.info.n_levels == 0:
        return f"pool 'levels': the model ({model.info.family}) has one output level (V-JEPA 2.1 has four)"
    return None


def pool_width(model: Model, mode: str) -> int:
    """The width of one pooled row (of one token's row for 'none'): D, or D x levels for 'levels'."""
    return int(model.embed_dim) * (int(model.info.n_levels) if mode == "levels" else 1)


def encodes_levels(mode: str) -> bool:
    """Whether the tokens `mode` pools are every level's (Context.encode(levels=True))."""
    return mode == "levels"


def pool(tokens: np.ndarray, mode: str | None, source: Model | ContextLike) -> np.ndarray:
    """tokens [B, N, D] -> [B, D] ('mean' over patch tokens, 'cls', 'lewm') or [B, N, D] ('none').

    `source` is the Model, or the Context the tokens came from. 'lewm' is a LeWM file's embedding:
    the CLS through the model's projector (Context.world_latents, bit for bit), so it runs on the
    network and needs the Context. 'levels' pools tokens of every level (encode(x, levels=True),
    [B, N, L x D]) as 'mean' does; tokens of another width are refused."""
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
    if mode == "levels" and tokens.shape[2] != pool_width(model, mode):
        raise InvalidInputError(
            f"pool 'levels' takes every level's tokens ({pool_width(model, mode)} wide: "
            f"Context.encode(x, levels=True)), got {tokens.shape[2]}", param="tokens",
        )
    # mean (and levels): over patch tokens only, CLS and registers carry no patch content.
    patches = tokens[:, model.n_prefix :]
    return patches.mean(axis=1, dtype=np.float32)
