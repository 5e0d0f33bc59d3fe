"""The one embedding pipeline: items -> prepared inputs -> batched encodes -> pooled rows, in input order.

`embed` (Python users, jepa-embed) and the server's workers (`encode_prepared` on the batch their
dispatcher formed) run this same code, so their vectors agree bit for bit: the engine gives a row the
same bits whatever the batch, and each row is pooled on its own."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

import numpy as np

from .errors import InvalidInputError, JepaError
from .pooling import check_pool, default_pool, encodes_levels, pool_width
from .pooling import pool as pool_tokens

if TYPE_CHECKING:
    from .media.items import Item
    from .model import Model


class Encoder(Protocol):
    """What the pipeline needs of a jepa.Context."""

    model: Model
    max_batch: int

    def encode(self, x: np.ndarray, levels: bool = False) -> np.ndarray: ...

    def world_latents(self, tokens: np.ndarray) -> np.ndarray: ...


def batch_groups(inputs: Sequence[np.ndarray], max_batch: int) -> list[list[int]]:
    """Indices of same-shaped inputs, in chunks of at most max_batch, in order of first appearance."""
    by_shape: dict[tuple[int, ...], list[int]] = {}
    for i, x in enumerate(inputs):
        if not isinstance(x, np.ndarray) or x.dtype != np.float32 or x.ndim != 4:
            got = f"{x.dtype} {list(x.shape)}" if isinstance(x, np.ndarray) else type(x).__name__
            raise InvalidInputError(f"input {i}: expected a prepared float32 [C, T, H, W] array, got {got}")
        by_shape.setdefault(x.shape, []).append(i)
    step = max(1, int(max_batch))
    return [idx[s : s + step] for idx in by_shape.values() for s in range(0, len(idx), step)]


def encode_prepared(
    context: Encoder, inputs: Sequence[np.ndarray], pool: str | None = None
) -> list[np.ndarray]:
    """Prepared inputs (jepa.media.prepare) -> one pooled float32 array per input, in input order:
    [D] for 'mean' / 'cls', [N, D] for 'none', [L x D] for 'levels'. Same-shaped inputs share encodes
    of up to context.max_batch."""
    model = context.model
    mode = check_pool(model, pool)
    out: list[np.ndarray | None] = [None] * len(inputs)
    for chunk in batch_groups(inputs, context.max_batch):
        tokens = context.encode(np.stack([inputs[i] for i in chunk]), levels=encodes_levels(mode))
        for j, i in enumerate(chunk):
            # Pool row by row: a row's result must not depend on the batch it was encoded in.
            out[i] = pool_tokens(tokens[j : j + 1], mode, context)[0].copy()
    return out  # type: ignore[return-value]


def stack_rows(rows: Sequence[np.ndarray], model: Model, pool: str | None = None) -> np.ndarray:
    """encode_prepared's rows as one float32 array: [n, D], or [n, N, D] for pool 'none'."""
    mode = pool or default_pool(model)
    if not rows:
        width = pool_width(model, mode)
        return np.zeros((0, 0, width) if mode == "none" else (0, width), np.float32)
    if len({r.shape for r in rows}) > 1:
        shapes = sorted({r.shape[0] for r in rows})
        raise InvalidInputError(
            f"pool 'none' gives items with different token counts ({shapes}): embed them separately"
        )
    return np.stack(rows).astype(np.float32, copy=False)


def embed(
    context: Encoder,
    items: Iterable[Item],
    pool: str | None = None,
    as_video: bool | None = None,
    frames: int | None = None,
) -> np.ndarray:
    """Embed items (paths, bytes, PIL images, uint8 arrays, lists of frames = clips, video files).

    Returns float32 [n, D] (or [n, N, D] for pool='none') in input order. pool: 'mean' (patch
    tokens), 'cls' or 'none'; default CLS when the model has one, else mean. as_video and frames are
    passed to jepa.media.prepare. For a text model the items are strings (jepa.text.embed_text)."""
    from .media import prepare  # Pillow and PyAV load on first use: `import jepa` stays light

    if isinstance(items, str | os.PathLike | bytes | bytearray | memoryview | np.ndarray) or not isinstance(
        items, Iterable
    ):
        raise InvalidInputError(
            f"embed expects a list of items, got one {type(items).__name__}: wrap it in a list"
        )
    model = context.model
    if model.is_text:  # texts: the same pipeline's text half (tokenize, length-ordered, no padding)
        from .text import embed_text

        return embed_text(context, items, pool=pool)  # type: ignore[arg-type]
    mode = check_pool(model, pool)
    inputs = []
    for i, item in enumerate(items):
        try:
            inputs.append(prepare(item, model, as_video=as_video, frames=frames))
        except JepaError as e:
            # Name the item; media's private subclasses surface as their public class.
            cls = InvalidInputError if isinstance(e, InvalidInputError) else type(e)
            raise cls(f"item {i}: {e.message}") from None
    return stack_rows(encode_prepared(context, inputs, mode), model, mode)
