"""The endpoints and the one route table."""

from __future__ import annotations

import asyncio
import base64
import json
from typing import Any

import numpy as np
from aiohttp import web

import jepa

from .admission import Admission
from .errors import ApiError, bad_request
from .inputs import (
    Item,
    Limits,
    Resolver,
    _opt_int,
    check_keys,
    numeric_array,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    parse_body,
    parse_item,
    parse_items,
)
from .keys import ADMISSION, METRICS, RUNTIME, SETTINGS
from .metrics import CONTENT_TYPE
from .pipeline import Classified, Embedded, WorldJob, WorldResult
from .runtime import Engine


def _engine(request: web.Request) -> Engine:
    return request.app[RUNTIME].require()


def _limits(request: web.Request) -> Limits:
    s = request.app[SETTINGS]
    return Limits(s.max_items, s.max_frames)


def _admission(request: web.Request) -> Admission:
    return request.app[ADMISSION]


async def _body(request: web.Request, allowed: set[str]) -> dict[str, Any]:
    body = parse_body(await request.read())
    check_keys(body, allowed)
    return body


def _check_model(engine: Engine, body: dict[str, Any]) -> None:
    name = body.get("model")
    if name is None:
        return
    if not isinstance(name, str) or not engine.accepts(name):
        raise ApiError(
            404,
            f"the model {json.dumps(name)[:80]} is not served here; this server serves {engine.model_id!r}",
            param="model",
            code="model_not_found",
            type="invalid_request_error",
        )


def _dimensions(engine: Engine, body: dict[str, Any], key: str = "dimensions") -> int | None:
    dims = opt_int(body, key, 1)
    if dims is not None and dims > engine.model.embed_dim:
        raise bad_request(
            f"'{key}' is {dims}, larger than the model's width {engine.model.embed_dim}", param=key
        )
    return dims


def truncate(v: np.ndarray, dims: int | None, normalize: bool) -> np.ndarray:
    """Keep the first `dims` values (of each row), then scale to unit length when asked."""
    if dims is not None:
        v = v[..., :dims]
        normalize = True  # a truncated embedding is only meaningful re-normalised
    if normalize:
        norm = np.linalg.norm(v, axis=-1, keepdims=True)
        v = v / np.maximum(norm, np.float32(1e-12))
    return np.ascontiguousarray(v, dtype=np.float32)


def _encode(v: np.ndarray, fmt: str) -> Any:
    if fmt == "base64":
        # little-endian float32: the same bits as the float form
        return base64.b64encode(v.astype("<f4", copy=False).tobytes()).decode("ascii")
    return v.tolist()  # float32 -> Python float is exact, and JSON round-trips it


async def _json(payload: Any, timing: Embedded | Classified | WorldResult | None = None) -> web.Response:
    # Large answers (token grids) serialise off the event loop.
    text = await asyncio.to_thread(json.dumps, payload, separators=(",", ":"), allow_nan=False)
    resp = web.Response(text=text, content_type="application/json")
    if timing is not None:
        resp.headers["x-queue-time"] = f"{timing.queue_s * 1000:.3f}"
        resp.headers["x-inference-time"] = f"{timing.inference_s * 1000:.3f}"
    return resp


# -- embeddings -----------------------------------------------------------------------------------


async def embeddings(request: web.Request) -> web.StreamResponse:
    """POST /v1/embeddings, OpenAI-shaped."""
    engine = _engine(request)
    body = await _body(request, {"model", "input", "encoding_format", "dimensions", "user", "pool"})
    _check_model(engine, body)
    fmt = opt_str(body, "encoding_format", ("float", "base64")) or "float"
    dims = _dimensions(engine, body)
    pool = engine.pipeline.check_pool(opt_str(body, "pool"))
    items = parse_items(body.get("input"), engine.pipeline.files.resolve, _limits(request))
    result = await _embed(request, engine, items, pool)
    data = []
    for i, v in enumerate(result.vectors):
        v = truncate(v, dims, normalize=False)
        entry = {"object": "embedding", "index": i, "embedding": _encode(v, fmt), "dim": int(v.shape[-1])}
        if v.ndim == 2:
            entry["shape"] = list(v.shape)
        data.append(entry)
    usage = {"prompt_tokens": result.tokens, "total_tokens": result.tokens}
    return await _json({"object": "list", "data": data, "model": engine.model_id, "usage": usage}, result)


