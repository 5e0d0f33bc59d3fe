"""One Dispatcher over a model replicated twice on the CPU (real WorkerPools, the tiny V-JEPA 2
encoder): every item served exactly once and in input order, bit-identical to one item at a time on
one device, the faster replica serving more; a batch that fails on one device retried on the other,
once; and build_replicas' skipping and budgets."""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any

import numpy as np
import pytest
from test_server_support import metric

import jepa
from jepa_server.dispatcher import Dispatcher, is_device_failure
from jepa_server.metrics import Metrics
from jepa_server.pipeline import encode_op
from jepa_server.replicas import Replica, budget_from_bytes, build_replicas, stop_replicas
from jepa_server.scheduler import input_cost
from jepa_server.workers import Task, WorkerPool

from conftest import bits

# The seam's simulated graph time per cost unit (a fast replica; a slow one takes SLOW_BY x longer):
# the tiny model's own graphs take well under a millisecond, so the sleep is the speed.
SECONDS_PER_COST = 2e-9
SLOW_BY = 4.0


class SeamPool(WorkerPool):
    """A WorkerPool whose graphs also take `slow` x SECONDS_PER_COST per cost unit, or that fails
    every group with `fail` (the test seam of WorkerPool._run)."""

    def __init__(self, *args: Any, slow: float = 1.0, fail: BaseException | None = None, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.slow = slow
        self.fail = fail
        self.seen: list[int] = []  # id() of every payload a graph of this pool ran
        self._lock = threading.Lock()

    def _run(self, ctx: jepa.Context, group: list[Task]) -> list[Any]:
        if self.fail is not None:
            raise self.fail
        with self._lock:
            self.seen += [id(t.payload) for t in group]
        cost = sum(input_cost(self.model, t.payload.shape) for t in group)  # type: ignore[union-attr]
        time.sleep(self.slow * SECONDS_PER_COST * cost)
        return super()._run(ctx, group)


@pytest.fixture(scope="module")
def model(tiny_vjepa2_encoder_path: str) -> jepa.Model:
    return jepa.Model(tiny_vjepa2_encoder_path)


# A burst of photos and clips of several lengths and sizes (the model takes 1-16 frames, 32-64 px).
SHAPES = [(1, 48)] * 12 + [(4, 48)] * 8 + [(8, 48)] * 6 + [(16, 48)] * 3 + [(4, 64)] * 4 + [(2, 32)] * 6


def _inputs(seed: int = 0) -> list[list[np.ndarray]]:
    """Eight requests of mixed items, in a seeded order."""
    rng = np.random.default_rng(seed)
    items = [rng.standard_normal((3, f, s, s)).astype(np.float32) for f, s in SHAPES]
    order = rng.permutation(len(items))
    return [[items[i] for i in order[k::8]] for k in range(8)]


def _pools(model: jepa.Model, *kinds: dict[str, Any]) -> list[SeamPool]:
    pools = [SeamPool(model, 1, k.pop("threads", 1), 8, label=f"cpu{i}", **k) for i, k in enumerate(kinds)]
    for p in pools:
        p.start()
    return pools


async def _serving(replicas: list[Replica], body: Callable[[Dispatcher], Awaitable[None]],
                   max_batch: int = 8, metrics: Metrics | None = None, stop: bool = True) -> None:
    d = Dispatcher(replicas, max_batch, 0, metrics or Metrics())
    task = asyncio.create_task(d.run())
    try:
        await body(d)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for r in replicas if stop else []:
            r.workers.stop()


def _one_at_a_time(model: jepa.Model, requests: list[list[np.ndarray]]) -> list[list[np.ndarray]]:
    ctx = model.context(threads=1, max_batch=1)
    return [[encode_op(ctx, [x], "mean")[0] for x in req] for req in requests]


def test_two_replicas_serve_every_item_once_in_order_with_one_devices_bits(model: jepa.Model) -> None:
    requests = _inputs()
    reference = _one_at_a_time(model, requests)
    fast, slow = _pools(model, {"threads": 2}, {"threads": 1, "slow": SLOW_BY})
    # The slow one listed first, with the bigger budget: the ranking's prior is wrong until measured.
    replicas = [Replica("cpu-slow", slow, budget=math.inf), Replica("cpu-fast", fast, budget=1e9)]

    async def body(d: Dispatcher) -> None:
        done = await asyncio.gather(*(d.run_batched(encode_op, "mean", req) for req in requests))
        for req, ref, got in zip(requests, reference, done, strict=True):
            assert len(got) == len(req)
            for r, g in zip(ref, got, strict=True):
                assert np.array_equal(bits(g.value), bits(r))  # in input order, the same bits
        stats = d.devices
        assert stats["cpu-fast"].cost > stats["cpu-slow"].cost > 0  # both served; the faster more
        assert stats["cpu-fast"].items + stats["cpu-slow"].items == len(SHAPES) == d.dispatched
        assert d.retried == 0 and d.depth == 0 and d.busy == 0
        text = metrics.render().decode()
        for name, st in stats.items():
            assert metric(text, "jepa_device_items_total", {"device": name}) == st.items
            assert metric(text, "jepa_device_cost_total", {"device": name}) == pytest.approx(st.cost)
            assert metric(text, "jepa_device_speed", {"device": name}) == pytest.approx(st.speed)
        assert metric(text, "jepa_workers", {"state": "idle"}) == 2

    metrics = Metrics()
    asyncio.run(_serving(replicas, body, metrics=metrics))
    seen = fast.seen + slow.seen
    assert len(seen) == len(SHAPES)  # exactly once: no item ran twice, none was lost
    assert sorted(seen) == sorted(id(x) for req in requests for x in req)


def test_a_batch_failing_on_one_device_is_retried_on_the_other(model: jepa.Model) -> None:
    requests = _inputs(1)[:3]
    reference = _one_at_a_time(model, requests)
    good, bad = _pools(model, {}, {"fail": jepa.BackendError("device lost")})
    # The failing replica has the bigger budget: the prior ranks it first, so it is handed work.
    replicas = [Replica("cpu-good", good, budget=1e9), Replica("cpu-bad", bad, budget=math.inf)]

    async def body(d: Dispatcher) -> None:
        done = await asyncio.gather(*(d.run_batched(encode_op, "mean", req) for req in requests))
        for ref, got in zip(reference, done, strict=True):
            assert all(np.array_equal(bits(g.value), bits(r)) for r, g in zip(ref, got, strict=True))
        assert d.retried >= 1 and d.devices["cpu-bad"].cost == 0
        assert d.devices["cpu-good"].items == sum(map(len, requests))
        # The failing device rests after a failure (1 s): it bounced the first batch, not each one.
        assert d.devices["cpu-bad"].failures == d.retried < len(requests)
        assert metric(metrics.render().decode(), "jepa_retries_total", {"device": "cpu-bad"}) == d.retried

    metrics = Metrics()
    asyncio.run(_serving(replicas, body, metrics=metrics))


@pytest.mark.parametrize(("error", "retries"), [
    (jepa.BackendError("device lost"), 1),  # retried once on the other, which fails too
    (jepa.InvalidInputError("bad pixels"), 0),  # the input's fault: the same everywhere
])
def test_a_request_fails_whole_when_its_retry_fails_or_its_input_is_refused(
    model: jepa.Model, error: jepa.JepaError, retries: int
) -> None:
    pools = _pools(model, {"fail": error}, {"fail": error})
    replicas = [Replica("cpu-a", pools[0]), Replica("cpu-b", pools[1])]

    async def body(d: Dispatcher) -> None:
        with pytest.raises(type(error)):
            await d.run_batched(encode_op, "mean", _inputs()[0][:1])
        assert d.retried == retries and d.depth == 0
        # A device failure rests both devices (each failed once); a refused input rests none.
        assert [st.failures for st in d.devices.values()] == [retries] * 2

    asyncio.run(_serving(replicas, body))


def test_one_replica_has_nothing_to_retry_on(model: jepa.Model) -> None:
    (pool,) = _pools(model, {"fail": jepa.BackendError("device lost")})

    async def body(d: Dispatcher) -> None:
        with pytest.raises(jepa.BackendError):
            await d.run_batched(encode_op, "mean", _inputs()[0][:2])
        assert d.retried == 0

    asyncio.run(_serving([Replica("cpu", pool)], body))


def test_a_batch_handed_ahead_to_a_busy_device_is_stolen_by_a_free_one(model: jepa.Model) -> None:
    rng = np.random.default_rng(3)
    xs = [rng.standard_normal((3, 4, 48, 48)).astype(np.float32) for _ in range(3)]
    (reference,) = _one_at_a_time(model, [xs])
    a, b = _pools(model, {}, {})
    # cpu-a ranks first (the bigger budget): it takes the first item, then, busy, a full pair ahead.
    replicas = [Replica("cpu-a", a, budget=math.inf), Replica("cpu-b", b, budget=1e9)]

    async def body(d: Dispatcher) -> None:
        a.gate.clear()  # cpu-a's worker holds its first graph
        first = asyncio.create_task(d.run_batched(encode_op, "mean", xs[:1]))
        while d.busy < 1:
            await asyncio.sleep(0.005)
        # The pair goes to cpu-a ahead, then cpu-b (free, nothing queued) takes it back and runs it.
        pair = await asyncio.wait_for(d.run_batched(encode_op, "mean", xs[1:]), 10)
        assert d.stolen == 1 and not first.done()
        assert d.devices["cpu-b"].items == 2 and d.groups == 2 and d.dispatched == 3
        a.gate.set()
        done = [*(await first), *pair]
        assert all(np.array_equal(bits(g.value), bits(r)) for r, g in zip(reference, done, strict=True))
        assert d.devices["cpu-a"].items == 1
        assert metric(metrics.render().decode(), "jepa_steals_total", {"device": "cpu-b"}) == 1

    metrics = Metrics()
    asyncio.run(_serving(replicas, body, max_batch=2, metrics=metrics))


def test_which_failures_are_the_devices() -> None:
    assert is_device_failure(jepa.BackendError("x"))
    assert is_device_failure(jepa.ResourceLimitError("out of memory"))  # another device may have it
    assert not is_device_failure(jepa.ResourceLimitError("cap", param="max_output_bytes"))
    assert not is_device_failure(jepa.InvalidInputError("x"))
    assert not is_device_failure(jepa.UnsupportedError("x"))
    assert not is_device_failure(jepa.world.Stopped("stopped"))
    assert not is_device_failure(ValueError("a bug is not a device"))


# -- build_replicas -----------------------------------------------------------------------------


def test_build_replicas_skips_a_device_the_model_does_not_fit(
    tiny_vjepa2_encoder_path: str, caplog: pytest.LogCaptureFixture
) -> None:
    def load(path: str, device: str) -> jepa.Model:
        if device == "cuda:1":
            raise jepa.ResourceLimitError("cannot allocate 12 GiB on CUDA1")
        return jepa.Model(path, "cpu")  # the CPU stands in for the GPUs here

    free = {"cuda:0": 4 << 30}
    with caplog.at_level(logging.WARNING, "jepa_server"):
        reps = build_replicas(tiny_vjepa2_encoder_path, ["cpu", "cuda:1", "cuda:0"], 1, 1, 8, 64 << 20,
                              load=load, memory=lambda d: (free[d], 8 << 30))
    try:
        assert [r.device for r in reps] == ["cpu", "cuda:0"]
        assert "not serving encoder.gguf on cuda:1: cannot allocate 12 GiB on CUDA1" in caplog.text
        model = reps[0].workers.model
        assert reps[0].budget == budget_from_bytes(model, 64 << 20)  # the CPU's: the setting
        assert reps[1].budget == budget_from_bytes(model, 0.8 * (4 << 30))  # CUDA's: its free memory
        assert all(r.workers.size == 1 and r.weight is None for r in reps)
    finally:
        for r in reps:
            r.workers.stop()
    none_fit = pytest.raises(jepa.ResourceLimitError, match="cannot allocate")
    with none_fit:
        build_replicas(tiny_vjepa2_encoder_path, ["cuda:1"], 1, 1, 8, None, load=load)


def test_build_replicas_unbounded_cpu_budget_weights_and_a_device_named_twice(
    tiny_vjepa2_encoder_path: str,
) -> None:
    reps = build_replicas(tiny_vjepa2_encoder_path, ["cpu", "cpu"], 2, 1, 4, 0,  # 0: off, as None
                          weights={"cpu": 2.0, "cpu#2": 1.0})
    try:
        assert [(r.device, r.weight, r.budget, r.workers.size) for r in reps] == [
            ("cpu", 2.0, math.inf, 2), ("cpu#2", 1.0, math.inf, 2)]

        async def serve(d: Dispatcher) -> None:
            assert d.devices["cpu"].spec.weight == 2.0  # one dispatcher over both
            assert len(await d.run_batched(encode_op, "mean", _inputs()[0])) == len(_inputs()[0])

        d_threads = [t for t in threading.enumerate() if t.name.startswith(("jepa-cpu-", "jepa-cpu#2-"))]
        assert len(d_threads) == 4  # two workers each, named by their replica
        asyncio.run(_serving(reps, serve, stop=False))
    finally:
        stop_replicas(reps, timeout=5)
    assert not any(t.is_alive() for t in d_threads)
    # More memory, a bigger budget; and a native item costs its share of it.
    model = jepa.Model(tiny_vjepa2_encoder_path)
    assert budget_from_bytes(model, 2e6) == pytest.approx(2 * budget_from_bytes(model, 1e6))
    assert budget_from_bytes(model, 0) == 0


def test_device_memory_reports_the_cpu_and_refuses_what_is_not_there() -> None:
    from jepa import _engine

    free, total = jepa.device_memory("cpu")
    assert 0 < free <= total
    with pytest.raises(jepa.InvalidInputError, match="unknown device 'tpu'"):
        jepa.device_memory("tpu")
    # The engine's own checks (jepa_device_memory), under parse_device's, name the device.
    with pytest.raises(jepa.InvalidInputError, match="unknown device kind 7") as exc:
        _engine.device_memory(7)
    assert exc.value.param == "device"
    if not jepa.has_cuda():
        with pytest.raises(jepa.UnsupportedError, match="no CUDA backend"):
            _engine.device_memory(1, 0)
