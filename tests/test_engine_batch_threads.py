"""Batching and threading change scheduling, never arithmetic: bit-identical float32 patterns; threads
with their own contexts run at once; each thread reads its own engine error."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import pytest

import jepa

pytestmark = pytest.mark.every_path


@pytest.fixture(scope="module")
def model(tiny_vit_path: str) -> jepa.Model:
    return jepa.Model(tiny_vit_path)


@pytest.fixture(scope="module")
def wide(wide_vit_path: str) -> jepa.Model:
    return jepa.Model(wide_vit_path)


def _run_at_once(work: Callable[[int], None], n: int, watch: Callable[[], None] | None = None) -> None:
    """work(0) ... work(n - 1) on n threads released together by a barrier, watch() called over and
    over on this thread while they run; re-raise the first error."""
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # surfaced below, on the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    while watch is not None and any(t.is_alive() for t in threads):
        watch()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _is_running(tid: int) -> bool:
    """Whether the kernel has thread tid running or runnable ("R"), not asleep on a lock or the GIL."""
    try:
        with open(f"/proc/self/task/{tid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] == "R"  # the state follows "(comm)"
    except (FileNotFoundError, ProcessLookupError):  # the thread has ended
        return False


def _pixels(n: int, seed: int = 0, size: int = 32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def _images_per_call(wide: jepa.Model, seconds: float = 0.3) -> int:
    """How many 224 px images (1 to 8) one thread encodes on `wide` in about `seconds`: 8 on the SIMD
    kernel paths (tens of ms), 1 on the portable path (~0.4 s an image), where 8 would only cost time."""
    ctx = wide.context(threads=1)
    one = _pixels(1, size=224)
    ctx.encode(one)  # warm-up
    t0 = time.perf_counter()
    ctx.encode(one)
    return max(1, min(8, int(seconds / (time.perf_counter() - t0))))


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def test_encode_shape_and_dtype(model: jepa.Model) -> None:
    out = model.context(threads=1).encode(_pixels(2))
    assert out.shape == (2, model.n_tokens(), model.embed_dim) == (2, 5, 192)
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


def test_threads_sharing_one_model_run_at_once_and_match_serial(wide: jepa.Model) -> None:
    """N threads with N contexts on one model really compute at once, and each gives the serial bits.

    At once: every encode starts before any ends (a GIL held through encode forbids it), and while
    all of them are inside encode the kernel sees two or more of the threads running in most samples
    (a lock anywhere around the compute, in Python or in the engine, leaves one running, the rest asleep)."""
    n, per_call = 4, _images_per_call(wide)
    inputs = [_pixels(per_call, seed=10 + i, size=224) for i in range(n)]
    contexts = [wide.context(threads=1) for _ in range(n)]
    serial = [ctx.encode(x) for ctx, x in zip(contexts, inputs, strict=True)]  # also the warm-up
    results: dict[int, np.ndarray] = {}
    spans: dict[int, tuple[float, float]] = {}
    tids: dict[int, int] = {}
    samples: list[tuple[float, int]] = []  # (when, how many of the threads the kernel has running)

    def work(i: int) -> None:
        tids[i] = threading.get_native_id()  # threads=1: the encode computes on the calling thread
        t0 = time.perf_counter()
        results[i] = contexts[i].encode(inputs[i])
        spans[i] = (t0, time.perf_counter())

    def watch() -> None:
        samples.append((time.perf_counter(), sum(_is_running(tid) for tid in list(tids.values()))))

    _run_at_once(work, n, watch)
    for i, ref in enumerate(serial):
        assert np.array_equal(_bits(results[i]), _bits(ref)), f"thread {i}"
    last_start, first_end = max(s for s, _ in spans.values()), min(e for _, e in spans.values())
    assert last_start < first_end, f"the encodes ran one after another: {sorted(spans.values())}"
    inside = [r for t, r in samples if last_start < t < first_end]
    together = sum(r >= 2 for r in inside)
    assert together > len(inside) / 2, f"{together} of {len(inside)} samples saw two threads running"


def test_each_thread_sees_its_own_error(model: jepa.Model) -> None:
    """The engine's error is thread-local: two threads fail inside the engine (the graph-memory check
    of encode, run with the GIL released) at the same time, over and over, each with its own limit in
    the message, and each reads its own message, never the other's."""
    caps, rounds = (1000, 3000), 200
    seen: dict[int, list[str]] = {cap: [] for cap in caps}
    x = _pixels(1)

    def fail(i: int) -> None:
        cap = caps[i]
        ctx = model.context(threads=1, max_graph_bytes=cap)
        for _ in range(rounds):
            with pytest.raises(jepa.ResourceLimitError) as e:
                ctx.encode(x)
            seen[cap].append(str(e.value))

    _run_at_once(fail, len(caps))
    for cap, other in zip(caps, caps[::-1], strict=True):
        assert len(seen[cap]) == rounds
        mine = [m for m in seen[cap] if f"limit of {cap} bytes" in m]
        theirs = [m for m in seen[cap] if f"limit of {other} bytes" in m]
        assert (len(mine), theirs) == (rounds, []), (cap, seen[cap][:3])


def test_gil_is_released_during_encode(wide: jepa.Model) -> None:
    """While one thread is inside encode, another thread keeps running Python code.

    With the GIL held for the whole call, the spinning thread could only run in the few
    milliseconds of a switch interval; released, it spins for the whole call."""
    x = _pixels(_images_per_call(wide), seed=4, size=224)
    ctx = wide.context(threads=1)
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
