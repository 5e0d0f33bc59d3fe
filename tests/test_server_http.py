"""jepa-server as a process: startup, every refusal in the OpenAI envelope (each followed by a
/health check: none takes the process down), the HTTP layer's own 400/404/405/413/414, endpoints."""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from test_server_support import (
    BIN,
    ServerProcess,
    assert_envelope,
    decode_embeddings,
    demo_model,
    http,
    image_item,
    png_bytes,
    server_process,
    video_bytes,
)

import jepa
from jepa.cpu import cpu_info

from conftest import bits

MAX_ITEMS, MAX_FRAMES = 4, 3


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with server_process(
        "--demo",
        "--port",
        "0",
        "--max-items",
        str(MAX_ITEMS),
        "--max-frames",
        str(MAX_FRAMES),
        "--max-body-mb",
        "1",
    ) as s:
        yield s


def _healthy(server: ServerProcess) -> None:
    reply = http(server.url + "/health")
    assert reply.status == 200 and reply.json()["status"] == "ok"
    assert server.proc is not None and server.proc.poll() is None


def _raw(server: ServerProcess, payload: bytes) -> tuple[int, dict[str, Any]]:
    """Send raw bytes; return the status and the JSON body of the answer."""
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(payload)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/json" in head.lower(), head
    assert b"x-total-time:" in head.lower(), head
    return status, json.loads(body)


def test_startup_line_names_version_model_family_dtype_backend_url(server: ServerProcess) -> None:
    line = server.startup[0]
    for part in (f"jepa-server {jepa.__version__}", "model demo-vit (demo-vit.gguf)", "family hfvit"):
        assert part in line
    assert "dtype f32" in line and "backend CPU" in line and server.url.startswith("http://127.0.0.1:")
    assert "workers 1" in server.startup[1] and "max-batch 8" in server.startup[1]


