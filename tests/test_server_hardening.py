"""Issue 10 on the server: every input bounded in memory and time, every client error a 4xx in the
OpenAI envelope. The HTTP layer (deep JSON, a bad Content-Encoding, a client leaving mid-body,
`Expect`, HTTP/0.9 and 2.0, slow headers and bodies, the connection cap), the request budget
(response size, pixels, input bytes, local files that are FIFOs, devices, huge or unnamable), and
faults (an engine call that raises or hangs past the deadline, a model file deleted after load)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_media_decode import png_header_only
from test_server_support import (
    ServerProcess,
    assert_envelope,
    b64,
    demo_model,
    demo_path,
    http,
    hung_mean_encodes,
    image_item,
    in_process,
    png_bytes,
    run,
    server_process,
)

import jepa
import jepa_server.pipeline
from jepa_server.settings import Settings

HEADER_T, BODY_T, MAX_CONN = 1.0, 1.0, 6


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process("--demo", "--port", "0", "--header-timeout-s", str(HEADER_T), "--body-timeout-s",
                        str(BODY_T), "--max-connections", str(MAX_CONN)) as s:
        yield s


def _addr(server: ServerProcess) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def raw(server: ServerProcess, payload: bytes, *, then_wait: float = 0.0,
        timeout: float = 20.0) -> tuple[bytes, dict[str, str], bytes]:
    """Send bytes, read the answer to the end: (status line, headers, body)."""
    with socket.create_connection(_addr(server), timeout=timeout) as s:
        s.sendall(payload)
        time.sleep(then_wait)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    headers = {}
    for line in lines[1:]:
        k, _, v = line.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    return lines[0], headers, body


def envelope(line: bytes, headers: dict[str, str], body: bytes, status: int) -> dict[str, Any]:
    # aiohttp answers a request it cannot parse in HTTP/1.0; anything else is answered in HTTP/1.1.
    assert line.startswith((b"HTTP/1.1 %d " % status, b"HTTP/1.0 %d " % status)), (line, body[:200])
    assert headers["content-type"].startswith("application/json"), headers
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return dict(err)


def post_raw(path: str, body: bytes, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
            f"{len(body)}\r\nConnection: close\r\n{extra}\r\n").encode() + body


def _no_500_nor_traceback(server: ServerProcess) -> None:
    text = http(server.url + "/metrics").body.decode()
    assert 'status="500"' not in text
    assert http(server.url + "/health").status == 200


# -- the HTTP layer ---------------------------------------------------------------------------------


def test_json_nested_deep_is_a_400(server: ServerProcess) -> None:
    for depth in (33, 10_000):
        deep = b'{"input":' + b"[" * depth + b"]" * depth + b"}"
        err = envelope(*raw(server, post_raw("/v1/embeddings", deep)), 400)
        assert err["code"] == "invalid_json" and "nested deeper than 32" in err["message"]
    _no_500_nor_traceback(server)


def test_a_bad_content_encoding_is_a_4xx(server: ServerProcess) -> None:
    for enc in ("gzip", "deflate"):
        sent = post_raw("/v1/embeddings", b"not compressed", f"Content-Encoding: {enc}\r\n")
        err = envelope(*raw(server, sent), 400)
        assert err["code"] == "invalid_body", err
    # One the server does not undo (it inflates gzip and deflate itself: content_encoding.py).
    sent = post_raw("/v1/embeddings", b"not compressed", "Content-Encoding: br\r\n")
    assert envelope(*raw(server, sent), 415)["code"] == "unsupported_encoding"
    _no_500_nor_traceback(server)


def test_a_client_leaving_mid_body_is_no_500_and_no_traceback(server: ServerProcess) -> None:
    for _ in range(3):
        with socket.create_connection(_addr(server)) as s:
            s.sendall(b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{\"input\"")
            time.sleep(0.2)
    time.sleep(0.5)
    _no_500_nor_traceback(server)


def test_expect_and_http_versions_answer_json(server: ServerProcess) -> None:
    err = envelope(*raw(server, post_raw("/v1/embeddings", b"{}", "Expect: bogus\r\n")), 417)
    assert "Expect" in err["message"]
    envelope(*raw(server, post_raw("/nowhere", b"{}", "Expect: bogus\r\n")), 417)
    for line in (b"GET /health HTTP/2.0\r\nHost: x\r\n\r\n", b"GET /health\r\n\r\n"):
        answer = raw(server, line)
        err = envelope(*answer, 505)
        assert "use HTTP/1.1" in err["message"] and answer[0].startswith(b"HTTP/1.1 505")
    # 100-continue still works.
    body = json.dumps({"input": image_item(1)}).encode()
    line, _, _ = raw(server, post_raw("/v1/embeddings", body, "Expect: 100-continue\r\n"))
    assert line.startswith(b"HTTP/1.1 100") or line.startswith(b"HTTP/1.1 200"), line


def test_slow_headers_and_bodies_are_cut_off(server: ServerProcess) -> None:
    started = time.monotonic()
    err = envelope(*raw(server, b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\n"), 408)
    assert err["code"] == "header_timeout" and time.monotonic() - started < HEADER_T + 3
    started = time.monotonic()
    short = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"
    err = envelope(*raw(server, short), 408)
    assert err["code"] == "body_timeout" and time.monotonic() - started < BODY_T + 3
    # Headers that arrive in time, then a computation longer than the header timeout: not cut off.
    reply = http(server.url + "/v1/embeddings", "POST", {"input": [image_item(i) for i in range(4)]})
    assert reply.status == 200


def test_open_connections_are_capped(server: ServerProcess) -> None:
    held = [socket.create_connection(_addr(server)) for _ in range(MAX_CONN)]
    try:
        time.sleep(0.3)
        err = envelope(*raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n"), 503)
        assert err["code"] == "too_many_connections" and "--max-connections" in err["message"]
    finally:
        for s in held:
            s.close()
    time.sleep(0.3)
    assert http(server.url + "/health").status == 200


def test_an_empty_pool_is_refused(server: ServerProcess) -> None:
    reply = http(server.url + "/v1/embeddings", "POST", {"input": image_item(1), "pool": ""})
    err = assert_envelope(reply, 400)
    assert err["param"] == "pool"


# -- the request budget -----------------------------------------------------------------------------


def test_a_response_over_the_limit_is_refused_before_computing() -> None:
    """The issue's 6.7 KB request of 64 1x1 PNGs with pool none answered 95 MB."""
    tiny = {"b64": b64(png_bytes(0, (1, 1)))}

    async def body() -> None:
        async with in_process() as (client, app):
            from jepa_server.keys import RUNTIME

            dispatcher = app[RUNTIME].require().dispatcher
            before = dispatcher.groups
            resp = await client.post("/v1/embeddings", json={"input": [tiny] * 64, "pool": "none"})
            err = (await resp.json())["error"]
            assert resp.status == 413 and err["code"] == "response_too_large", err
            assert "--max-response-mb 32" in err["message"]
            assert dispatcher.groups == before  # refused before anything ran
            # Under the limit, the real answer never exceeds the estimate.
            from jepa_server.budget import embedding_bytes
            from jepa_server.inputs import Item

            for fmt, n, pool in (("base64", 64, "none"), ("float", 4, "none"), ("float", 64, "mean")):
                r = await client.post("/v1/embeddings", json={"input": [tiny] * n, "pool": pool,
                                                              "encoding_format": fmt})
                assert r.status == 200, await r.text()
                est = embedding_bytes(demo_model(), [Item(b"", "x")] * n, pool, fmt, None)
                assert len(await r.read()) <= est

    run(body)


