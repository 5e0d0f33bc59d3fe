#!/usr/bin/env python3
"""jepa-server on loopback over a grid of --max-batch x concurrent clients, against in-process
jepa.embed on the same photos, plus a planner cell -> tests/results/server-bench.json

The model is a ViT-S/16 (384 wide, 12 blocks, 6 heads, 224 px) with random weights written by
jepa.demo.write_demo_model (numpy only, no torch), f16 matrices; the inputs are real photos from
scikit-image (astronaut, chelsea, coffee, rocket, immunohistochemistry, hubble_deep_field) encoded
as JPEG in memory, one per request. One jepa-server subprocess per configuration -- --max-batch 1,
8 and 32 at the default --max-wait-ms, and --max-batch 8 at --max-wait-ms 0 -- listens on a free
loopback port and dies with this process. The cells run interleaved, round after round, the order
rotating, so a neighbour's load falls on all of them alike:

  inproc-bB        jepa.embed(ctx, items) on the same JPEG bytes, a context of max_batch B with the
                   server's threads: the ceiling each server cell is measured against
  embed-bB-cC      C concurrent clients (asyncio + aiohttp, prepared bodies) post /v1/embeddings
                   without pause to the max-batch B server; the timed window runs from the
                   warm-up-th answer to `requests` answers later, and the clients keep sending until
                   it closes (steady state); C = 1, 8, 32
  health-bB-cC     the control: C clients GET /health on the same server (the HTTP stack's rate)
  embed-b8-c1-wait0  one client against the --max-wait-ms 0 server (a lone item never waits)

Per embed cell: req/s, the p50/p95/p99 latency the client saw, the mean batch and the workers' busy
share of the window (/metrics read at its two ends: the batching that happened, not the cap), the
mean x-queue-time / x-inference-time / x-total-time, CPU milliseconds per image, and the share of
the cores the server, the client (this process) and everything else on the machine took
(others_cpu_share). Every answer's vector, warm-up and tail included, is checked bit for bit
against in-process jepa.embed after the cell (so the check costs the window nothing). Ratios are
paired within a round, then the median over rounds: server / in-process at the same max-batch, and
the batching gain (max-batch B over max-batch 1 at the same clients, and in-process the same: the
engine's own gain, which bounds the server's). A round in which other processes took more than
QUIET of the cores in either cell of a pair is not quiet; the ratios over the quiet rounds alone
are reported too. Decode + preprocess is timed inside each in-process run and per photo.

The planner cell: a LeWM file at its published size (jepa.testing.random_world.write_random_lewm,
numpy only) served with --workers N --threads cores/N; /rollout requests with a "plan" (CEM:
PLAN below) from one client, then from N concurrent clients. Plans/s, candidate rollouts/s
(samples x CEM steps per plan), client latency, and the server's resident memory (VmRSS sampled
from /proc every 10 ms): idle, peak with one planner, peak with N; the difference over N - 1 is the
memory each concurrent planner adds. Every plan is checked bit for bit against in-process jepa.plan.

    python tools/bench_server.py                   # the full run (about five minutes on 2 cores)
    python tools/bench_server.py --encoding base64 # answers as base64 (what the openai client asks)
    python tools/bench_server.py --smoke           # tiny models, a few requests: the test runs it

A benchmark, not a test: the numbers depend on the machine and on what else runs on it. The engine
file's fingerprint is recorded at the start and checked at the end (a rebuild during a run mixes two
builds and can crash the processes that have it mapped; the run then exits non-zero, as it does on
any mismatched vector or plan)."""

from __future__ import annotations

import argparse
import asyncio
import base64
import io
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

# numpy's own OpenBLAS threads spin after start-up and steal cycles; nothing here needs them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "server-bench.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "server-bench-smoke.json"
SCHEMA = 2
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field")
VIT_S16 = dict(embed_dim=384, n_layer=12, n_head=6, patch_size=16, img_size=224)
SMOKE_MODEL = dict(embed_dim=64, n_layer=2, n_head=2, patch_size=16, img_size=64)
BATCHES, CLIENTS = (1, 8, 32), (1, 8, 32)
SMOKE_BATCHES, SMOKE_CLIENTS = (1, 4), (1, 4)
WAIT0_BATCH = 8  # the --max-wait-ms 0 server's max-batch (at 1 client only one item is ever queued)
GOAL_RATIO = 0.95  # issue 11: a saturated server at least this share of in-process throughput
GOAL_BATCHING = 1.4  # issue 11: batching gain at the most clients, where the hardware allows it
QUIET = 0.05  # a pair is quiet when other processes took at most this share of the cores in both cells
# The planner: LeWM's published CEM (300 samples, top 30, horizon 5) with 10 of its 30 steps, so a
# plan takes seconds, not tens of seconds, on 2 cores.
PLAN: dict[str, Any] = dict(samples=300, topk=30, cem_steps=10, horizon=5, seed=0)
SMOKE_PLAN: dict[str, Any] = dict(samples=16, topk=4, cem_steps=2, horizon=5, seed=0)
PLAN_NAMES = dict(samples="num_samples", topk="topk", cem_steps="n_steps", horizon="horizon", seed="seed")

