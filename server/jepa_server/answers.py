"""Every answer's body, built from a pipeline result: the one place an endpoint's JSON is shaped.

A leaf: the handlers import it, and it imports nothing of theirs back. Vectors go out as float32
(a JSON float round-trips a float32 exactly; base64 is the same bits, little-endian)."""

from __future__ import annotations

import asyncio
import base64
import functools
import json
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
from aiohttp import web

from .errors import ApiError

if TYPE_CHECKING:
    import jepa

    from .pipeline import Embedded

# Every JSON answer is JSON: NaN and infinity have no spelling in it, so writing one is an error here
# (a bug, answered 500) rather than a body a client's parser refuses.
strict_dumps = functools.partial(json.dumps, allow_nan=False)

# The keys of jepa.rollout's / jepa.plan's dict that an answer carries (the traces stay inside).
WORLD_KEYS = ("energies", "costs", "best", "states", "latents", "actions", "energy_per_iteration",
              "cost_per_iteration")


class Timed(Protocol):
    """A pipeline result's timing, written as headers."""

    @property
    def queue_s(self) -> float: ...

    @property
    def inference_s(self) -> float: ...


def truncate(v: np.ndarray, dims: int | None, normalize: bool) -> np.ndarray:
    """Keep the first `dims` values (of each row), then scale to unit length when asked."""
    if dims is not None:
        v = v[..., :dims]
        normalize = True  # a truncated embedding is only meaningful re-normalised
    if normalize:
        norm = np.linalg.norm(v, axis=-1, keepdims=True)
        v = v / np.maximum(norm, np.float32(1e-12))
    return np.ascontiguousarray(v, dtype=np.float32)


def encode_vector(v: np.ndarray, fmt: str) -> Any:
    if fmt == "base64":
        # little-endian float32: the same bits as the float form
        return base64.b64encode(v.astype("<f4", copy=False).tobytes()).decode("ascii")
    return v.tolist()  # float32 -> Python float is exact, and JSON round-trips it


def embeddings(result: Embedded, fmt: str, dims: int | None, model_id: str) -> dict[str, Any]:
    """/v1/embeddings, OpenAI-shaped. `usage` counts the tokens encoded (a text model's real tokens,
    and the texts its tokenizer truncated)."""
    data = []
    for i, v in enumerate(result.vectors):
        v = truncate(v, dims, normalize=False)
        entry = {"object": "embedding", "index": i, "embedding": encode_vector(v, fmt),
                 "dim": int(v.shape[-1])}
        if v.ndim == 2:
            entry["shape"] = list(v.shape)
        data.append(entry)
    usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
    if result.truncated is not None:
        usage["truncated_inputs"] = result.truncated
    return {"object": "list", "data": data, "model": model_id, "usage": usage}


def embed_tei(result: Embedded, dims: int | None, normalize: bool) -> list[Any]:
    """/embed, TEI-style: the bare vectors."""
    return [truncate(v, dims, normalize).tolist() for v in result.vectors]


def classifications(results: list[jepa.Classification], model_id: str) -> dict[str, Any]:
    data = [classification(i, c) for i, c in enumerate(results)]
    return {"object": "list", "data": data, "model": model_id}


def classification(index: int, c: jepa.Classification) -> dict[str, Any]:
    """One input's answer in jepa.cpp's documented shape (its clients read it unchanged): the top-k
    classes, best first, each with its label, softmax probability and logit."""
    predictions = [
        {"index": k, "label": label, "probability": p, "logit": float(c.logits[k])}
        for k, label, p in zip(c.indices, c.labels, c.probabilities, strict=True)
    ]
    return {"object": "classification", "index": index, "predictions": predictions}


def world(value: dict[str, Any], model_id: str, kind: str, planned: bool) -> dict[str, Any]:
    """jepa.rollout's / jepa.plan's dict as JSON: arrays as nested lists (float32 -> Python float is
    exact, and JSON round-trips it), the trace-free keys only."""
    head = {"object": "plan" if planned else "rollout", "model": model_id, "kind": kind}
    out = {k: value[k] for k in WORLD_KEYS if k in value}
    return {**head, **{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in out.items()}}


async def json_response(payload: Any, timing: Timed | None = None) -> web.Response:
    """The payload as a JSON answer, serialised off the event loop (token grids are large), with the
    result's queue and inference times as headers."""
    try:
        text = await asyncio.to_thread(json.dumps, payload, separators=(",", ":"), allow_nan=False)
    except ValueError:  # NaN or infinity: JSON has no spelling for it
        raise ApiError(
            422,
            "the model's answer for these inputs holds a non-finite number (an overflow inside the model)",
            code="non_finite_output",
        ) from None
    resp = web.Response(text=text, content_type="application/json")
    if timing is not None:
        resp.headers["x-queue-time"] = f"{timing.queue_s * 1000:.3f}"
        resp.headers["x-inference-time"] = f"{timing.inference_s * 1000:.3f}"
    return resp
