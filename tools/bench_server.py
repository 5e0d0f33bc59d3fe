#!/usr/bin/env python3
"""A saturated jepa-server against in-process jepa.embed on the same photos -> tests/results/server-bench.json

The model is a ViT-S/16 (384 wide, 12 blocks, 6 heads, 224 px) with random weights written by
jepa.demo.write_demo_model (numpy only, no torch), f16 matrices; the inputs are real photos from
scikit-image (astronaut, chelsea, coffee, rocket, immunohistochemistry, hubble_deep_field) encoded
as JPEG in memory. One jepa-server subprocess per --max-batch setting (B, and 1 for the batching
gain) listens on a free loopback port and dies with this process. The cells run interleaved, round
after round, the order rotating, so a neighbour's load falls on all of them alike:

  inproc      jepa.embed(ctx, items) on the same JPEG bytes: one context per worker with the server's
              threads and max-batch (decode + preprocess, then batched encodes, on one thread)
  server-bB   N concurrent clients (asyncio + aiohttp, prepared bodies, one image per request) post
              /v1/embeddings without pause; the timed window runs from the warm-up-th answer to
              `requests` answers later, and the clients keep sending until it closes (steady state)

Per cell: img/s (= req/s), p50/p95/p99 latency, the mean batch and the workers' busy share of the
window (/metrics at its two ends), the mean x-queue-time / x-inference-time / x-total-time, CPU
milliseconds per image, and the share of the cores the server, the client (this process) and
everything else on the machine took. Ratios are paired within a round, then the median over rounds:
server / in-process, and the batching gain (max-batch B over max-batch 1 at the same clients); a
round in which other processes took more than QUIET of the cores in any cell is not quiet, and the
ratio over the quiet rounds alone is reported too. Decode + preprocess is timed inside each
in-process run (every jepa.media.prepare call jepa.embed makes), as ms per image and as a share of
the run; per photo, decode and preprocess are also timed apart. Every server vector is checked bit
for bit against in-process jepa.embed.

    python tools/bench_server.py                   # the full run (two to three minutes on 2 cores)
    python tools/bench_server.py --encoding base64 # answers as base64 (what the openai client asks)
    python tools/bench_server.py --smoke           # tiny demo model, a few requests: the test runs it

A benchmark, not a test: the numbers depend on the machine and on what else runs on it. The engine
file's fingerprint is recorded at the start and checked at the end (a rebuild during a run mixes two
builds and can crash the processes that have it mapped; the run then exits non-zero)."""

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
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# numpy's own OpenBLAS threads spin after start-up and steal cycles; nothing here needs them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "server-bench.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "server-bench-smoke.json"
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "immunohistochemistry", "hubble_deep_field")
VIT_S16 = dict(embed_dim=384, n_layer=12, n_head=6, patch_size=16, img_size=224)
SMOKE_MODEL = dict(embed_dim=64, n_layer=2, n_head=2, patch_size=16, img_size=64)
GOAL_RATIO = 0.95  # issue 15: a saturated server at least this share of in-process throughput
QUIET = 0.05  # a round is quiet when other processes took at most this share of the cores in every cell


# The machine record and CPU-time counters are the engine benchmark's (one definition).
from bench_engine import machine_busy_s, machine_info, self_busy_s  # noqa: E402