def test_pixels_are_refused_from_the_header() -> None:
    bomb = {"b64": b64(png_header_only(9000, 9000))}  # the 9000x9000 PNG, in 50 bytes

    async def body() -> None:
        async with in_process() as (client, _):
            resp = await client.post("/v1/embeddings", json={"input": [image_item(1), bomb]})
            err = (await resp.json())["error"]
            assert resp.status == 413 and err["param"] == "input[1]"
            assert "--max-image-pixels" in err["message"]
            # Issue 36, L24: over jepa.media.MAX_PIXELS (100 Mpx), and over Pillow's own refusal at
            # open (200 Mpx: twice its limit): the budget's 413 too, not a 400.
            for side in (10_000, 14_200):
                big = {"b64": b64(png_header_only(side, side))}
                resp = await client.post("/v1/embeddings", json={"input": [big]})
                err = (await resp.json())["error"]
                assert resp.status == 413 and "--max-image-pixels" in err["message"], (side, err)
        async with in_process(max_request_pixels=64 * 48 * 3) as (client, _):
            ok = await client.post("/v1/embeddings", json={"input": [image_item(i) for i in range(3)]})
            assert ok.status == 200
            resp = await client.post("/v1/embeddings", json={"input": [image_item(i) for i in range(4)]})
            err = (await resp.json())["error"]
            assert resp.status == 413 and "--max-request-pixels" in err["message"], err

    run(body)


