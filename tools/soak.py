#!/usr/bin/env python3
"""Soak jepa-server: drive one server on loopback for a set time with mixed valid and hostile
traffic (bounded concurrency), sampling the server's RSS, open fds and threads and the latency of
the valid requests; write the record as JSON and exit 1 unless it held.

    python tools/soak.py --seconds 1800 --out tests/results/soak.json     # the committed 30-minute run
    python tools/soak.py --seconds 20 --out /tmp/soak.json                 # what the test suite runs

It held when no valid request failed, every hostile request got its expected status (a 4xx in the
OpenAI envelope; never a 5xx), and over the second half of the run RSS grew by at most
max(32 MiB, 10 %) while fds and threads stayed within a few of where they started. The server is
the demo model (or --model) with short header / body timeouts so the slow clients end quickly.
Stdlib only (plus numpy, Pillow and PyAV for the inputs): the traffic never goes through a client
library that would hide a protocol-level answer."""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from media_samples import png_bytes, png_header, video_bytes  # tools/, beside this file

ROOT = Path(__file__).resolve().parents[1]
HEADER_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0


# -- inputs -----------------------------------------------------------------------------------------


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# -- the wire ---------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int | None  # None: no answer (the connection closed or was cut by us)
    envelope: bool  # a JSON body with an "error" object of the four OpenAI fields
    seconds: float


def exchange(
    addr: tuple[str, int], payload: bytes, *, pause: float = 0.0, cut: bool = False, timeout: float = 60.0
) -> Answer:
    """Send `payload` on a fresh connection and read the whole answer (Connection: close). `pause`:
    wait before reading (a slow client); `cut`: close without reading (a client that leaves)."""
    started = time.perf_counter()
    with socket.create_connection(addr, timeout=timeout) as s:
        s.sendall(payload)
        if cut:
            time.sleep(pause)
            return Answer(None, False, time.perf_counter() - started)
        data = b""
        try:
            while chunk := s.recv(65536):
                data += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    took = time.perf_counter() - started
    head, _, body = data.partition(b"\r\n\r\n")
    try:
        status = int(head.split(b" ", 2)[1])
    except (IndexError, ValueError):
        return Answer(None, False, took)
    if b"100 Continue" in head.split(b"\r\n", 1)[0]:
        head, _, body = body.partition(b"\r\n\r\n")
        status = int(head.split(b" ", 2)[1])
    if b"chunked" in head.lower():
        body = _unchunk(body)
    envelope = False
    try:
        err = json.loads(body).get("error")
        envelope = isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}
    except (ValueError, AttributeError):
        pass
    return Answer(status, envelope, took)


def _unchunk(body: bytes) -> bytes:
    out, rest = b"", body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line.split(b";")[0] or b"0", 16)
        if size == 0:
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return out


def post(path: str, body: Any, headers: str = "") -> bytes:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return (
        f"POST {path} HTTP/1.1\r\nHost: soak\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n{headers}\r\n"
    ).encode() + data


def get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: soak\r\nConnection: close\r\n\r\n".encode()


# -- the traffic ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Kind:
    name: str
    valid: bool
    expect: frozenset[int | None]  # the statuses this kind may get
    send: Callable[[tuple[str, int]], Answer]
    weight: int = 1


