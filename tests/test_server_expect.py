"""Issue 36, L15: `Expect: 100-continue` is answered with 100 Continue only for a request the server
would serve. aiohttp's own handler said 100 Continue before the key was checked, inviting a client
without the key to send its whole body; an announced body over --max-body-mb was invited too."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import pytest
from test_server_support import ServerProcess, image_item, server_process

KEY = "expect-key-1"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process("--demo", "--port", "0", "--api-key", KEY, "--max-body-mb", "1") as s:
        yield s


def _first_answer(server: ServerProcess, length: int, auth: bool) -> bytes:
    """The status line the server sends after the headers alone (the body is held back)."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    head = (f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nExpect: 100-continue\r\n"
            + (f"Authorization: Bearer {KEY}\r\n" if auth else "") + "\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(head)
        data = s.recv(65536)
    return data.split(b"\r\n", 1)[0]


def test_no_key_is_a_401_before_the_body_is_asked_for(server: ServerProcess) -> None:
    assert _first_answer(server, 1000, auth=False).startswith(b"HTTP/1.1 401"), "100 Continue before the key"


def test_an_announced_oversize_body_is_a_413_before_it_is_asked_for(server: ServerProcess) -> None:
    assert _first_answer(server, 5 << 20, auth=True).startswith(b"HTTP/1.1 413")
    assert _first_answer(server, 5 << 20, auth=False).startswith(b"HTTP/1.1 413")


def test_an_admitted_request_is_asked_for_its_body_and_served(server: ServerProcess) -> None:
    assert _first_answer(server, 1000, auth=True) == b"HTTP/1.1 100 Continue"
    body = json.dumps({"input": image_item(1)}).encode()
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    head = (f"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\nConnection: close\r\n"
            f"Authorization: Bearer {KEY}\r\n\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(head)
        assert s.recv(65536).startswith(b"HTTP/1.1 100 Continue")
        s.sendall(body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    assert data.startswith(b"HTTP/1.1 200"), data[:200]
