"""Batching and threading change scheduling, never arithmetic: bit-identical float32 patterns."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import jepa
from jepa.demo import write_demo_model


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> jepa.Model:
    path = tmp_path_factory.mktemp("engine") / "vit.gguf"
    write_demo_model(str(path), embed_dim=64, n_layer=2, n_head=4, patch_size=16, img_size=32, seed=3)
    return jepa.Model(path)


def _pixels(n: int, seed: int = 0, size: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_encode_shape_and_dtype(model: jepa.Model) -> None:
    out = model.context(threads=1).encode(_pixels(2))
    assert out.shape == (2, model.n_tokens(), model.embed_dim) == (2, 5, 64)
    assert out.dtype == np.float32
    assert np.isfinite(out).all()


def test_images_and_clips_of_one_frame_agree(model: jepa.Model) -> None:
    ctx = model.context(threads=1)
    x = _pixels(2)
    assert np.array_equal(_bits(ctx.encode(x)), _bits(ctx.encode(x[:, :, None])))


def test_batched_equals_one_at_a_time_and_uneven_chunks(model: jepa.Model) -> None:
    x = _pixels(7, seed=1)
    ctx = model.context(threads=2)
    singles = np.concatenate([ctx.encode(x[i : i + 1]) for i in range(len(x))])
    batched = ctx.encode(x)
    differing = int(np.count_nonzero(_bits(singles) != _bits(batched)))
    assert differing == 0
    # max_batch 3 splits 7 items into 3 + 3 + 1 graphs; the rows must not notice.
    ctx.max_batch = 3
    assert ctx.max_batch == 3
    chunked = ctx.encode(x)
    assert np.array_equal(_bits(chunked), _bits(batched))
    uneven = np.concatenate([ctx.encode(x[:2]), ctx.encode(x[2:6]), ctx.encode(x[6:])])
    assert np.array_equal(_bits(uneven), _bits(batched))


def test_thread_count_does_not_change_bits(model: jepa.Model) -> None:
    x = _pixels(3, seed=2)
    one = model.context(threads=1).encode(x)
    two = model.context(threads=2).encode(x)
    assert np.array_equal(_bits(one), _bits(two))


def test_threads_sharing_one_model_match_serial(model: jepa.Model) -> None:
    inputs = [_pixels(2, seed=10 + i) for i in range(4)]
    serial = [model.context(threads=1).encode(x) for x in inputs]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(inputs))

    def work(i: int) -> None:
        try:
            ctx = model.context(threads=1)
            barrier.wait()
            for _ in range(3):
                results[i] = ctx.encode(inputs[i])
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for i, ref in enumerate(serial):
        assert np.array_equal(_bits(results[i]), _bits(ref))


def test_each_thread_sees_its_own_error(model: jepa.Model) -> None:
    """The engine's message is thread-local: a failing call in one thread never leaks into another."""
    messages: dict[str, str] = {}
    barrier = threading.Barrier(2)

    def bad_channels() -> None:
        ctx = model.context(threads=1)
        barrier.wait()
        with pytest.raises(jepa.InvalidInputError) as e:
            ctx.encode(np.zeros((1, 2, 32, 32), np.float32))
        messages["channels"] = str(e.value)

    def bad_size() -> None:
        ctx = model.context(threads=1)
        barrier.wait()
        with pytest.raises(jepa.InvalidInputError) as e:
            ctx.encode(np.zeros((1, 3, 30, 30), np.float32))
        messages["size"] = str(e.value)

    ts = [threading.Thread(target=bad_channels), threading.Thread(target=bad_size)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert "channels" in messages["channels"] and "patch" not in messages["channels"]
    assert "patch size" in messages["size"] and "channels" not in messages["size"]


def test_gil_is_released_during_encode(tmp_path: Path) -> None:
    """While one thread is inside encode, another thread keeps running Python code.

    With the GIL held for the whole call, the spinning thread could only run in the few
    milliseconds of a switch interval; released, it spins for the whole call."""
    import time

    path = tmp_path / "wide.gguf"
    write_demo_model(str(path), embed_dim=128, n_layer=4, n_head=4, patch_size=16, img_size=224, seed=5)
    x = _pixels(8, seed=4, size=224)
    ctx = jepa.Model(path).context(threads=1)
    ctx.encode(x[:1])  # warm-up
    # How fast this thread spins alone.
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < 0.05:
        n += 1
    rate = n / 0.05

    started = threading.Event()
    done = threading.Event()
    span: list[float] = []

    def work() -> None:
        started.set()
        t = time.perf_counter()
        for _ in range(4):  # long enough to tell on a fast engine (one call: ~35 ms here)
            ctx.encode(x)
        span.append(time.perf_counter() - t)
        done.set()

    th = threading.Thread(target=work)
    th.start()
    started.wait()
    spins = 0
    while not done.is_set():
        spins += 1
        time.perf_counter()
    th.join()
    assert span[0] > 0.05, "encode too short to tell"
    assert spins > 0.2 * rate * span[0], (spins, rate, span[0])
