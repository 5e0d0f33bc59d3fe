"""Residency: which models are loaded, loading them on demand, and unloading the idle ones.

- A request names a model (or gets the default); `Registry.use(name)` hands it the model's Engine
  for the request's duration and counts the reference. The reference is taken in the same step as
  the lookup (no await between them), and a model loaded for waiting requests is made resident with
  their references already counted: an engine a request holds is never chosen for eviction. A
  resident model answers at once: a warm request never waits behind anybody's load.
- A model that is not resident is loaded by its first request. Concurrent first requests for one
  model wait for the same load (one load per model at a time); other models load in parallel, at
  most --max-concurrent-loads cold loads at once. A load ends with the smoke test (one call of the
  model's own kind on every worker, WorkerPool.start); a model that loads but cannot infer fails its
  load with 503 and the reason. A failed load is remembered for its file (path, mtime, size): its
  requests answer the same 503 with Retry-After for a backoff that doubles with each failure of the
  same file (LOAD_BACKOFF_S, capped); a changed file is tried at once.
- --max-loaded-models caps the resident, loading and unloading models. A load that finds no room
  waits in one FIFO line of loads (at most `slot_wait_s`, then 503 models_busy + Retry-After): the
  least recently used idle model is unloaded for it, or, when every one is in use, the least
  recently used busy one is *draining*: its requests in flight finish, its new ones line up behind
  the waiting load, and it unloads when the last one leaves. Every model gets its turn; none starves.
- An idle model (no reference) unloads once the last of its requests' keep-alives has run out: a
  request keeps its model at least its own `keep_alive` (else the model's models.toml keep_alive_s,
  else --keep-alive-s), bounded by --max-keep-alive-s (unset: the model's own keep-alive). A
  request can thus shorten only its own stay: keep_alive 0 unloads a model nobody else used lately,
  never one another client's keep-alive still holds. -m models stay.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import stat
import time
from collections import deque
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
# How often a resident model's path is compared with the file it loaded (a replacement by rename).
REPLACED_CHECK_S = 1.0
# A failed load's file is not tried again for this long, doubled on each further failure of the same
# file, up to the cap.
LOAD_BACKOFF_S = (2.0, 60.0)


@dataclass(eq=False)
class Resident:
    entry: ModelEntry
    engine: Any  # runtime.Engine
    loaded_at: float
    load_s: float
    refs: int = 0
    last_used: float = field(default_factory=time.monotonic)
    expires: float = 0.0  # monotonic: the latest end of its requests' keep-alives
    requests: int = 0
    draining: bool = False  # chosen to make room for a waiting load: takes no new requests
    stale: bool = False  # its file changed under it (rewritten in place) or was replaced: not served again
    file_sig: Signature | None = None  # the file as it was loaded (its path's device, inode, mtime, size)
    checked_at: float = 0.0  # monotonic: when its path was last compared with file_sig
    retired: asyncio.Event = field(default_factory=asyncio.Event)  # set once it is out of service

    def idle_s(self, now: float) -> float:
        return 0.0 if self.refs else now - self.last_used


@dataclass(eq=False)
class _Load:
    """A load asked for: queued for room (task None) or running. `done` resolves to the Resident
    with every waiter's reference counted, or to the load's error."""

    entry: ModelEntry
    started: asyncio.Future[None]
    done: asyncio.Future[Resident]
    waiters: int = 0
    task: asyncio.Task[None] | None = None


@dataclass(frozen=True)
class _Failure:
    signature: Signature | None  # the file that failed
    until: float  # monotonic
    backoff_s: float
    error: ApiError


Loader = Callable[[ModelEntry], Awaitable[Any]]  # -> a loaded, smoke-tested Engine


Signature = tuple[int, int, int, int]  # a file's device, inode, mtime_ns and size


def _file_state(path: str) -> tuple[Signature | None, bool]:
    """The file's signature (None when it cannot be read) and whether it is a regular file (it was
    when the directory was read; a FIFO now would hold a loading thread for good)."""
    try:
        st = os.stat(path)
    except OSError:
        return None, True  # the loader names what is wrong with it
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size), stat.S_ISREG(st.st_mode)


def _file_changed(entry: ModelEntry, then: str) -> ApiError:
    return ApiError(
        503,
        f"the model {entry.id!r}'s file changed under the server (replace model files by rename, never in "
        f"place); it loads again once {then}: retry",
        code="model_file_changed",
        headers={"Retry-After": "1"},
    )


def _quiet(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled():
        fut.exception()  # retrieved: a failure nobody awaited is not logged as lost


def _scrub(reason: str, entry: ModelEntry) -> str:
    """`reason` with the file's path (as named, and resolved) reduced to its base name, and its
    directories removed: a client is told the model and why, never where it lives."""
    paths = {entry.path, os.path.realpath(entry.path)}
    for p in sorted(paths, key=len, reverse=True):
        reason = reason.replace(p, entry.file_name)
    for d in sorted({os.path.dirname(p) for p in paths} - {"", "/"}, key=len, reverse=True):
        reason = reason.replace(d + os.sep, "").replace(d, "<directory>")
    return reason


class Registry:
    def __init__(
        self,
        catalog: Catalog,
        loader: Loader,
        *,
        keep_alive_s: float,
        max_loaded: int,
        max_concurrent_loads: int,
        max_keep_alive_s: float | None = None,
        slot_wait_s: float = 30.0,
        load_backoff_s: tuple[float, float] = LOAD_BACKOFF_S,
        close_timeout_s: float = 10.0,
        on_event: Callable[[str, str, float], None] | None = None,
    ) -> None:
        self.catalog = catalog
        self._loader = loader
        self.keep_alive_s = keep_alive_s
        self.max_keep_alive_s = max_keep_alive_s
        self.max_loaded = max_loaded
        self.slot_wait_s = slot_wait_s
        self._backoff = load_backoff_s
        self._load_slots = asyncio.Semaphore(max_concurrent_loads)
        self._close_timeout_s = close_timeout_s
        self._on_event = on_event or (lambda kind, model, seconds: None)
        self.resident: dict[str, Resident] = {}
        self._loads: dict[str, _Load] = {}  # queued and running loads, by model id
        self._queue: deque[str] = deque()  # the queued loads' ids, first come first
        self._unloading: dict[Resident, asyncio.Task[None]] = {}
        self._failed: dict[str, _Failure] = {}  # by file path
        self._last_scan = time.monotonic()
        self._scanning: asyncio.Task[None] | None = None
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

        async def one(entry: ModelEntry) -> None:
            self._release(await self._acquire(entry), None)

        pinned = [e for e in self.catalog.entries() if e.pinned]
        results = await asyncio.gather(*(one(e) for e in pinned), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r

    async def close(self, timeout: float | None = None) -> None:
        """Unload every model (each engine's workers get `timeout` to leave their graph)."""
        self._closed = True
        if timeout is not None:
            self._close_timeout_s = timeout
        for task in (self._reaper, self._scanning):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        shutting = ApiError(503, "the server is shutting down", code="shutting_down")
        for load in list(self._loads.values()):
            if load.task is not None:
                load.task.cancel()
            else:
                self._settle(load, shutting)
        for load in list(self._loads.values()):
            if load.task is not None:
                with contextlib.suppress(BaseException):
                    await load.task
        for load in list(self._loads.values()):  # a task cancelled before it ran settled nothing
            self._settle(load, shutting)
        self._loads.clear()
        self._queue.clear()
        residents, self.resident = list(self.resident.values()), {}
        await asyncio.gather(
            *(r.engine.close(self._close_timeout_s) for r in residents),
            *self._unloading.values(),
            return_exceptions=True,
        )

    # -- lookup

    async def find(self, name: str | None) -> ModelEntry:
        """The catalog entry a request's `model` names (None: the default), or a 404 / 400."""
        entry = self._lookup(name)
        if entry is None and name is not None and self.catalog.models_dir is not None:
            await self.rescan()  # a file dropped into the directory since
            entry = self._lookup(name)
        if entry is None:
            assert name is not None
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

    def _lookup(self, name: str | None) -> ModelEntry | None:
        if name is not None:
            return self.catalog.find(name)
        entry = self.catalog.default
        if entry is None:
            raise ApiError(
                400,
                f"name a model: this server serves {describe(self.catalog.entries())}",
                param="model",
                code="model_required",
            )
        return entry

    async def rescan(self, force: bool = False) -> None:
        """Re-read the models directory in a thread (a slow disk never holds the loop), at most once
        a RESCAN_EVERY_S unless forced; concurrent callers share one reading."""
        if self._scanning is None:
            now = time.monotonic()
            if not force and now - self._last_scan < RESCAN_EVERY_S:
                return
            self._last_scan = now
            self._scanning = asyncio.create_task(self._scan(), name="jepa-registry-rescan")
        task = self._scanning
        await asyncio.shield(task)

    async def _scan(self) -> None:
        try:
            scan = await asyncio.to_thread(self.catalog.read)
        except CatalogError as exc:  # keep serving the catalog read before
            log.warning("models directory not rescanned: %s", exc)
        else:
            self.catalog.apply(scan)
        finally:
            self._scanning = None

    # -- use

    @contextlib.asynccontextmanager
    async def use(self, name: str | None, keep_alive_s: float | None = None) -> AsyncIterator[Any]:
        """The engine of the model `name` for the block's duration, loading it first if needed."""
        res = await self._acquire(await self.find(name))
        res.requests += 1
        try:
            yield res.engine
        finally:
            self._release(res, keep_alive_s)

    def peek(self, name: str | None) -> Any | None:
        """The engine of a resident model, without loading or counting (None when not resident)."""
        try:
            entry = self._lookup(name)
        except ApiError:
            return None
        res = None if entry is None else self.resident.get(entry.id)
        return None if res is None else res.engine

    async def _acquire(self, entry: ModelEntry) -> Resident:
        """The model's Resident with one more reference: at once when it is resident, else through
        its load (queued for room under --max-loaded-models)."""
        res = self.resident.get(entry.id)
        if res is None and entry.path in self._failed:
            await self._check_backoff(entry)
        # From here to the reference (or to joining a load) nothing awaits: no eviction slips in.
        if self._closed:
            raise ApiError(503, "the server is shutting down", code="shutting_down")
        res = self.resident.get(entry.id)
        if res is not None and not res.draining and not self._retired_if_changed(res):
            res.refs += 1
            return res
        res = self.resident.get(entry.id)  # a model just retired idle is gone: its file loads again
        if res is not None and res.stale:
            # Its requests in flight on the old file end first (at once when the engine refuses a
            # changed file; a rename's finish normally): wait for that, then load the new file.
            try:
                async with asyncio.timeout(self.slot_wait_s):
                    await res.retired.wait()
            except TimeoutError:
                raise _file_changed(entry, "its requests in flight on the old file end") from None
            return await self._acquire(entry)
        load = self._loads.get(entry.id)
        if load is None:
            if not self._room() and not self._can_make_room():
                raise self._busy(entry, "every one is an -m model, never unloaded")
            loop = asyncio.get_running_loop()
            load = _Load(entry, loop.create_future(), loop.create_future())
            load.done.add_done_callback(_quiet)
            self._loads[entry.id] = load
            self._queue.append(entry.id)
            load.waiters += 1
            self._schedule()
        else:
            load.waiters += 1
        try:
            if not load.started.done():
                async with asyncio.timeout(self.slot_wait_s):
                    await asyncio.shield(load.started)
            # shield: a request that gives up (its deadline, its client gone) does not cancel the
            # load the other requests for this model wait for.
            return await asyncio.shield(load.done)
        except TimeoutError:
            if self._leave(load):
                raise self._busy(entry, f"none made room within {self.slot_wait_s:g} s") from None
            return load.done.result()  # it came in as the wait ended: the reference is ours
        except BaseException:
            if not self._leave(load):  # the load had counted it: give the reference back
                self._release(load.done.result(), None)
            raise

    def _retired_if_changed(self, res: Resident) -> bool:
        """Whether `res`'s file changed under it (truncated or rewritten in place: an fstat of the
        file its mapping holds); such a model is taken out of service, unloaded at once when idle or
        once its requests in flight (refused by the engine) end, and its next request loads the file
        again."""
        why = res.engine.model.file_changed() or self._replaced(res)
        if why is None:
            return False
        log.warning("model %r: %s; it loads again", res.entry.id, why)
        res.stale = res.draining = True
        if res.refs == 0:
            self._begin_unload(res, "file_changed")
        return True

    def _replaced(self, res: Resident) -> str | None:
        """Whether another file now sits at the model's path (replaced by rename, the right way: the
        loaded mapping is intact, but the operator asked for the new file). One stat per model per
        REPLACED_CHECK_S at most."""
        now = time.monotonic()
        if res.file_sig is None or now - res.checked_at < REPLACED_CHECK_S:
            return None
        res.checked_at = now
        sig, _ = _file_state(res.entry.path)
        if sig is None or sig == res.file_sig:  # gone: the catalog's rescan decides; unchanged
            return None
        return "another file was put at its path"

    def _leave(self, load: _Load) -> bool:
        """A waiter gives up on `load`: True when it is no longer counted, False when the load had
        already counted its reference (the caller holds it then)."""
        if load.done.done() and not load.done.cancelled() and load.done.exception() is None:
            return False
        load.waiters -= 1
        if load.waiters == 0 and load.task is None and not load.done.done():  # nobody waits for it
            self._queue.remove(load.entry.id)
            del self._loads[load.entry.id]
            load.done.cancel()
            self._schedule()
        return True

    def _release(self, res: Resident, keep_alive_s: float | None) -> None:
        res.refs -= 1
        now = time.monotonic()
        res.last_used = now
        res.expires = max(res.expires, now + self._keep_for(res, keep_alive_s))
        if res.refs == 0 and res.draining:
            self._begin_unload(res, "lru")
            self._schedule()

    def _busy(self, entry: ModelEntry, why: str) -> ApiError:
        used = len(self.resident) + self._running() + len(self._unloading)
        return ApiError(
            503,
            f"cannot load {entry.id!r}: {used} models are resident, loading or unloading "
            f"(--max-loaded-models {self.max_loaded}) and {why}; retry",
            code="models_busy",
            headers={"Retry-After": "1"},
        )

    # -- room under --max-loaded-models

    def _running(self) -> int:
        return sum(1 for load in self._loads.values() if load.task is not None)

    def _room(self) -> bool:
        used = len(self.resident) + self._running() + len(self._unloading)
        return self.max_loaded <= 0 or used < self.max_loaded

    def _can_make_room(self) -> bool:
        """Whether some model could ever give its place up (-m models never do)."""
        return bool(self._unloading) or any(not r.entry.pinned for r in self.resident.values()) or any(
            load.task is not None and not load.entry.pinned for load in self._loads.values()
        )

    def _schedule(self) -> None:
        """Start the queued loads there is room for, first come first; make room for the rest: the
        least recently used idle model unloads, else the least recently used busy one drains."""
        if self._closed:
            return
        while self._queue:
            head = self._loads[self._queue[0]]
            if head.entry.id not in self.resident and not self._room():
                break
            self._queue.popleft()
            self._start(head)
        while self._wanted() > 0:
            candidates = [r for r in self.resident.values() if not r.entry.pinned and not r.draining]
            if not candidates:
                break
            victim = min(candidates, key=lambda r: (r.refs > 0, r.last_used))
            if victim.refs == 0:
                self._begin_unload(victim, "lru")
            else:
                victim.draining = True
        while self._wanted() < 0:  # fewer loads wait than models make room: the most recent stays
            draining = [r for r in self.resident.values() if r.draining and not r.stale]
            if not draining:
                break
            keep = max(draining, key=lambda r: r.last_used)
            keep.draining = False
            load = self._loads.get(keep.entry.id)
            if load is not None and load.task is None:  # its own requests that lined up behind it
                self._queue.remove(keep.entry.id)
                self._start(load)

    def _wanted(self) -> int:
        """Queued loads that no unloading or draining model is making room for yet."""
        making_room = len(self._unloading) + sum(r.draining for r in self.resident.values())
        return len(self._queue) - making_room

    def _start(self, load: _Load) -> None:
        load.started.set_result(None)
        res = self.resident.get(load.entry.id)
        if res is not None and res.stale:  # its file changed: the old engine is never handed out again
            self._settle(load, _file_changed(load.entry, "its requests in flight on the old file end"))
            return
        if res is not None:  # its turn came while it was still resident (it was draining): no load
            res.draining = False
            self._settle(load, res)
            return
        load.task = asyncio.create_task(self._load_one(load), name=f"jepa-load-{load.entry.id}")

    def _settle(self, load: _Load, outcome: Resident | ApiError) -> None:
        """End `load`: its waiters get the Resident (their references counted now) or the error."""
        if self._loads.get(load.entry.id) is load:
            del self._loads[load.entry.id]
        if not load.started.done():
            load.started.set_result(None)
        if load.done.done():
            return
        if isinstance(outcome, Resident):
            outcome.refs += load.waiters
            load.done.set_result(outcome)
        else:
            load.done.set_exception(outcome)

    # -- loading

    async def _load_one(self, load: _Load) -> None:
        entry = load.entry
        self.loads += 1
        try:
            async with self._load_slots:
                self.loads_running += 1
                self.loads_peak = max(self.loads_peak, self.loads_running)
                t0 = time.monotonic()
                signature = None
                try:
                    signature, regular = await asyncio.to_thread(_file_state, entry.path)
                    if not regular:
                        raise OSError(f"{entry.path} is not a regular file")
                    engine = await self._loader(entry)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._settle(load, self._failure(entry, exc, signature))
                    self._on_event("load_failed", entry.id, time.monotonic() - t0)
                    return
                finally:
                    self.loads_running -= 1
            took = time.monotonic() - t0
            if self._closed:
                await engine.close(self._close_timeout_s)
                self._settle(load, ApiError(503, "the server is shutting down", code="shutting_down"))
                return
            res = Resident(entry, engine, time.time(), took, file_sig=signature)
            self.resident[entry.id] = res
            self._failed.pop(entry.path, None)
            self._settle(load, res)
            if res.refs == 0:  # every waiter gave up: it stays its own keep-alive (else theirs)
                res.expires = time.monotonic() + self.keep_alive_of(res)
            self._on_event("loaded", entry.id, took)
            log.info("model %r loaded in %.2f s", entry.id, took)
        except asyncio.CancelledError:
            self._settle(load, ApiError(503, "the server is shutting down", code="shutting_down"))
            raise
        finally:
            self._schedule()

    def _failure(self, entry: ModelEntry, exc: Exception, signature: Signature | None) -> ApiError:
        """The 503 of a failed load (the model's id and the reason, the path only in the log), kept
        for the backoff."""
        reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
        prior = self._failed.get(entry.path)
        first, cap = self._backoff
        backoff = first if prior is None or prior.signature != signature else min(cap, prior.backoff_s * 2)
        log.error("model %r (%r) failed to load (not tried again for %g s): %s",
                  entry.id, entry.path, backoff, reason)
        error = ApiError(
            503,
            f"the model {entry.id!r} failed to load: {_scrub(reason, entry)}",
            code="model_load_failed",
            headers={"Retry-After": str(math.ceil(backoff))},
        )
        self._failed[entry.path] = _Failure(signature, time.monotonic() + backoff, backoff, error)
        return error

    async def _check_backoff(self, entry: ModelEntry) -> None:
        """The remembered 503 while the file that failed is unchanged and its backoff runs."""
        failure = self._failed.get(entry.path)
        if failure is None:
            return
        left = failure.until - time.monotonic()
        if left <= 0:
            return  # try again (a further failure doubles the backoff)
        if (await asyncio.to_thread(_file_state, entry.path))[0] != failure.signature:
            self._failed.pop(entry.path, None)  # a changed file: try it at once
            return
        e = failure.error
        raise ApiError(e.status, e.message, code=e.code, headers={"Retry-After": str(math.ceil(left))})

    # -- unloading

    def keep_alive_of(self, res: Resident) -> float:
        """The model's own keep-alive: models.toml's keep_alive_s, else --keep-alive-s."""
        if res.entry.keep_alive_s is not None:
            return res.entry.keep_alive_s
        return self.keep_alive_s

    def _keep_for(self, res: Resident, asked: float | None) -> float:
        """How long a request keeps its model: its own `keep_alive` (bounded by --max-keep-alive-s,
        else by the model's own keep-alive), or the model's keep-alive."""
        own = self.keep_alive_of(res)
        if asked is None:
            return own
        bound = own if self.max_keep_alive_s is None else self.max_keep_alive_s
        return max(0.0, min(asked, bound))

    def _begin_unload(self, res: Resident, why: str) -> None:
        """Take `res` out of service now (it holds no reference); its engine closes in a task, and
        its place counts under --max-loaded-models until it has."""
        if self.resident.get(res.entry.id) is not res or res.refs:
            return
        del self.resident[res.entry.id]
        res.retired.set()
        log.info("model %r unloading (%s; idle %.1f s)", res.entry.id, why, res.idle_s(time.monotonic()))
        name = f"jepa-unload-{res.entry.id}"
        self._unloading[res] = asyncio.create_task(self._close_engine(res, why), name=name)

    async def _close_engine(self, res: Resident, why: str) -> None:
        try:
            await res.engine.close(self._close_timeout_s)
        except Exception:
            log.exception("closing model %r failed", res.entry.id)
        finally:
            self._unloading.pop(res, None)
            self._on_event("unloaded_" + why, res.entry.id, 0.0)  # after close: its gauges are final
            self._schedule()

    async def reap(self) -> None:
        """Unload every idle model past its keep-alive (the reaper runs this every second)."""
        now = time.monotonic()
        for res in list(self.resident.values()):
            if not res.entry.pinned and res.refs == 0 and now >= res.expires:
                self._begin_unload(res, "idle")
        await asyncio.gather(*self._unloading.values(), return_exceptions=True)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(REAP_EVERY_S)
            try:
                await self.reap()
            except Exception:  # never let the reaper die: the next round tries again
                log.exception("unloading idle models failed")