async def embed_tei(request: web.Request) -> web.StreamResponse:
    """POST /embed, TEI-style: bare vectors."""
    engine = _engine(request)
    body = await _body(request, {"inputs", "pool", "normalize", "dimensions", "model"})
    _check_model(engine, body)
    dims = _dimensions(engine, body)
    normalize = opt_bool(body, "normalize", False)
    pool = engine.pipeline.check_pool(opt_str(body, "pool"))
    items = parse_items(body.get("inputs"), engine.pipeline.files.resolve, _limits(request), name="inputs")
    result = await _embed(request, engine, items, pool)
    return await _json([truncate(v, dims, normalize).tolist() for v in result.vectors], result)


async def _embed(request: web.Request, engine: Engine, items: list[Item], pool: str) -> Embedded:
    async with _admission(request).slot():
        return await engine.pipeline.embed(items, pool)


# -- heads and world models ------------------------------------------------------------------------
# Both parse and validate the whole request first (so a malformed one is refused the same way on
# any model), then check the model can do it. A classification runs as a batched op beside
# encode_op; a rollout or a plan runs whole on one worker (Dispatcher.run_whole).

# Plan fields: (lowest, highest) for the integers; the highest bound the work one request may ask.
_PLAN_INTS: dict[str, tuple[int, int | None]] = {
    "samples": (1, 4096),
    "topk": (1, 4096),
    "cem_steps": (1, 100),
    "horizon": (1, 64),
    "seed": (0, None),
}
_PLAN_NUMBERS = ("maxnorm", "gripper_clamp")  # both more than 0
# The planners' own names of the plan fields, per world model; a field missing here is refused.
_PLAN_NAMES = {
    "ac": {k: k for k in (*_PLAN_INTS, *_PLAN_NUMBERS)},
    "lewm": {"samples": "num_samples", "topk": "topk", "cem_steps": "n_steps", "horizon": "horizon",
             "seed": "seed"},
}
_WORLD_KEYS = ("energies", "costs", "best", "states", "latents", "actions", "energy_per_iteration",
               "cost_per_iteration")
_ACTION_SHAPES = "[K][H][dim] (K candidate sequences) or [H][dim]"
MAX_CANDIDATES = 1024  # K of `actions`
MAX_STEPS = 64  # H of `actions`


async def classify(request: web.Request) -> web.StreamResponse:
    """POST /classify: the top-k classes of each input, for a model with a classifier head."""
    engine = _engine(request)
    body = await _body(request, {"input", "inputs", "top_k", "model"})
    _check_model(engine, body)
    top_k = opt_int(body, "top_k", 1)
    top_k = 5 if top_k is None else top_k
    key = "inputs" if "inputs" in body else "input"
    items = parse_items(body.get(key), engine.pipeline.files.resolve, _limits(request), name=key)
    if not engine.model.has_head:
        raise bad_request(
            f"model {engine.model_id!r} has no classifier head: /classify needs a model converted "
            "with one (a video classifier); use /v1/embeddings for embeddings",
            code="no_classifier_head",
        )
    async with _admission(request).slot():
        result = await engine.pipeline.classify(items, top_k)
    data = [classification(i, c) for i, c in enumerate(result.results)]
    return await _json({"object": "list", "data": data, "model": engine.model_id}, result)


def classification(index: int, c: jepa.Classification) -> dict[str, Any]:
    """One input's answer in jepa.cpp's documented shape (its clients read it unchanged): the top-k
    classes, best first, each with its label, softmax probability and logit."""
    predictions = [
        {"index": k, "label": label, "probability": p, "logit": float(c.logits[k])}
        for k, label, p in zip(c.indices, c.labels, c.probabilities, strict=True)
    ]
    return {"object": "classification", "index": index, "predictions": predictions}


