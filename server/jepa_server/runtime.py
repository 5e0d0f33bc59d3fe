"""The engine side of one app: the model, its workers, the dispatcher and the pipeline.

They come to life after the app starts (loading a model can take a while, and /health answers
503 until it is loaded and warm), so the app holds one Runtime and handlers ask it for them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from dataclasses import dataclass

import jepa

from .budget import media_budget
from .dispatcher import Dispatcher
from .errors import ApiError
from .metrics import Metrics
from .pipeline import Pipeline
from .security import LocalFiles
from .settings import Settings
from .workers import WorkerPool

log = logging.getLogger("jepa_server")

# general.file_type values (gguf-py's LlamaFileType): 32 is bf16 (30 is the bf16 *tensor* type).
_DTYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 7: "q8_0", 8: "q5_0", 9: "q5_1", 32: "bf16"}


@dataclass(frozen=True)
class Engine:
    """What serving needs once the model is loaded and warm."""

    model: jepa.Model
    model_id: str
    workers: WorkerPool
    dispatcher: Dispatcher
    pipeline: Pipeline
    loaded_at: int

    @property
    def file_name(self) -> str:
        """The model file's base name: never a directory."""
        return os.path.basename(self.model.path)

    @property
    def dtype(self) -> str:
        ft = int(self.model.info.file_type)
        return _DTYPES.get(ft, f"type{ft}")

    def accepts(self, name: str) -> bool:
        return name in (self.model_id, self.file_name)


def model_path(settings: Settings) -> str:
    if settings.model:
        return settings.model
    if settings.demo:
        import jepa.demo  # writes the demo model on first use

        return jepa.demo.demo_model_path()
    raise ValueError("no model: give -m/--model PATH, or --demo for the built-in demo model")


def default_model_id(path: str) -> str:
    name = os.path.basename(path)
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


class Runtime:
    def __init__(
        self, settings: Settings, metrics: Metrics, files: LocalFiles, model: jepa.Model | None
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self.files = files
        self._given_model = model
        self.engine: Engine | None = None
        self.error: BaseException | None = None
        self.ready = asyncio.Event()  # set when loaded and warm, or when loading failed
        self.draining = False  # shutting down: new requests are refused
        self._dispatch_task: asyncio.Task[None] | None = None

    def require(self) -> Engine:
        """The engine, or a 503 while it loads (or after it failed to)."""
        if self.engine is None:
            message = "the model is still loading" if self.error is None else "the model failed to load"
            raise ApiError(503, message, code="not_ready", headers={"Retry-After": "1"})
        return self.engine

    async def load(self) -> None:
        """Load the model, start and warm the workers, start the dispatcher. Never raises: a
        failure is kept in `error` (and /health says so)."""
        s = self.settings
        workers: WorkerPool | None = None
        try:
            model = self._given_model
            if model is None:
                path = await asyncio.to_thread(model_path, s)
                model = await asyncio.to_thread(jepa.Model, path, s.device)
            workers = WorkerPool(model, s.workers, s.graph_threads, s.max_batch)
            await asyncio.to_thread(workers.start)
            dispatcher = Dispatcher(workers, s.max_batch, s.max_wait_ms, self.metrics)
            pipeline = Pipeline(
                model, dispatcher, self.files, s.decode_threads, s.max_frames, lambda: media_budget(s)
            )
            self._dispatch_task = asyncio.create_task(dispatcher.run(), name="jepa-dispatcher")
            self.engine = Engine(
                model,
                s.model_id or default_model_id(model.path),
                workers,
                dispatcher,
                pipeline,
                int(time.time()),
            )
        except asyncio.CancelledError:
            if workers is not None:
                await asyncio.to_thread(workers.stop)
            raise
        except Exception as exc:
            log.error("cannot serve the model: %s", exc)
            self.error = exc
            if workers is not None:
                await asyncio.to_thread(workers.stop)
        finally:
            self.ready.set()

    def drain(self) -> None:
        """Refuse new requests from now on (shutdown has begun)."""
        self.draining = True

    async def close(self, timeout: float = 10.0) -> None:
        """Fail queued work, stop running rollouts between steps, and let the workers exit, waiting
        at most `timeout` for a graph that is running (a worker thread is a daemon: a stuck one does
        not hold the process)."""
        engine, self.engine = self.engine, None
        if engine is None:
            return
        engine.dispatcher.close()
        engine.pipeline.close()
        if self._dispatch_task is not None:
            self._dispatch_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dispatch_task
        await asyncio.to_thread(engine.workers.stop, timeout)
