"""Typed keys of what an app holds (no module globals)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from .admission import Admission
from .metrics import Metrics
from .runtime import Runtime
from .settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
ADMISSION = web.AppKey("admission", Admission)
RUNTIME = web.AppKey("runtime", Runtime)
# The one thread request bodies are parsed on (handlers._body): a parse holds the interpreter, so two
# at once would hold it in turn for longer than either (eight bodies at once held /health 5-8 s).
PARSER = web.AppKey("parser", ThreadPoolExecutor)