def test_an_input_over_the_byte_limit_is_refused_before_decoding(tmp_path: Path) -> None:
    big = tmp_path / "big.png"
    with open(big, "wb") as f:
        f.truncate(1 << 30)  # the 1 GiB sparse file
    item = {"b64": b64(png_bytes(1, (300, 300)))}  # 270 KB

    async def body() -> None:
        async with in_process(max_input_mb=0.1, files_root=str(tmp_path)) as (client, _):
            resp = await client.post("/v1/embeddings", json={"input": item})
            err = (await resp.json())["error"]
            assert resp.status == 413 and err["code"] == "input_too_large"
            assert "--max-input-mb" in err["message"]
            for form in ("big.png", {"video": "big.png", "frames": 1}):
                resp = await client.post("/v1/embeddings", json={"input": form})
                err = (await resp.json())["error"]
                assert resp.status == 413 and "--max-input-mb" in err["message"], err

    run(body)


def test_fifos_devices_and_long_names_never_take_the_decode_threads(tmp_path: Path) -> None:
    """A FIFO blocked a decode thread forever; with two of them every later request hung."""
    os.mkfifo(tmp_path / "pipe.png")
    os.symlink("/dev/zero", tmp_path / "zero.png")

    async def body() -> None:
        async with in_process(allow_local_files=True, prep_threads=2) as (client, _):
            for path in [str(tmp_path / "pipe.png")] * 4 + ["/dev/zero", str(tmp_path / "zero.png")]:
                for item in (path, {"video": path, "frames": 1}, {"frames": [path]}):
                    resp = await asyncio.wait_for(client.post("/v1/embeddings", json={"input": item}), 10)
                    err = (await resp.json())["error"]
                    assert resp.status == 400 and "not a regular file" in err["message"], err
            long = await client.post("/v1/embeddings", json={"input": "/" + "x" * 5000})
            err = (await long.json())["error"]
            assert long.status == 400 and err["param"] == "input", err
            ok = await asyncio.wait_for(client.post("/v1/embeddings", json={"input": image_item(1)}), 10)
            assert ok.status == 200
        async with in_process(files_root=str(tmp_path), prep_threads=2) as (client, _):
            for path in ("pipe.png", "zero.png", "x" * 5000, "a/" * 3000):
                resp = await asyncio.wait_for(client.post("/v1/embeddings", json={"input": path}), 10)
                err = (await resp.json())["error"]
                assert resp.status == 400 and err["code"] == "invalid_path", (path[:20], err)

    run(body)


# -- faults -----------------------------------------------------------------------------------------


def test_an_engine_call_that_raises_fails_only_its_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    real = jepa_server.pipeline.encode_op

    def faulty(ctx: jepa.Context, inputs: list[np.ndarray], pool: str) -> list[np.ndarray]:
        if pool == "mean":
            raise jepa.BackendError("injected: the backend failed")
        return real(ctx, inputs, pool)

    monkeypatch.setattr(jepa_server.pipeline, "encode_op", faulty)

    async def body() -> None:
        async with in_process(workers=2) as (client, _):
            bad, good = await asyncio.gather(
                client.post("/v1/embeddings", json={"input": image_item(1), "pool": "mean"}),
                client.post("/v1/embeddings", json={"input": image_item(1), "pool": "cls"}))
            assert bad.status == 500 and (await bad.json())["error"]["code"] == "engine_error"
            assert good.status == 200
            monkeypatch.setattr(jepa_server.pipeline, "encode_op", real)
            again = await client.post("/v1/embeddings", json={"input": image_item(1), "pool": "mean"})
            assert again.status == 200

    run(body)


