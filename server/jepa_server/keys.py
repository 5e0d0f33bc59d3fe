"""Typed keys of what an app holds (no module globals)."""

from __future__ import annotations

from aiohttp import web

from .admission import Admission
from .metrics import Metrics
from .runtime import Runtime
from .settings import Settings

SETTINGS = web.AppKey("settings", Settings)
METRICS = web.AppKey("metrics", Metrics)
ADMISSION = web.AppKey("admission", Admission)
RUNTIME = web.AppKey("runtime", Runtime)
