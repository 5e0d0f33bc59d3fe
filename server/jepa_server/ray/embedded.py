"""jepa-server's own aiohttp app inside a Ray replica, on a private Unix socket, and the one hop that
hands it a request.

The replica adds no handler of its own: `forward` passes the method, path, headers and raw body to
the app `create_app(settings)` builds — the same parsing, admission, pipeline, batching and error
envelope jepa-server runs — and returns its status, headers and body unchanged. A socket costs a
fraction of a millisecond per request (tools/bench/ray.py measures the whole Ray path against
jepa-server), and it needs nothing from the server's internals: the app is driven the way
jepa-server's __main__ drives it."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass

import aiohttp
from aiohttp import web

from ..app import create_app, wait_ready
from ..errors import ApiError
from ..keys import METRICS, RUNTIME
from ..metrics import Metrics
from ..protocol import JepaAppRunner
from ..settings import Settings

log = logging.getLogger("jepa_server.ray")

# Headers that describe one connection, not the request: never passed across the hop (RFC 9110
# 7.6.1), nor the ones the hop writes itself (the body's length, the socket's host), nor Expect
# (Ray's proxy has read the body already).
_HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade",
    "proxy-authenticate", "proxy-authorization", "host", "content-length", "expect",
})  # fmt: skip
# The answer's headers the front server writes itself (uvicorn in Ray's proxy).
_ANSWER_OWN = frozenset({"content-length", "transfer-encoding", "connection", "keep-alive", "date", "server"})
_BASE = "http://jepa-replica"  # the host part of a URL on the Unix socket: never resolved


@dataclass(frozen=True)
class Answer:
    """What the embedded server answered, as it answered it."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes


class EmbeddedServer:
    """One jepa-server app on a Unix socket in a private directory, and a client session to it.
    Start it with `await EmbeddedServer.start(settings)` on the loop that will forward to it."""

    def __init__(self, app: web.Application, runner: web.AppRunner, directory: str) -> None:
        self.app = app
        self._runner = runner
        self._directory = directory
        self.socket_path = os.path.join(directory, "jepa.sock")
        self._session: aiohttp.ClientSession | None = None

    @classmethod
    async def start(cls, settings: Settings, ready_timeout_s: float | None = None) -> EmbeddedServer:
        """Start the app, wait until its model is loaded and every worker ran its warm graph, and
        check the hop with one /health through the socket. Raises what stopped the model loading
        (the replica then fails to start, and Ray says why)."""
        app = create_app(settings)
        runner = JepaAppRunner(app, settings)
        await runner.setup()
        # 0700: only this replica's user can reach the socket.
        server = cls(app, runner, tempfile.mkdtemp(prefix="jepa-ray-"))
        try:
            await web.UnixSite(runner, server.socket_path).start()
            async with asyncio.timeout(ready_timeout_s):
                await wait_ready(app)
            await server.check_health()
        except BaseException:
            await server.close()
            raise
        return server

    @property
    def metrics(self) -> Metrics:
        return self.app[METRICS]

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.UnixConnector(self.socket_path, limit=0),
                # The answer's bytes go back as they came: no decompression, no added headers.
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Accept", "Content-Type"),
                timeout=aiohttp.ClientTimeout(total=None),  # the app's own deadlines bound a request
            )
        return self._session

    async def forward(
        self,
        method: str,
        path: str,
        headers: Iterable[tuple[str, str]],
        body: bytes,
        declared_length: int | None = None,
    ) -> Answer:
        """One request through the app. With `declared_length` (a body too large to read) the app
        is told that length and sent nothing: it refuses the request from its Content-Length, as
        jepa-server does, before reading a byte. A hop that fails (the app is closing) is a 503 in
        the server's envelope, never an exception out of the replica."""
        sent = [(k, v) for k, v in headers if k.lower() not in _HOP_BY_HOP]
        if declared_length is not None:
            sent.append(("Content-Length", str(declared_length)))
            body = b""
        try:
            async with self._client().request(
                method, _BASE + path, headers=sent, data=body if body else None, allow_redirects=False
            ) as resp:
                raw = await resp.read()
                kept = [(k, v) for k, v in resp.headers.items() if k.lower() not in _ANSWER_OWN]
                return Answer(resp.status, kept, raw)
        except aiohttp.ClientError as exc:
            log.warning("the replica's server did not answer %s %s: %s", method, path, exc)
            error = ApiError(503, "this replica's server is not answering; retry",
                             code="replica_unavailable", headers={"Retry-After": "1"})  # fmt: skip
            headers_out = [("Content-Type", "application/json; charset=utf-8"), *error.headers.items()]
            return Answer(503, headers_out, json.dumps(error.body()).encode())

    async def check_health(self) -> None:
        """Raise unless the app's /health answers 200 (loaded, warm, not shutting down)."""
        if self.app[RUNTIME].draining:
            raise RuntimeError("the replica is shutting down")
        answer = await self.forward("GET", "/health", [], b"")
        if answer.status != 200:
            raise RuntimeError(f"/health answered {answer.status}: {answer.body[:200]!r}")

    async def close(self) -> None:
        """Refuse new requests, let in-flight ones finish (--shutdown-timeout-s), stop the workers."""
        self.app[RUNTIME].drain()
        with contextlib.suppress(Exception):
            await self._runner.cleanup()  # waits for the app's in-flight requests first
        if self._session is not None:
            await self._session.close()
            self._session = None
        shutil.rmtree(self._directory, ignore_errors=True)