@pytest.mark.cpu_class
def test_health_models_info(server: ServerProcess) -> None:
    h = http(server.url + "/health").json()
    assert h["model"] == "demo-vit" and h["file"] == "demo-vit.gguf" and "/" not in h["file"]
    assert h["pool"]["default"] == "cls" and h["queue_depth"] == 0 and h["device"] == "cpu"
    assert h["pool"]["modes"] == ["mean", "cls", "none"]  # the demo ViT's own: no 'lewm'
    models = http(server.url + "/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["demo-vit"]
    info = http(server.url + "/info").json()
    assert info["limits"]["max_items"] == MAX_ITEMS and info["model"]["embed_dim"] == 192
    assert info["limits"]["files_root"] is False and "path" not in info["model"]
    # Which kernels run the weight matrices: the engine's own on the path this CPU (as JEPA_CPU_FEATURES
    # masks it; the server inherits it) selects, ggml's on an x86 CPU without AVX2 + FMA.
    matmul, packed = info["model"]["matmul"], info["model"]["n_matmul_packed"]
    kernels = cpu_info().kernels
    assert matmul == ("ggml" if kernels == "ggml" else f"jepa: {kernels}"), (matmul, kernels)
    assert (packed > 0) == (kernels != "ggml"), (matmul, packed)


def test_embeddings_shape_usage_and_timing_headers(server: ServerProcess) -> None:
    body = {"model": "demo-vit", "input": [image_item(1), image_item(2, (30, 70))], "pool": "mean"}
    reply = http(server.url + "/v1/embeddings", "POST", body)
    assert reply.status == 200, reply.body
    out = reply.json()
    assert out["object"] == "list" and out["model"] == "demo-vit"
    assert [d["index"] for d in out["data"]] == [0, 1] and all(d["dim"] == 192 for d in out["data"])
    assert out["usage"] == {"prompt_tokens": 2 * 196, "total_tokens": 2 * 196}
    for h in ("x-queue-time", "x-inference-time", "x-total-time"):
        assert float(reply.headers[h]) >= 0
    assert float(reply.headers["x-inference-time"]) > 0


def test_pool_none_and_dimensions(server: ServerProcess) -> None:
    out = http(server.url + "/v1/embeddings", "POST", {"input": image_item(3), "pool": "none"}).json()
    assert out["data"][0]["shape"] == [197, 192]
    assert decode_embeddings(out).shape == (1, 197, 192)
    cut = http(server.url + "/v1/embeddings", "POST", {"input": image_item(3), "dimensions": 16}).json()
    v = decode_embeddings(cut)[0]
    assert v.shape == (16,) and abs(float((v.astype("f8") ** 2).sum()) - 1.0) < 1e-5


def test_video_item_goes_through_the_video_path(server: ServerProcess) -> None:
    item = {"video": {"b64": base64.b64encode(video_bytes()).decode()}, "frames": 1}
    reply = http(server.url + "/v1/embeddings", "POST", {"input": [item]})
    assert reply.status == 200, reply.body
    assert decode_embeddings(reply.json()).shape == (1, 192)


def test_tei_embed_returns_bare_vectors(server: ServerProcess) -> None:
    out = http(server.url + "/embed", "POST", {"inputs": [image_item(4), image_item(5)]}).json()
    assert isinstance(out, list) and len(out) == 2 and len(out[0]) == 192
    normed = http(server.url + "/embed", "POST", {"inputs": image_item(4), "normalize": True}).json()
    assert abs(sum(x * x for x in normed[0]) - 1.0) < 1e-5


def _truncated_b64() -> str:
    return base64.b64encode(png_bytes(9)).decode()[:-3]


def _frames(n: int) -> dict[str, Any]:
    return {"frames": [image_item(i) for i in range(n)]}


EMB, IMG, CTX = "/v1/embeddings", image_item(1), [image_item(1)]
NOT_AN_IMAGE = {"b64": base64.b64encode(b"hello").decode()}

# (name, endpoint, body (a JSON value, or raw bytes), status, code, param)
# fmt: off
REFUSALS: list[tuple[str, str, Any, int, str, str | None]] = [
    ("not JSON", EMB, b"{not json", 400, "invalid_json", None),
    ("not UTF-8", EMB, b"\xff\xfe\x00", 400, "invalid_json", None),
    ("array body", EMB, [{"input": "x"}], 400, "invalid_json", None),
    ("array item", EMB, {"input": [[1, 2, 3]]}, 400, "wrong_modality", "input[0]"),  # ids to an image model
    ("number item", EMB, {"input": 3}, 400, "invalid_item", "input"),
    ("missing input", EMB, {"model": "demo-vit"}, 400, "missing_field", "input"),
    ("empty input", EMB, {"input": []}, 400, "invalid_value", "input"),
    ("unknown field", EMB, {"input": IMG, "pooling": "mean"}, 400, "unknown_field", "pooling"),
    ("truncated base64", EMB, {"input": {"b64": _truncated_b64()}}, 400, "invalid_base64", "input.b64"),
    ("b64 not a string", EMB, {"input": {"b64": 12}}, 400, "invalid_value", "input.b64"),
    ("not an image", EMB, {"input": NOT_AN_IMAGE}, 400, "invalid_input", "input"),
    ("unknown model", EMB, {"input": IMG, "model": "gpt-4"}, 404, "model_not_found", "model"),
    ("local path, flag off", EMB, {"input": "/etc/hostname"}, 400, "local_files_disabled", "input"),
    ("path, flag off", EMB, {"input": {"path": "x.png"}}, 400, "local_files_disabled", "input.path"),
    ("url item", EMB, {"input": {"url": "http://127.0.0.1:1/x.png"}}, 400, "url", "input.url"),
    ("url string", EMB, {"input": "https://example.com/x.png"}, 400, "url", "input"),
    ("too many items", EMB, {"input": [IMG] * (MAX_ITEMS + 1)}, 400, "too_many_items", "input"),
    ("too many frames", EMB, {"input": _frames(MAX_FRAMES + 1)}, 400, "too_many_frames", "input.frames"),
    ("video frames over", EMB, {"input": {"video": {"b64": "AAAA"}, "frames": MAX_FRAMES + 1}},
     400, "invalid_value", "input.frames"),
    ("clip on an image model", EMB, {"input": _frames(2)}, 400, "invalid_input", "input"),
    ("bad pool", EMB, {"input": IMG, "pool": "max"}, 400, "invalid_input", "pool"),
    ("bad encoding", EMB, {"input": IMG, "encoding_format": "fp16"}, 400, "invalid_value", "encoding_format"),
    ("dimensions too large", EMB, {"input": IMG, "dimensions": 193}, 400, "invalid_value", "dimensions"),
    ("dimensions zero", EMB, {"input": IMG, "dimensions": 0}, 400, "invalid_value", "dimensions"),
    ("tei: not JSON", "/embed", b"]", 400, "invalid_json", None),
    ("tei: normalize type", "/embed", {"inputs": IMG, "normalize": "yes"}, 400, "invalid_value", "normalize"),
    ("classify: no head", "/classify", {"input": IMG}, 400, "no_classifier_head", None),
    ("classify: bad top_k", "/classify", {"input": IMG, "top_k": 0}, 400, "invalid_value", "top_k"),
    ("rollout: ragged actions", "/rollout", {"context": CTX, "actions": [[1, 2], [3]]},
     400, "invalid_shape", "actions"),
    ("rollout: 1-D actions", "/rollout", {"context": CTX, "actions": [1, 2, 3]},
     400, "invalid_shape", "actions"),
    ("rollout: 4-D actions", "/rollout", {"context": CTX, "actions": [[[[1.0]]]]},
     400, "invalid_shape", "actions"),
    ("rollout: text actions", "/rollout", {"context": CTX, "actions": [["a", "b"]]},
     400, "invalid_shape", "actions"),
    ("rollout: no context", "/rollout", {"actions": [[1, 2]]}, 400, "invalid_value", "context"),
    ("rollout: plan key", "/rollout", {"context": CTX, "goal": IMG, "plan": {"iters": 3}},
     400, "unknown_field", "plan.iters"),
    ("rollout: plan without goal", "/rollout", {"context": CTX, "plan": {"samples": 8}},
     400, "invalid_value", "goal"),
    ("rollout: not a world model", "/rollout", {"context": CTX, "actions": [[0.1, 0.2]]},
     400, "not_a_world_model", None),
]
# fmt: on


@pytest.mark.parametrize(
    ("name", "endpoint", "body", "status", "code", "param"), REFUSALS, ids=[r[0] for r in REFUSALS]
)
def test_refusal_then_health(
    server: ServerProcess, name: str, endpoint: str, body: Any, status: int, code: str, param: str | None
) -> None:
    raw = body if isinstance(body, bytes) else None
    reply = http(server.url + endpoint, "POST", None if raw else body, raw=raw)
    err = assert_envelope(reply, status)
    assert (err["code"], err["param"]) == (code, param), err
    assert err["type"] == "invalid_request_error"
    _healthy(server)


def test_refusal_messages_say_what_is_wrong(server: ServerProcess) -> None:
    def message(endpoint: str, body: Any) -> str:
        return str(http(server.url + endpoint, "POST", body).json()["error"]["message"])

    assert "has no classifier head" in message("/classify", {"input": image_item(1)})
    assert "is not a world model" in message("/rollout", {"context": [image_item(1)], "actions": [[0.0]]})
    assert "fetches nothing" in message("/v1/embeddings", {"input": {"url": "http://x"}})
    assert "--max-items" in message("/v1/embeddings", {"input": [image_item(1)] * (MAX_ITEMS + 1)})
    assert "larger than the model's width 192" in message(
        "/v1/embeddings", {"input": image_item(1), "dimensions": 500}
    )


def test_unknown_route_and_wrong_method(server: ServerProcess) -> None:
    err = assert_envelope(http(server.url + "/v2/nothing"), 404)
    assert err["type"] == "not_found"
    _healthy(server)
    reply = http(server.url + "/v1/embeddings")  # GET on a POST route
    assert_envelope(reply, 405)
    assert reply.headers["allow"] == "POST"
    _healthy(server)
    assert_envelope(http(server.url + "/health", "POST", {}), 405)
    _healthy(server)


def test_body_over_the_limit_is_413_before_any_handler(server: ServerProcess) -> None:
    big = {"input": {"b64": "A" * (1024 * 1024 + 16)}}  # over --max-body-mb 1
    err = assert_envelope(http(server.url + "/v1/embeddings", "POST", big), 413)
    assert "--max-body-mb" in err["message"]
    _healthy(server)
    # A chunked body announces no length: it is caught when read.
    head = (
        b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )
    chunk = b"x" * (1024 * 1024 + 16)
    status, body = _raw(server, head + b"%x\r\n" % len(chunk) + chunk + b"\r\n0\r\n\r\n")
    assert status == 413 and body["error"]["code"] == "request_too_large"
    _healthy(server)


def test_protocol_errors_are_json_too(server: ServerProcess) -> None:
    status, body = _raw(server, b"GARBAGE\r\n\r\n")
    assert status == 400 and body["error"]["code"] == "bad_request"
    _healthy(server)
    status, body = _raw(server, b"GET /" + b"a" * 20000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
    assert status == 414 and body["error"]["code"] == "uri_too_long"
    _healthy(server)
    status, body = _raw(server, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"b" * 20000 + b"\r\n\r\n")
    assert status == 431 and set(body["error"]) == {"message", "type", "param", "code"}
    _healthy(server)


def test_a_dropped_connection_mid_request_harms_nothing(server: ServerProcess) -> None:
    items = [image_item(i) for i in range(MAX_ITEMS)]
    body = json.dumps({"input": items, "encoding_format": "base64"}).encode()
    head = b"POST /v1/embeddings HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    request = head + b"Content-Length: %d\r\n\r\n" % len(body) + body
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    # One client drops halfway through its body; another once its whole request is sent, before
    # the answer (computed for nobody).
    for sent in (request[: len(request) - len(body) // 2], request):
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(sent)
    # A new request is answered, with the vectors jepa.embed gives for the same images ...
    reply = http(server.url + "/v1/embeddings", "POST", {"input": items, "encoding_format": "base64"})
    assert reply.status == 200, reply.body[:300]
    want = jepa.embed(demo_model().context(threads=2), [png_bytes(i) for i in range(MAX_ITEMS)])
    np.testing.assert_array_equal(bits(decode_embeddings(reply.json())), bits(want))
    # ... and the dropped requests hold nothing: no admission slot, nothing queued, no busy worker.
    deadline = time.monotonic() + 30
    while (live := http(server.url + "/info").json()["live"])["requests_admitted"] or live["busy_workers"]:
        assert time.monotonic() < deadline, live
        time.sleep(0.05)
    assert live["queue_depth"] == 0
    _healthy(server)


def test_sigterm_shuts_down_cleanly() -> None:
    with server_process("--demo", "--port", "0", "--workers", "2") as s:
        assert http(s.url + "/v1/embeddings", "POST", {"input": [IMG, IMG]}).status == 200
        err = s.stop()
        assert s.proc is not None and s.proc.returncode == 0, err
        assert "Traceback" not in err


# -- startup refusals (no server is left running) ---------------------------------------------------


def _run_server(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "jepa-server"), *args], capture_output=True, text=True, timeout=60)


def test_files_root_that_is_not_a_directory_stops_startup(tmp_path: Any) -> None:
    f = tmp_path / "file.txt"
    f.write_text("x")
    for root in (str(f), str(tmp_path / "missing")):
        done = _run_server("--demo", "--port", "0", "--files-root", root)
        assert done.returncode == 2 and "is not a directory" in done.stderr


def test_no_model_and_bad_settings_stop_startup(tmp_path: Any) -> None:
    done = _run_server("--port", "0")
    assert done.returncode == 2 and "--demo" in done.stderr
    done = _run_server("--demo", "--max-batch", "64")
    assert done.returncode == 2 and "max_batch" in done.stderr
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 20)
    done = _run_server("-m", str(bad), "--port", "0")
    assert done.returncode == 1 and "cannot serve the model" in done.stderr


def test_non_loopback_host_warns(tmp_path: Any) -> None:
    # 192.0.2.1 (TEST-NET-1) is never this machine's: the warning prints, then binding fails.
    done = _run_server("--demo", "--host", "192.0.2.1", "--port", "0")
    assert "warning: listening on 192.0.2.1" in done.stderr and "no --api-key" in done.stderr
    assert done.returncode == 1
