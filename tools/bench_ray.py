#!/usr/bin/env python3
"""jepa on Ray Serve against jepa-server at the same total cores -> tests/results/bench-ray.json

The model is bench_server.py's ViT-S/16 (384 wide, 12 blocks, 224 px, random weights written by
jepa.demo.write_demo_model, f16 matrices); the inputs its scikit-image photos as JPEG, one per
request, answers as float JSON. On this machine's C cores:

  ray-r{R}t{T}     a local Ray cluster (ray.init(num_cpus=C), the driver is this process), the
                   application `jepa_server.ray:app` with R replicas of C/R CPUs and T = C/R graph
                   threads each: the path a request takes across machines (Ray's HTTP proxy, its
                   router, the replica actor, the replica's Unix-socket hop into jepa-server's app)
  server-w{W}t{T}  jepa-server subprocesses on loopback (bench_server.Server): --workers R --threads T,
                   the same contexts and threads as the Ray replicas together, and --workers 1
                   --threads C, one context on every core
  health-*         GET /health on both at 1 client (the per-request latency of each path) and at the
                   cell's clients (the rate each HTTP path sustains without the engine)

Every embed cell is `clients` concurrent aiohttp clients posting without pause (bench_server._steady:
a timed window after a warm-up, kept saturated to its end); every answer is checked bit for bit
against in-process jepa.embed after the cell. The cells run interleaved, round after round, the
order rotating. The ratio (Ray over the faster jepa-server configuration, req/s) is paired within a
round, then the median over rounds; the goal is 0.8 (issue 12: what routing may cost). `hop_ms` is
the replica's own hop alone: /health forwarded through the Unix socket to an embedded app, in this
process, sequentially (EmbeddedServer.forward), against the same app's /health over loopback TCP.

    python tools/bench_ray.py            # the full run (about five minutes on 2 cores)
    python tools/bench_ray.py --smoke    # a tiny model and a few requests: the test suite runs it

A benchmark, not a test: the numbers depend on the machine and on what else runs on it."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-ray.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "bench-ray-smoke.json"
SCHEMA = 1
GOAL = 0.8  # issue 12: Ray's throughput at least this share of jepa-server's at the same cores
CLIENTS, SMOKE_CLIENTS = 32, 4
# Ray's proxy reads this once, when it starts: its own refusals in the envelope (as deployed).
RAY_ENV = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "jepa_server.ray.proxy:middlewares"}

sys.path.insert(0, str(Path(__file__).resolve().parent))
# One definition of the machine record, the commit, the inputs, the load and the checks.
from bench_engine import git_commit, machine_busy_s, machine_info, self_busy_s  # noqa: E402
from bench_server import (  # noqa: E402
    SMOKE_MODEL,
    VIT_S16,
    RunStart,
    Server,
    _getter,
    _poster,
    _steady,
    process_busy_s,
    request_body,
    rss_mb,
    server_dirty,
    write_model,
)
from bench_server import versions as server_versions  # noqa: E402


def versions() -> dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        import starlette
    return {**server_versions(), "ray": ray.__version__, "starlette": starlette.__version__}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def ray_app(model: str, cores: int, replicas: int, threads: int, max_batch: int) -> Iterator[str]:
    """A local Ray cluster serving the application; yields its URL."""
    os.environ.update(RAY_ENV)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        from ray import serve

        from jepa_server.ray import app

    ray.init(num_cpus=cores, include_dashboard=False, log_to_driver=False, logging_level="WARNING")
    try:
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port}, logging_config={"log_level": "WARNING"})
        args = {"model": model, "num_replicas": replicas, "num_cpus": cores / replicas, "threads": threads,
                "max_batch": max_batch, "max_concurrent_requests": 1024}  # fmt: skip
        serve.run(app(args), route_prefix="/")
        yield f"http://127.0.0.1:{port}"
    finally:
        try:
            serve.shutdown()
        finally:
            ray.shutdown()


@contextmanager
def machine_share(pids: list[int]) -> Iterator[dict[str, Any]]:
    """The share of all cores the whole machine, and this process (the clients), used in the block,
    and the CPU-seconds the serving processes `pids` spent in it: what a request costs the path,
    whatever else the machine ran (a shared machine's req/s depends on its neighbours)."""
    busy, mine, t0 = machine_busy_s(), self_busy_s(), time.perf_counter()
    serving = sum(process_busy_s(p) for p in pids)
    out: dict[str, Any] = {}
    yield out
    wall = (time.perf_counter() - t0) * (os.cpu_count() or 1)
    out["machine_cpu_share"] = round(min(1.0, (machine_busy_s() - busy) / wall), 3)
    out["client_cpu_share"] = round(min(1.0, (self_busy_s() - mine) / wall), 3)
    out["serving_cpu_s"] = round(sum(process_busy_s(p) for p in pids) - serving, 3)


def embed_cell(
    url: str, bodies: list[bytes], clients: int, n: int, expected: list[np.ndarray], pids: list[int]
) -> dict[str, Any]:
    with machine_share(pids) as share:
        w = asyncio.run(_steady(url, _poster(url, bodies), clients, n, clients, False))
    return {
        **w.timing(n),
        "server_ms": w.server_ms(),
        "mismatches": w.wrong_vectors(expected),
        "answered": len(w.answers),
        # CPU-milliseconds the serving processes spent per answer (warm-up and tail included)
        "cpu_ms_per_req": round(share["serving_cpu_s"] / len(w.answers) * 1000, 2),
        **share,
    }


def health_cell(url: str, clients: int, n: int, pids: list[int]) -> dict[str, Any]:
    with machine_share(pids) as share:
        w = asyncio.run(_steady(url, _getter(url), clients, n, clients, False))
    return {**w.timing(n, req_s_digits=1), "mismatches": w.unhealthy(), "answered": len(w.answers),
            "cpu_ms_per_req": round(share["serving_cpu_s"] / len(w.answers) * 1000, 3),
            **share}  # fmt: skip


def _descendants(root: int) -> dict[int, str]:
    """pid -> command line of every process under `root` (from /proc; empty where it is absent)."""
    parents: dict[int, int] = {}
    names: dict[int, str] = {}
    for d in Path("/proc").glob("[0-9]*"):
        try:
            parents[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            names[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
    out, todo = {}, [root]
    while todo:
        pid = todo.pop()
        for child, parent in parents.items():
            if parent == pid and child not in out:
                out[child] = names.get(child, "")
                todo.append(child)
    return out


def memory(servers: dict[str, Server]) -> dict[str, Any]:
    """Resident memory, MiB: each Ray replica (its process holds the model and its contexts), Ray's
    own processes on the node (GCS, raylet, controller, proxy, ...), and each jepa-server."""
    servers_pids = {s.pid for s in servers.values()}
    procs = {pid: cmd for pid, cmd in _descendants(os.getpid()).items() if pid not in servers_pids}
    replicas = [round(rss_mb(pid), 1) for pid, cmd in procs.items() if "ServeReplica" in cmd]
    others = sum(rss_mb(pid) for pid, cmd in procs.items() if "ServeReplica" not in cmd)
    return {"ray_replica_rss_mb": sorted(replicas), "ray_system_rss_mb": round(others, 1),
            "server_rss_mb": {k: round(rss_mb(s.pid), 1) for k, s in servers.items()}}  # fmt: skip


def replica_spread(url: str, body: bytes, n: int) -> dict[str, int]:
    """Which replica answered each of n concurrent requests (x-jepa-replica)."""
    import aiohttp

    async def go() -> Counter[str]:
        async with aiohttp.ClientSession() as s:
            async def one() -> str:
                async with s.post(url + "/v1/embeddings", data=body,
                                  headers={"Content-Type": "application/json"}) as r:  # fmt: skip
                    await r.read()
                    return r.headers.get("x-jepa-replica", "?")

            return Counter(await asyncio.gather(*(one() for _ in range(n))))

    return dict(asyncio.run(go()))


def hop_cost(model: str, n: int) -> dict[str, float]:
    """The replica's Unix-socket hop alone: /health through EmbeddedServer.forward against the same
    app's /health over loopback TCP, sequentially, ms per request (median of 5 runs of n)."""
    import aiohttp
    from aiohttp import web

    from jepa_server.ray.embedded import EmbeddedServer
    from jepa_server.settings import Settings

    async def go() -> dict[str, float]:
        server = await EmbeddedServer.start(Settings.from_mapping({"model": model, "threads": 1}))
        port = _free_port()
        await web.TCPSite(server._runner, "127.0.0.1", port).start()  # the same app, also on TCP
        hop, tcp = [], []
        try:
            async with aiohttp.ClientSession() as session:
                for _ in range(5):
                    t = time.perf_counter()
                    for _ in range(n):
                        await server.forward("GET", "/health", [], b"")
                    hop.append((time.perf_counter() - t) / n * 1000)
                    t = time.perf_counter()
                    for _ in range(n):
                        async with session.get(f"http://127.0.0.1:{port}/health") as r:
                            await r.read()
                    tcp.append((time.perf_counter() - t) / n * 1000)
        finally:
            await server.close()
        return {"unix_hop_ms": round(statistics.median(hop), 3),
                "tcp_loopback_ms": round(statistics.median(tcp), 3)}  # fmt: skip

    return asyncio.run(go())


def paired(rounds: list[dict[str, Any]], num: str, dens: list[str]) -> float | None:
    """Median over rounds of num's req/s over the best of dens' req/s in the same round."""
    vals = [r[num]["req_s"] / max(r[d]["req_s"] for d in dens) for r in rounds if num in r]
    return round(statistics.median(vals), 3) if vals else None


def median_of(rounds: list[dict[str, Any]], cell: str, *path: str) -> float:
    vals = []
    for r in rounds:
        v: Any = r[cell]
        for p in path:
            v = v[p]
        vals.append(float(v))
    return round(statistics.median(vals), 2)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--smoke", action="store_true", help="a tiny model and a few requests (the test runs it)")
    p.add_argument("--model", default=None, help="serve this GGUF instead of writing a random ViT-S/16")
    p.add_argument("--ftype", default="f16", choices=("f32", "f16", "bf16"))
    p.add_argument("--clients", type=int, default=None, help=f"concurrent clients (default {CLIENTS})")
    p.add_argument("--requests", type=int, default=256, help="timed requests per embed cell")
    p.add_argument("--health-requests", type=int, default=1000, help="timed GET /health per control cell")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--replicas", type=int, default=0, help="Ray replicas (0: one per core)")
    p.add_argument("--out", type=Path, default=None,
                   help=f"JSON to write (default {DEFAULT_OUT.relative_to(ROOT)}; with --smoke, {SMOKE_OUT})")
    p.add_argument("--note", default="", help="free text stored in the JSON")
    args = p.parse_args(argv)  # fmt: skip
    clients = args.clients or (SMOKE_CLIENTS if args.smoke else CLIENTS)
    if args.smoke:
        args.requests, args.health_requests, args.rounds = min(args.requests, 8), 16, 1

    import jepa

    cores = os.cpu_count() or 1
    replicas = args.replicas or cores
    threads = max(1, cores // replicas)
    out: Path = args.out or (SMOKE_OUT if args.smoke else DEFAULT_OUT)
    start = RunStart.now(args.smoke, versions)
    data = start.photos
    names = list(data)
    ray_cell, split = f"ray-r{replicas}t{threads}", f"server-w{replicas}t{threads}"
    whole = f"server-w1t{cores}"
    servers = {split: (replicas, threads), whole: (1, cores)}
    with tempfile.TemporaryDirectory(prefix="jepa-bench-ray-") as tmp:
        path = args.model or write_model(Path(tmp) / "model.gguf", SMOKE_MODEL if args.smoke else VIT_S16,
                                         args.ftype)  # fmt: skip
        ctx = jepa.Model(path).context(threads=cores, max_batch=1)
        expected = [jepa.embed(ctx, [data[n]], pool="mean")[0] for n in names]  # each alone
        del ctx
        bodies = [request_body(data[n], "float") for n in names]
        hop = hop_cost(path, 50 if args.smoke else 500)
        print(f"hop {hop}", file=sys.stderr, flush=True)
        running: dict[str, Server] = {}
        rounds: list[dict[str, Any]] = []
        try:
            for name, (w, t) in servers.items():
                extra = ["--max-concurrent-requests", "1024"]
                running[name] = Server(path, w, t, args.max_batch, extra).start()
            with ray_app(path, cores, replicas, threads, args.max_batch) as ray_url:
                urls = {ray_cell: ray_url, **{k: s.url for k, s in running.items()}}
                # The processes each path runs on: Ray's are every process under this one (the
                # GCS, raylet, controller, proxy and replicas) but the jepa-servers.
                theirs = {s.pid for s in running.values()}
                pids = {ray_cell: [p for p in _descendants(os.getpid()) if p not in theirs],
                        **{k: [s.pid] for k, s in running.items()}}  # fmt: skip
                spread = replica_spread(ray_url, bodies[0], 4 * clients)
                cells = [*urls, f"health-{ray_cell}", f"health-{split}"]
                for r in range(args.rounds):
                    done: dict[str, Any] = {}
                    for name in cells[r % len(cells):] + cells[: r % len(cells)]:
                        if name.startswith("health-"):
                            path = name.removeprefix("health-")
                            done[name] = health_cell(urls[path], clients, args.health_requests, pids[path])
                            done[name + "-c1"] = health_cell(urls[path], 1, args.health_requests // 4,
                                                             pids[path])  # fmt: skip
                        else:
                            done[name] = embed_cell(urls[name], bodies, clients, args.requests, expected,
                                                    pids[name])  # fmt: skip
                        print(f"round {r} {name}: {done[name]['req_s']:.2f}/s", file=sys.stderr, flush=True)
                    rounds.append(done)
                mem = memory(running)  # warm: every process has served the whole run
        finally:
            for s in running.values():
                s.stop()

    engine_changed = start.engine_changed()
    mismatches = sum(c["mismatches"] for r in rounds for c in r.values())
    lat = {k: {q: median_of(rounds, k, "latency_ms", q) for q in ("p50", "p95", "p99")}
           for k in (ray_cell, split, whole)}  # fmt: skip
    ratio = paired(rounds, ray_cell, [split, whole])
    summary = {
        "ray_req_s": median_of(rounds, ray_cell, "req_s"),
        "server_req_s": {k: median_of(rounds, k, "req_s") for k in (split, whole)},
        "ray_over_server": ratio,
        "ray_over_same_split": paired(rounds, ray_cell, [split]),
        "goal": GOAL,
        "meets_goal": None if ratio is None else ratio >= GOAL,
        "latency_ms": lat,
        "health_req_s": {k: median_of(rounds, f"health-{k}", "req_s") for k in (ray_cell, split)},
        # CPU per request of each path: on a CPU-bound machine of its own, throughputs go as its inverse
        "cpu_ms_per_req": {k: median_of(rounds, k, "cpu_ms_per_req") for k in (ray_cell, split, whole)},
        # the throughput ratio those CPU costs give where the serving processes have the cores to
        # themselves: the cheaper jepa-server's cost over Ray's
        "ray_over_server_by_cpu": None,
        "health_cpu_ms_per_req": {
            k: median_of(rounds, f"health-{k}", "cpu_ms_per_req") for k in (ray_cell, split)
        },
        "health_p50_ms_one_client": {
            k: median_of(rounds, f"health-{k}-c1", "latency_ms", "p50") for k in (ray_cell, split)
        },
        "hop": hop,
        "replica_spread": spread,
        "memory": mem,
        "mismatches": mismatches,
    }
    cpu = summary["cpu_ms_per_req"]
    if cpu[ray_cell] > 0:
        summary["ray_over_server_by_cpu"] = round(min(cpu[split], cpu[whole]) / cpu[ray_cell], 3)
    result = {
        "benchmark": "bench-ray",
        "schema": SCHEMA,
        "description": f"jepa_server.ray ({replicas} replicas x {threads} threads on a local Ray cluster of "
        f"{cores} CPUs) against jepa-server (--workers {replicas} --threads {threads}, and --workers 1 "
        f"--threads {cores}) on the same cores, {clients} concurrent clients posting one photo per "
        "/v1/embeddings request; cells interleaved round by round, ratios paired within rounds, medians "
        "over rounds; every vector checked bit for bit against in-process jepa.embed",
        "started": start.started,
        "seconds": start.seconds(),
        "smoke": args.smoke,
        "note": args.note,
        "commit": git_commit(),
        "server_dirty": server_dirty(),
        "engine_changed_during_run": engine_changed,
        "machine": machine_info(cores),
        "versions": start.versions,
        "python": platform.python_version(),
        "settings": {
            "model": os.path.basename(args.model) if args.model else
            ("a tiny ViT (64 wide, 2 blocks, 64 px)" if args.smoke else "ViT-S/16") + f" {args.ftype}",
            "clients": clients, "requests": args.requests, "health_requests": args.health_requests,
            "rounds": args.rounds, "max_batch": args.max_batch, "max_wait_ms": 5.0,
            "replicas": replicas, "threads": threads, "cores": cores,
            "cells": {"ray": ray_cell, "split": split, "whole": whole},
        },
        "summary": summary,
        "rounds": rounds,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}: Ray {summary['ray_req_s']} req/s, jepa-server {summary['server_req_s']}, "
          f"ratio {ratio} (goal {GOAL}); mismatches {mismatches}", file=sys.stderr)  # fmt: skip
    return 1 if mismatches or engine_changed else 0


if __name__ == "__main__":
    sys.exit(main())
