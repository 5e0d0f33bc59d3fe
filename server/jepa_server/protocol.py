"""The HTTP layer under the application: every protocol-level refusal in the OpenAI envelope, and
the connection's own bounds (a cap on open connections, a deadline for a request's line and headers).

A request aiohttp cannot parse (garbage, a request line or header over the parser's limits) never
reaches the application or its middlewares: aiohttp's RequestHandler.handle_error answers it in
plain text, and an `Expect` header or an HTTP version the server does not speak is answered before
the middlewares run. The subclasses here make all of those the same JSON envelope, and
tests/test_server_http.py / test_server_hardening.py pin the behaviour, so an aiohttp change that
bypasses them is caught."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http import HttpVersion10, HttpVersion11
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest
from aiohttp.web_server import Server

from .errors import ApiError
from .settings import Settings

_TIMING = ("x-queue-time", "x-inference-time", "x-total-time")


# After refusing a request whose body is unread (408, 413), aiohttp reads and drops the rest for a
# while, so a client still sending sees the answer rather than a reset; its default 10 s would let a
# slow body hold the connection long past --body-timeout-s.
LINGER_S = 2.0


@dataclass(frozen=True)
class HttpLimits:
    header_timeout_s: float
    max_connections: int


# The offending line of a LineTooLong: aiohttp's C parser gives the request target alone, its Python
# parser the whole request line; for a header, the C parser gives the value or name, the Python one
# the line. A target starts with "/" or "*" or a scheme; a header value that does is misread as one.
_REQUEST_LINE = re.compile(rb"^(?:[A-Z]+ )?(?:/|\*|[a-zA-Z][a-zA-Z0-9+.-]*://)")
_PROTOCOL_MESSAGES = {
    400: "the request could not be parsed",
    414: "the request URI is too long",
    431: "a request header is too long",
    500: "internal server error",
}


def raw_response(error: ApiError) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection, for where no response object can be made."""
    body = json.dumps(error.body()).encode()
    head = [
        f"HTTP/1.1 {error.status} {HTTPStatus(error.status).phrase}",
        "Content-Type: application/json; charset=utf-8",
        f"Content-Length: {len(body)}",
        "Connection: close",
        *(f"{h}: 0.000" for h in _TIMING),
        *(f"{k}: {v}" for k, v in error.headers.items()),
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def _never_ran(resp: web.StreamResponse) -> web.StreamResponse:
    for header in _TIMING:
        resp.headers[header] = "0.000"  # never queued, never computed
    return resp


class _JsonErrorRequestHandler(RequestHandler):
    _header_timer: asyncio.TimerHandle | None = None
    _refusing = False  # answered and closing: whatever else arrives is dropped

    @property
    def _limits(self) -> HttpLimits:
        return self._manager.limits  # type: ignore[union-attr]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._manager is not None and len(self._manager.connections) > self._limits.max_connections:
            cap = self._limits.max_connections
            message = f"too many open connections (at most {cap}, --max-connections); retry later"
            error = ApiError(503, message, code="too_many_connections", headers={"Retry-After": "1"})
            self._close_with(error)

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return
        waiting = not self._request_in_progress and not self._messages and self._payload_parser is None
        if data and waiting and self._header_timer is None and not self._force_close:
            # The first byte of a request: its line and headers must all arrive in time.
            self._header_timer = self._loop.call_later(self._limits.header_timeout_s, self._headers_late)
        super().data_received(data)
        if self._header_timer is not None and (self._messages or self._request_in_progress):
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_late(self) -> None:
        self._header_timer = None
        if self._request_in_progress or self._messages or self.transport is None:
            return  # the headers did arrive (the timer was armed by body bytes)
        t = self._limits.header_timeout_s
        self._close_with(ApiError(
            408, f"the request line and headers did not arrive within {t:g} s (--header-timeout-s)",
            code="header_timeout"))

    def _close_with(self, error: ApiError) -> None:
        """Answer and close. The close waits LINGER_S with our side shut for writing, dropping what
        still arrives: closing with unread data would reset the connection, and the client could
        lose the answer."""
        transport = self.transport
        if transport is None or self._refusing:
            return
        self._refusing = True
        transport.write(raw_response(error))
        if isinstance(transport, asyncio.WriteTransport) and transport.can_write_eof():
            transport.write_eof()
        self._loop.call_later(LINGER_S, self.force_close)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: Any,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        resp = super().handle_error(request, status, exc, message)
        if not isinstance(resp, web.Response):  # pragma: no cover - aiohttp always builds a Response
            return resp
        if status == 400 and isinstance(exc, LineTooLong):
            line = exc.args[0] if exc.args else b""
            line = line.encode("latin-1", "replace") if isinstance(line, str) else bytes(line)
            status = 414 if _REQUEST_LINE.match(line) else 431
        text = _PROTOCOL_MESSAGES.get(status) or resp.reason or "error"
        body = ApiError(status, text).body()
        out = web.Response(status=status, text=json.dumps(body), content_type="application/json")
        out.force_close()
        return _never_ran(out)


class JsonErrorServer(Server):
    """web.Server whose connections answer protocol errors in the JSON envelope, within HttpLimits."""

    def __init__(self, handler: Any, *, limits: HttpLimits, **kwargs: Any) -> None:
        super().__init__(handler, **kwargs)
        self.limits = limits

    def __call__(self) -> RequestHandler:
        return _JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


Handler = Callable[[BaseRequest], Awaitable[web.StreamResponse]]


def _guarded(handler: Handler) -> Handler:
    """The application's handler behind the checks aiohttp runs before any middleware."""

    async def guarded(request: BaseRequest) -> web.StreamResponse:
        version = request.version
        if version not in (HttpVersion10, HttpVersion11):
            # Answered in HTTP/1.1, not in the version the client named (the response's status line
            # reads request.version, a cached copy of _version).
            request._version = HttpVersion11
            request._cache.pop("version", None)
            error = ApiError(505, f"HTTP/{version.major}.{version.minor} is not served here: use HTTP/1.1")
            return _never_ran(error.response())
        expect = request.headers.get("Expect")
        if expect is not None and expect.lower() != "100-continue":
            error = ApiError(417, f"unknown Expect header {expect[:80]!r}: only 'Expect: 100-continue' is "
                             "understood")
            return _never_ran(error.response())
        return await handler(request)

    return guarded


class JepaAppRunner(web.AppRunner):
    """AppRunner serving through JsonErrorServer, with the settings' connection bounds."""

    def __init__(self, app: web.Application, settings: Settings, **kwargs: Any) -> None:
        super().__init__(
            app,
            handler_cancellation=True,  # work whose client has gone is dropped
            keepalive_timeout=settings.idle_timeout_s,
            shutdown_timeout=settings.shutdown_timeout_s,
            lingering_time=LINGER_S,
            # Bodies reach the handler as sent: gzip / deflate are undone there, after the key and
            # admission, on a thread and bounded (content_encoding.py), never in the parser on the loop.
            auto_decompress=False,
            **kwargs,
        )
        self._limits = HttpLimits(settings.header_timeout_s, settings.max_connections)

    async def _make_server(self) -> Server:
        base = await super()._make_server()
        return JsonErrorServer(
            _guarded(base.request_handler),
            limits=self._limits,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
