"""Issue 21, M5: bodies were read and held before admission (about 2.3 x the body per waiting
request; 256 connections x 32 MiB: ~18 GB). Now each request's body is taken from the server-wide
--max-bodies-mb as its bytes arrive and given back with its answer; a request that does not fit
waits its turn up to --queue-timeout-s, then answers 503 `overloaded` with Retry-After. Issue 36,
H6: the announced Content-Length was taken before a byte arrived, so eight slow connections held
the whole budget; now a slow client holds what it has sent."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import threading
import time
from typing import Any

import pytest
from test_server_hardening_json import LAG_MARGIN_S, MiB, _addr, _exchange, _post
from test_server_support import http, hung_mean_encodes, image_item, in_process, run, server_process

import jepa_server.handlers
from jepa_server.keys import ADMISSION


def test_bodies_waiting_for_a_slot_hold_bounded_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before: every request read and parsed its body, then waited for an admission slot holding it
    (about 2.3 x the body each; 256 connections x 32 MiB bodies: ~18 GB). Now a body is read only
    once its Content-Length fits --max-bodies-mb: with the one slot held and a 16 MiB budget, three of
    six 5 MiB bodies are read, the rest wait and answer 503 naming --max-bodies-mb."""
    read_body = jepa_server.handlers.read_body
    sizes: list[int] = []

    async def counted(request: Any) -> bytes:
        raw = await read_body(request)
        sizes.append(len(raw))
        return raw

    monkeypatch.setattr(jepa_server.handlers, "read_body", counted)
    big = json.dumps({"input": image_item(1), "user": "u" * (5 * MiB)}).encode()

    async def body() -> None:
        async with in_process(max_concurrent_requests=1, queue_timeout_s=2.0, max_body_mb=8,
                              max_bodies_mb=16) as (client, app):
            admission = app[ADMISSION]
            hung = asyncio.ensure_future(client.post("/v1/embeddings",
                                                     json={"input": image_item(1), "pool": "mean"}))
            while admission.in_use == 0:
                await asyncio.sleep(0.01)
            headers = {"Content-Type": "application/json"}

            def post_big() -> Any:
                return client.post("/v1/embeddings", data=io.BytesIO(big), headers=headers)

            waiting = [asyncio.ensure_future(post_big()) for _ in range(6)]
            await asyncio.sleep(1.0)
            assert len([n for n in sizes if n > MiB]) <= 3, sizes  # before: all 6 read while none could run
            assert admission.body_bytes <= 16 * MiB
            answers = await asyncio.gather(*waiting)
            messages = []
            for resp in answers:
                err = (await resp.json())["error"]
                assert resp.status == 503 and err["code"] == "overloaded" and "Retry-After" in resp.headers
                messages.append(err["message"])
            assert sum("--max-bodies-mb" in m for m in messages) >= 3, messages
            release.set()
            assert (await hung).status == 200
            again = await post_big()
            assert again.status == 200, await again.text()
            assert admission.body_bytes == 0
            info = await (await client.get("/info")).json()
            assert info["limits"]["max_bodies_mb"] == 16 and info["live"]["body_bytes_held"] == 0

    with hung_mean_encodes(monkeypatch) as release:
        run(body)


def test_a_body_that_does_not_fit_waits_its_turn() -> None:
    """Slow clients that have sent all but two bytes of 1 MiB bodies hold --max-bodies-mb 2; the next
    body waits (--queue-timeout-s), is admitted when one of them is answered, or answers 503 with
    Retry-After when none is. GETs never wait."""
    with server_process("--demo", "--port", "0", "--max-body-mb", "1", "--max-bodies-mb", "2",
                        "--queue-timeout-s", "3", "--body-timeout-s", "20") as srv:
        body = json.dumps({"input": image_item(1), "user": "u" * 1000}).encode()
        filler = b'{"input": "x", "user": "' + b"u" * (MiB - 27)  # all of a 1 MiB body but 2 bytes
        holders = []
        try:
            for _ in range(2):
                s = socket.create_connection(_addr(srv), timeout=30)
                s.sendall(_post("/v1/embeddings", filler, length=MiB))  # short of its length: held
                holders.append(s)
            time.sleep(0.5)
            assert http(srv.url + "/health").status == 200
            assert http(srv.url + "/info").json()["live"]["body_bytes_held"] == 2 * len(filler)
            started = time.monotonic()
            status, answer = _exchange(srv, _post("/v1/embeddings", body))
            assert status == 503 and answer["error"]["code"] == "overloaded", answer
            assert "--max-bodies-mb" in answer["error"]["message"]
            assert 2.5 < time.monotonic() - started < 3 + LAG_MARGIN_S + 5
            # A waiting request is admitted as soon as a holder's body is complete and answered.
            waiter: list[tuple[int, dict[str, Any]]] = []
            t = threading.Thread(target=lambda: waiter.append(_exchange(srv, _post("/v1/embeddings", body))))
            t.start()
            time.sleep(0.5)
            assert not waiter  # still waiting its turn
            holders[0].sendall(b" " * (MiB - len(filler) - 2) + b'"}')
            t.join(20)
            assert waiter and waiter[0][0] == 200, waiter
        finally:
            for s in holders:
                s.close()
        time.sleep(0.5)
        assert http(srv.url + "/info").json()["live"]["body_bytes_held"] == 0
        assert http(srv.url + "/v1/embeddings", "POST", {"input": image_item(2)}).status == 200



def test_slow_clients_hold_what_they_sent_not_what_they_announced() -> None:
    """Issue 36, H6: eight connections announcing --max-body-mb bodies and sending a byte at a time
    held all of --max-bodies-mb from their headers, so every other POST waited ~29 s or got 503. Now
    they hold the bytes they sent: a normal client beside them is served at once."""
    with server_process("--demo", "--port", "0", "--max-body-mb", "1", "--max-bodies-mb", "8",
                        "--queue-timeout-s", "5", "--body-timeout-s", "20") as srv:
        holders = []
        try:
            for _ in range(8):
                s = socket.create_connection(_addr(srv), timeout=30)
                s.sendall(_post("/v1/embeddings", b'{"input": "', length=MiB))  # 1 MiB announced
                holders.append(s)
            time.sleep(0.5)
            held = http(srv.url + "/info").json()["live"]["body_bytes_held"]
            assert held < 1024, held  # before: 8 MiB, the whole budget
            for i in range(3):
                started = time.monotonic()
                reply = http(srv.url + "/v1/embeddings", "POST", {"input": image_item(i)})
                assert reply.status == 200 and time.monotonic() - started < 3, (reply.status, i)
        finally:
            for s in holders:
                s.close()