sys.path.insert(0, str(Path(__file__).resolve().parent))
# The machine record, the commit and the CPU-time counters are the engine benchmark's (one
# definition); the LeWM sizes the world benchmark's; how a child server stops, the tests' too.
import processes  # noqa: E402
from bench_engine import git_commit, machine_busy_s, machine_info, self_busy_s  # noqa: E402
from bench_world import LEWM_FULL, LEWM_SMOKE  # noqa: E402


def process_busy_s(pid: int) -> float:
    """CPU-seconds of another process, all its threads (0 where /proc is absent)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    """A process's resident memory (VmRSS), MiB; 0 where /proc is absent."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


@contextmanager
def rss_peak(pid: int, every_s: float = 0.01) -> Iterator[list[float]]:
    """Sample a process's VmRSS on a thread while the block runs; the list holds the samples."""
    samples = [rss_mb(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(every_s):
            samples.append(rss_mb(pid))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    try:
        yield samples
    finally:
        done.set()
        t.join()
        samples.append(rss_mb(pid))


def engine_fingerprint() -> str:
    """The installed engine's build: its file's mtime and a hash of its bytes. A rebuild during a run
    (another engineer's `make`) changes it, and crashes processes that have it mapped."""
    import hashlib

    import jepa

    engine = Path(jepa._engine.__file__)
    built = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(engine.stat().st_mtime))
    return f"{built} sha256:{hashlib.sha256(engine.read_bytes()).hexdigest()[:16]}"


def versions() -> dict[str, Any]:
    import aiohttp
    import PIL

    import jepa

    return {
        "jepa": jepa.__version__,
        "ggml": jepa._engine.ggml_version(),
        "engine": engine_fingerprint(),
        "aiohttp": aiohttp.__version__,
        "pillow": PIL.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def server_dirty() -> bool:
    """Whether the server's or the package's sources differ from the commit measured."""
    r = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--", "server", "python/jepa"],
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    return bool(r.stdout.strip())


# -- inputs


def photos(names: tuple[str, ...] = PHOTOS, quality: int = 90) -> dict[str, bytes]:
    """scikit-image's photos as in-memory JPEG files (bundled with the package: no download)."""
    import skimage.data
    from PIL import Image

    out = {}
    for name in names:
        buf = io.BytesIO()
        Image.fromarray(getattr(skimage.data, name)()).convert("RGB").save(
            buf, format="JPEG", quality=quality
        )
        out[name] = buf.getvalue()
    return out


@dataclass(frozen=True)
class RunStart:
    """What a run notes before it measures (this benchmark's and bench_ray's): when, the versions
    (the engine's fingerprint among them, to tell a rebuild during the run) and the photos it posts."""

    started: str
    t0: float
    versions: dict[str, Any]
    photos: dict[str, bytes]

    @classmethod
    def now(cls, smoke: bool, versions: Callable[[], dict[str, Any]]) -> RunStart:
        return cls(time.strftime("%Y-%m-%dT%H:%M:%S%z"), time.perf_counter(), versions(),
                   photos(PHOTOS[:2] if smoke else PHOTOS))  # fmt: skip

    def seconds(self) -> float:
        return round(time.perf_counter() - self.t0, 1)

    def engine_changed(self) -> bool:
        return engine_fingerprint() != self.versions["engine"]


def write_model(path: Path, shape: dict[str, int], ftype: str) -> str:
    import jepa.demo

    return jepa.demo.write_demo_model(path, ftype=ftype, **shape)


# -- the server


def _die_with_parent() -> None:
    """In the child: SIGTERM when the benchmark dies, however it dies (Linux; elsewhere a no-op)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Server:
    """jepa-server in a subprocess on a free loopback port (the port is read from its startup line)."""

    def __init__(self, model: str, workers: int, threads: int, max_batch: int, extra: list[str]) -> None:
        self.args = [
            sys.executable, "-m", "jepa_server", "-m", model, "--host", "127.0.0.1", "--port", "0",
            "--workers", str(workers), "--threads", str(threads), "--max-batch", str(max_batch),
            "--max-concurrent-requests", "1024", *extra,
        ]  # fmt: skip
        self.max_batch = max_batch
        self.workers = workers
        self.proc: subprocess.Popen[str] | None = None
        self.log = tempfile.TemporaryFile("w+")  # noqa: SIM115 - its stderr, shown when it fails
        self.url = ""
        self.startup: list[str] = []

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 120.0) -> Server:
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=ROOT,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"}, preexec_fn=_die_with_parent,
        )  # fmt: skip
        assert self.proc.stdout is not None
        from jepa_server.startup import read_startup

        self.url, self.startup = read_startup(self.proc.stdout, timeout)
        if self.url:
            return self
        self.stop()
        raise RuntimeError(f"jepa-server did not start: {self.startup} {self.stderr()}")

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()[-4000:]

    def failed(self, exc: BaseException) -> RuntimeError:
        status = None if self.proc is None else self.proc.poll()
        return RuntimeError(f"the server failed ({exc!r}; exit status {status}): {self.stderr()}")

    def stop(self) -> None:
        if self.proc is None:
            return
        processes.stop(self.proc)
        self.proc = None


@contextmanager
def servers(
    model: str, workers: int, threads: int, configs: dict[str, tuple[int, list[str]]]
) -> Iterator[dict[str, Server]]:
    """One server per configuration: name -> (max-batch, extra flags)."""
    started: dict[str, Server] = {}
    try:
        for name, (b, extra) in configs.items():
            started[name] = Server(model, workers, threads, b, extra).start()
        yield started
    finally:
        for s in started.values():
            s.stop()


def histogram_sums(metrics_text: str) -> dict[str, float]:
    """The _count and _sum samples of the batch-size and inference-time histograms, summed over
    their labels (every model the server holds)."""
    wanted = (
        "jepa_batch_size_count",
        "jepa_batch_size_sum",
        "jepa_inference_seconds_count",
        "jepa_inference_seconds_sum",
    )
    out = dict.fromkeys(wanted, 0.0)
    for line in metrics_text.splitlines():
        name = line.split(" ", 1)[0].split("{", 1)[0]
        if name in out and not line.startswith("#"):
            out[name] += float(line.split()[-1])
    return out


def request_body(data: bytes, encoding: str) -> bytes:
    body = {"input": [{"b64": base64.b64encode(data).decode("ascii")}], "pool": "mean"}
    if encoding != "float":
        body["encoding_format"] = encoding
    return json.dumps(body).encode()


def vector_of(answer: dict[str, Any]) -> np.ndarray:
    e = answer["data"][0]["embedding"]
    if isinstance(e, str):
        return np.frombuffer(base64.b64decode(e), "<f4")
    return np.asarray(e, np.float32)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {f"p{p}": round(float(np.percentile(ms, p)), 2 if ms.max() < 10 else 1) for p in (50, 95, 99)}


# -- load


@dataclass
class Window:
    """What a steady-state load saw: the timed window and the answers of the whole run."""

    seconds: float
    latencies: list[float]  # the timed window's, client-side
    headers: dict[str, list[float]]  # x-*-time of the timed window's answers
    answers: list[tuple[int, bytes]]  # (body index, raw answer) of every answer, warm-up and tail too
    metrics: tuple[dict[str, float], dict[str, float]] | None  # /metrics at the window's two ends

    # What every cell records of its window, here once for bench_server's cells and bench_ray's.
    def timing(self, n: int, req_s_digits: int = 3) -> dict[str, Any]:
        """The window's length, request rate and client-side latency percentiles."""
        return {
            "seconds": round(self.seconds, 3),
            "req_s": round(n / self.seconds, req_s_digits),
            "latency_ms": percentiles(self.latencies),
        }

    def server_ms(self) -> dict[str, float]:
        """The mean of each x-*-time header the server sent, in ms."""
        return {h.removeprefix("x-"): round(statistics.fmean(v), 2) for h, v in self.headers.items() if v}

    def wrong_vectors(self, expected: list[np.ndarray]) -> int:
        """How many embedding answers are not the expected vector of their body, bit for bit."""
        k = len(expected)
        return sum(not same_bits(vector_of(json.loads(raw)), expected[i % k]) for i, raw in self.answers)

    def unhealthy(self) -> int:
        """How many /health answers did not say ok."""
        return sum(json.loads(raw).get("status") != "ok" for _, raw in self.answers)


async def _steady(
    url: str,
    send: Callable[[Any, int], Awaitable[tuple[int, bytes, Any]]],
    clients: int,
    n: int,
    warmup: int,
    metrics: bool,
) -> Window:
    """`clients` concurrent clients call send(session, i) without pause; the timed window runs from
    the warmup-th answer to the (warmup + n)-th, and the clients keep sending until it closes, so the
    server is as loaded at the window's end as in its middle."""
    import aiohttp

    total = warmup + n + clients  # the last `clients` keep the window's end saturated
    latencies: list[float] = []
    headers: dict[str, list[float]] = {"x-queue-time": [], "x-inference-time": [], "x-total-time": []}
    answers: list[tuple[int, bytes]] = []
    sent = answered = 0
    marks: dict[str, Any] = {}

    async def read_metrics(session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get(url + "/metrics") as r:
            return histogram_sums(await r.text())

    def mark(name: str, session: aiohttp.ClientSession, at: float) -> None:
        marks[name] = at
        if metrics:
            marks[name + "-metrics"] = asyncio.ensure_future(read_metrics(session))

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent, answered
        while sent < total and "end" not in marks:
            i = sent
            sent += 1
            t = time.perf_counter()
            status, raw, resp_headers = await send(session, i)
            done = time.perf_counter()
            if status != 200:
                raise RuntimeError(f"request {i}: HTTP {status}: {raw[:200]!r}")
            answered += 1
            answers.append((i, raw))
            timed = "start" in marks and "end" not in marks
            if answered == warmup:
                mark("start", session, done)
            elif answered == warmup + n:
                mark("end", session, done)
            if timed:
                latencies.append(done - t)
                for h, values in headers.items():
                    if h in resp_headers:
                        values.append(float(resp_headers[h]))

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if warmup == 0:
            mark("start", session, time.perf_counter())
        await asyncio.gather(*(client(session) for _ in range(clients)))
        ends = (await marks["start-metrics"], await marks["end-metrics"]) if metrics else None
    return Window(marks["end"] - marks["start"], latencies, headers, answers, ends)


def _poster(url: str, bodies: list[bytes]) -> Callable[[Any, int], Awaitable[tuple[int, bytes, Any]]]:
    async def send(session: Any, i: int) -> tuple[int, bytes, Any]:
        async with session.post(url + "/v1/embeddings", data=bodies[i % len(bodies)],
                                headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
            return resp.status, await resp.read(), resp.headers

    return send


def _getter(url: str) -> Callable[[Any, int], Awaitable[tuple[int, bytes, Any]]]:
    async def send(session: Any, i: int) -> tuple[int, bytes, Any]:
        async with session.get(url + "/health") as resp:
            return resp.status, await resp.read(), resp.headers

    return send


@contextmanager
def cpu_shares(server: Server) -> Iterator[dict[str, Any]]:
    """The share of all the machine's cores the server, this process and everything else took while
    the block ran (warm-up and tail included); filled in when the block ends."""
    busy, mine, theirs = machine_busy_s(), self_busy_s(), process_busy_s(server.pid)
    t0 = time.perf_counter()
    out: dict[str, Any] = {}
    yield out
    wall = (time.perf_counter() - t0) * (os.cpu_count() or 1)
    busy, mine = machine_busy_s() - busy, self_busy_s() - mine
    theirs = process_busy_s(server.pid) - theirs
    out["server_cpu_s"] = theirs

    def share(cpu_s: float) -> float:  # /proc counts in 10 ms ticks: a short cell can read past 1
        return round(min(1.0, max(0.0, cpu_s / wall)), 3)

    out["cpu_share"] = {
        "server": share(theirs),
        "client": share(mine),
        "others": share(busy - theirs - mine),
    }
    out["others_cpu_share"] = out["cpu_share"]["others"]


def embed_cell(
    server: Server, bodies: list[bytes], clients: int, n: int, warmup: int, expected: list[np.ndarray]
) -> dict[str, Any]:
    with cpu_shares(server) as shares:
        try:
            w = asyncio.run(_steady(server.url, _poster(server.url, bodies), clients, n, warmup, True))
        except Exception as exc:
            raise server.failed(exc) from exc
    assert w.metrics is not None
    before, after = w.metrics
    d = {k: after[k] - before[k] for k in after}
    graphs = d["jepa_batch_size_count"]
    # Every answer against in-process jepa.embed, after the window (it costs the window nothing).
    mismatches = w.wrong_vectors(expected)
    return {
        **w.timing(n),
        "mean_batch": round(d["jepa_batch_size_sum"] / graphs, 2) if graphs else None,
        "graphs": int(graphs),
        "graph_ms": round(1000 * d["jepa_inference_seconds_sum"] / graphs, 1) if graphs else None,
        # the share of the window the workers spent in graphs (the rest: waiting for work)
        "worker_busy": round(d["jepa_inference_seconds_sum"] / w.seconds / server.workers, 3),
        "server_ms": w.server_ms(),
        # CPU-seconds per image: steady under a neighbour's load, unlike req/s
        "cpu_ms_per_img": round(shares["server_cpu_s"] / len(w.answers) * 1000, 2),
        "cpu_share": shares["cpu_share"],
        "others_cpu_share": shares["others_cpu_share"],
        "mismatches": mismatches,
        "answered": len(w.answers),  # all answers, warm-up and tail included
    }  # fmt: skip


def health_cell(server: Server, clients: int, n: int) -> dict[str, Any]:
    with cpu_shares(server) as shares:
        try:
            w = asyncio.run(_steady(server.url, _getter(server.url), clients, n, clients, False))
        except Exception as exc:
            raise server.failed(exc) from exc
    return {**w.timing(n, req_s_digits=1), "cpu_share": shares["cpu_share"],
            "others_cpu_share": shares["others_cpu_share"], "mismatches": w.unhealthy(),
            "answered": len(w.answers)}  # fmt: skip


@contextmanager
def timed_prepare() -> Iterator[list[float]]:
    """Time every jepa.media.prepare call jepa.embed makes (it looks the function up at each call),
    so the decode + preprocess share of an in-process run is measured inside that very run."""
    import jepa.media

    spent: list[float] = []
    original = jepa.media.prepare

    def prepare(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - t)

    jepa.media.prepare = prepare
    try:
        yield spent
    finally:
        jepa.media.prepare = original


def inproc_cell(
    model: Any, workers: int, threads: int, max_batch: int, items: list[bytes], expected: list[np.ndarray]
) -> dict[str, Any]:
    """jepa.embed on the same bytes: `workers` contexts on threads of their own, as the server runs."""
    from concurrent.futures import ThreadPoolExecutor

    import jepa

    contexts = [model.context(threads=threads, max_batch=max_batch) for _ in range(workers)]
    shares = [items[w::workers] for w in range(workers)]
    for ctx, share in zip(contexts, shares, strict=True):
        jepa.embed(ctx, share[:max_batch], pool="mean")  # the graph is built and warm
    busy, mine = machine_busy_s(), self_busy_s()
    with timed_prepare() as spent:
        t0 = time.perf_counter()
        with ThreadPoolExecutor(workers) as pool:
            outs = list(
                pool.map(lambda cs: jepa.embed(cs[0], cs[1], pool="mean"), zip(contexts, shares, strict=True))
            )
        seconds = time.perf_counter() - t0
    busy, mine = machine_busy_s() - busy, self_busy_s() - mine
    cores = os.cpu_count() or 1
    mismatches = sum(not same_bits(row, expected[(w + j * workers) % len(expected)])
                     for w, out in enumerate(outs) for j, row in enumerate(out))  # fmt: skip
    others = round(min(1.0, max(0.0, busy - mine) / (seconds * cores)), 3)
    return {
        "seconds": round(seconds, 3),
        "img_s": round(len(items) / seconds, 3),
        "cpu_ms_per_img": round(mine / len(items) * 1000, 2),
        # decode + preprocess inside this run: ms per image, and its share of the workers' time
        "prepare_ms": round(statistics.fmean(spent) * 1000, 2),
        "prepare_share": round(sum(spent) / (seconds * workers), 4),
        "cpu_share": {"self": round(mine / (seconds * cores), 3), "others": others},
        "others_cpu_share": others,
        "mismatches": mismatches,
    }  # fmt: skip


def decode_cost(model: Any, data: dict[str, bytes], repeats: int) -> dict[str, Any]:
    """Per photo: jepa.media's decode (bytes -> RGB image) and preprocess (resize, crop, normalise)
    timed apart, and prepare (both) whole; medians of `repeats`."""
    import jepa.media
    from jepa.media.items import recipe_for

    recipe = recipe_for(model)
    per: dict[str, dict[str, Any]] = {}
    for name, raw in data.items():
        dec, pre, full = [], [], []
        for _ in range(repeats):
            t = time.perf_counter()
            img = jepa.media.decode_image(raw)
            t1 = time.perf_counter()
            jepa.media.preprocess_image(img, recipe)
            t2 = time.perf_counter()
            jepa.media.prepare(raw, model)
            t3 = time.perf_counter()
            dec.append(t1 - t)
            pre.append(t2 - t1)
            full.append(t3 - t2)
        w, h = img.size
        per[name] = {
            "size": f"{w}x{h}",
            "jpeg_kb": round(len(raw) / 1024, 1),
            "decode_ms": round(statistics.median(dec) * 1000, 2),
            "preprocess_ms": round(statistics.median(pre) * 1000, 2),
            "prepare_ms": round(statistics.median(full) * 1000, 2),
        }
    return {
        "photos": per,
        "prepare_ms_mean": round(statistics.fmean(p["prepare_ms"] for p in per.values()), 2),
    }


# -- the planner cell


class Plans(NamedTuple):
    """What concurrent planners saw: the wall time, each answer's latency and x-queue-time, the answers."""

    seconds: float
    latencies: list[float]
    queued: list[float]
    answers: list[bytes]


async def _plans(url: str, body: bytes, clients: int, each: int, timeout_s: float) -> Plans:
    import aiohttp

    latencies: list[float] = []
    queued: list[float] = []
    answers: list[bytes] = []
    head = {"Content-Type": "application/json"}

    async def client(session: aiohttp.ClientSession) -> None:
        for _ in range(each):
            t = time.perf_counter()
            async with session.post(url + "/rollout", data=body, headers=head) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"/rollout: HTTP {resp.status}: {raw[:300]!r}")
                queued.append(float(resp.headers["x-queue-time"]))
            latencies.append(time.perf_counter() - t)
            answers.append(raw)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session:
        t = time.perf_counter()
        await asyncio.gather(*(client(session) for _ in range(clients)))
        return Plans(time.perf_counter() - t, latencies, queued, answers)


def post_plans(server: Server, body: bytes, clients: int, each: int, timeout_s: float = 900) -> Plans:
    """`clients` concurrent clients each post `each` /rollout plans (`body`), one after another."""
    try:
        return asyncio.run(_plans(server.url, body, clients, each, timeout_s))
    except Exception as exc:
        raise server.failed(exc) from exc


def planner_cell(
    tmp: Path, smoke: bool, planners: int, requests: int, data: dict[str, bytes], cores: int
) -> dict[str, Any]:
    """LeWM plans over /rollout: `requests` from one client, then `planners` x `requests` from
    `planners` concurrent clients, on a server with one worker per planner; RSS sampled throughout."""
    import jepa
    from jepa.testing.random_world import write_random_lewm

    shape = LEWM_SMOKE if smoke else LEWM_FULL
    plan = SMOKE_PLAN if smoke else PLAN
    threads = max(1, cores // planners)
    path = write_random_lewm(tmp / "lewm.gguf", ftype="f32", **shape)
    frames = list(data.values())
    context, goal = frames[0], frames[-1]
    # In-process jepa.plan on the same bytes, the server's threads: the reference and the ceiling.
    ctx = jepa.Model(path).context(threads=threads)
    t0 = time.perf_counter()
    want = jepa.plan(ctx, [context], goal, **{PLAN_NAMES[k]: v for k, v in plan.items()})
    inproc_s = time.perf_counter() - t0
    del ctx
    body = json.dumps({"context": [{"b64": base64.b64encode(context).decode()}],
                       "goal": {"b64": base64.b64encode(goal).decode()}, "plan": plan}).encode()  # fmt: skip
    server = Server(path, planners, threads, 8, []).start()
    try:
        idle = rss_mb(server.pid)
        # Memory first, on cold workers: one plan (one worker's buffers), then `planners` at once
        # (every worker's). A worker keeps its buffers, so later plans show no growth.
        peak: dict[int, float] = {}
        answered: list[bytes] = []
        for n in (1, planners):
            with rss_peak(server.pid) as rss:
                answered += post_plans(server, body, n, 1).answers
            peak[n] = max(rss)
        # Then the timed phases, every worker warm.
        out: dict[str, Any] = {}
        for n in (1, planners):
            with cpu_shares(server) as shares:
                seconds, lat, queued, answers = post_plans(server, body, n, requests)
            answered += answers
            plans = len(answers)
            out[str(n)] = {
                "planners": n,
                "plans": plans,
                "seconds": round(seconds, 2),
                "plans_s": round(plans / seconds, 3),
                "rollouts_s": round(plans * plan["samples"] * plan["cem_steps"] / seconds, 1),
                "latency_ms": {**percentiles(lat), "max": round(max(lat) * 1000, 1)},
                "queue_ms_max": round(max(queued), 1),
                # summed latency over the wall time: how many plans ran at once on average
                "overlap": round(sum(lat) / seconds, 2),
                "rss_mb_peak": round(peak[n], 1),  # the cold phase's, with as many planners
                "cpu_share": shares["cpu_share"],
                "others_cpu_share": shares["others_cpu_share"],
            }
        mismatches = sum(not same_bits(json.loads(raw)["actions"], want["actions"]) for raw in answered)
        startup = server.startup
    finally:
        server.stop()
    per = (peak[planners] - peak[1]) / (planners - 1) if planners > 1 else None
    return {
        "model": {"family": "lewm", "weights": "random", "ftype": "f32", **shape},
        "plan": plan,
        "planners": planners,
        "workers": planners,
        "threads": threads,
        "requests_per_client": requests,
        "inproc_plan_s": round(inproc_s, 2),
        "inproc_rollouts_s": round(plan["samples"] * plan["cem_steps"] / inproc_s, 1),
        "rss_mb_idle": round(idle, 1),
        "rss_mb_first_planner": round(peak[1] - idle, 1),
        "rss_mb_per_added_planner": None if per is None else round(per, 1),
        "phases": out,
        "server_startup": startup,
        "plans_checked": len(answered),
        "mismatches": mismatches,
    }


# -- the run


def paired(rounds: list[dict[str, Any]], num: str, den: str, key: str = "req_s") -> float | None:
    """The median over rounds of num / den within a round (in-process cells hold img_s)."""

    def rate(c: dict[str, Any]) -> float:
        return float(c.get(key, c.get("img_s", 0.0)))

    r = [rate(c[num]) / rate(c[den]) for c in rounds if num in c and den in c]
    return round(statistics.median(r), 4) if r else None


def quiet(rounds: list[dict[str, Any]], *cells: str) -> list[dict[str, Any]]:
    """The rounds in which other processes took at most QUIET of the cores during these cells."""
    return [c for c in rounds if all(c[k]["others_cpu_share"] <= QUIET for k in cells)]


def median_of(rounds: list[dict[str, Any]], cell: str, *path: str, digits: int = 2) -> float | None:
    values = []
    for c in rounds:
        v: Any = c[cell]
        for k in path:
            v = v[k]
        if v is not None:
            values.append(v)
    return round(statistics.median(values), digits) if values else None


def summarise(
    rounds: list[dict[str, Any]], batches: tuple[int, ...], clients: tuple[int, ...], wait0_batch: int
) -> dict[str, Any]:
    """One row per cell (medians over rounds, ratios paired within rounds) and the goals."""
    cells = []
    for b in batches:
        for c in clients:
            name, inproc, base = f"embed-b{b}-c{c}", f"inproc-b{b}", f"embed-b1-c{c}"
            cells.append(
                _row(rounds, name, inproc, base if b != 1 else None, f"health-b{b}-c{c}", b, c, None)
            )
    wait0 = f"embed-b{wait0_batch}-c1-wait0"
    if wait0 in rounds[0]:
        cells.append(_row(rounds, wait0, f"inproc-b{wait0_batch}", None, None, wait0_batch, 1, 0.0))
    top, most = max(clients), max(batches)
    gains = {b: paired(rounds, f"embed-b{b}-c{top}", f"embed-b1-c{top}") for b in batches if b != 1}
    best = max(gains, key=lambda b: gains[b] or 0.0) if gains else None
    main_b = 8 if 8 in batches else most  # the default --max-batch
    main = f"embed-b{main_b}-c{top}"
    inproc_gain = {b: paired(rounds, f"inproc-b{b}", "inproc-b1", "img_s") for b in batches if b != 1}
    return {
        "cells": cells,
        "goals": {"batching_gain": GOAL_BATCHING, "server_over_inproc": GOAL_RATIO},
        "batching_gain_at_most_clients": gains,
        "best_batching_gain": None if best is None else {"max_batch": best, "gain": gains[best]},
        # the engine's own gain from batching (jepa.embed at max_batch B over 1): the server's bound
        "inproc_batching_gain": inproc_gain,
        "saturated": {
            "cell": main,
            "max_batch": main_b,
            "server_over_inproc": paired(rounds, main, f"inproc-b{main_b}"),
            "server_over_inproc_quiet": paired(
                quiet(rounds, main, f"inproc-b{main_b}"), main, f"inproc-b{main_b}"
            ),
        },
        "mismatches": sum(c[k].get("mismatches", 0) for c in rounds for k in c),
    }


def _row(rounds: list[dict[str, Any]], name: str, inproc: str, base: str | None, health: str | None,
         b: int, c: int, wait: float | None) -> dict[str, Any]:  # fmt: skip
    q = quiet(rounds, name, inproc)
    return {
        "cell": name,
        "max_batch": b,
        "clients": c,
        "max_wait_ms": wait,  # None: the server's default
        "req_s": median_of(rounds, name, "req_s"),
        "latency_ms": {p: median_of(rounds, name, "latency_ms", p, digits=1) for p in ("p50", "p95", "p99")},
        "mean_batch": median_of(rounds, name, "mean_batch"),
        "worker_busy": median_of(rounds, name, "worker_busy", digits=3),
        "cpu_ms_per_img": median_of(rounds, name, "cpu_ms_per_img", digits=1),
        "inproc_img_s": median_of(rounds, inproc, "img_s"),
        "server_over_inproc": paired(rounds, name, inproc),
        "server_over_inproc_quiet": paired(q, name, inproc),
        "quiet_rounds": len(q),
        "batching_gain": None if base is None else paired(rounds, name, base),
        "health_req_s": None if health is None else median_of(rounds, health, "req_s", digits=0),
        "others_cpu_share": median_of(rounds, name, "others_cpu_share", digits=3),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="tiny models and a few requests (the test runs it)")
    p.add_argument("--model", default=None, help="serve this GGUF instead of writing a random ViT-S/16")
    p.add_argument(
        "--ftype", default="f16", choices=("f32", "f16", "bf16"), help="the random model's matrices"
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="threads per graph (0: cores / workers)")
    p.add_argument(
        "--requests", type=int, default=64, help="timed requests per embed cell (and images in-process)"
    )
    p.add_argument("--health-requests", type=int, default=1000, help="timed GET /health per control cell")
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed requests before each cell (default: its clients)"
    )
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument(
        "--planners", type=int, default=4, help="concurrent planners in the planner cell (0: none)"
    )
    p.add_argument("--plan-requests", type=int, default=2, help="plans per planner client in each phase")
    p.add_argument(
        "--encoding", default="float", choices=("float", "base64"), help="the answers' encoding_format"
    )
    p.add_argument("--server-arg", action="append", default=[], help="one more jepa-server flag (repeatable)")
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON to write (default {DEFAULT_OUT.relative_to(ROOT)}; with --smoke, {SMOKE_OUT})",
    )
    p.add_argument("--note", default="", help="free text stored in the JSON")
    args = p.parse_args(argv)  # fmt: skip
    batches, clients = (SMOKE_BATCHES, SMOKE_CLIENTS) if args.smoke else (BATCHES, CLIENTS)
    if args.smoke:
        args.requests, args.health_requests, args.rounds = min(args.requests, 8), 16, 1
        args.planners = min(args.planners, 2)

    import jepa

    cores = os.cpu_count() or 1
    threads = args.threads or max(1, cores // args.workers)
    out: Path = args.out or (SMOKE_OUT if args.smoke else DEFAULT_OUT)
    start = RunStart.now(args.smoke, versions)
    data = start.photos
    names = list(data)
    wait0_batch = WAIT0_BATCH if WAIT0_BATCH in batches else max(batches)
    wait0 = f"embed-b{wait0_batch}-c1-wait0"
    configs = {f"b{b}": (b, args.server_arg) for b in batches}
    configs["wait0"] = (wait0_batch, [*args.server_arg, "--max-wait-ms", "0"])

    def warmup(c: int) -> int:
        return c if args.warmup is None else args.warmup

    with tempfile.TemporaryDirectory(prefix="jepa-bench-server-") as tmp:
        shape = SMOKE_MODEL if args.smoke else VIT_S16
        path = args.model or write_model(Path(tmp) / "model.gguf", shape, args.ftype)
        model = jepa.Model(path)
        ref_ctx = model.context(threads=threads, max_batch=1)
        expected = [jepa.embed(ref_ctx, [data[n]], pool="mean")[0] for n in names]  # each alone
        del ref_ctx
        bodies = [request_body(data[n], args.encoding) for n in names]
        items = [data[names[i % len(names)]] for i in range(args.requests)]
        cost = decode_cost(model, data, 3 if args.smoke else 9)
        rounds: list[dict[str, Any]] = []
        with servers(path, args.workers, threads, configs) as running:
            cells = [f"inproc-b{b}" for b in batches]
            cells += [f"embed-b{b}-c{c}" for b in batches for c in clients]
            cells += [f"health-b{b}-c{c}" for b in batches for c in clients]
            cells.append(wait0)
            for r in range(args.rounds):
                done: dict[str, Any] = {}
                for name in cells[r % len(cells) :] + cells[: r % len(cells)]:
                    kind, *spec = name.split("-")
                    b = int(spec[0].removeprefix("b"))
                    if kind == "inproc":
                        done[name] = inproc_cell(model, args.workers, threads, b, items, expected)
                        rate = done[name]["img_s"]
                    else:
                        c = int(spec[1].removeprefix("c"))
                        server = running["wait0" if name == wait0 else f"b{b}"]
                        if kind == "health":
                            done[name] = health_cell(server, c, args.health_requests)
                        else:
                            done[name] = embed_cell(server, bodies, c, args.requests, warmup(c), expected)
                        rate = done[name]["req_s"]
                    print(f"round {r} {name}: {rate:.2f}/s", file=sys.stderr, flush=True)
                rounds.append(done)
            startup = {k: s.startup for k, s in running.items()}
        planner = None
        if args.planners:
            print("planner cell", file=sys.stderr, flush=True)
            planner = planner_cell(Path(tmp), args.smoke, args.planners, args.plan_requests, data, cores)

    engine_changed = start.engine_changed()
    if engine_changed:
        print("warning: the engine was rebuilt during the run; its figures mix two builds", file=sys.stderr)
    summary = summarise(rounds, batches, clients, wait0_batch)
    summary["prepare_ms"] = median_of(rounds, f"inproc-b{max(batches)}", "prepare_ms")
    summary["prepare_share_of_worker"] = median_of(
        rounds, f"inproc-b{max(batches)}", "prepare_share", digits=4
    )
    if planner is not None:
        summary["mismatches"] += planner["mismatches"]
    result = {
        "benchmark": "server-bench",
        "schema": SCHEMA,
        "description": "jepa-server (subprocesses on loopback, one per configuration: --max-batch "
        f"{'/'.join(map(str, batches))}, and {wait0_batch} at --max-wait-ms 0) under "
        f"{'/'.join(map(str, clients))} concurrent aiohttp clients posting one photo per /v1/embeddings "
        "request, a GET /health control on the same servers, in-process jepa.embed on the same JPEG "
        "bytes, model, threads and max-batch as the ceiling; cells interleaved round by round, ratios "
        "paired within rounds, medians over rounds; and a LeWM planner cell (/rollout with a plan)",
        "started": start.started,
        "seconds": start.seconds(),
        "smoke": bool(args.smoke),
        "note": args.note,
        "commit": git_commit(),
        "server_dirty": server_dirty(),
        "machine": machine_info(threads),
        "versions": start.versions,
        "engine_changed_during_run": engine_changed,
        "model": {"file": "random" if args.model is None else os.path.basename(args.model),
                  **({} if args.model else shape), "ftype": args.ftype if args.model is None else None},
        "settings": {"workers": args.workers, "threads": threads, "max_batch": list(batches),
                     "clients": list(clients), "requests": args.requests, "warmup": args.warmup,
                     "health_requests": args.health_requests, "rounds": args.rounds,
                     "encoding_format": args.encoding, "server_args": args.server_arg, "photos": names,
                     "quiet": QUIET},
        "server_startup": startup,
        "decode": cost,
        "rounds": rounds,
        "planner": planner,
        "summary": summary,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    brief = {k: v for k, v in summary.items() if k != "cells"}
    print(json.dumps(brief, indent=1), file=sys.stderr)
    if planner is not None:
        print(json.dumps({k: v for k, v in planner.items() if k not in ("phases", "server_startup")}),
              file=sys.stderr)  # fmt: skip
    print(f"wrote {out}", file=sys.stderr)
    return 1 if summary["mismatches"] or engine_changed else 0


if __name__ == "__main__":
    sys.exit(main())
