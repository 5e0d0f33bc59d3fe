"""The dispatcher: forms groups of compatible tasks and hands each to a free worker.

When a worker is free it takes the head task and every compatible task behind it (same BatchKey),
up to max_batch. A partial group waits up to max_wait for more compatible tasks, but only while
nothing else is waiting: an incompatible task behind it ends the wait. Grouping changes the
scheduling, never the arithmetic (on the CPU the engine gives an item the same bits in any batch).

While every worker is busy, a *full* group (max_batch compatible tasks, or a task that runs whole)
is handed over ahead, at most one per worker: the worker that frees first starts it at once, without
a round trip through the event loop between two graphs. A partial group is never handed over
early, so it keeps gathering company until a worker is free.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

import jepa

from .errors import ApiError
from .metrics import Metrics
from .workers import BatchKey, BatchOp, Done, Task, WorkerPool


class Dispatcher:
    def __init__(self, workers: WorkerPool, max_batch: int, max_wait_ms: float, metrics: Metrics) -> None:
        self._workers = workers
        self._max_batch = max_batch
        self._max_wait_s = max_wait_ms / 1000.0
        self._metrics = metrics
        self._pending: list[Task] = []
        self._arrived = asyncio.Event()  # a task arrived, or a group finished
        self._loop = asyncio.get_running_loop()
        self._closed = False
        # Groups handed over and not finished, in hand-over order -> their sizes. Workers start them
        # in that order, so the oldest `workers.size` are running and the rest wait in the pool.
        self._outstanding: OrderedDict[int, int] = OrderedDict()
        self.groups = 0  # groups handed to workers so far
        self.dispatched = 0  # tasks handed to workers so far
        metrics.workers.labels("idle").set(workers.size)
        metrics.workers.labels("busy").set(0)

    @property
    def busy(self) -> int:
        """Workers running a group."""
        return min(len(self._outstanding), self._workers.size)

    @property
    def depth(self) -> int:
        """Tasks waiting for a worker: not yet grouped, or in a group handed over ahead."""
        ahead = list(self._outstanding.values())[self._workers.size :]
        return len(self._pending) + sum(ahead)

    # -- the request side

    async def run_batched(self, op: BatchOp, arg: Any, inputs: Sequence[np.ndarray]) -> list[Done]:
        """Run op over every input, each grouped with compatible work from any request."""
        tasks = [Task(BatchKey(op, arg, tuple(x.shape)), x, self._loop.create_future()) for x in inputs]
        for t in tasks:
            self._submit(t)
        return await self._gather(tasks)

    async def run_whole(self, fn: Callable[[jepa.Context], Any]) -> Done:
        """Run fn(context) alone on one worker (a rollout, a plan)."""
        task = Task(None, fn, self._loop.create_future())
        self._submit(task)
        return (await self._gather([task]))[0]

    def _submit(self, task: Task) -> None:
        if self._closed:
            raise ApiError(503, "the server is shutting down", code="shutting_down")
        self._pending.append(task)
        self._metrics.queue_depth.set(self.depth)
        self._arrived.set()

    @staticmethod
    async def _gather(tasks: list[Task]) -> list[Done]:
        # return_exceptions: every future's outcome is retrieved, then the first error is raised.
        results = await asyncio.gather(*(t.future for t in tasks), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return results  # type: ignore[return-value]

    # -- the worker side

    async def run(self) -> None:
        """Forever: form a group when a worker is free (or a full one while all are busy), hand it
        over."""
        while True:
            group = await self._next_group()
            self.groups += 1
            self.dispatched += len(group)
            self._metrics.batch_size.observe(len(group))
            gid = self._workers.submit(group, self._report)
            self._outstanding[gid] = len(group)
            self._set_gauges()

    async def _next_group(self) -> list[Task]:
        while True:
            self._pending = [t for t in self._pending if not t.future.done()]
            if self._pending:
                if len(self._outstanding) < self._workers.size:
                    return await self._form_group()  # a worker is free
                if len(self._outstanding) < 2 * self._workers.size:
                    full = self._full_group()  # every worker busy: only a full group goes ahead
                    if full is not None:
                        return full
            self._arrived.clear()
            await self._arrived.wait()

    def _full_group(self) -> list[Task] | None:
        head = self._pending[0]
        if head.key is not None:
            n = sum(1 for t in self._pending if t.key == head.key)
            if n < self._max_batch:
                return None
        group = [self._pending.pop(0)]
        if head.key is not None:
            self._take_compatible(group)
        return group

    async def _form_group(self) -> list[Task]:
        head = self._pending.pop(0)
        group = [head]
        if head.key is not None:
            self._take_compatible(group)
            deadline = self._loop.time() + self._max_wait_s
            while self._max_wait_s > 0 and len(group) < self._max_batch and not self._pending:
                remaining = deadline - self._loop.time()
                if remaining <= 0:
                    break
                self._arrived.clear()
                try:
                    async with asyncio.timeout(remaining):
                        await self._arrived.wait()
                except TimeoutError:
                    break
                self._take_compatible(group)
        return group

    def _take_compatible(self, group: list[Task]) -> None:
        key = group[0].key
        keep: list[Task] = []
        for t in self._pending:
            if t.future.done():
                continue  # abandoned by its request
            if t.key == key and len(group) < self._max_batch:
                group.append(t)
            else:
                keep.append(t)
        self._pending = keep

    def _report(
        self, group: list[Task], outcome: list[Any] | BaseException, started: float, took: float, gid: int
    ) -> None:
        """Called by a worker thread; the results are set on the event loop."""
        self._loop.call_soon_threadsafe(self._finish, group, outcome, started, took, gid)

    def _finish(
        self, group: list[Task], outcome: list[Any] | BaseException, started: float, took: float, gid: int
    ) -> None:
        self._outstanding.pop(gid, None)
        self._arrived.set()  # a worker is free, or has room for a group ahead
        self._set_gauges()
        self._metrics.inference_seconds.observe(took)
        if not isinstance(outcome, BaseException):
            self._metrics.items.inc(len(group))
        for i, t in enumerate(group):
            wait = max(0.0, started - t.enqueued)
            self._metrics.queue_seconds.observe(wait)
            if t.future.done():
                continue
            if isinstance(outcome, BaseException):
                t.future.set_exception(outcome)
            else:
                t.future.set_result(Done(outcome[i], wait, took, len(group), gid))

    def _set_gauges(self) -> None:
        self._metrics.workers.labels("busy").set(self.busy)
        self._metrics.workers.labels("idle").set(self._workers.size - self.busy)
        self._metrics.queue_depth.set(self.depth)

    def close(self) -> None:
        """Refuse new work and fail what is still waiting."""
        self._closed = True
        for t in self._pending:
            if not t.future.done():
                t.future.set_exception(ApiError(503, "the server is shutting down", code="shutting_down"))
        self._pending.clear()
        self._metrics.queue_depth.set(0)


def timing_of(done: Sequence[Done]) -> tuple[float, float]:
    """(queue, inference) seconds of a request: its longest wait, and the summed time of the
    distinct graphs its items ran in."""
    queue_s = max((d.queue_s for d in done), default=0.0)
    graphs = {d.group: d.inference_s for d in done}
    return queue_s, sum(graphs.values())
