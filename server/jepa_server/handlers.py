"""The endpoints and the one route table."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from aiohttp import web
from aiohttp.http import HttpVersion11
from aiohttp.web_protocol import RequestPayloadError

import jepa

from . import answers
from .admission import Admission, BodyHold
from .answers import json_response, strict_dumps
from .budget import (
    check_response,
    check_rollout_work,
    classify_bytes,
    embedding_bytes,
    rollout_work,
    world_bytes,
)
from .content_encoding import encoding_of, inflate
from .errors import ApiError, bad_request, from_jepa
from .inputs import (
    Item,
    Limits,
    TextInputs,
    check_keys,
    opt_bool,
    opt_int,
    opt_number,
    opt_str,
    parse_body,
    parse_inputs,
    parse_items,
)
from .keys import ADMISSION, METRICS, PARSER, RUNTIME, SETTINGS
from .metrics import CONTENT_TYPE
from .model_info import model_json, pool_json, text_json
from .pipeline import Embedded
from .rollout import parse_world_job
from .runtime import Engine
from .security import check_admitted

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_T = TypeVar("_T")
# A request's `keep_alive`: how long its model stays resident once idle (seconds; at most a day).
MAX_KEEP_ALIVE_S = 86_400.0
# The fields every model-using endpoint takes beside its own: which model, and its keep-alive.
MODEL_FIELDS = {"model", "keep_alive"}


def _limits(request: web.Request) -> Limits:
    s = request.app[SETTINGS]
    return Limits(s.max_items, s.max_frames, s.max_input_bytes, s.max_request_chars, s.max_request_tokens,
                  s.accept_token_ids)


def _admission(request: web.Request) -> Admission:
    return request.app[ADMISSION]


async def _parsing(request: web.Request, fn: Callable[..., _T], *args: Any) -> _T:
    """fn(*args) on the app's parser thread: reading a request's fields walks what the client sent
    (a 30 MB string checked for whitespace took a second on the loop), so it never runs on the loop."""
    return await asyncio.get_running_loop().run_in_executor(request.app[PARSER], fn, *args)


async def _body(request: web.Request, allowed: set[str]) -> dict[str, Any]:
    """The body as a JSON object with only `allowed` fields. Parsed on the app's one parser thread:
    however it is built, a body within --max-body-mb and --max-json-values holds the interpreter for
    a bounded time, and bodies parse one after another rather than taking the interpreter in turn."""
    raw = await read_body(request)
    body = await _parsing(request, parse_body, raw, request.app[SETTINGS].max_json_values)
    check_keys(body, allowed)
    return body


# Where holding_body keeps a request's BodyHold for read_body.
_BODY_HOLD = web.RequestKey("jepa_body_hold", BodyHold)


def holding_body(handler: Handler) -> Handler:
    """`handler` with its request's body counted in the server's body budget (--max-bodies-mb) until
    the answer, the bytes taken as they arrive (read_body): what a body becomes (its bytes, its JSON,
    its decoded inputs) lives within that, so requests waiting for a slot hold bounded memory
    together, and a slow client holds only what it has sent. A compressed body holds --max-body-mb
    while it inflates, then what it inflated to."""

    async def holding(request: web.Request) -> web.StreamResponse:
        if not request.can_read_body:
            return await handler(request)
        async with _admission(request).body(request.app[SETTINGS].max_bodies_bytes) as hold:
            request[_BODY_HOLD] = hold
            return await handler(request)

    return holding


async def read_body(request: web.Request) -> bytes:
    """The whole body within --body-timeout-s, its Content-Encoding undone on a thread within
    --max-body-mb (the runner leaves bodies as sent: content_encoding.py); a body that cannot be read
    is the client's fault."""
    s = request.app[SETTINGS]
    encoding = encoding_of(request.headers.get("Content-Encoding"))
    hold = request.get(_BODY_HOLD)
    chunks: list[bytes] = []
    total = 0
    try:
        async with asyncio.timeout(s.body_timeout_s):
            while chunk := await request.content.readany():
                total += len(chunk)
                if total > s.max_body_bytes:  # a chunked body past the limit, as it arrives
                    raise ApiError(413, f"the request body is more than {s.max_body_bytes} bytes; this "
                                   f"server takes at most {s.max_body_bytes} (--max-body-mb "
                                   f"{s.max_body_mb:g})", code="request_too_large")
                if hold is not None:
                    await hold.grow(len(chunk))
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(
            408,
            f"the request body did not arrive within {s.body_timeout_s:g} s (--body-timeout-s)",
            code="body_timeout",
        ) from None
    except RequestPayloadError as exc:  # a broken chunked encoding
        raise bad_request(f"the request body cannot be read: {exc}", code="invalid_body") from None
    except ConnectionResetError:  # the client closed the connection mid-body: nobody reads the answer
        raise ApiError(400, "the request body ended early: the client closed the connection",
                       code="incomplete_body") from None
    raw = b"".join(chunks)
    del chunks
    if encoding == "identity":
        return raw
    if hold is not None:  # the inflated body's room, taken before it inflates
        await hold.grow(s.max_body_bytes)
    body = await asyncio.to_thread(inflate, raw, encoding, s.max_body_bytes)
    if hold is not None:
        hold.shrink_to(len(raw) + len(body))
    return body


