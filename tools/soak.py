#!/usr/bin/env python3
"""Soak jepa-server: drive one server on loopback for a set time with mixed valid and hostile
traffic (bounded concurrency), sampling the server's RSS, open fds and threads, its event loop's lag
(the latency of GET /health, which touches no model) and the latency of the valid requests; write the
record as JSON and exit 1 unless it held.

    python tools/soak.py --seconds 1800 --out tests/results/soak.json     # the committed 30-minute run
    python tools/soak.py --seconds 20 --out /tmp/soak.json                 # what the test suite runs

By default the server serves a models directory of three models under --max-loaded-models 2: two
image models (f32 and q8_0, the latter used in place from its mapping) and a text model, so the
registry loads and evicts all the time, and text traffic (strings, token-id arrays, oversized texts)
runs beside the images. A replacer rewrites the model files while they serve: by rename (the right
way: the old mapping stays intact) and, for the q8_0 model, in place (truncated then written, as
`cp` does), which the server must survive, answering 503 `model_file_changed` / `model_load_failed`
with Retry-After until the file is whole again and then serving the new file. `--model` serves one
file instead, without the registry traffic.

It held when no valid request failed (a 503 with Retry-After and one of the codes its kind expects
counts as a refusal, not a failure: models_busy under --max-loaded-models, the in-place rewrite's),
every hostile request got its expected status (a 4xx in the OpenAI envelope; never a 5xx), and over
the second half of the run RSS grew by at most max(32 MiB, 10 %) (the median of the last quarter's
samples against the second quarter's), fds and threads stayed within a
few of where they started and the event loop's lag (p99 of /health) stayed within max(250 ms, 3x) of
the first half's (the floor: a loaded CI machine's noise, far under the stalls of seconds this
catches). Stdlib only (plus numpy, Pillow and PyAV for the inputs, jepa to write the models):
the traffic never goes through a client library that would hide a protocol-level answer."""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
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
    code: str | None = None  # the envelope's code
    retry_after: bool = False


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
    envelope, code = False, None
    try:
        err = json.loads(body).get("error")
        envelope = isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}
        code = err.get("code") if envelope else None
    except (ValueError, AttributeError):
        pass
    return Answer(status, envelope, took, code, b"\r\nretry-after:" in head.lower())


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
    # 503 codes a valid request of this kind may get (with Retry-After): a refusal, not a failure.
    busy: frozenset[str] = frozenset()


# Every model's file is replaced by rename now and then: while the old file's requests in flight
# finish, new ones get 503 model_file_changed (Retry-After: 1), then the new file serves.
BUSY = frozenset({"models_busy", "model_file_changed"})
# The q8_0 model is also rewritten in place (truncated, then written): between the two its requests
# are refused until the file is whole, then served from the new file.
IN_PLACE = BUSY | {"model_load_failed"}


