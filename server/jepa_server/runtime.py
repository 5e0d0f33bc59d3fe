"""The engine side of one app: the registry of models and, per resident model, its Engine (the
loaded model on its devices, the workers, the dispatcher and the pipeline).

They come to life after the app starts (loading a model can take a while, and /health answers
503 until the -m models are loaded and warm), so the app holds one Runtime and handlers ask it for
a model's engine for the duration of their request (`Runtime.use`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import jepa
import jepa.text

from .budget import media_budget
from .catalog import Catalog, CatalogError, ModelEntry, default_model_id, dtype_name, model_paths
from .dispatcher import Dispatcher
from .errors import ApiError
from .metrics import Metrics
from .pipeline import Pipeline
from .registry import Registry
from .replicas import Replica, build_replicas, stop_replicas
from .security import LocalFiles
from .settings import Settings
from .tokenizing import TokenizerGate
from .workers import WorkerPool

log = logging.getLogger("jepa_server")


__all__ = ["Engine", "Runtime", "default_model_id", "model_paths"]


@dataclass(eq=False)
class Engine:
    """What serving one model needs once it is loaded and warm: the model on one or more devices
    (a replica each, with its own workers), the dispatcher over them, the pipeline."""

    model: jepa.Model
    model_id: str
    replicas: tuple[Replica, ...]
    dispatcher: Dispatcher
    pipeline: Pipeline
    loaded_at: int
    _dispatch_task: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def workers(self) -> WorkerPool:
        """The first replica's workers (the only ones on a single device)."""
        return self.replicas[0].workers

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(r.device for r in self.replicas)

    @property
    def file_name(self) -> str:
        """The model file's base name: never a directory."""
        return os.path.basename(self.model.path)

    @property
    def dtype(self) -> str:
        return dtype_name(int(self.model.info.file_type))

    async def close(self, timeout: float = 10.0) -> None:
        """Fail queued work, stop running rollouts between steps, and let the workers exit, waiting
        at most `timeout` for a graph that is running (a worker thread is a daemon: a stuck one does
        not hold the process)."""
        self.dispatcher.close()
        self.pipeline.close()
        if self._dispatch_task is not None:
            self._dispatch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatch_task
        await asyncio.to_thread(stop_replicas, self.replicas, timeout)


class SmokeTestFailed(Exception):
    """A model that loads but cannot infer: its load fails (503 with this reason)."""


async def open_engine(
    entry: ModelEntry,
    settings: Settings,
    metrics: Metrics,
    files: LocalFiles,
    gate: TokenizerGate,
    model: jepa.Model | None = None,
) -> Engine:
    """Load `entry` (or take the given, already loaded `model`) on the settings' device, or on each
    of --devices, start the workers with one warm call on each (the smoke test: a model that loads
    but cannot infer fails here), start the dispatcher. Raises what failed; nothing is left
    running then."""
    s = settings
    if len(s.device_list) > 1:
        return await _open_replicated(entry, s, metrics, files, gate)
    if model is None:
        model = await asyncio.to_thread(jepa.Model, entry.path, s.device, mmap=not s.no_mmap)
    workers = WorkerPool(model, s.workers, s.graph_threads, s.max_batch)
    try:
        await asyncio.to_thread(workers.start, not s.skip_smoke_test)
    except jepa.JepaError as exc:
        await asyncio.to_thread(workers.stop)
        raise _smoke_failed(exc) from exc
    except BaseException:
        await asyncio.to_thread(workers.stop)
        raise
    return _engine(entry, model, (Replica(s.device, workers),), s, metrics, files, gate)


async def _open_replicated(
    entry: ModelEntry, s: Settings, metrics: Metrics, files: LocalFiles, gate: TokenizerGate
) -> Engine:
    """The model on every device of --devices, one replica each, pulling from one queue. Replicas
    on the same device share one loaded model (one copy of the weights): each has its own workers."""
    loaded: dict[str, jepa.Model] = {}

    def load(path: str, device: str) -> jepa.Model:
        if device not in loaded:
            loaded[device] = jepa.Model(path, device, mmap=not s.no_mmap)
        return loaded[device]

    try:
        replicas = await asyncio.to_thread(
            build_replicas, entry.path, s.device_list, s.workers, s.graph_threads, s.max_batch,
            s.cpu_batch_mb * 2**20, load=load, warm=not s.skip_smoke_test,
        )
    except jepa.InvalidInputError as exc:  # the warm call refused: the model cannot infer
        raise _smoke_failed(exc) from exc
    return _engine(entry, replicas[0].workers.model, tuple(replicas), s, metrics, files, gate)