def _model_name(body: dict[str, Any]) -> str | None:
    """The request's `model` (None: the server's default model); anything but a string names no
    model served here."""
    name = body.get("model")
    if name is None or isinstance(name, str):
        return name
    raise ApiError(
        404,
        f"the model {json.dumps(name)[:80]} is not served here: `model` is a model's id (a string)",
        param="model",
        code="model_not_found",
        type="invalid_request_error",
    )


def _keep_alive(body: dict[str, Any]) -> float | None:
    value = opt_number(body, "keep_alive")
    if value is not None and not 0 <= value <= MAX_KEEP_ALIVE_S:
        raise bad_request(
            f"'keep_alive' is {value:g} s; it must be within 0..{MAX_KEEP_ALIVE_S:g} seconds",
            param="keep_alive",
        )
    return value


def _use(request: web.Request, body: dict[str, Any]) -> Any:
    """`async with _use(request, body) as engine`: the named model's engine for the request (loaded
    first when it is not resident)."""
    return request.app[RUNTIME].use(_model_name(body), _keep_alive(body))


def _dimensions(engine: Engine, body: dict[str, Any], pool: str, key: str = "dimensions") -> int | None:
    dims = opt_int(body, key, 1)
    width = jepa.pooling.pool_width(engine.model, pool)
    if dims is not None and dims > width:
        message = f"'{key}' is {dims}, larger than the model's width {width} (pool '{pool}')"
        raise bad_request(message, param=key)
    return dims


def _pool(model: jepa.Model, body: dict[str, Any]) -> str:
    """The request's pool mode (default: the model's), by the library's one check of the model's
    declared modes: nothing is computed to find out."""
    try:
        return jepa.check_pool(model, opt_str(body, "pool"))
    except jepa.JepaError as exc:
        raise from_jepa(exc, "pool") from None


# -- embeddings -----------------------------------------------------------------------------------


async def embeddings(request: web.Request) -> web.StreamResponse:
    """POST /v1/embeddings, OpenAI-shaped."""
    body = await _body(request, MODEL_FIELDS | {"input", "encoding_format", "dimensions", "user", "pool"})
    async with _use(request, body) as engine:
        return await _embeddings(request, engine, body)


