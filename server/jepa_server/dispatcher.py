"""The dispatcher: hands batches of compatible tasks to the free workers of a model's replicas.

Tasks of every request wait in one queue (scheduler.Scheduler), each with its cost (the model's
per-token cost times its tokens) and its batch key (same operation, argument and input shape).
When a replica has a free worker it takes a batch: one device alone takes the oldest task and the
compatible tasks behind it, in arrival order; of several devices the fastest takes from the
expensive end and the others from the cheap end, each up to its budget and max_batch (the
scheduler's docstring has the policy). Grouping changes the scheduling, never the arithmetic (on the
CPU the engine gives an item the same bits in any batch, on any replica).

A partial batch waits up to max_wait for more compatible tasks, but only while nothing else is
waiting: an incompatible task in the queue ends the wait. While every worker of a replica is busy, a
*full* batch (max_batch tasks, its budget, or a task that runs whole) is handed to it ahead, at most
one per worker: the worker that frees first starts it at once, without a round trip through the
event loop between two graphs. A partial batch is never handed over early. Until a worker starts
it, a batch handed ahead may be stolen: a free worker of another replica with nothing queued takes
it back (WorkerPool.revoke) when it would end sooner there.

A batch that fails on a device (the engine's 5xx-class errors: a backend failure, memory exhausted)
is queued again once for the other replicas; a refused input fails the same everywhere and is not
retried. A request is answered whole or not at all.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np

import jepa
import jepa.world

from .errors import ApiError, from_jepa
from .metrics import Metrics
from .replicas import Replica
from .scheduler import Batch, CostModel, DeviceSpec, DeviceState, Scheduler, input_cost
from .workers import BatchKey, BatchOp, Done, Task, WorkerPool

log = logging.getLogger("jepa_server")


def is_device_failure(exc: BaseException) -> bool:
    """Whether another device might succeed where this one failed: an engine error the server
    answers with a 5xx (a backend failure, memory exhausted while computing). A refused input (4xx)
    fails the same everywhere; a stopped rollout was stopped on purpose."""
    if not isinstance(exc, jepa.JepaError) or isinstance(exc, jepa.world.Stopped):
        return False
    return from_jepa(exc, computing=True).status >= 500


class Dispatcher:
    def __init__(self, replicas: WorkerPool | Sequence[Replica], max_batch: int, max_wait_ms: float,
                 metrics: Metrics, *, max_age_s: float | None = None, model: str = "") -> None:
        """`replicas`: the model's replicas, fastest-first order not required; or one WorkerPool,
        served as one unbounded replica on its model's device (the single-device server)."""
        if isinstance(replicas, (list, tuple)):
            reps = list(replicas)
        else:
            pool: Any = replicas
            reps = [Replica(str(getattr(getattr(pool, "model", None), "device", "cpu")), pool)]
        self.replicas = {r.device: r for r in reps}
        self._max_batch = max_batch
        self._max_wait_s = max_wait_ms / 1000.0
        self._metrics = metrics.for_model(model)  # every sample carries the model's id
        self._sched: Scheduler[Task] = Scheduler(
            [DeviceSpec(r.device, r.budget, r.workers.size, r.weight) for r in reps], max_batch,
            max_age_s=max_age_s)
        self._cost = _shape_cost(getattr(reps[0].workers, "model", None))
        self._arrived = asyncio.Event()  # a task arrived, or a batch finished
        self._loop = asyncio.get_running_loop()
        self._closed = False
        # Per replica: batches handed over and not finished, in hand-over order. Workers start them
        # in that order, so the oldest `workers.size` run and the rest wait in the pool.
        self._outstanding: dict[str, OrderedDict[int, Batch[Task]]] = {r.device: OrderedDict() for r in reps}
        self._workers = sum(r.workers.size for r in reps)
        self.groups = 0  # batches handed to workers so far
        self.dispatched = 0  # tasks handed to workers so far (a retried task counts again)
        self.retried = 0  # batches queued again after a device failure
        self.stolen = 0  # batches taken back from a busy device for another's free worker
        self._gids: dict[int, int] = {}  # batch id -> its pool's group id (for revoke)
        self._metrics.workers.labels("idle").set(self._workers)
        self._metrics.workers.labels("busy").set(0)

    @property
    def busy(self) -> int:
        """Workers running a batch."""
        return sum(min(len(self._outstanding[d]), r.workers.size) for d, r in self.replicas.items())

    @property
    def queued(self) -> int:
        """Tasks not handed to any worker yet (each task is this or `dispatched`, never both)."""
        return len(self._sched.queue)

    @property
    def depth(self) -> int:
        """Tasks waiting for a worker: queued, or in a batch handed over ahead."""
        ahead = sum(len(b) for d, r in self.replicas.items()
                    for b in list(self._outstanding[d].values())[r.workers.size:])
        return len(self._sched.queue) + ahead

    @property
    def devices(self) -> dict[str, DeviceState]:
        """Per replica: its measured speed and what it served (batches, items, cost, busy seconds)."""
        return self._sched.devices

    # -- the request side

    async def run_batched(
        self, op: BatchOp, arg: Any, inputs: Sequence[np.ndarray], costs: Sequence[float] | None = None
    ) -> list[Done]:
        """Run op over every input, each grouped with compatible work from any request; the results
        in input order. `costs` (one per input) replaces the cost read from an input's shape where
        the shape does not tell it: a text's fixed-width payload holds its real token count."""
        if costs is not None and len(costs) != len(inputs):
            raise ValueError(f"{len(costs)} costs for {len(inputs)} inputs")
        tasks = []
        for i, x in enumerate(inputs):
            key = BatchKey(op, arg, tuple(x.shape))
            tasks.append(Task(key, x, self._loop.create_future()))
            self._submit(tasks[-1], self._cost(key.shape) if costs is None else float(costs[i]))
        return await self._gather(tasks)

    async def run_whole(self, fn: Callable[[jepa.Context], Any], cost: float | None = None) -> Done:
        """Run fn(context) alone on one worker (a rollout, a plan); `cost` orders it among the other
        tasks (default: one item of the model's native shape)."""
        task = Task(None, fn, self._loop.create_future())
        self._submit(task, self._cost(None) if cost is None else cost)
        return (await self._gather([task]))[0]

    def _submit(self, task: Task, cost: float) -> None:
        if self._closed:
            raise ApiError(503, "the server is shutting down", code="shutting_down")
        self._sched.push(task, cost, task.key, task.enqueued)
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
        """Forever: take a batch for a replica with a free worker (or a full one while all its
        workers are busy), hand it over."""
        while True:
            replica, batch, stolen = await self._next_batch()
            if not stolen:  # a stolen batch was counted when it was first handed over
                self.groups += 1
                self.dispatched += len(batch)
                self._metrics.batch_size.observe(len(batch))
            self._outstanding[replica.device][batch.id] = batch
            self._gids[batch.id] = replica.workers.submit([e.item for e in batch.entries],
                                                          self._reporter(batch))
            self._set_gauges()

    async def _next_batch(self) -> tuple[Replica, Batch[Task], bool]:
        """The next batch, the replica to hand it to, and whether it was stolen from another."""
        while True:
            self._sched.queue.discard(lambda t: t.future.done())  # abandoned by their requests
            now = time.perf_counter()
            for device in self._sched.ranking():  # the fastest first: it takes the expensive end
                replica, running = self.replicas[device], len(self._outstanding[device])
                if self._sched.resting(device, now):
                    continue  # it failed a batch a moment ago
                if running < replica.workers.size:
                    batch = self._sched.take(device, now) if len(self._sched.queue) else None
                    if batch is not None:
                        return replica, await self._wait_for_company(batch), False
                    batch = self._steal(device, now)
                    if batch is not None:
                        return replica, batch, True
                elif running < 2 * replica.workers.size and len(self._sched.queue):
                    batch = self._sched.take(device, now, full_only=True)
                    if batch is not None:
                        return replica, batch, False
            self._arrived.clear()
            wake = self._sched.wakes_at(now)  # a resting device may take work again then
            try:
                async with asyncio.timeout(None if wake is None else max(0.0, wake - now)):
                    await self._arrived.wait()
            except TimeoutError:
                pass

    def _steal(self, thief: str, now: float) -> Batch[Task] | None:
        """A batch handed ahead to another replica that has not started there, taken back for
        `thief`'s free worker when it would end sooner on it (the work-stealing half of the
        policy: a batch handed ahead is not promised to its device)."""
        for victim, replica in self.replicas.items():
            revoke = getattr(replica.workers, "revoke", None)
            batches = list(self._outstanding[victim].values())
            if victim == thief or revoke is None or len(batches) <= replica.workers.size:
                continue
            waits_for = sum(self._sched.remaining(b, now) for b in batches[: replica.workers.size])
            for batch in batches[replica.workers.size:]:
                sooner = self._sched.sooner_elsewhere(batch, thief, now, waits_for)
                if sooner and revoke(self._gids[batch.id]):
                    del self._outstanding[victim][batch.id]
                    self._gids.pop(batch.id, None)
                    self.stolen += 1
                    self._metrics.steals.labels(thief).inc()
                    return self._sched.move(batch, thief, now)
                waits_for += batch.cost
        return None

    async def _wait_for_company(self, batch: Batch[Task]) -> Batch[Task]:
        """A partial batch waits up to max_wait for compatible tasks, while nothing else waits."""
        deadline = self._loop.time() + self._max_wait_s
        while self._max_wait_s > 0 and not self._sched.is_full(batch) and not len(self._sched.queue):
            remaining = deadline - self._loop.time()
            if remaining <= 0:
                break
            self._arrived.clear()
            try:
                async with asyncio.timeout(remaining):
                    await self._arrived.wait()
            except TimeoutError:
                break
            self._sched.queue.discard(lambda t: t.future.done())
            batch = self._sched.top_up(batch, time.perf_counter())
        return batch

    def _reporter(self, batch: Batch[Task]) -> Callable[[list[Task], Any, float, float, int], None]:
        """The report a worker thread calls; the results are set on the event loop."""

        def report(group: list[Task], outcome: list[Any] | BaseException, started: float, took: float,
                   gid: int) -> None:
            self._loop.call_soon_threadsafe(self._finish, batch, outcome, started, took)

        return report

    def _finish(self, batch: Batch[Task], outcome: list[Any] | BaseException, started: float,
                took: float) -> None:
        device = batch.device
        self._outstanding[device].pop(batch.id, None)
        self._gids.pop(batch.id, None)
        self._arrived.set()  # a worker is free, or has room for a batch ahead
        failed = isinstance(outcome, BaseException)
        self._sched.finish(batch, took, ok=not failed)
        self._metrics.inference_seconds.observe(took)
        if not failed:
            self._metrics.items.inc(len(batch))
            self._metrics.device_items.labels(device).inc(len(batch))
            self._metrics.device_cost.labels(device).inc(batch.cost)
            speed = self._sched.devices[device].speed
            if speed is not None:
                self._metrics.device_speed.labels(device).set(speed)
        elif self._retry(batch, outcome):  # type: ignore[arg-type]
            self._set_gauges()
            return
        for i, e in enumerate(batch.entries):
            t = e.item
            wait = max(0.0, started - t.enqueued)
            self._metrics.queue_seconds.observe(wait)
            if t.future.done():
                continue
            if isinstance(outcome, BaseException):
                t.future.set_exception(outcome)
            else:
                t.future.set_result(Done(outcome[i], wait, took, len(batch), batch.id))
        self._set_gauges()

    def _retry(self, batch: Batch[Task], exc: BaseException) -> bool:
        """Queue a batch that failed on its device again for the other replicas, once; the device
        rests a while (Scheduler.device_failed)."""
        if not is_device_failure(exc):
            return False
        self._sched.device_failed(batch.device, time.perf_counter())
        live = [e for e in batch.entries if not e.item.future.done()]
        if self._closed or not live or not self._sched.retry(batch, live):
            return False
        self.retried += 1
        self._metrics.retries.labels(batch.device).inc()
        log.warning("a batch of %d failed on %s (%s); retrying it on another device", len(live),
                    batch.device, exc)
        return True

    def _set_gauges(self) -> None:
        busy = self.busy
        self._metrics.workers.labels("busy").set(busy)
        self._metrics.workers.labels("idle").set(self._workers - busy)
        self._metrics.queue_depth.set(self.depth)

    def close(self) -> None:
        """Refuse new work and fail what is still waiting."""
        self._closed = True
        for e in list(self._sched.queue):
            if not e.item.future.done():
                shutting = ApiError(503, "the server is shutting down", code="shutting_down")
                e.item.future.set_exception(shutting)
        self._sched.queue.discard(lambda t: True)
        self._metrics.queue_depth.set(0)


def _shape_cost(model: jepa.Model | None) -> Callable[[tuple[int, ...] | None], float]:
    """A task's cost by its input shape (None: one item of the model's native shape). Without a
    model (a test's fake pool), the pixel count stands in for it."""

    @lru_cache(maxsize=256)
    def cost(shape: tuple[int, ...] | None) -> float:
        if model is None:
            return float(np.prod(shape)) if shape else 1.0
        if shape is None:
            size = int(model.info.img_size)
            shape = (int(model.info.in_chans), max(1, int(model.info.n_frames)), size, size)
        if len(shape) >= 4:
            try:
                return input_cost(model, shape)
            except jepa.JepaError:
                pass  # a shape the engine refuses: its graph will say so; any cost orders it
        return CostModel.of(model).item(int(np.prod(shape)))  # not pixels: its elements as tokens

    return cost


def timing_of(done: Sequence[Done]) -> tuple[float, float]:
    """(queue, inference) seconds of a request: its longest wait, and the summed time of the
    distinct graphs its items ran in."""
    queue_s = max((d.queue_s for d in done), default=0.0)
    graphs = {d.group: d.inference_s for d in done}
    return queue_s, sum(graphs.values())
