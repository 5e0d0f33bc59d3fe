"""jepa-server under load, as the serving benchmarks drive it (bench.server, bench.ray,
bench.world_plan): the model and photos they post, a server in a subprocess on a free loopback port,
concurrent aiohttp clients at steady state (a timed window kept saturated to its end), /rollout
planners, the answers checked bit for bit, and the CPU and memory the server took."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import processes  # tools/processes.py: how a child server stops, the tests' way too

from bench import harness

# scikit-image's bundled photos (no download), posted as JPEG, one per request.
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field")
# The model served: a ViT-S/16 with random weights (jepa.demo), and --smoke's tiny ViT.
VIT_S16 = dict(embed_dim=384, n_layer=12, n_head=6, patch_size=16, img_size=224)
SMOKE_MODEL = dict(embed_dim=64, n_layer=2, n_head=2, patch_size=16, img_size=64)


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


def server_dirty() -> bool:
    """Whether the server's or the package's sources differ from the commit measured."""
    r = subprocess.run(["git", "status", "--porcelain", "--", "server", "python/jepa"], cwd=harness.ROOT,
                       capture_output=True, text=True, timeout=30)  # fmt: skip
    return bool(r.stdout.strip())


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


def write_model(path: Path, shape: dict[str, int], ftype: str) -> str:
    import jepa.demo

    return jepa.demo.write_demo_model(path, ftype=ftype, **shape)


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
            self.args, stdout=subprocess.PIPE, stderr=self.log, text=True, cwd=harness.ROOT,
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


@dataclass
class Window:
    """What a steady-state load saw: the timed window and the answers of the whole run."""

    seconds: float
    latencies: list[float]  # the timed window's, client-side
    headers: dict[str, list[float]]  # x-*-time of the timed window's answers
    answers: list[tuple[int, bytes]]  # (body index, raw answer) of every answer, warm-up and tail too
    metrics: tuple[dict[str, float], dict[str, float]] | None  # /metrics at the window's two ends

    # What every cell records of its window, here once for bench.server's cells and bench.ray's.
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


async def steady(
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


def poster(url: str, bodies: list[bytes]) -> Callable[[Any, int], Awaitable[tuple[int, bytes, Any]]]:
    """steady's send for embed cells: request i posts bodies[i % len(bodies)] to /v1/embeddings."""

    async def send(session: Any, i: int) -> tuple[int, bytes, Any]:
        async with session.post(url + "/v1/embeddings", data=bodies[i % len(bodies)],
                                headers={"Content-Type": "application/json"}) as resp:  # fmt: skip
            return resp.status, await resp.read(), resp.headers

    return send


def getter(url: str) -> Callable[[Any, int], Awaitable[tuple[int, bytes, Any]]]:
    """steady's send for the control cells: GET /health."""

    async def send(session: Any, i: int) -> tuple[int, bytes, Any]:
        async with session.get(url + "/health") as resp:
            return resp.status, await resp.read(), resp.headers

    return send


@contextmanager
def cpu_shares(server: Server) -> Iterator[dict[str, Any]]:
    """The share of all the machine's cores the server, this process and everything else took while
    the block ran (warm-up and tail included); filled in when the block ends."""
    out: dict[str, Any] = {}
    with harness.Load([server.pid]) as load:
        yield out
    out["server_cpu_s"] = load.pids_s
    out["cpu_share"] = {"server": load.share(load.pids_s), "client": load.share(load.self_s),
                        "others": load.others()}
    out["others_cpu_share"] = out["cpu_share"]["others"]


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


# -- the rounds' ratios and medians (interleaved cells, paired within a round)


def paired(rounds: list[dict[str, Any]], num: str, den: str | Sequence[str],
           key: str = "req_s") -> float | None:
    """The median over rounds of num's rate over den's within a round (over the fastest of den's cells
    where it names several); in-process cells hold img_s."""
    dens = [den] if isinstance(den, str) else list(den)

    def rate(c: dict[str, Any]) -> float:
        return float(c.get(key, c.get("img_s", 0.0)))

    both = [c for c in rounds if num in c and all(d in c for d in dens)]
    r = [rate(c[num]) / max(rate(c[d]) for d in dens) for c in both]
    return round(statistics.median(r), 4) if r else None


def median_of(rounds: list[dict[str, Any]], cell: str, *path: str, digits: int = 2) -> float | None:
    """The median over rounds of cell's value at path (None values left out; None when all are)."""
    values = []
    for c in rounds:
        v: Any = c[cell]
        for k in path:
            v = v[k]
        if v is not None:
            values.append(v)
    return round(statistics.median(values), digits) if values else None
