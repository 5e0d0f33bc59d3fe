"""From parsed inputs to results, for every task: preprocessing (decoding, tokenizing) on the model's
preparation threads, then grouped work on the workers.

It calls the same functions as jepa-embed (jepa.media.prepare, jepa.pipeline.encode_prepared,
jepa.text.encode_tokens), so a vector the server returns is the vector jepa-embed writes for the same
input, bit for bit.

A text goes to the dispatcher as one task whose payload is a fixed-shape int32 row (its length, ids
and token types), so texts of every length share batches across requests; the worker-side op
(text_op) unpacks the rows and runs jepa.text.encode_tokens, which orders the batch by length and cuts
it at the token budget: the engine sees real tokens only, never padding."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

import jepa
import jepa.media
import jepa.pipeline
import jepa.text
import jepa.world
from jepa.text import Tokens

from .dispatcher import Dispatcher, timing_of
from .errors import ApiError, from_jepa
from .inputs import Item, Limits, TextInputs
from .metrics import ModelMetrics
from .rollout import WorldJob, request_field
from .scheduler import CostModel
from .security import LocalFiles
from .tokenizing import TokenizerGate, tokenize
from .workers import BatchOp, Done

log = logging.getLogger("jepa_server")

T = TypeVar("T")


def encode_op(ctx: jepa.Context, inputs: list[np.ndarray], pool: str) -> list[np.ndarray]:
    """The worker-side operation of an embedding group."""
    return jepa.pipeline.encode_prepared(ctx, inputs, pool)


def classify_op(ctx: jepa.Context, inputs: list[np.ndarray], top_k: int) -> list[jepa.Classification]:
    """The worker-side operation of a classification group: the same code as jepa.classify."""
    return jepa.classify_prepared(ctx, inputs, top_k)


def pack(t: Tokens, width: int) -> np.ndarray:
    """A text as one fixed-shape row [1 + 2 width]: its length, ids and token types (zeros past the
    length, never read by the engine)."""
    row = np.zeros(1 + 2 * width, np.int32)
    n = len(t)
    row[0] = n
    row[1 : 1 + n] = t.ids
    row[1 + width : 1 + width + n] = t.type_ids
    return row


def unpack(row: np.ndarray) -> Tokens:
    n, width = int(row[0]), (row.shape[0] - 1) // 2
    return Tokens(row[1 : 1 + n].copy(), row[1 + width : 1 + width + n].copy())


def text_op(ctx: jepa.Context, inputs: list[np.ndarray], arg: tuple[str, int]) -> list[np.ndarray]:
    """The worker-side operation of a text group: length-ordered engine calls within the token budget."""
    pool, budget = arg
    vecs = jepa.text.encode_tokens(ctx, [unpack(r) for r in inputs], pool, None, budget)
    return [v.copy() for v in vecs]


@dataclass(frozen=True)
class Classified:
    results: list[jepa.Classification]
    queue_s: float
    inference_s: float


@dataclass(frozen=True)
class Embedded:
    vectors: list[np.ndarray]  # [D] per item, or [N, D] with pool "none"
    tokens: int  # tokens encoded, for `usage`: patch tokens, or a text's real tokens (special included)
    queue_s: float
    inference_s: float
    truncated: int | None = None  # texts cut to max_seq_len (a text model's answers only)


@dataclass(frozen=True)
class WorldResult:
    value: dict[str, Any]  # jepa.rollout's or jepa.plan's dict
    queue_s: float
    inference_s: float


def world_op(
    job: WorldJob, frames: np.ndarray, goal: np.ndarray | None, stop: threading.Event
) -> Callable[[jepa.Context], dict[str, Any]]:
    """The worker-side operation of a /rollout request: jepa.rollout or jepa.plan, whole, on one
    context, from the prepared frames; it stops between predictor steps once `stop` is set."""

    def op(ctx: jepa.Context) -> dict[str, Any]:
        if job.plan is not None:
            return jepa.plan(ctx, frames, goal, state=job.state, stop=stop.is_set, **job.plan)
        return jepa.rollout(ctx, frames, job.actions, goal=goal, state=job.state,
                            return_latents=job.return_latents, stop=stop.is_set)

    return op


class Pipeline:
    def __init__(
        self,
        model: jepa.Model,
        dispatcher: Dispatcher,
        files: LocalFiles,
        prep_threads: int,
        max_frames: int,
        budget: Callable[[], jepa.media.Budget],
        gate: TokenizerGate,
        metrics: ModelMetrics,
        text_token_budget: int = jepa.text.DEFAULT_TOKEN_BUDGET,
    ) -> None:
        self.model = model
        self.dispatcher = dispatcher
        self.files = files
        self.max_frames = max_frames
        self.budget = budget  # a fresh media budget per request
        self.gate = gate  # the server's characters in the tokenizer at once, shared by every model
        self.metrics = metrics
        self.text_token_budget = text_token_budget  # tokens per engine call of a text group
        self._prep = ThreadPoolExecutor(prep_threads, thread_name_prefix="jepa-prep")
        self._running: set[threading.Event] = set()  # the stop events of running world requests

    def close(self) -> None:
        """Stop running rollouts between steps; drop queued decodes without waiting for a running
        one (inputs are bounded, but shutdown must not wait on one)."""
        self.stop_all()
        self._prep.shutdown(wait=False, cancel_futures=True)

    def stop_all(self) -> None:
        for event in list(self._running):
            event.set()

    def submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        """fn(*args) on the preparation threads, beside decoding: a text model's tokenizer runs here,
        off the event loop and off asyncio's default executor (which writes JSON answers and
        /metrics, and loads models), so a burst of long texts waits for these threads only."""
        return self._prep.submit(fn, *args)

    async def prepare(self, items: list[Item], budget: jepa.media.Budget | None = None) -> list[np.ndarray]:
        """Decode and preprocess every item off the event loop: float32 [C, T, H, W] each, all within
        one media budget."""
        return await self._off_loop(self._prepare_one, items, budget or self.budget())

    async def _off_loop(self, fn: Callable[[Item, jepa.media.Budget], Any], items: list[Item],
                        budget: jepa.media.Budget) -> list[Any]:
        """fn(item, budget) for every item on the preparation threads; the first failure is raised
        once all have finished (none is left running behind the answer)."""
        loop = asyncio.get_running_loop()
        jobs = [loop.run_in_executor(self._prep, fn, item, budget) for item in items]
        results = await asyncio.gather(*jobs, return_exceptions=True)
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is None:
            return results
        # Raised from a frame that no longer holds the results, the jobs or the items: else the
        # exception's traceback keeps this frame, which keeps the exception (a cycle), and with it
        # the request's decoded inputs until the cyclic GC runs (40 invalid 25 MiB images, one at a
        # time, took the RSS from 220 to 1016 MiB).
        del results, jobs, items
        try:
            raise failed
        finally:
            del failed

    def _prepare_one(self, item: Item, budget: jepa.media.Budget) -> np.ndarray:
        return self._reading(item, lambda: jepa.media.prepare(
            item.source, self.model, as_video=item.as_video, frames=item.frames, budget=budget))

    def _frames_of(self, item: Item, budget: jepa.media.Budget) -> np.ndarray:
        """A world model's frames, each prepared on its own, as [C, N, S, S] (the layout the
        frame-count check reads). A video's frames are prepared as they decode."""

        def plane(rgb: np.ndarray) -> np.ndarray:
            return jepa.media.prepare(rgb, self.model, as_video=False)[:, 0]

        def read() -> np.ndarray:
            src: Any = item.source
            if item.as_video:
                n = item.frames or max(1, int(self.model.info.n_frames))
                planes = jepa.media.load_video(item.source, n, budget=budget, transform=plane)  # type: ignore[arg-type]
                src = np.ascontiguousarray(np.stack(planes))  # prepared: prepare_frames takes it as is
            return jepa.world.prepare_frames(self.model, src, "frames", budget).transpose(1, 0, 2, 3)

        return self._reading(item, read)

    def _reading(self, item: Item, read: Callable[[], np.ndarray]) -> np.ndarray:
        try:
            x = read()
        except jepa.ResourceLimitError as exc:  # a budget: 413 naming the item and the limit
            message = f"{item.param}: {exc.message}"
            raise ApiError(413, message, param=item.param, code="input_too_large") from None
        except (jepa.JepaError, ValueError, OSError, EOFError) as exc:
            # Decoders raise more than JepaError (Pillow, PyAV); all of it is the input's fault.
            if item.local:
                reason = str(exc)
                for resolved, given in item.paths:
                    reason = reason.replace(resolved, given)
                raise self.files.refusal(item.param, reason) from None
            message = exc.message if isinstance(exc, jepa.JepaError) else f"cannot decode the input: {exc}"
            raise ApiError(400, f"{item.param}: {message}", param=item.param, code="invalid_input") from None
        if x.ndim == 4 and x.shape[1] > self.max_frames:
            raise ApiError(
                400,
                f"{item.param}: {x.shape[1]} frames (at most {self.max_frames}, --max-frames)",
                param=item.param,
                code="too_many_frames",
            )
        return x

    def patch_tokens(self, inputs: list[np.ndarray]) -> int:
        """Patch tokens the inputs encode to (CLS and registers not counted)."""
        n = 0
        for x in inputs:
            _, t, h, w = x.shape
            n += self.model.n_tokens(t, h, w) - self.model.n_prefix
        return n

    async def _batched(self, items: list[Item], op: BatchOp, arg: Any) -> tuple[list[np.ndarray], list[Done]]:
        """Prepare the items, then run op over them on the workers, grouped with compatible work."""
        inputs = await self.prepare(items, self.budget())
        try:
            return inputs, await self.dispatcher.run_batched(op, arg, inputs)
        except jepa.JepaError as exc:
            raise from_jepa(exc, "input", computing=True) from None

    async def embed(self, items: list[Item], pool: str) -> Embedded:
        inputs, done = await self._batched(items, encode_op, pool)
        return Embedded([d.value for d in done], self.patch_tokens(inputs), *timing_of(done))

    async def embed_texts(self, inputs: TextInputs, pool: str, limits: Limits) -> Embedded:
        """A text model's inputs tokenized on the preparation threads, then one task per text: each
        costs its real tokens, so the scheduler orders texts by length across requests and a device's
        batch budget counts what it will compute (no padding)."""
        seqs = await tokenize(self.model, inputs, limits, self, self.gate)
        width = self.model.info.max_seq_len
        rows = [pack(t, width) for t in seqs]
        cost = CostModel.of(self.model)
        try:
            done = await self.dispatcher.run_batched(
                text_op, (pool, self.text_token_budget), rows, [cost.item(len(t)) for t in seqs]
            )
        except jepa.JepaError as exc:
            raise from_jepa(exc, "input", computing=True) from None
        n_tok = sum(len(t) for t in seqs)
        truncated = sum(t.truncated for t in seqs)
        self.metrics.count_texts(len(seqs), n_tok, truncated)
        return Embedded([d.value for d in done], n_tok, *timing_of(done), truncated=truncated)

    async def classify(self, items: list[Item], top_k: int) -> Classified:
        _, done = await self._batched(items, classify_op, top_k)
        return Classified([d.value for d in done], *timing_of(done))

    async def world(self, job: WorldJob) -> WorldResult:
        """A rollout or a plan: the frames prepared off the event loop, then the whole request on one
        worker (Dispatcher.run_whole) through jepa.rollout / jepa.plan."""
        items = [job.context] if job.goal is None else [job.context, job.goal]
        prepared = await self._off_loop(self._frames_of, items, self.budget())
        frames = [np.ascontiguousarray(x.transpose(1, 0, 2, 3)) for x in prepared]
        goal = frames[1] if len(frames) > 1 else None
        stop = threading.Event()
        self._running.add(stop)
        try:
            done = await self.dispatcher.run_whole(world_op(job, frames[0], goal, stop))
        except jepa.world.Stopped:  # only the server stops one: it is shutting down
            raise ApiError(503, "the server is shutting down", code="shutting_down") from None
        except jepa.JepaError as exc:
            # By class (from_jepa) and by the argument the refusal names, never by its message.
            field = request_field(getattr(exc, "param", None), self.model.world_model)
            raise from_jepa(exc, field, computing=True) from None
        finally:
            # Cancelled (the deadline, the client gone, shutdown) or done: a rollout still running
            # on its worker stops at its next predictor step.
            stop.set()
            self._running.discard(stop)
        return WorldResult(done.value, done.queue_s, done.inference_s)
