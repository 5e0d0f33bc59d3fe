"""Residency: which models are loaded, loading them on demand, and unloading the idle ones.

- A request names a model (or gets the default); `Registry.use(name)` hands it the model's Engine
  for the request's duration and counts the reference. A resident model answers at once: a warm
  request never waits behind anybody's load.
- A model that is not resident is loaded by its first request. Concurrent first requests for one
  model wait for the same load (one load per model at a time); other models load in parallel, at
  most --max-concurrent-loads cold loads at once. A load ends with the smoke test (one call of the
  model's own kind on every worker, WorkerPool.start); a model that loads but cannot infer fails its
  load with 503 and the reason, and its next request tries again.
- An idle model (no reference) unloads --keep-alive-s after its last request (its own keep_alive_s
  from models.toml, or the last request's `keep_alive`); -m models stay. --max-loaded-models caps
  the resident (and loading) models: one more unloads the least recently used idle one, or answers
  503 + Retry-After while every resident model is in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from .catalog import Catalog, CatalogError, ModelEntry, describe
from .errors import ApiError

log = logging.getLogger("jepa_server")

# A rescan of --models-dir on an unknown name happens at most this often (a name that is not there
# costs a directory listing, not one per request).
RESCAN_EVERY_S = 1.0
REAP_EVERY_S = 1.0


@dataclass(eq=False)
class Resident:
    entry: ModelEntry
    engine: Any  # runtime.Engine
    loaded_at: float
    load_s: float
    refs: int = 0
    last_used: float = field(default_factory=time.monotonic)
    keep_alive_s: float | None = None  # the last request's `keep_alive`, else the entry's / server's
    requests: int = 0

    def idle_s(self, now: float) -> float:
        return 0.0 if self.refs else now - self.last_used


Loader = Callable[[ModelEntry], Awaitable[Any]]  # -> a loaded, smoke-tested Engine


class Registry:
    def __init__(
        self,
        catalog: Catalog,
        loader: Loader,
        *,
        keep_alive_s: float,
        max_loaded: int,
        max_concurrent_loads: int,
        close_timeout_s: float = 10.0,
        on_event: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self._loader = loader
        self.keep_alive_s = keep_alive_s
        self.max_loaded = max_loaded
        self._load_slots = asyncio.Semaphore(max_concurrent_loads)
        self._close_timeout_s = close_timeout_s
        self._on_event = on_event or (lambda kind, model, seconds: None)
        self.resident: dict[str, Resident] = {}
        self._loading: dict[str, asyncio.Task[Resident]] = {}
        self._last_scan = time.monotonic()
        self._reaper: asyncio.Task[None] | None = None
        self._closed = False
        self.loads = 0  # loads begun (the tests count them)
        self.loads_running = 0
        self.loads_peak = 0  # the most loads running at once

    # -- life

    def start(self) -> None:
        self._reaper = asyncio.create_task(self._reap_forever(), name="jepa-registry-reaper")

    async def load_pinned(self) -> None:
        """Load every -m model (they load in parallel within the cold-load cap); raises the first
        failure once all have finished."""
        pinned = [e for e in self.catalog.entries() if e.pinned]
        results = await asyncio.gather(*(self._load(e) for e in pinned), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def close(self, timeout: float | None = None) -> None:
        """Unload every model (each engine's workers get `timeout` to leave their graph)."""
        self._closed = True
        if timeout is not None:
            self._close_timeout_s = timeout
        if self._reaper is not None:
            self._reaper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reaper
        for task in list(self._loading.values()):
            task.cancel()
        for task in list(self._loading.values()):
            with contextlib.suppress(BaseException):
                await task
        residents, self.resident = list(self.resident.values()), {}
        await asyncio.gather(*(r.engine.close(self._close_timeout_s) for r in residents))

    # -- lookup

    def find(self, name: str | None) -> ModelEntry:
        """The catalog entry a request's `model` names (None: the default), or a 404 / 400."""
        if name is None:
            entry = self.catalog.default
            if entry is None:
                raise ApiError(
                    400,
                    f"name a model: this server serves {describe(self.catalog.entries())}",
                    param="model",
                    code="model_required",
                )
            return entry
        entry = self.catalog.find(name)
        if entry is None and self.catalog.models_dir is not None:
            self.rescan()  # a file dropped into the directory since
            entry = self.catalog.find(name)
        if entry is None:
            shown = name if len(name) <= 80 else name[:80] + "..."
            raise ApiError(
                404,
                f"the model {shown!r} is not served here; "
                f"this server serves {describe(self.catalog.entries())}",
                param="model",
                code="model_not_found",
                type="invalid_request_error",
            )
        return entry

    def rescan(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_scan < RESCAN_EVERY_S:
            return
        self._last_scan = now
        try:
            self.catalog.scan()
        except CatalogError as exc:  # keep serving the catalog read before
            log.warning("models directory not rescanned: %s", exc)

    # -- use

    @contextlib.asynccontextmanager
    async def use(self, name: str | None, keep_alive_s: float | None = None) -> AsyncIterator[Any]:
        """The engine of the model `name` for the block's duration, loading it first if needed."""
        entry = self.find(name)
        res = self.resident.get(entry.id)
        if res is None:
            res = await self._load(entry)
        res.refs += 1
        res.requests += 1
        if keep_alive_s is not None:
            res.keep_alive_s = keep_alive_s
        try:
            yield res.engine
        finally:
            res.refs -= 1
            res.last_used = time.monotonic()

    def peek(self, name: str | None) -> Any | None:
        """The engine of a resident model, without loading or counting (None when not resident)."""
        try:
            entry = self.find(name)
        except ApiError:
            return None
        res = self.resident.get(entry.id)
        return None if res is None else res.engine

    # -- loading

    async def _load(self, entry: ModelEntry) -> Resident:
        while True:  # re-checked after every await: another request may have begun the load
            if self._closed:
                raise ApiError(503, "the server is shutting down", code="shutting_down")
            task = self._loading.get(entry.id)
            if task is not None:
                break
            res = self.resident.get(entry.id)
            if res is not None:
                return res
            if self.max_loaded > 0 and len(self.resident) + len(self._loading) >= self.max_loaded:
                await self._evict_one(entry)
                continue
            task = asyncio.create_task(self._load_one(entry), name=f"jepa-load-{entry.id}")
            self._loading[entry.id] = task
            task.add_done_callback(self._loaded_callback(entry.id))
            break
        # shield: a request that gives up (its deadline, its client gone) does not cancel the load
        # the other requests for this model wait for.
        return await asyncio.shield(task)

    def _loaded_callback(self, mid: str) -> Callable[[asyncio.Task[Resident]], None]:
        def done(task: asyncio.Task[Resident]) -> None:
            self._loading.pop(mid, None)
            if not task.cancelled():
                task.exception()  # retrieved: a failure nobody awaited is not logged as lost

        return done

    async def _load_one(self, entry: ModelEntry) -> Resident:
        self.loads += 1
        async with self._load_slots:
            self.loads_running += 1
            self.loads_peak = max(self.loads_peak, self.loads_running)
            t0 = time.monotonic()
            try:
                engine = await self._loader(entry)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self._on_event("load_failed", entry.id, time.monotonic() - t0)
                log.error("model %s (%s) failed to load: %s", entry.id, entry.path, exc)
                reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
                raise ApiError(
                    503,
                    f"the model {entry.id!r} failed to load: {reason}",
                    code="model_load_failed",
                    headers={"Retry-After": "5"},
                ) from None
            finally:
                self.loads_running -= 1
        took = time.monotonic() - t0
        if self._closed:
            await engine.close(self._close_timeout_s)
            raise ApiError(503, "the server is shutting down", code="shutting_down")
        res = Resident(entry, engine, time.time(), took)
        self.resident[entry.id] = res
        self._on_event("loaded", entry.id, took)
        log.info("model %s loaded in %.2f s", entry.id, took)
        return res

    async def _evict_one(self, entry: ModelEntry) -> None:
        """Under --max-loaded-models: unload the least recently used idle unpinned model, or 503."""
        idle = [r for r in self.resident.values() if r.refs == 0 and not r.entry.pinned]
        if not idle:
            raise ApiError(
                503,
                f"cannot load {entry.id!r}: {len(self.resident) + len(self._loading)} models are "
                f"resident or loading (--max-loaded-models {self.max_loaded}) and every one is in use "
                "or pinned; retry",
                code="models_busy",
                headers={"Retry-After": "1"},
            )
        await self._unload(min(idle, key=lambda r: r.last_used), "lru")

    # -- unloading

    def keep_alive_of(self, res: Resident) -> float:
        if res.keep_alive_s is not None:
            return res.keep_alive_s
        if res.entry.keep_alive_s is not None:
            return res.entry.keep_alive_s
        return self.keep_alive_s

    async def _unload(self, res: Resident, why: str) -> None:
        if self.resident.get(res.entry.id) is not res or res.refs:
            return
        del self.resident[res.entry.id]
        log.info("model %s unloaded (%s; idle %.1f s)", res.entry.id, why, res.idle_s(time.monotonic()))
        await res.engine.close(self._close_timeout_s)
        self._on_event("unloaded_" + why, res.entry.id, 0.0)  # after close: its gauges are final

    async def reap(self) -> None:
        """Unload every idle model past its keep-alive (the reaper runs this every second)."""
        now = time.monotonic()
        for res in list(self.resident.values()):
            if not res.entry.pinned and res.refs == 0 and now - res.last_used >= self.keep_alive_of(res):
                await self._unload(res, "idle")

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await self.reap()
            except Exception:  # never let the reaper die: the next round tries again
                log.exception("unloading idle models failed")
