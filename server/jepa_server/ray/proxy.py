"""Ray Serve's own refusals in jepa-server's error envelope.

A replica's answers are already the server's. What Ray's HTTP proxy answers itself is not: a request
whose replica died under it (500, "Internal Server Error" in plain text), one dropped by
backpressure (503), one past the proxy's request_timeout_s (408, answered as a 504). This ASGI
middleware, installed in
the proxy through Ray's hook

    RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH=jepa_server.ray.proxy:middlewares

(set on every node that runs a proxy, before `ray start` / `serve run`: the proxy reads it once),
rewrites each such answer — any 4xx or 5xx that no replica made — into the envelope, the proxy's
text kept as the message. Answers from a replica (they carry x-jepa-replica) pass untouched."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.middleware import Middleware

from ..errors import ApiError
from .deployment import REPLICA_HEADER

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# The proxy's answers by status: the code a client can act on. (Its 408 is answered as a 504, below.)
_CODES = {
    429: "rate_limited",
    500: "replica_failed",  # the replica died or raised before it answered: another replica may not
    503: "unavailable",
    504: "deadline_exceeded",
}


NO_ANSWER = "the proxy got no answer from the replica: it died, or its call failed"


def proxy_error(status: int, text: str) -> ApiError:
    """The envelope for an answer Ray's proxy made itself."""
    detail = text.strip() or "no detail"
    if status == 408:
        # Ray's proxy says 408 when no replica answered within its request_timeout_s: the client
        # sent its request whole, so the wait is the server's, not the client's (jepa-server's own
        # deadline is a 504 deadline_exceeded too). A request lost with a dying replica ends here.
        status, detail = 504, f"no replica answered within the proxy's request_timeout_s ({detail})"
    if status == 500:
        message = f"the replica serving this request failed before it answered (Ray Serve: {detail})"
    else:
        message = f"Ray Serve: {detail}"
    headers = {"Retry-After": "1"} if status in (429, 503) else None
    return ApiError(status, message[:1000], code=_CODES.get(status), headers=headers)


class EnvelopeErrors:
    """ASGI middleware: the proxy's own error answers in the envelope."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        held: Message | None = None  # the proxy's own error start, kept until its body is read
        body = bytearray()
        started = False

        async def relay(message: Message) -> None:
            nonlocal held, started
            if message["type"] == "http.response.start":
                if message["status"] >= 400 and not _from_replica(message):
                    held = message
                    return
                started = True
            elif message["type"] == "http.response.body" and held is not None:
                body.extend(message.get("body", b""))
                if message.get("more_body", False):
                    return
                status, held = held["status"], None
                started = True
                await _send_envelope(send, proxy_error(status, body.decode("utf-8", "replace")))
                return
            await send(message)

        try:
            await self.app(scope, receive, relay)
        except Exception as exc:
            if started:
                raise
            await _send_envelope(send, proxy_error(500, type(exc).__name__))
            return
        if not started:
            # The proxy sends nothing when the replica's call failed (a dead replica: Ray's
            # ActorDiedError); uvicorn would answer a bare text 500.
            status = 500 if held is None else held["status"]
            await _send_envelope(send, proxy_error(status, body.decode("utf-8", "replace") or NO_ANSWER))


def _from_replica(start: Message) -> bool:
    name = REPLICA_HEADER.encode()
    return any(k.lower() == name for k, _ in start.get("headers", []))


async def _send_envelope(send: Send, error: ApiError) -> None:
    payload = json.dumps(error.body()).encode()
    headers = [(b"content-type", b"application/json; charset=utf-8"),
               (b"content-length", str(len(payload)).encode()),
               *((k.lower().encode(), v.encode()) for k, v in error.headers.items())]  # fmt: skip
    await send({"type": "http.response.start", "status": error.status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def middlewares() -> list[Middleware]:
    """What RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH names: the proxy's middleware list."""
    return [Middleware(EnvelopeErrors)]