def process_busy_s(pid: int) -> float:
    """CPU-seconds of another process, all its threads (0 where /proc is absent)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


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


def git_commit() -> dict[str, Any]:
    def git(*args: str) -> str:
        r = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True, timeout=30)
        return r.stdout.strip() if r.returncode == 0 else ""

    return {
        "commit": git("rev-parse", "HEAD"),
        "server_dirty": bool(git("status", "--porcelain", "--", "server", "python/jepa")),
    }


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

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextmanager
def servers(
    model: str, workers: int, threads: int, batches: list[int], extra: list[str]
) -> Iterator[dict[int, Server]]:
    started: dict[int, Server] = {}
    try:
        for b in batches:
            started[b] = Server(model, workers, threads, b, extra).start()
        yield started
    finally:
        for s in started.values():
            s.stop()


def histogram_sums(metrics_text: str) -> dict[str, float]:
    """The _count and _sum samples of the batch-size and inference-time histograms."""
    wanted = (
        "jepa_batch_size_count",
        "jepa_batch_size_sum",
        "jepa_inference_seconds_count",
        "jepa_inference_seconds_sum",
    )
    out = dict.fromkeys(wanted, 0.0)
    for line in metrics_text.splitlines():
        name = line.split(" ", 1)[0]
        if name in out:
            out[name] = float(line.split()[-1])
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


async def _load(
    url: str, bodies: list[bytes], clients: int, n: int, warmup: int, expected: list[np.ndarray] | None
) -> dict[str, Any]:
    """Steady state: `clients` concurrent clients send requests (body i % len(bodies)) without pause;
    the timed window runs from the warmup-th answer to the (warmup + n)-th, and the clients keep
    sending until it closes, so the server is saturated all through it."""
    import aiohttp

    total = warmup + n + clients  # the last `clients` keep the window's end saturated
    latencies: list[float] = []
    headers: dict[str, list[float]] = {"x-queue-time": [], "x-inference-time": [], "x-total-time": []}
    mismatches = 0
    checked: set[int] = set()
    sent = answered = 0
    marks: dict[str, Any] = {}

    async def metrics(session: aiohttp.ClientSession) -> dict[str, float]:
        async with session.get(url + "/metrics") as r:
            return histogram_sums(await r.text())

    async def client(session: aiohttp.ClientSession) -> None:
        nonlocal sent, answered, mismatches
        while sent < total and "end" not in marks:
            i = sent
            sent += 1
            k = i % len(bodies)
            t = time.perf_counter()
            async with session.post(
                url + "/v1/embeddings", data=bodies[k], headers={"Content-Type": "application/json"}
            ) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    raise RuntimeError(f"request {i}: HTTP {resp.status}: {raw[:200]!r}")
                done = time.perf_counter()
                answered += 1
                timed = "start" in marks and "end" not in marks
                if answered == warmup:
                    marks["start"] = done
                    marks["before"] = asyncio.ensure_future(metrics(session))
                elif answered == warmup + n:
                    marks["end"] = done
                    marks["after"] = asyncio.ensure_future(metrics(session))
                if timed:
                    latencies.append(done - t)
                    for h, values in headers.items():
                        values.append(float(resp.headers[h]))
            if expected is not None and k not in checked:
                checked.add(k)
                got = vector_of(json.loads(raw))
                mismatches += int(not np.array_equal(got.view(np.uint32), expected[k].view(np.uint32)))

    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if warmup == 0:
            marks["start"] = time.perf_counter()
            marks["before"] = asyncio.ensure_future(metrics(session))
        await asyncio.gather(*(client(session) for _ in range(clients)))
        before, after = await marks["before"], await marks["after"]
    seconds = marks["end"] - marks["start"]
    d = {k: after[k] - before[k] for k in after}
    graphs = d["jepa_batch_size_count"]
    lat = np.asarray(latencies) * 1000
    return {
        "seconds": seconds,
        "img_s": n / seconds,
        "req_s": n / seconds,
        "latency_ms": {f"p{p}": round(float(np.percentile(lat, p)), 1) for p in (50, 95, 99)},
        "mean_batch": round(d["jepa_batch_size_sum"] / graphs, 2) if graphs else None,
        "graph_ms": round(1000 * d["jepa_inference_seconds_sum"] / graphs, 1) if graphs else None,
        # the share of the window the workers spent in graphs (the rest: waiting for work)
        "worker_busy": round(d["jepa_inference_seconds_sum"] / seconds, 3),
        "server_ms": {h.removeprefix("x-"): round(statistics.fmean(v), 2) for h, v in headers.items()},
        "mismatches": mismatches,
        "answered": answered,  # all answers, warm-up and tail included
    }  # fmt: skip


def server_cell(
    server: Server, bodies: list[bytes], clients: int, n: int, warmup: int, expected: list[np.ndarray]
) -> dict[str, Any]:
    assert server.proc is not None
    busy, mine, theirs = machine_busy_s(), self_busy_s(), process_busy_s(server.proc.pid)
    t0 = time.perf_counter()
    try:
        cell = asyncio.run(_load(server.url, bodies, clients, n, warmup, expected))
    except Exception as exc:
        status = server.proc.poll()
        raise RuntimeError(f"the server failed ({exc!r}; exit status {status}): {server.stderr()}") from exc
    wall = (time.perf_counter() - t0) * (os.cpu_count() or 1)
    busy, mine = machine_busy_s() - busy, self_busy_s() - mine
    theirs = process_busy_s(server.proc.pid) - theirs
    cell["worker_busy"] = round(cell["worker_busy"] / server.workers, 3)
    # CPU-seconds per image: steady under a neighbour's load, unlike img/s (see the module doc)
    cell["cpu_ms_per_img"] = round(theirs / cell["answered"] * 1000, 2)
    cell["cpu_share"] = {  # of all the machine's cores, over the whole cell (warm-up and tail too)
        "server": round(theirs / wall, 3),
        "client": round(mine / wall, 3),
        "others": round(max(0.0, busy - theirs - mine) / wall, 3),
    }
    return cell


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


def inproc_cell(model: Any, workers: int, threads: int, max_batch: int, items: list[bytes]) -> dict[str, Any]:
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
            list(
                pool.map(lambda cs: jepa.embed(cs[0], cs[1], pool="mean"), zip(contexts, shares, strict=True))
            )
        seconds = time.perf_counter() - t0
    busy, mine = machine_busy_s() - busy, self_busy_s() - mine
    cores = os.cpu_count() or 1
    return {
        "seconds": seconds,
        "img_s": len(items) / seconds,
        "cpu_ms_per_img": round(mine / len(items) * 1000, 2),
        # decode + preprocess inside this run: ms per image, and its share of the workers' time
        "prepare_ms": round(statistics.fmean(spent) * 1000, 2),
        "prepare_share": round(sum(spent) / (seconds * workers), 4),
        "cpu_share": {"self": round(mine / (seconds * cores), 3),
                      "others": round(max(0.0, busy - mine) / (seconds * cores), 3)},
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


def paired(rounds: list[dict[str, Any]], num: str, den: str) -> float | None:
    r = [c[num]["img_s"] / c[den]["img_s"] for c in rounds if num in c and den in c]
    return round(statistics.median(r), 4) if r else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="a tiny model and a few requests (the test runs it)")
    p.add_argument("--model", default=None, help="serve this GGUF instead of writing a random ViT-S/16")
    p.add_argument(
        "--ftype", default="f16", choices=("f32", "f16", "bf16"), help="the random model's matrices"
    )
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="threads per graph (0: cores / workers)")
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--no-batch1", action="store_true", help="skip the max-batch 1 server (no batching gain)")
    p.add_argument("--clients", type=int, default=32)
    p.add_argument(
        "--requests", type=int, default=64, help="timed requests per server cell (and images in-process)"
    )
    p.add_argument(
        "--warmup", type=int, default=None, help="untimed requests before each server cell (default: clients)"
    )
    p.add_argument("--rounds", type=int, default=8)
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
    if args.smoke:
        args.clients, args.requests, args.rounds = min(args.clients, 4), min(args.requests, 8), 1

    import jepa

    cores = os.cpu_count() or 1
    threads = args.threads or max(1, cores // args.workers)
    warmup = args.clients if args.warmup is None else args.warmup
    out: Path = args.out or (SMOKE_OUT if args.smoke else DEFAULT_OUT)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    result_versions = versions()
    data = photos(PHOTOS[:2] if args.smoke else PHOTOS)
    names = list(data)
    batches = [args.max_batch] + ([] if args.no_batch1 or args.max_batch == 1 else [1])
    with tempfile.TemporaryDirectory(prefix="jepa-bench-server-") as tmp:
        shape = SMOKE_MODEL if args.smoke else VIT_S16
        path = args.model or write_model(Path(tmp) / "model.gguf", shape, args.ftype)
        model = jepa.Model(path)
        ref_ctx = model.context(threads=threads, max_batch=args.max_batch)
        expected = list(jepa.embed(ref_ctx, [data[n] for n in names], pool="mean"))
        del ref_ctx
        bodies = [request_body(data[n], args.encoding) for n in names]
        items = [data[names[i % len(names)]] for i in range(args.requests)]
        cost = decode_cost(model, data, 3 if args.smoke else 9)
        rounds: list[dict[str, Any]] = []
        with servers(path, args.workers, threads, batches, args.server_arg) as running:
            cells = ["inproc", *(f"server-b{b}" for b in batches)]
            for r in range(args.rounds):
                done: dict[str, Any] = {}
                for name in cells[r % len(cells) :] + cells[: r % len(cells)]:
                    if name == "inproc":
                        done[name] = inproc_cell(model, args.workers, threads, args.max_batch, items)
                    else:
                        b = int(name.removeprefix("server-b"))
                        done[name] = server_cell(
                            running[b], bodies, args.clients, args.requests, warmup, expected
                        )
                    print(f"round {r} {name}: {done[name]['img_s']:.2f} img/s", file=sys.stderr, flush=True)
                rounds.append(done)
            startup = {b: s.startup for b, s in running.items()}

    engine_changed = engine_fingerprint() != result_versions["engine"]
    if engine_changed:
        print("warning: the engine was rebuilt during the run; its figures mix two builds", file=sys.stderr)
    main_cell = f"server-b{args.max_batch}"

    def med(cell: str, *path: str, digits: int = 2) -> float:
        """The median over rounds of one figure of one cell."""
        values = []
        for c in rounds:
            v: Any = c[cell]
            for k in path:
                v = v[k]
            values.append(v or 0)
        return round(statistics.median(values), digits)

    summary: dict[str, Any] = {
        "inproc_img_s": med("inproc", "img_s"),
        "server_img_s": med(main_cell, "img_s"),
        "server_over_inproc": paired(rounds, main_cell, "inproc"),
        "goal": GOAL_RATIO,
        "mean_batch": med(main_cell, "mean_batch"),
        "latency_ms_p50": med(main_cell, "latency_ms", "p50", digits=1),
        "latency_ms_p99": med(main_cell, "latency_ms", "p99", digits=1),
        "prepare_ms": med("inproc", "prepare_ms"),
        "prepare_share_of_worker": med("inproc", "prepare_share", digits=4),
        "inproc_cpu_ms_per_img": med("inproc", "cpu_ms_per_img", digits=1),
        "server_cpu_ms_per_img": med(main_cell, "cpu_ms_per_img", digits=1),
        "worker_busy": med(main_cell, "worker_busy", digits=3),
        "mismatches": sum(c[k].get("mismatches", 0) for c in rounds for k in c),
    }

    def quiet(*cells: str) -> list[dict[str, Any]]:
        """The rounds in which other processes took at most QUIET of the cores during these cells."""
        return [c for c in rounds if all(c[k]["cpu_share"]["others"] <= QUIET for k in cells)]

    summary["quiet_pairs"] = len(quiet(main_cell, "inproc"))
    summary["server_over_inproc_quiet"] = paired(quiet(main_cell, "inproc"), main_cell, "inproc")
    if "server-b1" in rounds[0] and args.max_batch != 1:
        summary["server_b1_img_s"] = med("server-b1", "img_s")
        summary["batching_gain"] = paired(rounds, main_cell, "server-b1")
        summary["batching_gain_quiet"] = paired(quiet(main_cell, "server-b1"), main_cell, "server-b1")
        summary["worker_busy_b1"] = med("server-b1", "worker_busy", digits=3)
    result = {
        "benchmark": "server-bench",
        "description": "jepa-server (subprocess, loopback, concurrent aiohttp clients posting one image per "
        "/v1/embeddings request) against in-process jepa.embed on the same JPEG bytes, model, threads and "
        "max-batch; cells interleaved round by round; ratios paired within rounds, medians over rounds",
        "started": started,
        "seconds": round(time.perf_counter() - t0, 1),
        "smoke": bool(args.smoke),
        "note": args.note,
        "machine": machine_info(threads),
        "versions": result_versions,
        "engine_changed_during_run": engine_changed,
        "git": git_commit(),
        "model": {"file": "random" if args.model is None else os.path.basename(args.model),
                  **({} if args.model else shape), "ftype": args.ftype if args.model is None else None},
        "settings": {"workers": args.workers, "threads": threads, "max_batch": args.max_batch,
                     "clients": args.clients, "requests": args.requests, "warmup": warmup,
                     "rounds": args.rounds, "encoding_format": args.encoding, "server_args": args.server_arg,
                     "photos": names},
        "server_startup": startup,
        "decode": cost,
        "rounds": rounds,
        "summary": summary,
    }  # fmt: skip
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(summary, indent=1), file=sys.stderr)
    print(f"wrote {out}", file=sys.stderr)
    return 1 if summary["mismatches"] or engine_changed else 0


if __name__ == "__main__":
    sys.exit(main())
