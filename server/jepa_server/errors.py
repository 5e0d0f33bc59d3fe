"""Refusals in one shape: OpenAI's `{"error": {"message", "type", "param", "code"}}`.

Handlers raise `ApiError`; engine errors are mapped by class (never by message); aiohttp's own
HTTP exceptions are rewritten into the same envelope (the low-level protocol's errors too:
protocol.py).
"""

from __future__ import annotations

import logging
from typing import Any

from aiohttp import web

import jepa

log = logging.getLogger("jepa_server")

INVALID = "invalid_request_error"
NOT_FOUND = "not_found"
SERVER = "server_error"

_TYPE_BY_STATUS = {404: NOT_FOUND, 500: SERVER, 502: SERVER, 503: SERVER, 504: SERVER, 505: SERVER}
_CODE_BY_STATUS = {
    400: "bad_request",
    401: "invalid_api_key",
    404: "unknown_route",
    405: "method_not_allowed",
    408: "request_timeout",
    413: "request_too_large",
    414: "uri_too_long",
    417: "expectation_failed",
    431: "headers_too_large",
    500: "internal_error",
    503: "unavailable",
    504: "deadline_exceeded",
    505: "http_version_not_supported",
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
        if self.status in (408, 413, 417, 505) or self.code == "shutting_down":
            resp.force_close()  # an unread body stays unread, or the connection is done: close it
        return resp


def bad_request(message: str, param: str | None = None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


# The engine's per-call allocation caps (jepa_context_params), named by ResourceLimitError.param.
_REQUEST_SIZE_CAPS = ("max_output_bytes", "max_graph_bytes")


def from_jepa(exc: jepa.JepaError, param: str | None = None, *, computing: bool = False) -> ApiError:
    """The refusal for an engine error, by its class. A resource limit met while computing is the
    server's momentary state (503); met while reading the request it is the request's size (413)."""
    if isinstance(exc, jepa.InvalidInputError):
        return ApiError(400, exc.message, param=param, code="invalid_input")
    if isinstance(exc, jepa.UnsupportedError):
        return ApiError(400, exc.message, param=param, code="unsupported")
    if isinstance(exc, jepa.ResourceLimitError):
        # A cap on what one call may allocate is the request's size, whenever it is met: retrying
        # the same request cannot help. Anything else met while computing is the server's state.
        if computing and getattr(exc, "param", None) not in _REQUEST_SIZE_CAPS:
            return ApiError(503, exc.message, code="resource_exhausted", headers={"Retry-After": "1"})
        return ApiError(413, exc.message, param=param, code="resource_limit")
    if isinstance(exc, jepa.ModelFileError) and getattr(exc, "param", None) == "model_file":
        # The file changed under the running server (replaced in place): the registry loads it again.
        return ApiError(
            503,
            f"{exc.message}: the server loads it again; retry",
            code="model_file_changed",
            headers={"Retry-After": "1"},
        )
    # A model file or backend failure is the server's fault, not the request's.
    return ApiError(500, exc.message, code="engine_error")


def from_http(exc: web.HTTPException) -> ApiError:
    """aiohttp's HTTPNotFound, HTTPMethodNotAllowed, HTTPRequestEntityTooLarge, ... as an ApiError."""
    messages = {
        404: "no such endpoint",
        405: "method not allowed here",
        413: "the request body is too large",
        417: "unknown Expect header: only 'Expect: 100-continue' is understood",
    }
    message = messages.get(exc.status, exc.reason)
    headers = {k: v for k, v in exc.headers.items() if k.lower() in ("allow", "retry-after")}
    if exc.status == 405 and "Allow" in headers:
        message = f"method not allowed here; allowed: {headers['Allow']}"
    return ApiError(exc.status, message, headers=headers)
