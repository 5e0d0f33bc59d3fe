"""Worker threads: each owns one engine Context and runs one group of tasks at a time.

Workers never see JSON or aiohttp objects: a group is a list of Tasks whose payloads are
preprocessed numpy arrays (or, for work that runs whole, a callable taking the Context)."""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import jepa

log = logging.getLogger("jepa_server")

# op(context, inputs, arg) -> one result per input
BatchOp = Callable[[jepa.Context, list[np.ndarray], Any], list[Any]]


@dataclass(frozen=True)
class BatchKey:
    """Tasks with equal keys may share one graph: the same operation and argument, the same input
    shape (so the same frame count and crop)."""

    op: BatchOp
    arg: Hashable
    shape: tuple[int, ...]


@dataclass(eq=False)
class Task:
    key: BatchKey | None  # None: runs alone (a rollout runs whole on one worker)
    payload: np.ndarray | Callable[[jepa.Context], Any]
    future: asyncio.Future[Done]
    enqueued: float = field(default_factory=time.perf_counter)


@dataclass(frozen=True)
class Done:
    """A task's result and where its time went."""

    value: Any
    queue_s: float  # from submission to the start of its graph
    inference_s: float  # the whole graph it ran in
    batch: int  # items in that graph
    group: int  # which graph (ids are unique per worker pool)


# What a worker reports back to the event loop: the group, its values or its error, when the
# graph started and how long it took.
Report = Callable[[list[Task], "list[Any] | BaseException", float, float, int], None]


def run_group(ctx: jepa.Context, group: list[Task]) -> list[Any]:
    head = group[0]
    if head.key is None:
        assert callable(head.payload)
        return [head.payload(ctx)]
    return head.key.op(ctx, [t.payload for t in group], head.key.arg)  # type: ignore[misc]


def warm_input(model: jepa.Model) -> np.ndarray:
    """One item of an image or video model's native shape, to build and run a first graph before
    serving."""
    info = model.info
    size = int(info.img_size)
    return np.zeros((1, int(info.in_chans), max(1, int(info.n_frames)), size, size), np.float32)


SMOKE_TEXT = "jepa smoke test"


def recipe_refusal(model: jepa.Model) -> str | None:
    """Why an image or video model's own preprocessing recipe makes inputs its encoder refuses
    (jepa.gguf.keys.recipe_conflict, the rule the converter and `jepa-server check` apply
    to the file's keys), or None."""
    from jepa.gguf.keys import recipe_conflict

    info = model.info
    return recipe_conflict({"jepa.enc.img_size": info.img_size, "jepa.enc.patch_size": info.patch_size,
                            "jepa.enc.pos_type": info.pos_type.name.lower(),
                            "jepa.pre.crop": info.preprocess.crop})


def smoke_call(model: jepa.Model) -> Callable[[jepa.Context], object]:
    """The server's smoke test of a model: one call of its own kind, on a context. An image or
    video model whose recipe its encoder refuses fails here (ModelFileError: it would refuse every
    request); otherwise it encodes one item of its native shape (warm_input). A text model
    tokenizes a short text with its own tokenizer and encodes it, so a broken tokenizer fails the
    load too. Either way the output must be finite: NaN or infinite weights (or q8_0 / q4_k scales)
    passed the smoke test and then made every request a 422 while the model stayed resident."""
    if model.is_text:
        tokens = model.tokenizer.encode([SMOKE_TEXT])
        return lambda ctx: _finite(ctx.encode_text(tokens))
    why = recipe_refusal(model)
    if why:
        raise jepa.ModelFileError(why)
    x = warm_input(model)
    return lambda ctx: _finite(ctx.encode(x))


def _finite(out: np.ndarray) -> np.ndarray:
    if not np.isfinite(out).all():
        raise jepa.InvalidInputError(
            "its output on the smoke test's input is not finite (NaN or infinity): the file's weights "
            "or scales hold non-finite values")
    return out


class WorkerPool:
    def __init__(
        self, model: jepa.Model, n_workers: int, threads: int, max_batch: int, label: str = ""
    ) -> None:
        self.model = model
        self.size = n_workers
        self.label = label  # names the threads (a replica's device), so a stack dump says whose
        self._threads_per_graph = threads
        self._max_batch = max_batch
        self._jobs: queue.SimpleQueue[tuple[list[Task], Report, int] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._contexts: list[jepa.Context] = []
        self._next_group = 0
        # Groups submitted that no worker has started: the dispatcher may take one back (revoke)
        # for another device's free worker.
        self._unstarted: set[int] = set()
        self._claim = threading.Lock()
        # Test hook: clear() makes every worker wait before its next group, set() lets them run.
        self.gate = threading.Event()
        self.gate.set()

    def start(self, warm: bool = True) -> None:
        """Make the contexts, run one warm graph on each (the server's smoke test; `warm=False`
        skips it), start the threads. Blocking: call it off the event loop."""
        smoke = smoke_call(self.model) if warm else None
        for _ in range(self.size):
            ctx = self.model.context(threads=self._threads_per_graph, max_batch=self._max_batch)
            if smoke is not None:
                smoke(ctx)
            self._contexts.append(ctx)
        for i, ctx in enumerate(self._contexts):
            name = f"jepa-{self.label}-worker-{i}" if self.label else f"jepa-worker-{i}"
            t = threading.Thread(target=self._loop, args=(ctx,), name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def submit(self, group: list[Task], report: Report) -> int:
        """Queue a group for the next free worker; `report` is called from that worker thread."""
        self._next_group += 1
        with self._claim:
            self._unstarted.add(self._next_group)
        self._jobs.put((group, report, self._next_group))
        return self._next_group

    def revoke(self, group_id: int) -> bool:
        """Take back a submitted group that no worker has started: True when it will not run here
        (its report is never called); False when a worker already has it."""
        with self._claim:
            if group_id not in self._unstarted:
                return False
            self._unstarted.discard(group_id)
            return True

    def stop(self, timeout: float = 30.0) -> None:
        """Let the workers finish what they hold and exit, waiting `timeout` seconds in all (the
        threads are daemons: one still in a graph then does not hold the process). Blocking."""
        self.gate.set()
        for _ in self._threads:
            self._jobs.put(None)
        deadline = time.monotonic() + timeout
        for t in self._threads:
            t.join(max(0.0, deadline - time.monotonic()))
            if t.is_alive():
                log.warning("%s is still running a graph at shutdown; not waiting for it", t.name)
        self._threads.clear()
        self._contexts.clear()

    def _run(self, ctx: jepa.Context, group: list[Task]) -> list[Any]:
        """One group on this worker's context (a test seam: a subclass slows or fails one device)."""
        return run_group(ctx, group)

    def _loop(self, ctx: jepa.Context) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            group, report, group_id = job
            self.gate.wait()
            with self._claim:  # taken back for another device while it waited
                if group_id not in self._unstarted:
                    continue
                self._unstarted.discard(group_id)
            started = time.perf_counter()
            outcome: list[Any] | BaseException
            try:
                outcome = self._run(ctx, group)
                if len(outcome) != len(group):
                    raise jepa.BackendError(
                        f"a worker returned {len(outcome)} results for {len(group)} items"
                    )
            except BaseException as exc:  # reported to the requests; the worker lives on
                outcome = exc
            try:
                report(group, outcome, started, time.perf_counter() - started, group_id)
            except RuntimeError:  # the event loop is gone (shutting down): nobody is waiting
                log.debug("a worker finished after the event loop closed")
