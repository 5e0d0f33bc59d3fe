"""What the server and client tests share: test images, an in-process server, a subprocess server
and a plain HTTP helper. (A module of its own so the suites can import it; it holds no tests.)

Everything talks to 127.0.0.1 only. The model is the demo model (a tiny random-weight ViT)."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import jepa
from jepa_server.startup import read_startup

from conftest import import_tool

BIN = Path(sys.executable).parent

# Synthetic media: one copy, shared with tools/soak.py.
_samples = import_tool("media_samples")
png_bytes = _samples.png_bytes
video_bytes = _samples.video_bytes
_processes = import_tool("processes")  # how a child server is stopped, shared with tools/bench/serving.py



def demo_path() -> str:
    import jepa.demo

    return jepa.demo.demo_model_path()


_MODEL: list[jepa.Model] = []
_MODEL_LOCK = threading.Lock()


def demo_model() -> jepa.Model:
    """The demo model, loaded once per test process and shared (a Model is immutable)."""
    with _MODEL_LOCK:
        if not _MODEL:
            _MODEL.append(jepa.Model(demo_path()))
        return _MODEL[0]


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def image_item(seed: int, size: tuple[int, int] = (64, 48)) -> dict[str, str]:
    return {"b64": b64(png_bytes(seed, size))}


# The bit-identity gate's images. Sizes differ on purpose: every image is resized to the model's crop,
# so all share one graph.
IDENTITY_SIZES = [(64, 48), (48, 64), (224, 224), (31, 97), (80, 80), (100, 60)]


def identity_images(root: Path, seed: int) -> list[Path]:
    """One PNG per IDENTITY_SIZES entry under root, seeded seed, seed + 1, ..."""
    paths = []
    for i, size in enumerate(IDENTITY_SIZES):
        p = root / f"img{i}.png"
        p.write_bytes(png_bytes(seed + i, size))
        paths.append(p)
    return paths


def cli_embed(paths: list[Path], pool: str | None, out: Path) -> np.ndarray:
    """The demo model's vectors for paths from the jepa-embed command (the reference the servers match)."""
    args = [str(BIN / "jepa-embed"), "-m", demo_path(), *map(str, paths), "-o", str(out), "-q"]
    if pool is not None:
        args += ["--pool", pool]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return np.load(out)


def decode_embeddings(body: dict[str, Any]) -> np.ndarray:
    rows = []
    for entry in sorted(body["data"], key=lambda e: e["index"]):
        e = entry["embedding"]
        row = np.frombuffer(base64.b64decode(e), "<f4") if isinstance(e, str) else np.asarray(e, np.float32)
        rows.append(row.reshape(entry.get("shape") or [entry["dim"]]))
    return np.stack(rows)


# -- plain HTTP -----------------------------------------------------------------------------------


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def http(
    url: str,
    method: str = "GET",
    body: Any = None,
    headers: dict[str, str] | None = None,
    raw: bytes | None = None,
) -> Reply:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    if data is not None and raw is None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return Reply(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
    except urllib.error.HTTPError as exc:
        with exc:
            return Reply(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read())


def assert_envelope(reply: Reply, status: int) -> dict[str, Any]:
    """The reply is the OpenAI error envelope with this status; returns its error object."""
    assert reply.status == status, (reply.status, reply.body[:300])
    assert reply.headers["content-type"].startswith("application/json")
    err = reply.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert isinstance(err["message"], str) and err["message"]
    return err


# -- a jepa-server subprocess -----------------------------------------------------------------------


class ServerProcess:
    """`jepa-server ... --port 0` in a subprocess; the URL is read from its startup line."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = [str(BIN / "jepa-server"), *args]
        self.env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.startup: list[str] = []
        self._stderr: Any = None
        self._stderr_text = ""

    def start(self, timeout: float = 60.0) -> ServerProcess:
        # stderr to a file, not a pipe nobody reads before the startup line: a server that logs a lot
        # first (a Rust panic's backtrace under RUST_BACKTRACE=1) would block on a full pipe.
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 (closed in stop())
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=self._stderr, text=True, env=self.env
        )
        assert self.proc.stdout is not None
        self.url, self.startup = read_startup(self.proc.stdout, timeout)
        if self.url:
            return self
        err = self.stop()
        raise RuntimeError(f"jepa-server did not start: {self.startup} {err}")

    def stop(self) -> str:
        """Stop it (SIGTERM) and return its stderr."""
        if self.proc is None:
            return ""
        _processes.stop(self.proc)
        if self._stderr is not None:  # a second stop() returns what the first read
            self._stderr.seek(0)
            self._stderr_text = self._stderr.read()
            self._stderr.close()
            self._stderr = None
        return self._stderr_text

    def __enter__(self) -> ServerProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextmanager
def server_process(*args: str, env: dict[str, str] | None = None) -> Iterator[ServerProcess]:
    demo_path()  # written once, before any server races to write it
    with ServerProcess(*args, env=env) as server:
        yield server


# -- an in-process server ---------------------------------------------------------------------------


@asynccontextmanager
async def in_process(model: jepa.Model | None = None, **settings: Any) -> AsyncIterator[tuple[Any, Any]]:
    """(client, app) for an app serving `model` (default: the shared demo model); settings are
    Settings fields."""
    from aiohttp.test_utils import TestClient, TestServer

    from jepa_server.app import create_app, wait_ready
    from jepa_server.settings import Settings

    if model is None and "models_dir" in settings:  # a models directory alone: nothing preloaded
        app = create_app(Settings(**settings))
    else:
        where = {"demo": True} if model is None else {"model": model.path}
        app = create_app(Settings(**where, **settings), model=model or demo_model())
    async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
        await wait_ready(app)
        yield client, app


@contextmanager
def hung_mean_encodes(monkeypatch: pytest.MonkeyPatch) -> Iterator[threading.Event]:
    """The engine calls of an in-process server with pool "mean" block until the event yielded is
    set (30 s at most); the others run. It is set on the way out too, so a failing test leaves no
    worker blocked."""
    import jepa_server.pipeline

    real = jepa_server.pipeline.encode_op
    release = threading.Event()

    def hanging(ctx: jepa.Context, inputs: list[np.ndarray], pool: str) -> list[np.ndarray]:
        if pool == "mean":
            release.wait(30)
        return real(ctx, inputs, pool)

    monkeypatch.setattr(jepa_server.pipeline, "encode_op", hanging)
    try:
        yield release
    finally:
        release.set()


def run(coro_fn: Callable[[], Any]) -> Any:
    """Run an async test body on a fresh event loop."""
    return asyncio.run(coro_fn())


def metric(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """A sample's value from Prometheus text (0 when absent)."""
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items()):
                return float(s.value)
    return 0.0


@pytest.fixture(scope="session")
def demo_ctx() -> jepa.Context:
    return demo_model().context(threads=2)


def test_dtype_names_follow_general_file_type() -> None:
    # general.file_type is gguf-py's LlamaFileType: 32 is a bf16 file (30 is ggml's bf16 tensor type).
    from jepa_server.catalog import dtype_name

    assert (dtype_name(0), dtype_name(1), dtype_name(32)) == ("f32", "f16", "bf16")
    assert (dtype_name(17), dtype_name(18)) == ("q5_k", "q6_k") and dtype_name(30) == "type30"
