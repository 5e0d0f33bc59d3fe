"""create_app(settings) -> web.Application: the middleware, the routes, the resources' lifetimes."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

import jepa

from .admission import Admission
from .errors import ApiError, from_http, from_jepa
from .handlers import ROUTES
from .keys import ADMISSION, METRICS, PARSER, RUNTIME, SETTINGS
from .metrics import Metrics
from .runtime import Runtime
from .security import LocalFiles, check_admitted
from .settings import Settings

log = logging.getLogger("jepa_server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# After in-flight requests had --shutdown-timeout-s: how long the workers may take to leave their
# graph (a rollout stops at its next step; an encode graph is short).
CLOSE_TIMEOUT_S = 5.0


def create_app(settings: Settings, *, model: jepa.Model | None = None) -> web.Application:
    """The server as an aiohttp app. With `model`, serve that already loaded model (tests share
    one); otherwise the settings' model is loaded in the background once the app starts.

    Raises ValueError when --files-root is not a directory."""
    files = LocalFiles(settings.allow_local_files, settings.files_root)
    metrics = Metrics()
    app = web.Application(middlewares=[edge_middleware], client_max_size=settings.max_body_bytes)
    app[SETTINGS] = settings
    app[METRICS] = metrics
    app[RUNTIME] = Runtime(settings, metrics, files, model)
    app.add_routes(ROUTES)
    app.cleanup_ctx.append(_admission_ctx)
    app.cleanup_ctx.append(_engine_ctx)
    return app


async def _admission_ctx(app: web.Application) -> AsyncIterator[None]:
    # An asyncio.Semaphore belongs to the running loop, so it is made here, not in create_app.
    s = app[SETTINGS]
    app[ADMISSION] = Admission(s.max_concurrent_requests, s.queue_timeout_s)
    app[PARSER] = ThreadPoolExecutor(1, thread_name_prefix="jepa-json")
    yield
    app[PARSER].shutdown(wait=False, cancel_futures=True)


async def _engine_ctx(app: web.Application) -> AsyncIterator[None]:
    runtime = app[RUNTIME]
    loading = asyncio.create_task(runtime.load(), name="jepa-load")
    yield
    loading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await loading
    await runtime.close(timeout=CLOSE_TIMEOUT_S)


async def wait_ready(app: web.Application) -> None:
    """Wait until the model is loaded and warm; raise what stopped it if it failed."""
    runtime = app[RUNTIME]
    await runtime.ready.wait()
    if runtime.error is not None:
        raise runtime.error


@web.middleware
async def edge_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Limits and auth before the handler; every refusal in the OpenAI envelope; timing headers
    and metrics on every answer."""
    started = time.perf_counter()
    metrics = request.app[METRICS]
    metrics.in_flight.inc()
    try:
        response = await _answer(request, handler)
    except asyncio.CancelledError:
        # The client went away (aiohttp cancels its handler: the work is dropped) or the server is
        # shutting down; nobody reads an answer. 499 is the usual count for "client closed".
        status = "499" if request.transport is None else "503"
        metrics.requests.labels(_endpoint(request), status).inc()
        raise
    finally:
        metrics.in_flight.dec()
    total = time.perf_counter() - started
    # Handlers that computed set the first two; every other answer spent no time there.
    response.headers.setdefault("x-queue-time", "0.000")
    response.headers.setdefault("x-inference-time", "0.000")
    response.headers["x-total-time"] = f"{total * 1000:.3f}"
    endpoint = _endpoint(request)
    metrics.requests.labels(endpoint, str(response.status)).inc()
    metrics.request_seconds.labels(endpoint).observe(total)
    return response


def _endpoint(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return resource.canonical if resource is not None else "unmatched"


async def _answer(request: web.Request, handler: Handler) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    try:
        # Refuse an announced oversize body and a wrong key before any handler runs (a chunked body
        # is caught by client_max_size when read).
        check_admitted(settings.api_key, settings.max_body_bytes, settings.max_body_mb, request.path,
                       request.headers, request.content_length)
        if request.app[RUNTIME].draining:
            raise ApiError(503, "the server is shutting down", code="shutting_down",
                           headers={"Retry-After": "1"})
        try:
            # The request's deadline: a timeout cancels its queued work, and a running rollout stops
            # at its next predictor step (Pipeline.world).
            async with asyncio.timeout(settings.request_timeout_s):
                return await handler(request)
        except TimeoutError:
            raise ApiError(
                504,
                f"the request did not finish within {settings.request_timeout_s:g} s (--request-timeout-s); "
                "its work was stopped",
                code="deadline_exceeded",
            ) from None
    except ApiError as exc:
        if exc.status >= 500:
            log.warning("%s %s -> %d: %s", request.method, request.path, exc.status, exc.message)
        return exc.response()
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return from_http(exc).response()
    except jepa.JepaError as exc:
        log.warning("%s %s: %s: %s", request.method, request.path, type(exc).__name__, exc)
        return from_jepa(exc).response()
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return ApiError(500, "internal server error").response()