async def rollout(request: web.Request) -> web.StreamResponse:
    """POST /rollout: energies of action sequences (or a plan) under a world model, through
    jepa.rollout / jepa.plan run whole on one worker."""
    engine = _engine(request)
    body = await _body(request, {"context", "actions", "goal", "state", "return_latents", "plan", "model"})
    _check_model(engine, body)
    job = _world_job(body, engine, _limits(request))
    async with _admission(request).slot():
        result = await engine.pipeline.world(job)
    kind = engine.model.world_model
    head = {"object": "plan" if job.plan is not None else "rollout", "model": engine.model_id, "kind": kind}
    return await _json({**head, **_world_answer(result.value)}, result)


def _world_answer(value: dict[str, Any]) -> dict[str, Any]:
    """jepa.rollout's / jepa.plan's dict as JSON: arrays as nested lists (float32 -> Python float is
    exact, and JSON round-trips it), the trace-free keys only."""
    out = {k: value[k] for k in _WORLD_KEYS if k in value}
    return {k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in out.items()}


def _world_job(body: dict[str, Any], engine: Engine, limits: Limits) -> WorldJob:
    """Validate the whole request (the same way on any model), then check the model can run it."""
    resolve = engine.pipeline.files.resolve
    context = body.get("context")
    if context is None:
        raise bad_request("'context' is required: the frames the rollout starts from", param="context")
    ctx_item = _frames_item(context, "context", resolve, limits)
    actions, plan = _actions_or_plan(body)
    goal = None
    if body.get("goal") is not None:
        goal = _frames_item(body["goal"], "goal", resolve, limits)
    elif plan is not None:
        raise bad_request("a 'plan' needs a 'goal' to plan towards", param="goal")
    state = None
    if body.get("state") is not None:
        state = numeric_array(body["state"], "state", (1, 2), "[dim] or [T][dim]")
    return_latents = opt_bool(body, "return_latents", False)
    kind = engine.model.world_model
    if not kind:
        raise bad_request(
            f"model {engine.model_id!r} is not a world model: /rollout needs an action-conditioned "
            "predictor (V-JEPA 2-AC, LeWM)",
            code="not_a_world_model",
        )
    info = engine.model.info
    if actions is not None:
        actions = _check_actions(actions, int(info["pred_action_dim"]))
    _check_state(kind, state, int(info.get("pred_state_dim", 0)))
    options = None if plan is None else _planner_options(kind, plan)
    return WorldJob(ctx_item, goal, actions, state, options, return_latents)


def _actions_or_plan(body: dict[str, Any]) -> tuple[np.ndarray | None, dict[str, Any] | None]:
    """Exactly one of: actions to score, a plan to make."""
    plan = _plan(body.get("plan"))
    if body.get("actions") is None:
        if plan is None:
            raise bad_request("'actions' is required unless a 'plan' is given", param="actions")
        return None, plan
    if plan is not None:
        raise bad_request("give 'actions' to score, or a 'plan' to make some; not both", param="actions")
    return numeric_array(body["actions"], "actions", (2, 3), _ACTION_SHAPES), None


def _frames_item(value: Any, param: str, resolve: Resolver, limits: Limits) -> Item:
    """Frames: a list of frames, or one item (an image, a clip, a video)."""
    return parse_item({"frames": value} if isinstance(value, list) else value, param, resolve, limits)


def _check_actions(actions: np.ndarray, dim: int) -> np.ndarray:
    a = actions[None] if actions.ndim == 2 else actions
    k, h, d = a.shape
    if d != dim:
        raise bad_request(
            f"'actions' must be [K][H][{dim}] or [H][{dim}] for this model (action dim {dim}); got "
            f"{d} numbers per step",
            param="actions",
            code="invalid_shape",
        )
    if k > MAX_CANDIDATES or h > MAX_STEPS:
        raise bad_request(
            f"'actions' is [{k}][{h}][{d}]: at most {MAX_CANDIDATES} candidates of {MAX_STEPS} steps",
            param="actions",
            code="invalid_shape",
        )
    return np.ascontiguousarray(a)


def _check_state(kind: str, state: np.ndarray | None, dim: int) -> None:
    if kind == "lewm":
        if state is not None:
            raise bad_request("a LeWM model takes no 'state' (its actions carry everything)", param="state")
        return
    if state is None:
        raise bad_request(
            f"'state' is required for a V-JEPA 2-AC model: the robot's pose [{dim}] at the last frame",
            param="state",
        )
    if state.shape[-1] != dim:
        raise bad_request(
            f"'state' must be [{dim}] or [T][{dim}] for this model; got shape {list(state.shape)}",
            param="state",
            code="invalid_shape",
        )


