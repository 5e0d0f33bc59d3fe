"""jepa-server's two startup lines, and how the process that started a server reads them back.

The first line ends with the URL (with --port 0 the only place the port is told); the tests and
tools/bench/server.py read it with `read_startup`, so its format is written once, here."""

from __future__ import annotations

import time
from typing import IO

import jepa

from .registry import Registry
from .settings import Settings


def url(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def startup_lines(settings: Settings, registry: Registry, port: int) -> tuple[str, str]:
    """What the server prints once its -m models are loaded and warm: the default model (or what
    the models directory offers), then the settings. The URL ends the first line."""
    engine = registry.peek(None)
    if engine is not None:
        info = engine.model.info
        what = (
            f"model {engine.model_id} ({engine.file_name}) · family {info.family} · dtype {engine.dtype} · "
            f"backend {info.backend}"
        )
    else:
        what = f"{len(registry.catalog.entries())} model(s) servable, none loaded yet"
    others = len(registry.catalog.entries()) - (engine is not None)
    if engine is not None and others:
        what += f" · {others} more servable"
    first = f"jepa-server {jepa.__version__} · {what} · {url(settings.host, port)}"
    files = "root" if settings.files_root else "on" if settings.local_files else "off"
    second = (
        f"  workers {settings.workers} × threads {settings.graph_threads} · "
        f"max-batch {settings.max_batch} · "
        f"max-wait {settings.max_wait_ms:g} ms · max-concurrent {settings.max_concurrent_requests} · "
        f"auth {'on' if settings.api_key else 'off'} · local files {files}"
    )
    return first, second


def read_startup(stdout: IO[str], timeout: float) -> tuple[str, list[str]]:
    """Read a starting server's stdout through its startup lines: (its URL, the lines read). The URL
    is "" when the output ended first (the server exited) or `timeout` seconds passed."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while time.monotonic() < deadline:
        line = stdout.readline()
        if not line:
            break
        lines.append(line.rstrip("\n"))
        if "http://" in line:
            lines.append(stdout.readline().rstrip("\n"))
            return line.rsplit(" ", 1)[-1].strip(), lines
    return "", lines