def test_an_engine_call_that_hangs_past_the_deadline_fails_only_its_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def body() -> None:
        async with in_process(workers=2, request_timeout_s=1.0) as (client, _):
            started = time.monotonic()
            mean = {"input": image_item(1), "pool": "mean"}
            hung = asyncio.ensure_future(client.post("/v1/embeddings", json=mean))
            await asyncio.sleep(0.2)
            good = await client.post("/v1/embeddings", json={"input": image_item(2), "pool": "cls"})
            assert good.status == 200
            resp = await hung
            err = (await resp.json())["error"]
            assert resp.status == 504 and err["code"] == "deadline_exceeded"
            assert "--request-timeout-s" in err["message"]
            assert time.monotonic() - started < 5
            release.set()
            await asyncio.sleep(0.2)
            again = await client.post("/v1/embeddings", json={"input": image_item(1), "pool": "mean"})
            assert again.status == 200

    with hung_mean_encodes(monkeypatch) as release:
        run(body)


def test_a_model_file_deleted_after_load_keeps_serving(tmp_path: Path) -> None:
    path = tmp_path / "gone.gguf"
    shutil.copy(demo_path(), path)

    async def body() -> None:
        from aiohttp.test_utils import TestClient, TestServer

        from jepa_server.app import create_app, wait_ready

        app = create_app(Settings(model=str(path)))
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            await wait_ready(app)
            path.unlink()
            for _ in range(3):
                assert (await client.post("/v1/embeddings", json={"input": image_item(1)})).status == 200
            assert (await client.get("/health")).status == 200
            assert (await client.get("/info")).status == 200

    run(body)


def test_an_allocation_cap_is_the_requests_size_not_the_servers_state() -> None:
    """The engine's per-call caps (max_output_bytes, max_graph_bytes) refuse the request itself: a 413
    naming the field even while computing, never a 503 that invites the same request again."""
    from jepa_server.errors import from_jepa

    cap = jepa.ResourceLimitError("output of 9 GB is over max_output_bytes", param="max_output_bytes")
    err = from_jepa(cap, param="input", computing=True)
    assert (err.status, err.code, err.param) == (413, "resource_limit", "input")
    busy = jepa.ResourceLimitError("out of memory")
    assert from_jepa(busy, computing=True).status == 503


def test_a_refused_items_inputs_are_freed_without_the_cyclic_gc() -> None:
    """Issue 36, M7: the first failure of a request's items was raised from a frame that held the
    results (the exception among them), so the exception, its traceback and the items lived in a cycle
    until the cyclic GC ran. Now the items go when the refusal does, with the GC off."""
    import contextlib
    import gc
    import weakref
    from concurrent.futures import ThreadPoolExecutor

    from jepa_server.pipeline import Pipeline

    class Holder:  # stands for a request's item: its decoded bytes
        def __init__(self) -> None:
            self.data = np.zeros(1 << 20, np.uint8)

    def refuse(item: Holder, budget: object) -> None:
        raise ValueError("not an image")

    async def body() -> list[weakref.ref[Holder]]:
        fake = type("P", (), {})()
        fake._prep = ThreadPoolExecutor(2)
        items = [Holder(), Holder()]
        refs = [weakref.ref(i) for i in items]
        with contextlib.suppress(ValueError):
            await Pipeline._off_loop(fake, refuse, items, None)  # type: ignore[arg-type]
        del items
        fake._prep.shutdown()
        return refs

    gc.collect()
    gc.disable()
    try:
        refs = run(body)
        assert all(r() is None for r in refs), "a refused request's items outlived the refusal"
    finally:
        gc.enable()


def test_refusals_name_a_local_file_as_given_not_where_it_resolved(tmp_path: Path) -> None:
    """Issue 36, L18: with --allow-local-files and no root, a refusal echoed the resolved absolute path
    (the directories a symlink led to). It names the path as the client wrote it."""
    secret = tmp_path / "secret-dir-name"
    secret.mkdir()
    os.symlink(secret / "gone.png", tmp_path / "link.png")  # its target is missing: the error names a file
    os.symlink(secret, tmp_path / "dir.png")  # a directory

    async def body() -> None:
        async with in_process(allow_local_files=True) as (client, _):
            for name in ("link.png", "dir.png"):
                given = str(tmp_path / name)
                for item in (given, {"path": given}, {"frames": [given]}):
                    resp = await client.post("/v1/embeddings", json={"input": item})
                    err = (await resp.json())["error"]
                    assert resp.status == 400 and err["code"] == "invalid_path", err
                    assert "secret-dir-name" not in err["message"] and name in err["message"], err

    run(body)