def _engine(
    entry: ModelEntry, model: jepa.Model, replicas: tuple[Replica, ...], s: Settings, metrics: Metrics,
    files: LocalFiles, gate: TokenizerGate,
) -> Engine:
    """The dispatcher over the started replicas, the pipeline, and the dispatcher's task."""
    dispatcher = Dispatcher(replicas, s.max_batch, s.max_wait_ms, metrics, model=entry.id)
    pipeline = Pipeline(
        model, dispatcher, files, s.decode_threads, s.max_frames, lambda: media_budget(s), gate,
        metrics.for_model(entry.id), s.text_token_budget,
    )
    engine = Engine(model, entry.id, replicas, dispatcher, pipeline, int(time.time()))
    name = f"jepa-dispatcher-{entry.id}"
    engine._dispatch_task = asyncio.create_task(dispatcher.run(), name=name)
    return engine


def _smoke_failed(exc: jepa.JepaError) -> SmokeTestFailed:
    return SmokeTestFailed(f"it loads, but its smoke test (one call on each worker) failed: {exc}")


def loaded_cap(setting: int, catalog: Catalog, has_dir: bool) -> int:
    """The registry's cap on resident models: --max-loaded-models (0: none), raised so the -m models
    always fit, with one --models-dir model beside them when there is a directory. A cap exists by
    default because any client can name any model of the directory: 300 tiny models loaded at once
    took 2 GB and 908 threads (issue 36, M9); Ollama keeps 3 resident on a CPU."""
    if setting <= 0:
        return 0
    pinned = sum(e.pinned for e in catalog.entries())
    return max(setting, pinned + (1 if has_dir else 0))


class Runtime:
    def __init__(
        self, settings: Settings, metrics: Metrics, files: LocalFiles, model: jepa.Model | None
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.files = files
        # The characters HF tokenizers holds at once, server-wide: a group of TOKENIZE_CHARS per
        # preparation thread (--prep-threads).
        self.gate = TokenizerGate(settings.decode_threads * jepa.text.TOKENIZE_CHARS)
        self._given_model = model  # tests share one loaded model: it serves the first -m entry
        self.registry: Registry | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()  # set when the -m models are loaded and warm, or loading failed
        self.draining = False  # shutting down: new requests are refused

    # -- the request side

    @contextlib.asynccontextmanager
    async def use(self, name: str | None, keep_alive_s: float | None = None) -> AsyncIterator[Engine]:
        """The engine of the model a request names (None: the default model) for the request's
        duration: loaded first when it is not resident."""
        async with self.registry_or_503().use(name, keep_alive_s) as engine:
            yield engine

    def require(self) -> Engine:
        """The default model's engine when it is resident, or a 503 while it loads (or after it
        failed to)."""
        engine = self.registry_or_503().peek(None)
        if engine is None:
            message = "the model is still loading" if self.error is None else "the model failed to load"
            raise ApiError(503, message, code="not_ready", headers={"Retry-After": "1"})
        return engine

    def registry_or_503(self) -> Registry:
        if self.registry is None or self.error is not None:
            message = "the server is still starting" if self.error is None else "the model failed to load"
            raise ApiError(503, message, code="not_ready", headers={"Retry-After": "1"})
        return self.registry

    # -- life

    async def load(self) -> None:
        """Read the catalog, load the -m models, start the reaper. Never raises: a failure is kept
        in `error` (and /health says so)."""
        s = self.settings
        try:
            paths = await asyncio.to_thread(model_paths, s)
            if self._given_model is not None and not paths:
                paths = (self._given_model.path,)
            catalog = await asyncio.to_thread(Catalog, paths, s.models_dir, s.model_id)
            registry = Registry(
                catalog,
                self._open,
                keep_alive_s=s.keep_alive_s,
                max_keep_alive_s=s.max_keep_alive_s,
                max_loaded=loaded_cap(s.max_loaded_models, catalog, s.models_dir is not None),
                max_concurrent_loads=s.max_concurrent_loads,
                slot_wait_s=s.queue_timeout_s,
                on_event=self._count,
            )
            self.registry = registry
            await registry.load_pinned()
            registry.start()
        except asyncio.CancelledError:
            raise
        except (CatalogError, ApiError, jepa.JepaError, OSError, ValueError) as exc:
            log.error("cannot serve: %s", exc)
            self.error = exc
        finally:
            self.ready.set()

    async def _open(self, entry: ModelEntry) -> Engine:
        given = self._given_model
        model = given if given is not None and entry.pinned and entry.path == given.path else None
        return await open_engine(entry, self.settings, self.metrics, self.files, self.gate, model)

    def _count(self, kind: str, model: str, seconds: float) -> None:
        self.metrics.model_events.labels(model, kind).inc()
        if kind.startswith("unloaded"):
            self.metrics.forget(model)
        if kind == "loaded":
            self.metrics.load_seconds.observe(seconds)
        if self.registry is not None:
            self.metrics.models_resident.set(len(self.registry.resident))

    def drain(self) -> None:
        """Refuse new requests from now on (shutdown has begun)."""
        self.draining = True

    async def close(self, timeout: float = 10.0) -> None:
        """Unload every model: queued work fails, running rollouts stop between steps, workers exit
        within `timeout`."""
        registry, self.registry = self.registry, None
        if registry is not None:
            await registry.close(timeout)
