"""Classification with a model's classifier head, in the one pipeline: items -> prepared inputs ->
batched encodes -> the head on each batch's tokens -> softmax and top-k per item, in input order.

`classify` (Python users) and the server's workers (`classify_prepared` on the batch their dispatcher
formed) run this same code, so their answers agree bit for bit: the engine gives an item's tokens,
logits and pooled vector the same bits whatever the batch, and softmax / top-k run on each row alone."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from .errors import InvalidInputError, JepaError, UnsupportedError
from .pipeline import batch_groups

if TYPE_CHECKING:
    from .media.items import Item
    from .model import Model


class Classifier(Protocol):
    """What the pipeline needs of a jepa.Context."""

    model: Model
    max_batch: int

    def encode(self, x: np.ndarray) -> np.ndarray: ...
    def classify(self, tokens: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...


@dataclass(frozen=True)
class Classification:
    """One item's answer: the top-k classes, best first, and every logit."""

    labels: list[str]  # names of the top-k classes
    indices: list[int]  # their class indices
    probabilities: list[float]  # their softmax probabilities (over all classes)
    logits: np.ndarray  # float32 [n_classes], the head's raw output

    def to_dict(self) -> dict[str, Any]:
        return {
            "labels": list(self.labels),
            "indices": list(self.indices),
            "probabilities": list(self.probabilities),
            "logits": [float(v) for v in self.logits],
        }


def softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float64 (max-subtracted), for one row or many."""
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def top_k(logits: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest logits of one row, largest first; ties go to the smaller index."""
    row = np.asarray(logits)
    if row.ndim != 1:
        raise InvalidInputError(f"top_k expects one row of logits, got shape {list(row.shape)}")
    # A stable sort of the negated values keeps equal logits in index order.
    return np.argsort(-row.astype(np.float64), kind="stable")[: max(0, min(int(k), row.shape[0]))]


def _check_top_k(top_k: int) -> int:
    if isinstance(top_k, bool) or not isinstance(top_k, int | np.integer) or top_k < 1:
        raise InvalidInputError(f"top_k must be a positive integer, got {top_k!r}")
    return int(top_k)


def answer(logits_row: np.ndarray, labels: Sequence[str], k: int) -> Classification:
    """One row of logits -> its Classification (top-k of softmax, labels by index)."""
    row = np.asarray(logits_row, dtype=np.float32)
    idx = top_k(row, k)
    prob = softmax(row)
    names = [labels[i] if i < len(labels) else f"class {i}" for i in idx]
    return Classification(
        labels=names,
        indices=[int(i) for i in idx],
        probabilities=[float(prob[i]) for i in idx],
        logits=row.copy(),
    )


def _need_head(model: Model) -> None:
    """The engine refuses a model without a head too; this refuses it before any decode or encode."""
    if not model.has_head:
        raise UnsupportedError(f"{model!r} has no classifier head: classification needs one")


def classify_prepared(
    context: Classifier, inputs: Sequence[np.ndarray], top_k: int = 5
) -> list[Classification]:
    """Prepared inputs (jepa.media.prepare) -> one Classification per input, in input order.
    Same-shaped inputs share encodes and head runs of up to context.max_batch."""
    k = _check_top_k(top_k)
    model = context.model
    _need_head(model)
    out: list[Classification | None] = [None] * len(inputs)
    for chunk in batch_groups(inputs, context.max_batch):
        tokens = context.encode(np.stack([inputs[i] for i in chunk]))
        logits, _ = context.classify(tokens)
        for j, i in enumerate(chunk):
            out[i] = answer(logits[j], model.labels, k)
    return out  # type: ignore[return-value]


def classify(
    context: Classifier,
    items: Iterable[Item],
    top_k: int = 5,
    as_video: bool | None = None,
    frames: int | None = None,
) -> list[Classification]:
    """Classify items (video files, lists of frames = clips, uint8 [T, H, W, 3] arrays, images) with
    the model's classifier head. Returns one Classification per item, in input order: the top_k
    labels, their indices and softmax probabilities (best first; ties to the smaller index), and all
    logits. as_video and frames are passed to jepa.media.prepare (frames: default the model's n_frames
    for a video file)."""
    from .media import prepare  # Pillow and PyAV load on first use: `import jepa` stays light

    if isinstance(items, str | os.PathLike | bytes | bytearray | memoryview | np.ndarray) or not isinstance(
        items, Iterable
    ):
        raise InvalidInputError(
            f"classify expects a list of items, got one {type(items).__name__}: wrap it in a list"
        )
    k = _check_top_k(top_k)
    model = context.model
    _need_head(model)  # before any item is decoded
    inputs = []
    for i, item in enumerate(items):
        try:
            inputs.append(prepare(item, model, as_video=as_video, frames=frames))
        except JepaError as e:
            raise type(e)(f"item {i}: {e.message}") from None
    return classify_prepared(context, inputs, k)