def _planner_options(kind: str, plan: dict[str, Any]) -> dict[str, Any]:
    names = _PLAN_NAMES[kind]
    for key in plan:
        if key not in names:
            raise bad_request(
                f"'plan.{key}' is not an option of this model's planner; it takes {', '.join(names)}",
                param=f"plan.{key}",
            )
    return {names[k]: v for k, v in plan.items()}


def _plan(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise bad_request("'plan' must be an object", param="plan")
    check_keys(value, {*_PLAN_INTS, *_PLAN_NUMBERS}, "plan")
    out: dict[str, Any] = {}
    for key, (lo, hi) in _PLAN_INTS.items():
        if (v := _opt_int(value.get(key), f"plan.{key}", lo, hi)) is not None:
            out[key] = v
    for key in _PLAN_NUMBERS:
        if (f := opt_number(value, key, 0.0)) is not None:
            out[key] = f
    if "topk" in out and "samples" in out and out["topk"] > out["samples"]:
        raise bad_request("'plan.topk' must not exceed 'plan.samples'", param="plan.topk")
    return out


# -- reading the server -----------------------------------------------------------------------------


async def health(request: web.Request) -> web.StreamResponse:
    """GET /health: 200 when loaded and warm, 503 before (or after a failed load)."""
    rt = request.app[RUNTIME]
    engine = rt.engine
    if engine is None:
        status = "loading" if rt.error is None else "failed"
        return web.json_response({"status": status}, status=503)
    s = request.app[SETTINGS]
    return web.json_response(
        {
            "status": "ok",
            "model": engine.model_id,
            "file": engine.file_name,
            "family": engine.model.info["family"],
            "backend": engine.model.info["backend"],
            "device": s.device,
            "pool": {"default": jepa.default_pool(engine.model), "modes": list(jepa.POOL_MODES)},
            "queue_depth": engine.dispatcher.depth,
        }
    )


async def models(request: web.Request) -> web.StreamResponse:
    """GET /v1/models, OpenAI-shaped."""
    engine = _engine(request)
    info = engine.model.info
    entry = {
        "id": engine.model_id,
        "object": "model",
        "created": engine.loaded_at,
        "owned_by": "jepa",
        "name": info["name"],
        "family": info["family"],
        "modality": info["modality"],
        "embed_dim": info["embed_dim"],
    }
    return web.json_response({"object": "list", "data": [entry]})


async def info(request: web.Request) -> web.StreamResponse:
    """GET /info: the model, the limits and live counters."""
    engine = _engine(request)
    s = request.app[SETTINGS]
    admission = request.app[ADMISSION]
    return web.json_response(
        {
            "version": jepa.__version__,
            "model": {
                "id": engine.model_id,
                "file": engine.file_name,
                "dtype": engine.dtype,
                **engine.model.info,
            },
            "limits": {
                "max_items": s.max_items,
                "max_frames": s.max_frames,
                "max_body_mb": s.max_body_mb,
                "max_batch": s.max_batch,
                "max_wait_ms": s.max_wait_ms,
                "max_concurrent_requests": s.max_concurrent_requests,
                "queue_timeout_s": s.queue_timeout_s,
                "workers": s.workers,
                "threads": s.graph_threads,
                "local_files": s.local_files,
                "files_root": s.files_root is not None,  # whether, never where
                "auth": s.api_key is not None,
            },
            "live": {
                "requests_admitted": admission.in_use,
                "queue_depth": engine.dispatcher.depth,
                "busy_workers": engine.dispatcher.busy,
                "graphs": engine.dispatcher.groups,
                "items_dispatched": engine.dispatcher.dispatched,
            },
        }
    )


async def metrics(request: web.Request) -> web.StreamResponse:
    """GET /metrics: Prometheus text."""
    body = await asyncio.to_thread(request.app[METRICS].render)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


ROUTES = [
    web.post("/v1/embeddings", embeddings),
    web.post("/embed", embed_tei),
    web.post("/classify", classify),
    web.post("/rollout", rollout),
    web.get("/health", health),
    web.get("/v1/models", models),
    web.get("/info", info),
    web.get("/metrics", metrics),
]