def kinds(body_limit: int, models: dict[str, str] | None = None) -> list[Kind]:
    """The traffic. `models`: role -> model id of a models-directory server ("image", "quant",
    "text"); None: one image model, no `model` field."""
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
        busy: frozenset[str] = frozenset(),
        **kw: Any,
    ) -> Kind:
        send = lambda addr: exchange(addr, payload(), **kw)  # noqa: E731
        return Kind(name, valid, frozenset(expect | ({503} if busy else set())), send, weight, busy)

    where = dict(models or {})

    def to(role: str, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "model": where[role]} if role in where else body

    busy = BUSY if models else frozenset()

    def ask(
        name: str,
        valid: bool,
        expect: set[int | None],
        body: Callable[[], dict[str, Any]],
        path: str = "/v1/embeddings",
        role: str = "image",
        weight: int = 1,
        refused: frozenset[str] | None = None,
    ) -> Kind:
        """A JSON body posted to `path` for the model of `role` (named on a models-directory server,
        which may refuse it 503 while that model's file is swapped: `busy`, unless `refused`)."""
        return k(name, valid, expect, lambda: post(path, to(role, body())), weight,
                 busy if refused is None else refused)  # fmt: skip

    deep = b'{"input":' + b"[" * 5000 + b"]" * 5000 + b"}"
    out = [
        # valid
        ask("embed", True, {200}, lambda: {"input": image()}, weight=8),
        ask("embed_batch", True, {200},
            lambda: {"input": [image() for _ in range(4)], "encoding_format": "base64"}, weight=3),
        ask("embed_tei", True, {200}, lambda: {"inputs": image(), "normalize": True}, "/embed", weight=2),
        ask("embed_tokens", True, {200},
            lambda: {"input": image(), "pool": "none", "encoding_format": "base64"}),
        ask("video", True, {200}, lambda: {"input": {"video": {"b64": b64(video)}, "frames": 1}}),
        k("health", True, {200}, lambda: get("/health")),
        k("info", True, {200}, lambda: get("/info")),
        k("metrics", True, {200}, lambda: get("/metrics")),
        # hostile: each must get exactly its refusal
        k("bad_json", False, {400}, lambda: post("/v1/embeddings", b"{not json")),
        k("deep_json", False, {400}, lambda: post("/v1/embeddings", deep)),
        ask("bad_b64", False, {400}, lambda: {"input": {"b64": "%%%"}}),
        ask("url_item", False, {400}, lambda: {"input": {"url": "http://x/y"}}),
        ask("empty_pool", False, {400}, lambda: {"input": image(), "pool": ""}),
        ask("truncated_png", False, {400}, lambda: {"input": {"b64": b64(photos[0][:33])}}),
        ask("pixel_bomb", False, {413}, lambda: {"input": {"b64": b64(png_header(9000, 9000))}}),
        ask("huge_answer", False, {413}, lambda: {"input": [{"b64": b64(tiny)}] * 64, "pool": "none"}),
        k("oversize_body", False, {413},
          lambda: (f"POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: {body_limit + 1}\r\n"
                   "Connection: close\r\n\r\n{").encode()),
        k("bad_encoding", False, {400},
          lambda: post("/v1/embeddings", b"plain", "Content-Encoding: gzip\r\n")),
        k("expect_bogus", False, {417},
          lambda: post("/v1/embeddings", {"input": image()}, "Expect: bogus\r\n")),
        k("http2_line", False, {505}, lambda: b"GET /health HTTP/2.0\r\nHost: soak\r\n\r\n"),
        k("garbage", False, {400}, lambda: b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03garbage\r\n\r\n"),
        k("no_route", False, {404}, lambda: get("/nowhere")),
        k("wrong_method", False, {405}, lambda: get("/v1/embeddings")),
        ask("no_head", False, {400}, lambda: {"input": image()}, "/classify"),
        ask("no_world", False, {400}, lambda: {"context": [image()], "actions": [[0.0]]}, "/rollout"),
        k("slow_headers", False, {408}, lambda: b"POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\n"),
        k("slow_body", False, {408},
          lambda: b'POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: 1000\r\n\r\n{"input"'),
        k("leaves_mid_body", False, {None},
          lambda: b'POST /v1/embeddings HTTP/1.1\r\nHost: soak\r\nContent-Length: 100000\r\n\r\n{"input"',
          pause=0.05, cut=True),
        k("leaves_mid_request", False, {None},
          lambda: post("/v1/embeddings", to("image", {"input": [image()] * 8})), pause=0.02, cut=True),
    ]  # fmt: skip
    if models:
        texts = [
            "a photo of a cat",
            "the quick brown fox jumps over the lazy dog",
            "query: fast vector search",
        ]
        out += [
            ask("embed_quant", True, {200}, lambda: {"input": image()}, role="quant", weight=4,
                refused=IN_PLACE),
            ask("text", True, {200}, lambda: {"input": rng.sample(texts, 2)}, role="text", weight=6),
            ask("text_tei", True, {200}, lambda: {"inputs": rng.choice(texts)}, "/embed", role="text",
                weight=2),
            # hostile text: another tokenizer's ids, over --max-request-chars, text to an image model
            k("text_token_ids", False, {400},
              lambda: post("/v1/embeddings", to("text", {"input": [[64, 6685, 315, 264, 8415]]}))),
            k("text_too_long", False, {413},
              lambda: post("/v1/embeddings", to("text", {"input": ["word " * 60_000]}))),
            k("text_to_image", False, {400}, lambda: post("/v1/embeddings", to("image", {"input": "a cat"}))),
            k("unknown_model", False, {404},
              lambda: post("/v1/embeddings", {"input": image(), "model": "nope"})),
        ]  # fmt: skip
    return out


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
    if args.model:
        server_args = ["--model", args.model, *server_args]
    else:
        server_args = [
            "--models-dir",
            args.models_dir,
            "--max-loaded-models",
            "2",
            "--keep-alive-s",
            "30",
            "--max-request-chars",
            "100000",
            *server_args,
        ]
    exe = Path(sys.executable).parent / "jepa-server"
    # Its log to a file and its stdout drained: a pipe nobody reads fills (64 KiB of the registry's
    # load / unload lines) and blocks the server's event loop on a write to it.
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (read and closed in stop_server)
    proc = subprocess.Popen([str(exe), *server_args], stdout=subprocess.PIPE, stderr=log, text=True)
    proc.log = log  # type: ignore[attr-defined]
    assert proc.stdout is not None
    url, lines = read_startup(proc.stdout, 120)
    if not url:
        proc.kill()
        proc.wait()
        log.seek(0)
        raise SystemExit(f"soak: the server did not start: {lines} {log.read()}")
    out = proc.stdout
    threading.Thread(target=lambda: [None for _ in out], daemon=True).start()
    host, port = url.removeprefix("http://").rsplit(":", 1)
    return proc, (host, int(port)), server_args


def stop_server(proc: subprocess.Popen[str]) -> str:
    """SIGTERM, wait for the exit, and the server's log."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log = proc.log  # type: ignore[attr-defined]
    log.seek(0)
    text: str = log.read()
    log.close()
    return text


# -- the models directory and its replacer ----------------------------------------------------------

MODELS = {"image": "vit", "quant": "vit-q8", "text": "minilm"}


def write_models(root: Path) -> tuple[Path, Path]:
    """The served directory and the pristine copies the replacer writes from."""
    from jepa.convert.quantize import quantize
    from jepa.demo import write_demo_model
    from jepa.testing.random_text import write_random_bert

    pristine, served = root / "pristine", root / "models"
    pristine.mkdir(parents=True)
    served.mkdir()
    write_demo_model(pristine / "vit.gguf")
    # 256 wide: the q8_0 matrices are used in place from the mapping (the engine's 64 KiB floor).
    f16 = write_demo_model(
        root / "vit-f16.gguf", ftype="f16", embed_dim=256, n_layer=2, n_head=4, img_size=32
    )
    quantize(f16, str(pristine / "vit-q8.gguf"), "q8_0")
    write_random_bert(pristine / "minilm.gguf", max_seq_len=32)
    for f in pristine.iterdir():
        shutil.copyfile(f, served / f.name)
    return served, pristine


def replacer(
    served: Path,
    pristine: Path,
    every_s: float,
    stop: threading.Event,
    log: list[dict[str, Any]],
    started: float,
) -> None:
    """Rewrite the model files while they serve: the f32 image and the text model by rename (a new
    file moved over the old: the right way), the q8_0 model alternately by rename and in place
    (truncated, then written in chunks, as `cp` does)."""
    n = 0
    while not stop.wait(every_s):
        n += 1
        name = ["vit.gguf", "vit-q8.gguf", "minilm.gguf", "vit-q8.gguf"][n % 4]
        in_place = name == "vit-q8.gguf" and n % 8 == 3
        src, dst = pristine / name, served / name
        try:
            if in_place:
                with open(src, "rb") as fi, open(dst, "r+b") as fo:
                    fo.truncate(0)
                    fo.flush()
                    time.sleep(0.05)  # the window a reader of the truncated file meets
                    while chunk := fi.read(1 << 16):
                        fo.write(chunk)
            else:
                tmp = served / f".{name}.tmp"  # not a .gguf: the catalog never lists it
                shutil.copyfile(src, tmp)
                os.replace(tmp, dst)
        except OSError as exc:  # the soak's own trouble (a full disk), not the server's: said, and go on
            log.append({"t": round(time.monotonic() - started, 1), "file": name, "error": repr(exc)})
            continue
        log.append(
            {
                "t": round(time.monotonic() - started, 1),
                "file": name,
                "how": "in place" if in_place else "rename",
            }
        )


def loop_lag(addr: tuple[str, int]) -> float:
    """The event loop's lag as a client sees it: GET /health touches no model, so its latency is the
    loop's (and the accept path's)."""
    return exchange(addr, get("/health"), timeout=120).seconds


def rss_trend(samples: list[dict[str, float]], seconds: float, warmup_s: float = 0.0) -> float:
    """RSS growth over the second half of the judged span (the `seconds` after a warm-up of
    `warmup_s`): the median of its last quarter's samples less the median of its second quarter's.
    Medians of windows, not two single samples: under the registry traffic RSS swings by ~100 MiB
    with which two models happen to be resident (318-423 MiB in the 30-minute run), which says
    nothing of a leak; a leak moves the whole window. The warm-up is left out because RSS climbs
    until every model, graph shape and worker thread's allocator arena has been met once (~800
    requests, ~15 s on a 2-core machine): a short run judged from its start measures that climb."""
    t0 = warmup_s
    q2 = [s["rss_mb"] for s in samples if t0 + seconds / 4 <= s["t"] < t0 + seconds / 2]
    q4 = [s["rss_mb"] for s in samples if s["t"] >= t0 + 3 * seconds / 4]
    if not q2 or not q4:  # a run too short for windows: its ends
        judged = [s for s in samples if s["t"] >= t0] or samples
        return judged[-1]["rss_mb"] - judged[len(judged) // 2]["rss_mb"]
    return float(np.median(q4) - np.median(q2))


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    a = np.asarray(values) * 1000
    return {p: round(float(np.percentile(a, q)), 1) for p, q in (("p50", 50), ("p90", 90), ("p99", 99))} | {
        "max": round(float(a.max()), 1)
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    tmp = None
    if not args.model:
        tmp = Path(tempfile.mkdtemp(prefix="jepa-soak-"))
        served, pristine = write_models(tmp)
        args.models_dir = str(served)
    try:
        return _run(args, None if args.model else (served, pristine))
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def _run(args: argparse.Namespace, dirs: tuple[Path, Path] | None) -> dict[str, Any]:
    proc, addr, server_args = start_server(args)
    table = kinds(int(args.max_body_mb * 1024 * 1024), MODELS if dirs else None)
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
            if ans.status == 503:  # a refusal it may get, with its code and Retry-After
                ok = ok and ans.code in kind.busy and ans.retry_after
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
                            "code": ans.code,
                            "t": round(time.monotonic() - started, 1),
                            "note": note,
                        }
                    )

    def sampler() -> None:
        while not stop.wait(args.sample_s):
            if proc.poll() is not None:
                return
            lag = loop_lag(addr)
            samples.append(
                {
                    "t": round(time.monotonic() - started, 1),
                    **sample(proc.pid),
                    "lag_ms": round(lag * 1000, 1),
                }
            )

    def total_answered() -> int:
        with lock:
            return sum(sum(v.values()) for v in counts.values())

    replaced: list[dict[str, Any]] = []
    samples.append({"t": 0.0, **sample(proc.pid), "lag_ms": round(loop_lag(addr) * 1000, 1)})
    threads = [threading.Thread(target=sampler, daemon=True)]
    if dirs is not None:
        threads.append(
            threading.Thread(
                target=replacer, args=(*dirs, args.replace_every_s, stop, replaced, started), daemon=True
            )
        )
    with ThreadPoolExecutor(args.concurrency) as pool:
        futures = [pool.submit(client) for _ in range(args.concurrency)]
        for t in threads:
            t.start()
        # The warm-up: until --warmup-requests are answered (a count, not a time: what RSS climbs
        # with is the work met, and a slower machine meets it later), at most --seconds more.
        while total_answered() < args.warmup_requests and time.monotonic() - started < args.seconds:
            time.sleep(0.1)
        warmup_s = round(time.monotonic() - started, 1) if args.warmup_requests else 0.0
        time.sleep(args.seconds)
        stop.set()
        for f in futures:
            f.result()
    for t in threads:
        t.join(args.sample_s + 30)
    time.sleep(1.0)  # the server settles: slow clients cut, answers written
    samples.append({"t": round(time.monotonic() - started, 1), **sample(proc.pid)})
    alive = proc.poll() is None
    stderr = stop_server(proc)
    tracebacks = stderr.count("Traceback")
    first_traceback = stderr[stderr.find("Traceback") :][:3000] if tracebacks else ""

    mid = warmup_s + args.seconds / 2  # the judged span's middle
    half = [s for s in samples if s["t"] >= mid] or samples[-1:]
    first = half[0]
    last = samples[-1]
    rss_growth = rss_trend(samples, args.seconds, warmup_s)
    lags = [s["lag_ms"] for s in samples if "lag_ms" in s]
    early = [s["lag_ms"] for s in samples if "lag_ms" in s and warmup_s <= s["t"] < mid] or lags
    late = [s["lag_ms"] for s in half if "lag_ms" in s] or lags
    p99 = lambda v: float(np.percentile(v, 99))  # noqa: E731
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
        "loop_lag_flat_second_half": p99(late) <= max(250.0, 3 * p99(early)),
    }
    if dirs is not None:
        # Long enough for an in-place rewrite (every 8th): it happened, by rename and in place.
        long_enough = args.seconds >= 8 * args.replace_every_s
        checks["files_replaced"] = not long_enough or (
            len(replaced) >= 2 and any(r["how"] == "in place" for r in replaced)
        )
    total = sum(sum(v.values()) for v in counts.values())
    return {
        "tool": "tools/soak.py",
        "commit": commit(),
        "cpu": cpu_record(),
        "python": platform.python_version(),
        "seconds": args.seconds,
        "warmup_requests": args.warmup_requests,
        "warmup_s": warmup_s,  # when the judged span began (0: judged from the start)
        "concurrency": args.concurrency,
        "server_args": server_args,
        "requests": total,
        "requests_per_s": round(total / (warmup_s + args.seconds), 1),
        "by_kind": {name: dict(v) for name, v in sorted(counts.items())},
        "failures": failures[:50],
        "n_failures": len(failures),
        "valid_latency_ms": percentiles(latency),
        "rss_mb": {
            "start": samples[0]["rss_mb"],
            "second_half_start": first["rss_mb"],
            "end": last["rss_mb"],
            "max": max(s["rss_mb"] for s in samples),
            "second_half_growth": round(rss_growth, 1),  # rss_trend: medians of the 2nd and 4th quarters
        },
        "fds": {"start": samples[0]["fds"], "end": last["fds"], "max": max(s["fds"] for s in samples)},
        "threads": {
            "start": samples[0]["threads"],
            "end": last["threads"],
            "max": max(s["threads"] for s in samples),
        },
        "loop_lag_ms": {
            "first_half_p99": round(p99(early), 1),
            "second_half_p99": round(p99(late), 1),
            "max": round(max(lags), 1),
        },
        "models": MODELS if dirs else None,
        "files_replaced": replaced,
        "samples": samples,
        "tracebacks_logged": tracebacks,
        "first_traceback": first_traceback,
        "checks": checks,
        "ok": all(checks.values()),
    }


def rejudge(path: Path) -> dict[str, Any]:
    """A recorded run, its RSS check made again from its own samples by rss_trend (every other check
    is as recorded): for a run judged by an earlier rule."""
    record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    before = record["rss_mb"]["second_half_growth"]
    growth = rss_trend(record["samples"], record["seconds"], record.get("warmup_s", 0.0))
    record["rss_mb"]["second_half_growth"] = round(growth, 1)
    limit = max(32.0, 0.10 * record["rss_mb"]["second_half_start"])
    record["checks"]["rss_flat_second_half"] = growth <= limit
    record["ok"] = all(record["checks"].values())
    record["rejudged"] = (
        f"rss_flat_second_half by rss_trend (medians of the 2nd and 4th quarters) on the recorded "
        f"samples: {growth:.1f} MiB (limit {limit:.1f}); the run's own rule, two single samples, "
        f"gave {before} MiB"
    )
    return record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to drive the server")
    parser.add_argument("--concurrency", type=int, default=16, help="clients at once")
    parser.add_argument(
        "--warmup-requests",
        type=int,
        default=0,
        help="requests answered before the judged --seconds begin (RSS, lag and the halves are "
        "judged after them; the traffic is the same)",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "tests" / "results" / "soak.json")
    parser.add_argument("--model", help="a GGUF file to serve (default: the demo model)")
    parser.add_argument("--sample-s", type=float, default=1.0, help="seconds between resource samples")
    parser.add_argument("--max-body-mb", type=float, default=4.0, help="the server's --max-body-mb")
    parser.add_argument("--server-arg", action="append", default=[], help="one more jepa-server argument")
    parser.add_argument(
        "--replace-every-s",
        type=float,
        default=2.0,
        help="seconds between two rewrites of a served model file (the registry traffic)",
    )
    parser.add_argument(
        "--rejudge",
        type=Path,
        metavar="RECORD",
        help="judge a recorded run's samples again by this version's RSS rule (rss_trend) and write "
        "it to --out, saying so in the record; nothing is run",
    )
    args = parser.parse_args(argv)
    record = rejudge(args.rejudge) if args.rejudge else run(args)
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
            "loop_lag_ms",
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
