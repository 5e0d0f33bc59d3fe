"""Scheduling: the dispatcher's grouping rules (on a fake worker pool), admission under a gated
worker, batching observable in the metrics, and the metrics moving as requests are made."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from test_server_support import b64, in_process, metric, png_bytes, run

from jepa_server.dispatcher import Dispatcher
from jepa_server.keys import ADMISSION, RUNTIME
from jepa_server.metrics import Metrics
from jepa_server.workers import Report, Task, run_group


class FakePool:
    """A one-worker pool like WorkerPool: one thread runs the groups in hand-over order, each behind
    a gate; it records what it ran."""

    size = 1

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.gate.set()
        self.groups: list[list[tuple[int, ...]]] = []
        self._jobs: queue.SimpleQueue[tuple[list[Task], Report, int]] = queue.SimpleQueue()
        self._next = 0
        threading.Thread(target=self._work, daemon=True).start()

    def submit(self, group: list[Task], report: Report) -> int:
        self._next += 1
        self._jobs.put((group, report, self._next))
        return self._next

    def _work(self) -> None:
        while True:
            group, report, gid = self._jobs.get()
            self.gate.wait(10)
            self.groups.append([t.key.shape for t in group if t.key is not None])
            started = time.perf_counter()
            try:
                out: Any = run_group(None, group)  # type: ignore[arg-type]
            except Exception as exc:
                out = exc
            with contextlib.suppress(RuntimeError):  # the test's event loop is gone
                report(group, out, started, time.perf_counter() - started, gid)


def double(ctx: Any, inputs: list[np.ndarray], arg: Any) -> list[np.ndarray]:
    return [x * 2 for x in inputs]


def explode(ctx: Any, inputs: list[np.ndarray], arg: Any) -> list[np.ndarray]:
    raise ValueError("boom")


async def _with_dispatcher(
    body: Callable[[Dispatcher, FakePool], Awaitable[None]], max_batch: int = 8, max_wait_ms: float = 0
) -> None:
    pool = FakePool()
    d = Dispatcher(pool, max_batch, max_wait_ms, Metrics())  # type: ignore[arg-type]
    task = asyncio.create_task(d.run())
    try:
        await body(d, pool)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        pool.gate.set()


def _x(n: int) -> np.ndarray:
    return np.zeros((3, 1, n, n), np.float32)


async def _until(cond: Callable[[], bool], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.005)


async def _hold_one(d: Dispatcher, pool: FakePool) -> asyncio.Task[Any]:
    """One task running on the worker and held there by the gate (pool.gate.set() lets it end)."""
    pool.gate.clear()
    first = _submit(d, 1)
    await _until(lambda: d.busy == 1)
    return first


def _submit(d: Dispatcher, n: int, arg: Any = None) -> asyncio.Task[Any]:
    """A request of n compatible tasks."""
    return asyncio.create_task(d.run_batched(double, arg, [_x(2)] * n))


def test_groups_hold_only_compatible_tasks_in_order_and_up_to_the_cap() -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        first = await _hold_one(d, pool)
        # Queued behind a busy worker: A A B A A A (shapes 2 and 4), cap 3.
        rest = asyncio.create_task(d.run_batched(double, None, [_x(2), _x(2), _x(4), _x(2), _x(2), _x(2)]))
        other = _submit(d, 1, "other-arg")
        # Every task handed over or queued (a full batch may be handed ahead to the busy worker: it
        # is then in `dispatched` and in `depth` both, so depth cannot count here).
        await _until(lambda: d.dispatched + d.queued == 8)
        pool.gate.set()
        done = await rest
        await first
        await other
        assert [d_.value.shape for d_ in done] == [(3, 1, 2, 2)] * 2 + [(3, 1, 4, 4)] + [(3, 1, 2, 2)] * 3
        # The head takes its compatible tasks from behind an incompatible one, up to the cap.
        assert [len(g) for g in pool.groups] == [1, 3, 1, 2, 1]
        assert pool.groups[1] == [(3, 1, 2, 2)] * 3 and pool.groups[2] == [(3, 1, 4, 4)]

    run(lambda: _with_dispatcher(body, max_batch=3))


def test_a_full_group_is_handed_over_ahead_of_a_busy_worker_and_a_partial_one_is_not() -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        first = await _hold_one(d, pool)
        # A full group (cap 2) goes to the pool at once, to start the moment the worker frees.
        full = _submit(d, 2)
        await _until(lambda: d.dispatched == 3)
        assert d.busy == 1 and d.depth == 2  # handed over, still waiting for the worker
        # A partial one stays behind, gathering company; and only one group waits ahead per worker.
        partial = _submit(d, 1)
        await _until(lambda: d.depth == 3)
        more = _submit(d, 2)
        await _until(lambda: d.depth == 5)
        await asyncio.sleep(0.05)
        assert d.dispatched == 3 and d.groups == 2
        pool.gate.set()
        for t in (first, full, partial, more):
            await t
        assert [len(g) for g in pool.groups] == [1, 2, 2, 1]
        assert d.depth == 0 and d.busy == 0

    run(lambda: _with_dispatcher(body, max_batch=2))


@pytest.mark.parametrize(
    ("max_batch", "max_wait_ms", "groups"),
    [
        (2, 5000, [2]),  # a partial group waits for company; full at 2, it goes at once, not after 5 s
        (8, 0, [1, 1]),  # max_wait 0 never waits
    ],
)
def test_a_partial_group_waits_for_compatible_company_up_to_max_wait(
    max_batch: int, max_wait_ms: float, groups: list[int]
) -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        a = _submit(d, 1)
        await asyncio.sleep(0.05)
        b = _submit(d, 1)
        await a
        await b
        assert [len(g) for g in pool.groups] == groups

    run(lambda: _with_dispatcher(body, max_batch=max_batch, max_wait_ms=max_wait_ms))


def test_a_partial_group_stops_waiting_when_something_else_waits() -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        started = time.monotonic()
        c = _submit(d, 1)
        await asyncio.sleep(0.05)
        e = asyncio.create_task(d.run_batched(double, None, [_x(4)]))  # incompatible
        await c
        assert time.monotonic() - started < 2.5  # not the 5 s max_wait
        assert [len(g) for g in pool.groups] == [1]
        e.cancel()  # it now waits alone for company; not this test's business
        await asyncio.gather(e, return_exceptions=True)

    run(lambda: _with_dispatcher(body, max_batch=8, max_wait_ms=5000))


def test_an_error_reaches_every_task_of_its_group_and_the_dispatcher_lives_on() -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        with pytest.raises(ValueError, match="boom"):
            await d.run_batched(explode, None, [_x(2), _x(2)])
        done = await d.run_batched(double, None, [_x(2)])
        assert done[0].value.shape == (3, 1, 2, 2)
        whole = await d.run_whole(lambda ctx: "ran alone")
        assert whole.value == "ran alone" and whole.batch == 1

    run(lambda: _with_dispatcher(body))


def test_abandoned_tasks_are_dropped() -> None:
    async def body(d: Dispatcher, pool: FakePool) -> None:
        first = await _hold_one(d, pool)
        gone = _submit(d, 2)
        await _until(lambda: d.depth == 2)
        gone.cancel()
        await asyncio.gather(gone, return_exceptions=True)
        kept = _submit(d, 1)
        pool.gate.set()
        await first
        await kept
        assert [len(g) for g in pool.groups] == [1, 1]

    run(lambda: _with_dispatcher(body))


# -- on the real app ------------------------------------------------------------------------------


def _item(seed: int) -> dict[str, str]:
    return {"b64": b64(png_bytes(seed))}


def test_admission_503_under_a_gated_worker_and_slots_come_back() -> None:
    async def body() -> None:
        async with in_process(max_concurrent_requests=1, queue_timeout_s=0.3) as (client, app):
            engine = app[RUNTIME].require()
            admission = app[ADMISSION]
            engine.workers.gate.clear()  # the test hook: the worker holds its next group
            held = asyncio.create_task(client.post("/v1/embeddings", json={"input": _item(1)}))
            await _until(lambda: engine.dispatcher.busy == 1)
            refused = await client.post("/v1/embeddings", json={"input": _item(2)})
            err = (await refused.json())["error"]
            assert refused.status == 503 and err["code"] == "overloaded" and err["type"] == "server_error"
            assert int(refused.headers["Retry-After"]) >= 1
            assert (await client.post("/embed", json={"inputs": _item(2)})).status == 503
            assert (await client.get("/health")).status == 200  # not admitted: always answers
            engine.workers.gate.set()
            assert (await held).status == 200
            assert admission.in_use == 0
            # A request refused inside its slot (bytes that are not an image) gives the slot back.
            for _ in range(3):
                bad = await client.post("/v1/embeddings", json={"input": {"b64": b64(b"not an image")}})
                assert bad.status == 400
            assert admission.in_use == 0
            assert (await client.post("/v1/embeddings", json={"input": _item(3)})).status == 200

    run(body)


def test_batching_is_observable_with_eight_concurrent_clients() -> None:
    async def body() -> None:
        async with in_process(max_batch=8, max_wait_ms=5) as (client, app):
            engine = app[RUNTIME].require()
            engine.workers.gate.clear()
            posts = [
                asyncio.create_task(client.post("/v1/embeddings", json={"input": _item(i)})) for i in range(8)
            ]
            # Every item is either in the held graph or queued behind it.
            d = engine.dispatcher
            await _until(lambda: d.groups >= 1 and d.dispatched + d.depth == 8)
            engine.workers.gate.set()
            for p in posts:
                assert (await p).status == 200
            text = await (await client.get("/metrics")).text()
            graphs = metric(text, "jepa_batch_size_count")
            assert metric(text, "jepa_batch_size_sum") == 8
            assert metric(text, "jepa_batch_size_bucket", {"le": "1.0"}) < graphs  # a group > 1
            assert metric(text, "jepa_batch_size_bucket", {"le": "8.0"}) == graphs  # none > 8
            assert metric(text, "jepa_items_total") == 8

    run(body)


class InFlight:
    """Wraps the workers' run_group: counts the groups running at once (the peak), and holds each
    at a barrier that only opens when `meet` of them run together, so work that never overlaps
    fails the test (the barrier breaks) instead of passing by luck."""

    def __init__(self, meet: int) -> None:
        self.now = self.peak = 0
        self._lock = threading.Lock()
        self._barrier = threading.Barrier(meet, timeout=10)
        self._entered = 0
        self.met = 0

    def __call__(self, ctx: Any, group: list[Task]) -> list[Any]:
        with self._lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
            meets = self._entered < self._barrier.parties  # the first `meet` groups must overlap
            self._entered += 1
        try:
            if meets:
                self._barrier.wait()
                with self._lock:
                    self.met += 1
            return run_group(ctx, group)
        finally:
            with self._lock:
                self.now -= 1


def test_two_workers_run_two_graphs_at_once_and_never_more(monkeypatch: pytest.MonkeyPatch) -> None:
    import jepa_server.workers

    spy = InFlight(meet=2)
    monkeypatch.setattr(jepa_server.workers, "run_group", spy)

    async def body() -> None:
        # max_batch 1: each request is a graph of its own, so six requests are six groups.
        async with in_process(workers=2, max_batch=1, max_wait_ms=0) as (client, _):
            replies = await asyncio.gather(
                *(client.post("/v1/embeddings", json={"input": _item(i)}) for i in range(6))
            )
            assert [r.status for r in replies] == [200] * 6
            assert spy.met == 2  # two graphs met at the barrier: they ran at the same time
            assert spy.peak == 2  # and never more than the two workers

    run(body)


def test_a_refused_pool_computes_and_queues_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import jepa

    pooled: list[str] = []
    real_pool = jepa.pool

    def spy(tokens: Any, mode: Any, source: Any) -> Any:
        pooled.append(threading.current_thread().name)
        return real_pool(tokens, mode, source)

    monkeypatch.setattr(jepa, "pool", spy)

    async def body() -> None:
        async with in_process() as (client, app):
            engine = app[RUNTIME].require()
            engine.workers.gate.clear()  # anything handed to a worker would wait here
            for mode in ("max", "lewm"):  # unknown; a LeWM mode on a ViT
                resp = await client.post("/v1/embeddings", json={"input": _item(1), "pool": mode})
                err = (await resp.json())["error"]
                assert resp.status == 400 and (err["param"], err["code"]) == ("pool", "invalid_input")
                assert engine.dispatcher.dispatched == 0 and engine.dispatcher.depth == 0
            engine.workers.gate.set()
            ok = await client.post("/v1/embeddings", json={"input": _item(1), "pool": "mean"})
            assert ok.status == 200
        assert pooled == []  # the check pooled nothing (no probe on zeros), on the event loop or off it

    run(body)


def test_metrics_move_as_requests_are_made() -> None:
    async def body() -> None:
        async with in_process() as (client, _):
            before = await (await client.get("/metrics")).text()
            ok = {"endpoint": "/v1/embeddings", "status": "200"}
            bad = {"endpoint": "/v1/embeddings", "status": "400"}
            assert (
                await client.post("/v1/embeddings", json={"input": [_item(1), _item(2), _item(3)]})
            ).status == 200
            assert (await client.post("/v1/embeddings", json={"input": _item(4)})).status == 200
            assert (await client.post("/v1/embeddings", data=b"not json")).status == 400
            assert (await client.get("/nowhere")).status == 404
            resp = await client.get("/metrics")
            assert resp.headers["Content-Type"].startswith("text/plain")
            after = await resp.text()

            def moved(name: str, labels: dict[str, str] | None = None) -> float:
                return metric(after, name, labels) - metric(before, name, labels)

            assert moved("jepa_requests_total", ok) == 2 and moved("jepa_requests_total", bad) == 1
            assert moved("jepa_requests_total", {"endpoint": "unmatched", "status": "404"}) == 1
            assert moved("jepa_items_total") == 4
            assert moved("jepa_request_duration_seconds_count", {"endpoint": "/v1/embeddings"}) == 3
            assert moved("jepa_queue_seconds_count") == 4
            assert moved("jepa_inference_seconds_count") >= 2 and moved("jepa_batch_size_sum") == 4
            assert metric(after, "jepa_queue_depth") == 0
            assert metric(after, "jepa_requests_in_flight") == 1  # this /metrics request
            assert metric(after, "jepa_workers", {"state": "idle"}) == 1
            assert metric(after, "jepa_workers", {"state": "busy"}) == 0

    run(body)


def test_health_is_503_while_the_pinned_model_loads_after_the_registry_is_up() -> None:
    """The registry is published before the -m models load (so requests can wait for them): /health
    must stay 503 "loading", naming the model, until that load is done (issue 36, M10: it said 200 "ok"
    for the 7.5 s a ViT-B took, and Kubernetes' probes passed)."""
    from aiohttp.test_utils import TestClient, TestServer

    from jepa_server.app import create_app, wait_ready
    from jepa_server.settings import Settings

    async def body() -> None:
        app = create_app(Settings(demo=True))
        gate = asyncio.Event()
        runtime = app[RUNTIME]
        open_engine = runtime._open

        async def slow_open(entry: Any) -> Any:
            await gate.wait()
            return await open_engine(entry)

        runtime._open = slow_open  # type: ignore[method-assign]
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            for _ in range(200):  # until the registry is published (the catalog is read on a thread)
                if runtime.registry is not None:
                    break
                await asyncio.sleep(0.01)
            assert runtime.registry is not None
            resp = await client.get("/health")
            answer = await resp.json()
            assert resp.status == 503 and answer["status"] == "loading", answer
            assert answer["loading"] == [e.id for e in runtime.registry.catalog.entries() if e.pinned], answer
            gate.set()
            await wait_ready(app)
            resp = await client.get("/health")
            assert resp.status == 200 and (await resp.json())["status"] == "ok"

    run(body)


def test_health_is_503_until_the_model_is_loaded_and_warm() -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from jepa_server.app import create_app, wait_ready
    from jepa_server.settings import Settings

    async def body() -> None:
        app = create_app(Settings(demo=True))
        gate = asyncio.Event()
        runtime = app[RUNTIME]
        load = runtime.load

        async def slow_load() -> None:
            await gate.wait()
            await load()

        runtime.load = slow_load  # type: ignore[method-assign]
        async with TestClient(TestServer(app, host="127.0.0.1", port=0)) as client:
            resp = await client.get("/health")
            assert resp.status == 503 and (await resp.json())["status"] == "loading"
            busy = await client.post("/v1/embeddings", json={"input": _item(1)})
            assert busy.status == 503 and (await busy.json())["error"]["code"] == "not_ready"
            gate.set()
            await wait_ready(app)
            assert (await client.get("/health")).status == 200

    run(body)