async def _embeddings(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    fmt = opt_str(body, "encoding_format", ("float", "base64")) or "float"
    dims = _dimensions(engine, body, _pool(engine.model, body))
    inputs, pool = await _parsing(request, _embedding_inputs, request, engine, body, "input", fmt, dims)
    result = await _embed(request, engine, inputs, pool)
    return await json_response(answers.embeddings(result, fmt, dims, engine.model_id), result)


async def embed_tei(request: web.Request) -> web.StreamResponse:
    """POST /embed, TEI-style: bare vectors."""
    body = await _body(request, MODEL_FIELDS | {"inputs", "pool", "normalize", "dimensions"})
    async with _use(request, body) as engine:
        return await _embed_tei(request, engine, body)


async def _embed_tei(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    dims = _dimensions(engine, body, _pool(engine.model, body))
    normalize = opt_bool(body, "normalize", False)
    inputs, pool = await _parsing(request, _embedding_inputs, request, engine, body, "inputs", "float",
                                  dims)
    result = await _embed(request, engine, inputs, pool)
    return await json_response(answers.embed_tei(result, dims, normalize), result)


def _embedding_inputs(
    request: web.Request, engine: Engine, body: dict[str, Any], key: str, fmt: str, dims: int | None
) -> tuple[list[Item] | TextInputs, str]:
    """The request's inputs for this model and its pool mode, with the answer's size bounded: all
    of it before anything is decoded or tokenized."""
    pool = _pool(engine.model, body)
    inputs = parse_inputs(engine.model, body.get(key), engine.pipeline.files.resolve, _limits(request), key)
    check_response(embedding_bytes(engine.model, inputs, pool, fmt, dims), request.app[SETTINGS])
    return inputs, pool


async def _embed(
    request: web.Request, engine: Engine, inputs: list[Item] | TextInputs, pool: str
) -> Embedded:
    async with _admission(request).slot():
        if isinstance(inputs, TextInputs):
            return await engine.pipeline.embed_texts(inputs, pool, _limits(request))
        return await engine.pipeline.embed(inputs, pool)


# -- heads and world models ------------------------------------------------------------------------
# Both parse and validate the whole request first (so a malformed one is refused the same way on
# any model), then check the model can do it. A classification runs as a batched op beside
# encode_op; a rollout or a plan (its request parsed in rollout.py) runs whole on one worker
# (Dispatcher.run_whole).

async def classify(request: web.Request) -> web.StreamResponse:
    """POST /classify: the top-k classes of each input, for a model with a classifier head."""
    body = await _body(request, MODEL_FIELDS | {"input", "inputs", "top_k"})
    async with _use(request, body) as engine:
        return await _classify(request, engine, body)


async def _classify(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    top_k = opt_int(body, "top_k", 1)
    top_k = 5 if top_k is None else top_k
    key = "inputs" if "inputs" in body else "input"
    items = await _parsing(request, parse_items, body.get(key), engine.pipeline.files.resolve,
                           _limits(request), key)
    if not engine.model.has_head:
        raise bad_request(
            f"model {engine.model_id!r} has no classifier head: /classify needs a model converted "
            "with one (a video classifier); use /v1/embeddings for embeddings",
            code="no_classifier_head",
        )
    check_response(classify_bytes(items, min(top_k, int(engine.model.info.n_classes) or top_k)),
                   request.app[SETTINGS])
    async with _admission(request).slot():
        result = await engine.pipeline.classify(items, top_k)
    return await json_response(answers.classifications(result.results, engine.model_id), result)


async def rollout(request: web.Request) -> web.StreamResponse:
    """POST /rollout: energies of action sequences (or a plan) under a world model, through
    jepa.rollout / jepa.plan run whole on one worker."""
    fields = {"context", "actions", "goal", "state", "return_latents", "plan"}
    body = await _body(request, MODEL_FIELDS | fields)
    async with _use(request, body) as engine:
        return await _rollout(request, engine, body)


async def _rollout(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    job = await _parsing(request, parse_world_job, body, engine.model, engine.model_id,
                         engine.pipeline.files.resolve, _limits(request))
    s = request.app[SETTINGS]
    kind = engine.model.world_model
    shape = None if job.actions is None else job.actions.shape
    check_rollout_work(rollout_work(kind, shape, job.plan), s, "plan" if job.plan is not None else "actions")
    if shape is not None:
        check_response(world_bytes(engine.model, shape[0], shape[1], job.return_latents), s)
    async with _admission(request).slot():
        result = await engine.pipeline.world(job)
    answer = answers.world(result.value, engine.model_id, kind, planned=job.plan is not None)
    return await json_response(answer, result)


# -- reading the server -----------------------------------------------------------------------------


async def health(request: web.Request) -> web.StreamResponse:
    """GET /health: 200 once the -m models are loaded and warm (a --models-dir model loads on its
    first request), 503 before (or after a failed load). Touches no model: it reads the registry's
    bookkeeping only."""
    rt = request.app[RUNTIME]
    registry = rt.registry
    # Not ready until the -m models are resident: the registry is published before they load (so
    # requests can wait for them), and a probe that passed then would send traffic to a server that
    # cannot answer yet.
    if registry is None or rt.error is not None or not rt.ready.is_set():
        status = "loading" if rt.error is None else "failed"
        answer: dict[str, Any] = {"status": status}
        if status == "loading" and registry is not None:
            answer["loading"] = [e.id for e in registry.catalog.entries()
                                 if e.pinned and e.id not in registry.resident]
        return web.json_response(answer, status=503, dumps=strict_dumps)
    s = request.app[SETTINGS]
    body: dict[str, Any] = {
        "status": "ok",
        "models": {
            "servable": len(registry.catalog.entries()),
            "resident": len(registry.resident),
            "loading": registry.loads_running,
        },
    }
    engine = registry.peek(None)
    if engine is not None:  # the default model, as a one-model server has always told it
        body.update(
            model=engine.model_id,
            file=engine.file_name,
            family=engine.model.info.family,
            backend=engine.model.info.backend,
            device=s.device,
            pool=pool_json(engine.model),
            queue_depth=engine.dispatcher.depth,
        )
    return web.json_response(body, dumps=strict_dumps)


async def models(request: web.Request) -> web.StreamResponse:
    """GET /v1/models, OpenAI-shaped: every servable model, with whether it is resident (what a
    resident one is comes from its loaded file; a model not loaded is described by its catalog
    entry only: nothing is read to list it)."""
    registry = request.app[RUNTIME].registry_or_503()
    await registry.rescan()
    data = []
    for entry in registry.catalog.entries():
        res = registry.resident.get(entry.id)
        item: dict[str, Any] = {
            "id": entry.id,
            "object": "model",
            "created": int(res.loaded_at) if res is not None else _mtime(entry.path),
            "owned_by": "jepa",
            "resident": res is not None,
            "aliases": list(entry.aliases),
        }
        if res is not None:
            info = res.engine.model.info
            item.update(name=info.name, family=info.family, modality=info.modality, embed_dim=info.embed_dim)
        data.append(item)
    return web.json_response({"object": "list", "data": data}, dumps=strict_dumps)


def _mtime(path: str) -> int:
    try:
        return int(os.stat(path).st_mtime)
    except OSError:
        return 0


async def info(request: web.Request) -> web.StreamResponse:
    """GET /info: the default model, every resident model, the limits and live counters."""
    registry = request.app[RUNTIME].registry_or_503()
    s = request.app[SETTINGS]
    admission = request.app[ADMISSION]
    default = registry.peek(None)
    now = time.monotonic()
    residents = list(registry.resident.values())
    engines = [r.engine for r in residents]
    return web.json_response(
        {
            "version": jepa.__version__,
            "model": None if default is None else _model_entry(default),
            "models": [
                {
                    **_model_entry(r.engine),
                    "devices": list(r.engine.devices),
                    "pinned": r.entry.pinned,
                    "references": r.refs,
                    "idle_s": round(r.idle_s(now), 3),
                    "keep_alive_s": None if r.entry.pinned else registry.keep_alive_of(r),
                    "requests": r.requests,
                    "items_served": r.engine.dispatcher.dispatched,
                    "load_s": round(r.load_s, 3),
                    "n_bytes": int(r.engine.model.info.n_bytes),
                    "n_bytes_mapped": int(r.engine.model.info.n_bytes_mapped),
                }
                for r in residents
            ],
            "registry": {
                "servable": registry.catalog.ids(),
                "models_dir": s.models_dir is not None,  # whether, never where
                "max_loaded_models": s.max_loaded_models,
                "max_concurrent_loads": s.max_concurrent_loads,
                "keep_alive_s": s.keep_alive_s,
                "loads": registry.loads,
                "loading": registry.loads_running,
            },
            "limits": {
                "max_items": s.max_items,
                "max_frames": s.max_frames,
                "max_body_mb": s.max_body_mb,
                "max_json_values": s.max_json_values,
                "max_bodies_mb": s.max_bodies_mb,
                "max_input_mb": s.max_input_mb,
                "max_image_pixels": s.max_image_pixels,
                "max_request_pixels": s.max_request_pixels,
                "max_clip_pixels": s.max_clip_pixels,
                "max_response_mb": s.max_response_mb,
                "max_rollout_work": s.max_rollout_work,
                "request_timeout_s": s.request_timeout_s,
                "max_connections": s.max_connections,
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
                "queue_depth": sum(e.dispatcher.depth for e in engines),
                "busy_workers": sum(e.dispatcher.busy for e in engines),
                "graphs": sum(e.dispatcher.groups for e in engines),
                "items_dispatched": sum(e.dispatcher.dispatched for e in engines),
                "body_bytes_held": admission.body_bytes,
            },
        },
        dumps=strict_dumps,
    )


def _model_entry(engine: Engine) -> dict[str, Any]:
    head = {"id": engine.model_id, "file": engine.file_name, "dtype": engine.dtype}
    return {**head, **model_json(engine.model), **text_json(engine.model, engine.pipeline.metrics.text)}


async def metrics(request: web.Request) -> web.StreamResponse:
    """GET /metrics: Prometheus text."""
    body = await asyncio.to_thread(request.app[METRICS].render)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def continue_if_admitted(request: web.Request) -> web.StreamResponse | None:
    """`Expect: 100-continue` answered only for a request that would be served: its key checked and its
    announced body within --max-body-mb (aiohttp's own handler said 100 Continue first, so a client
    without the key was invited to send its whole body). A refusal is the answer instead, and the
    client never sends the body."""
    s = request.app[SETTINGS]
    try:
        check_admitted(s.api_key, s.max_body_bytes, s.max_body_mb, request.path, request.headers,
                       request.content_length)
    except ApiError as exc:
        resp = exc.response()
        resp.force_close()  # the body was never asked for: it may still come, and is not a request
        return resp
    if request.version == HttpVersion11 and request.headers.get("Expect", "").lower() == "100-continue":
        await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        request.writer.output_size = 0
    return None


def _post(path: str, handler: Handler) -> web.RouteDef:
    return web.post(path, holding_body(handler), expect_handler=continue_if_admitted)


ROUTES = [
    _post("/v1/embeddings", embeddings),
    _post("/embed", embed_tei),
    _post("/classify", classify),
    _post("/rollout", rollout),
    web.get("/health", health),
    web.get("/v1/models", models),
    web.get("/info", info),
    web.get("/metrics", metrics),
]
