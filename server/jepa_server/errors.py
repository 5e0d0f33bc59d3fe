"""Refusals in one shape: OpenAI's `{"error": {"message", "type", "param", "code"}}`.

Handlers raise `ApiError`; engine errors are mapped by class (never by message); aiohttp's own
HTTP exceptions and the low-level protocol's parse errors are rewritten into the same envelope.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

import jepa

log = logging.getLogger("jepa_server")

INVALID = "invalid_request_error"
NOT_FOUND = "not_found"
SERVER = "server_error"

_TYPE_BY_STATUS = {404: NOT_FOUND, 500: SERVER, 502: SERVER, 503: SERVER, 504: SERVER}
_CODE_BY_STATUS = {
    400: "bad_request",
    401: "invalid_api_key",
    404: "unknown_route",
    405: "method_not_allowed",
    413: "request_too_large",
    414: "uri_too_long",
    431: "headers_too_large",
    500: "internal_error",
    503: "unavailable",
}


class ApiError(Exception):
    """A refusal with its HTTP status and the OpenAI error fields."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code or _CODE_BY_STATUS.get(status)
        self.type = type or _TYPE_BY_STATUS.get(status, INVALID)
        self.headers = headers or {}

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def response(self) -> web.Response:
        resp = web.json_response(self.body(), status=self.status, headers=self.headers)
        if self.status == 413:
            resp.force_close()  # the unread body stays unread: this connection is done
        return resp


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def from_jepa(exc: jepa.JepaError, param: str | None = None, *, computing: bool = False) -> ApiError:
    """The refusal for an engine error, by its class. A resource limit met while computing is the
    server's momentary state (503); met while reading the request it is the request's size (413)."""
    if isinstance(exc, jepa.InvalidInputError):
        return ApiError(400, exc.message, param=param, code="invalid_input")
    if isinstance(exc, jepa.UnsupportedError):
        return ApiError(400, exc.message, param=param, code="unsupported")
    if isinstance(exc, jepa.ResourceLimitError):
        if computing:
            return ApiError(503, exc.message, code="resource_exhausted", headers={"Retry-After": "1"})
        return ApiError(413, exc.message, param=param, code="resource_limit")
    # A model file or backend failure is the server's fault, not the request's.
    return ApiError(500, exc.message, code="engine_error")


def from_http(exc: web.HTTPException) -> ApiError:
    """aiohttp's HTTPNotFound, HTTPMethodNotAllowed, HTTPRequestEntityTooLarge, ... as an ApiError."""
    messages = {
        404: "no such endpoint",
        405: "method not allowed here",
        413: "the request body is too large",
    }
    message = messages.get(exc.status, exc.reason)
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
    if exc.status == 405 and "Allow" in headers:
        message = f"method not allowed here; allowed: {headers['Allow']}"
    return ApiError(exc.status, message, headers=headers)


# -- the low-level protocol ---------------------------------------------------------------------
# A request aiohttp cannot parse (garbage, a request line or header over the parser's limits) never
# reaches the application or its middlewares: aiohttp's RequestHandler.handle_error answers it in
# plain text. These two subclasses make that answer the same JSON envelope. tests/test_server_http.py
# pins the behaviour, so an aiohttp change that bypasses them is caught.


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


class _JsonErrorRequestHandler(RequestHandler):
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
        for header in ("x-queue-time", "x-inference-time", "x-total-time"):
            out.headers[header] = "0.000"  # never queued, never computed
        out.force_close()
        return out


class JsonErrorServer(Server):
    """web.Server whose connections answer protocol errors in the JSON envelope."""

    def __call__(self) -> RequestHandler:
        return _JsonErrorRequestHandler(self, loop=self._loop, **self._kwargs)


class JepaAppRunner(web.AppRunner):
    """AppRunner serving through JsonErrorServer."""

    async def _make_server(self) -> Server:
        base = await super()._make_server()
        return JsonErrorServer(
            base.request_handler,
            request_factory=base.request_factory,
            handler_cancellation=base.handler_cancellation,
            loop=base._loop,
            **base._kwargs,
        )