def kinds(body_limit: int) -> list[Kind]:
    rng = random.Random(0)
    photos = [png_bytes(i, (rng.randint(40, 400), rng.randint(40, 400))) for i in range(8)]
    video = video_bytes(seed=3)
    tiny = png_bytes(99, (1, 1))

    def image() -> dict[str, str]:
        return {"b64": b64(rng.choice(photos))}

    def k(
        name: str,
        valid: bool,
        expect: set[int | None],
        payload: Callable[[], bytes],
        weight: int = 1,
        **kw: Any,
    ) -> Kind:
        return Kind(name, valid, frozenset(expect), lambda addr: exchange(addr, payload(), **kw), weight)

    deep = b'{"input":' + b"[" * 5000 + b"]" * 5000 + b"}"
    return [
        # valid
        k("embed", True, {200}, lambda: post("/v1/embeddings", {"input": image()}), weight=8),
        k(
            "embed_batch",
            True,
            {200},
            lambda: post(
                "/v1/embeddings", {"input": [image() for _ in range(4)], "encoding_format": "base64"}
            ),
            weight=3,
        ),
        k("embed_tei", True, {200}, lambda: post("/embed", {"inputs": image(), "normalize": True}), weight=2),
        k(
            "embed_tokens",
            True,
            {200},
            lambda: post("/v1/embeddings", {"input": image(), "pool": "none", "encoding_format": "base64"}),
        ),
        k(
            "video",
            True,
            {200},
            lambda: post("/v1/embeddings", {"input": {"video": {"b64": b64(video)}, "frames": 1}}),
        ),
        k("health", True, {200}, lambda: get("/health")),
        k("info", True, {200}, lambda: get("/info")),
        k("metrics", True, {200}, lambda: get("/metrics")),
        # hostile: each must get exactly its refusal
        k("bad_json", False, {400}, lambda: post("/v1/embeddings", b"{not json")),
        k("deep_json", False, {400}, lambda: post("/v1/embeddings", deep)),
        k("bad_b64", False, {400}, lambda: post("/v1/embeddings", {"input": {"b64": "%%%"}})),
        k("url_item", False, {400}, lambda: post("/v1/embeddings", {"input": {"url": "http://x/y.png"}})),
        k("empty_pool", False, {400}, lambda: post("/v1/embeddings", {"input": image(), "pool": ""})),
        k(
            "truncated_png",
            False,
            {400},
            lambda: post("/v1/embeddings", {"input": {"b64": b64(photos[0][:33])}}),
        ),
        k(
            "pixel_bomb",
            False,
            {413},
            lambda: post("/v1/embeddings", {"input": {"b64": b64(png_header(9000, 9000))}}),
        ),
        k(
            "huge_answer",
            False,
            {413},
            lambda: post("/v1/embeddings", {"input": [{"b64": b64(tiny)}] * 64, "pool": "none"}),
        ),
        k(
            "oversize_body",
            False,
            {413},
            lambda: (
                f"POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: {body_limit + 1}\r\n"
                "Connection: close\r\n\r\n{"
            ).encode(),
        ),
        k(
            "bad_encoding",
            False,
            {400},
            lambda: post("/v1/embeddings", b"plain", "Content-Encoding: gzip\r\n"),
        ),
        k(
            "expect_bogus",
            False,
            {417},
            lambda: post("/v1/embeddings", {"input": image()}, "Expect: bogus\r\n"),
        ),
        k("http2_line", False, {505}, lambda: b"GET /health HTTP/2.0\r\nHost: soak\r\n\r\n"),
        k("garbage", False, {400}, lambda: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"),
        k("no_route", False, {404}, lambda: get("/nowhere")),
        k("wrong_method", False, {405}, lambda: get("/v1/embeddings")),
        k("no_head", False, {400}, lambda: post("/classify", {"input": image()})),
        k("no_world", False, {400}, lambda: post("/rollout", {"context": [image()], "actions": [[0.0]]})),
        k("slow_headers", False, {408}, lambda: b"POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\n"),
        k(
            "slow_body",
            False,
            {408},
            lambda: b'POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n{"input"',
        ),
        k(
            "leaves_mid_body",
            False,
            {None},
            lambda: b'POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: 100000\r\n\r\n{"input"',
            pause=0.05,
            cut=True,
        ),
        k(
            "leaves_mid_request",
            False,
            {None},
            lambda: post("/v1/embeddings", {"input": [image()] * 8}),
            pause=0.02,
            cut=True,
        ),
    ]


# -- the server's resources -------------------------------------------------------------------------


def sample(pid: int) -> dict[str, float]:
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "Threads"):
                fields[key] = int(value.split()[0])
    return {
        "rss_mb": round(fields["VmRSS"] / 1024, 1),
        "threads": fields["Threads"],
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
    }


def cpu_record() -> dict[str, Any]:
    model, flags = platform.processor(), []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "fma", "f16c")
    return {"model": model, "cores": os.cpu_count(), "flags": [f for f in wanted if f in flags]}


def commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[str], tuple[str, int], list[str]]:
    from jepa_server.startup import read_startup

    server_args = [
        "--port",
        "0",
        "--header-timeout-s",
        str(HEADER_TIMEOUT_S),
        "--body-timeout-s",
        str(BODY_TIMEOUT_S),
        "--max-body-mb",
        str(args.max_body_mb),
        *args.server_arg,
    ]
    server_args = (["--model", args.model] if args.model else ["--demo"]) + server_args
    exe = Path(sys.executable).parent / "jepa-server"
    proc = subprocess.Popen(
        [str(exe), *server_args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    url, lines = read_startup(proc.stdout, 120)
    if not url:
        proc.kill()
        raise SystemExit(
            f"soak: the server did not start: {lines} {proc.stderr.read() if proc.stderr else ''}"
        )
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port)), server_args


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values) * 1000
    return {p: round(float(np.percentile(a, q)), 1) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))} | {
        "max": round(float(a.max()), 1)
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    proc, addr, server_args = start_server(args)
    table = kinds(int(args.max_body_mb * 1024 * 1024))
    weights = [k.weight for k in table]
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    latency: list[float] = []
    failures: list[dict[str, Any]] = []
    samples: list[dict[str, float]] = []
    lock = threading.Lock()
    stop = threading.Event()
    started = time.monotonic()
    rng = random.Random(1)

    def client() -> None:
        while not stop.is_set():
            kind = rng.choices(table, weights)[0]
            try:
                ans = kind.send(addr)
            except OSError as exc:  # the server refused the connection: never expected
                ans = Answer(-1, False, 0.0)
                note = repr(exc)
            else:
                note = ""
            ok = ans.status in kind.expect and (ans.status in (None, 200) or ans.envelope or kind.valid)
            with lock:
                counts[kind.name][str(ans.status)] += 1
                if kind.valid and ans.status == 200:
                    latency.append(ans.seconds)
                if not ok:
                    failures.append(
                        {
                            "kind": kind.name,
                            "status": ans.status,
                            "envelope": ans.envelope,
                            "t": round(time.monotonic() - started, 1),
                            "note": note,
                        }
                    )

    def sampler() -> None:
        while not stop.wait(args.sample_s):
            if proc.poll() is not None:
                return
            samples.append({"t": round(time.monotonic() - started, 1), **sample(proc.pid)})

    samples.append({"t": 0.0, **sample(proc.pid)})
    threads = [threading.Thread(target=sampler, daemon=True)]
    with ThreadPoolExecutor(args.concurrency) as pool:
        futures = [pool.submit(client) for _ in range(args.concurrency)]
        threads[0].start()
        time.sleep(args.seconds)
        stop.set()
        for f in futures:
            f.result()
    threads[0].join(args.sample_s + 1)
    time.sleep(1.0)  # the server settles: slow clients cut, answers written
    samples.append({"t": round(time.monotonic() - started, 1), **sample(proc.pid)})
    alive = proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    try:
        _, stderr = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, stderr = proc.communicate()
    tracebacks = stderr.count("Traceback")

    half = [s for s in samples if s["t"] >= args.seconds / 2] or samples[-1:]
    first = half[0]
    last = samples[-1]
    rss_growth = last["rss_mb"] - first["rss_mb"]
    checks = {
        "server_alive": alive,
        "exited_cleanly": proc.returncode == 0,
        "no_failed_valid_request": not any(f["kind"] in {k.name for k in table if k.valid} for f in failures),
        "every_hostile_request_refused_as_expected": not failures,
        "no_traceback_logged": tracebacks == 0,
        "rss_flat_second_half": rss_growth <= max(32.0, 0.10 * first["rss_mb"]),
        "fds_flat": last["fds"] <= samples[0]["fds"] + 16,
        "threads_flat": last["threads"]
        <= max(s["threads"] for s in samples[: max(2, len(samples) // 2)]) + 4,
    }
    total = sum(sum(v.values()) for v in counts.values())
    return {
        "tool": "tools/soak.py",
        "commit": commit(),
        "cpu": cpu_record(),
        "python": platform.python_version(),
        "seconds": args.seconds,
        "concurrency": args.concurrency,
        "server_args": server_args,
        "requests": total,
        "requests_per_s": round(total / args.seconds, 1),
        "by_kind": {name: dict(v) for name, v in sorted(counts.items())},
        "failures": failures[:50],
        "n_failures": len(failures),
        "valid_latency_ms": percentiles(latency),
        "rss_mb": {
            "start": samples[0]["rss_mb"],
            "second_half_start": first["rss_mb"],
            "end": last["rss_mb"],
            "max": max(s["rss_mb"] for s in samples),
            "second_half_growth": round(rss_growth, 1),
        },
        "fds": {"start": samples[0]["fds"], "end": last["fds"], "max": max(s["fds"] for s in samples)},
        "threads": {
            "start": samples[0]["threads"],
            "end": last["threads"],
            "max": max(s["threads"] for s in samples),
        },
        "samples": samples,
        "tracebacks_logged": tracebacks,
        "checks": checks,
        "ok": all(checks.values()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to drive the server")
    parser.add_argument("--concurrency", type=int, default=16, help="clients at once")
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "results" / "soak.json")
    parser.add_argument("--model", help="a GGUF file to serve (default: the demo model)")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between resource samples")
    parser.add_argument("--max-body-mb", type=float, default=4.0, help="the server's --max-body-mb")
    parser.add_argument("--server-arg", action="append", default=[], help="one more jepa-server argument")
    args = parser.parse_args(argv)
    record = run(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    summary = {
        k: record[k]
        for k in (
            "requests",
            "requests_per_s",
            "n_failures",
            "valid_latency_ms",
            "rss_mb",
            "fds",
            "threads",
            "ok",
        )
    }
    print(json.dumps(summary))
    if not record["ok"]:
        print(
            f"soak: FAILED {[k for k, v in record['checks'].items() if not v]}; see {args.out}",
            file=sys.stderr,
        )
    return 0 if record["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
