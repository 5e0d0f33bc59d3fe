"""A request's budget beyond its body: what it may decode (a jepa.media.Budget per request), how
large its answer may be, and how much predictor work a /rollout may ask. Each check runs before the
cost is paid, and each refusal names the limit (docs/serving.md "Budgets")."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jepa
import jepa.media
from jepa.world_kinds import WORLD_KINDS

from .errors import ApiError, bad_request
from .inputs import Item, TextInputs
from .settings import FLOAT_JSON_BYTES, Settings

# A refusal of the media budget names the flag that sets the limit.
_FLAGS = {
    "max_input_bytes": "--max-input-mb",
    "max_image_pixels": "--max-image-pixels",
    "max_clip_pixels": "--max-clip-pixels",
    "max_request_pixels": "--max-request-pixels",
}
_ENTRY_BYTES = 160  # an answer's per-item overhead: keys, index, dim, shape, label text
_HEAD_BYTES = 512  # the envelope: object, model, usage, kind


def media_budget(s: Settings) -> jepa.media.Budget:
    """A fresh budget for one request (its pixel counter starts at 0)."""
    return jepa.media.Budget(
        max_input_bytes=s.max_input_bytes,
        max_image_pixels=s.max_image_pixels,
        max_clip_pixels=s.max_clip_pixels,
        max_request_pixels=s.max_request_pixels,
        names=_FLAGS,
    )


def _frames(model: jepa.Model, item: Item) -> int:
    """The most frames an item can encode as, from the request alone (a bare file may be a video)."""
    info = model.info
    if isinstance(item.source, list):
        n = len(item.source)
    elif item.as_video or info.modality != "image":
        n = item.frames or max(1, int(info.n_frames))
    else:
        n = 1
    tubelet = max(1, int(info.tubelet_size))
    return math.ceil(n / tubelet) * tubelet


def _float_bytes(n: int, fmt: str) -> int:
    return math.ceil(n * 16 / 3) + 4 if fmt == "base64" else n * FLOAT_JSON_BYTES


def embedding_bytes(
    model: jepa.Model, inputs: Sequence[Item] | TextInputs, pool: str, fmt: str, dims: int | None
) -> int:
    """The largest answer /v1/embeddings or /embed can give these inputs, before any is decoded or
    tokenized (a text is one pooled vector)."""
    width = dims or jepa.pooling.pool_width(model, pool)
    if isinstance(inputs, TextInputs):
        return _HEAD_BYTES + len(inputs) * (_ENTRY_BYTES + _float_bytes(width, fmt))
    crop = int(model.info.preprocess.crop) or int(model.info.img_size)
    total = _HEAD_BYTES
    for item in inputs:
        rows = model.n_tokens(_frames(model, item), crop, crop) if pool == "none" else 1
        total += _ENTRY_BYTES + _float_bytes(rows * width, fmt)
    return total


def classify_bytes(items: Sequence[Item], top_k: int) -> int:
    # A prediction: index, label (at most a few hundred bytes of text), probability, logit.
    return _HEAD_BYTES + len(items) * (_ENTRY_BYTES + top_k * (400 + 2 * FLOAT_JSON_BYTES))


def world_bytes(model: jepa.Model, k: int, h: int, return_latents: bool) -> int:
    """The largest /rollout answer for K candidates of H steps."""
    info = model.info
    floats = k * h + k * (h + 1) * int(info.pred_state_dim or 0)  # energies / costs, states
    if return_latents:
        floats += WORLD_KINDS[model.world_model].latent_floats(model, k, h)
    return _HEAD_BYTES + _float_bytes(floats, "float")


def check_response(estimate: int, s: Settings) -> None:
    if estimate > s.max_response_bytes:
        raise ApiError(
            413,
            f"the answer would be up to {estimate} bytes; this server answers at most "
            f"{s.max_response_bytes} (--max-response-mb {s.max_response_mb:g}): ask for fewer items, "
            "a pooled embedding, or encoding_format base64",
            code="response_too_large",
        )


def rollout_work(kind: str, actions_shape: tuple[int, ...] | None, plan: dict[str, Any] | None) -> int:
    """Candidate-steps a /rollout runs: K × H for a rollout; samples × horizon × CEM iterations for a
    plan (`plan` holds the planner's own option names)."""
    if plan is None:
        assert actions_shape is not None
        return int(actions_shape[0]) * int(actions_shape[1])
    return WORLD_KINDS[kind].plan_work(plan)


def check_rollout_work(work: int, s: Settings, param: str) -> None:
    if work > s.max_rollout_work:
        raise bad_request(
            f"this /rollout asks {work} candidate-steps of the predictor (candidates × steps, or samples × "
            f"horizon × cem_steps); this server runs at most {s.max_rollout_work} (--max-rollout-work)",
            param=param,
            code="too_much_work",
        )
