#!/usr/bin/env python3
"""jepa on Ray Serve against jepa-server at the same total cores -> tests/results/bench-ray.json

The model is bench.serving's ViT-S/16 (384 wide, 12 blocks, 224 px, random weights written by
jepa.demo.write_demo_model, f16 matrices); the inputs its scikit-image photos as JPEG, one per
request, answers as float JSON. On this machine's C cores:

  ray-r{R}t{T}     a local Ray cluster (ray.init(num_cpus=C), the driver is this process), the
                   application `jepa_server.ray:app` with R replicas of C/R CPUs and T = C/R graph
                   threads each: the path a request takes across machines (Ray's HTTP proxy, its
                   router, the replica actor, the replica's Unix-socket hop into jepa-server's app)
  server-w{W}t{T}  jepa-server subprocesses on loopback (bench.serving.Server): --workers R --threads T,
                   the same contexts and threads as the Ray replicas together, and --workers 1
                   --threads C, one context on every core
  health-*         GET /health on both at 1 client (the per-request latency of each path) and at the
                   cell's clients (the rate each HTTP path sustains without the engine)

Every embed cell is `clients` concurrent aiohttp clients posting without pause (bench.serving.steady:
a timed window after a warm-up, kept saturated to its end); every answer is checked bit for bit
against in-process jepa.embed after the cell. The cells run interleaved, round after round, the
order rotating. The ratio (Ray over the faster jepa-server configuration, req/s) is paired within a
round, then the median over rounds; the goal is 0.8 (issue 12: what routing may cost). `hop_ms` is
the replica's own hop alone: /health forwarded through the Unix socket to an embedded app, in this
process, sequentially (EmbeddedServer.forward), against the same app's /health over loopback TCP.

    python tools/bench/ray.py            # the full run (about five minutes on 2 cores)
    python tools/bench/ray.py --smoke    # a tiny model and a few requests: the test suite runs it

A benchmark, not a test: the numbers depend on the machine and on what else runs on it. The record's
head (commit, machine, the CPU held, versions) and the load are bench.harness's."""

from __future__ import annotations

import argparse
import asyncio
import os
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

if not __package__:  # python tools/bench/ray.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness, serving

SCHEMA = 1
GOAL = 0.8  # issue 12: Ray's throughput at least this share of jepa-server's at the same cores
CLIENTS, SMOKE_CLIENTS = 32, 4
# Ray's proxy reads this once, when it starts: its own refusals in the envelope (as deployed).
RAY_ENV = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": "jepa_server.ray.proxy:middlewares"}


def ray_versions() -> dict[str, str]:
    """Ray's and Starlette's versions (Ray warns of its own deprecations on import)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import ray
        import starlette
    return {"ray": ray.__version__, "starlette": starlette.__version__}


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


def shares(load: harness.Load) -> dict[str, Any]:
    """The share of all cores the whole machine, and this process (the clients), used in a cell, and
    the CPU-seconds the serving processes spent in it: what a request costs the path, whatever else
    the machine ran (a shared machine's req/s depends on its neighbours)."""
    return {"machine_cpu_share": load.share(load.machine_s), "client_cpu_share": load.share(load.self_s),
            "serving_cpu_s": round(load.pids_s, 3)}


def embed_cell(
    url: str, bodies: list[bytes], clients: int, n: int, expected: list[np.ndarray], pids: list[int]
) -> dict[str, Any]:
    with harness.Load(pids) as load:
        w = asyncio.run(serving.steady(url, serving.poster(url, bodies), clients, n, clients, False))
    return {
        **w.timing(n),
        "server_ms": w.server_ms(),
        "mismatches": w.wrong_vectors(expected),
        "answered": len(w.answers),
        # CPU-milliseconds the serving processes spent per answer (warm-up and tail included)
        "cpu_ms_per_req": round(load.pids_s / len(w.answers) * 1000, 2),
        **shares(load),
    }


def health_cell(url: str, clients: int, n: int, pids: list[int]) -> dict[str, Any]:
    with harness.Load(pids) as load:
        w = asyncio.run(serving.steady(url, serving.getter(url), clients, n, clients, False))
    return {**w.timing(n, req_s_digits=1), "mismatches": w.unhealthy(), "answered": len(w.answers),
            "cpu_ms_per_req": round(load.pids_s / len(w.answers) * 1000, 3),
            **shares(load)}  # fmt: skip


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


def memory(servers: dict[str, serving.Server]) -> dict[str, Any]:
    """Resident memory, MiB: each Ray replica (its process holds the model and its contexts), Ray's
    own processes on the node (GCS, raylet, controller, proxy, ...), and each jepa-server."""
    servers_pids = {s.pid for s in servers.values()}
    procs = {pid: cmd for pid, cmd in _descendants(os.getpid()).items() if pid not in servers_pids}
    replicas = [round(serving.rss_mb(pid), 1) for pid, cmd in procs.items() if "ServeReplica" in cmd]
    others = sum(serving.rss_mb(pid) for pid, cmd in procs.items() if "ServeReplica" not in cmd)
    return {"ray_replica_rss_mb": sorted(replicas), "ray_system_rss_mb": round(others, 1),
            "server_rss_mb": {k: round(serving.rss_mb(s.pid), 1) for k, s in servers.items()}}  # fmt: skip


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


def options() -> argparse.ArgumentParser:
    p = harness.parser(__doc__, smoke="a tiny model and a few requests (the test runs it)", threads=None)
    p.add_argument("--model", default=None, help="serve this GGUF instead of writing a random ViT-S/16")
    p.add_argument("--ftype", default="f16", choices=("f32", "f16", "bf16"))
    p.add_argument("--clients", type=int, default=None, help=f"concurrent clients (default {CLIENTS})")
    p.add_argument("--requests", type=int, default=256, help="timed requests per embed cell")
    p.add_argument("--health-requests", type=int, default=1000, help="timed GET /health per control cell")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-batch", type=int, default=8)
    p.add_argument("--replicas", type=int, default=0, help="Ray replicas (0: one per core)")
    p.add_argument("--note", default="", help="free text stored in the JSON")
    return p


class Cells:
    """The run's cells: Ray with R replicas of T threads, jepa-server split the same way and whole."""

    def __init__(self, cores: int, replicas: int) -> None:
        self.cores, self.replicas = cores, replicas
        self.threads = max(1, cores // replicas)
        self.ray = f"ray-r{replicas}t{self.threads}"
        self.split = f"server-w{replicas}t{self.threads}"
        self.whole = f"server-w1t{cores}"
        self.servers = {self.split: (replicas, self.threads), self.whole: (1, cores)}

    def names(self) -> dict[str, str]:
        return {"ray": self.ray, "split": self.split, "whole": self.whole}


def measure(args: argparse.Namespace, cells: Cells, clients: int, data: dict[str, bytes],
            path: str) -> dict[str, Any]:
    """The interleaved rounds on both paths, the hop alone, the replicas' spread and the memory."""
    import jepa

    names = list(data)
    ctx = jepa.Model(path).context(threads=cells.cores, max_batch=1)
    expected = [jepa.embed(ctx, [data[n]], pool="mean")[0] for n in names]  # each alone
    del ctx
    bodies = [serving.request_body(data[n], "float") for n in names]
    hop = hop_cost(path, 50 if args.smoke else 500)
    harness.log(f"hop {hop}")
    running: dict[str, serving.Server] = {}
    rounds: list[dict[str, Any]] = []
    try:
        for name, (w, t) in cells.servers.items():
            extra = ["--max-concurrent-requests", "1024"]
            running[name] = serving.Server(path, w, t, args.max_batch, extra).start()
        with ray_app(path, cells.cores, cells.replicas, cells.threads, args.max_batch) as ray_url:
            urls = {cells.ray: ray_url, **{k: s.url for k, s in running.items()}}
            # The processes each path runs on: Ray's are every process under this one (the GCS,
            # raylet, controller, proxy and replicas) but the jepa-servers.
            theirs = {s.pid for s in running.values()}
            pids = {cells.ray: [p for p in _descendants(os.getpid()) if p not in theirs],
                    **{k: [s.pid] for k, s in running.items()}}  # fmt: skip
            spread = replica_spread(ray_url, bodies[0], 4 * clients)
            order = [*urls, f"health-{cells.ray}", f"health-{cells.split}"]
            for r in range(args.rounds):
                done: dict[str, Any] = {}
                for name in harness.rotated(order, r):
                    if name.startswith("health-"):
                        at = name.removeprefix("health-")
                        done[name] = health_cell(urls[at], clients, args.health_requests, pids[at])
                        done[name + "-c1"] = health_cell(urls[at], 1, args.health_requests // 4, pids[at])
                    else:
                        done[name] = embed_cell(urls[name], bodies, clients, args.requests, expected,
                                                pids[name])
                    harness.log(f"round {r} {name}: {done[name]['req_s']:.2f}/s")
                rounds.append(done)
            mem = memory(running)  # warm: every process has served the whole run
    finally:
        for s in running.values():
            s.stop()
    return {"rounds": rounds, "hop": hop, "spread": spread, "memory": mem}


def summarise(got: dict[str, Any], cells: Cells) -> dict[str, Any]:
    rounds = got["rounds"]
    ray, split, whole = cells.ray, cells.split, cells.whole
    ratio = serving.paired(rounds, ray, [split, whole], "req_s")
    cpu = {k: serving.median_of(rounds, k, "cpu_ms_per_req") for k in (ray, split, whole)}
    by_cpu = None  # the cheaper jepa-server's CPU cost over Ray's: the throughput ratio on cores of their own
    if cpu[ray] and cpu[split] is not None and cpu[whole] is not None:
        by_cpu = round(min(cpu[split], cpu[whole]) / cpu[ray], 3)
    return {
        "ray_req_s": serving.median_of(rounds, ray, "req_s"),
        "server_req_s": {k: serving.median_of(rounds, k, "req_s") for k in (split, whole)},
        "ray_over_server": ratio,
        "ray_over_same_split": serving.paired(rounds, ray, split),
        "goal": GOAL,
        "meets_goal": None if ratio is None else ratio >= GOAL,
        "latency_ms": {k: {q: serving.median_of(rounds, k, "latency_ms", q) for q in ("p50", "p95", "p99")}
                       for k in (ray, split, whole)},
        "health_req_s": {k: serving.median_of(rounds, f"health-{k}", "req_s") for k in (ray, split)},
        # CPU per request of each path: on a CPU-bound machine of its own, throughputs go as its inverse
        "cpu_ms_per_req": cpu,
        "ray_over_server_by_cpu": by_cpu,
        "health_cpu_ms_per_req": {k: serving.median_of(rounds, f"health-{k}", "cpu_ms_per_req", digits=3)
                                  for k in (ray, split)},
        "health_p50_ms_one_client": {k: serving.median_of(rounds, f"health-{k}-c1", "latency_ms", "p50")
                                     for k in (ray, split)},
        "hop": got["hop"],
        "replica_spread": got["spread"],
        "memory": got["memory"],
        "mismatches": sum(c["mismatches"] for r in rounds for c in r.values()),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = harness.parse(options(), argv)
    clients = args.clients or (SMOKE_CLIENTS if args.smoke else CLIENTS)
    if args.smoke:
        args.requests, args.health_requests, args.rounds = min(args.requests, 8), 16, 1
    cores = os.cpu_count() or 1
    cells = Cells(cores, args.replicas or cores)
    out = harness.out_path(args, "bench-ray")
    run = harness.Run("bench-ray", cores, args.smoke, modules=("aiohttp", "pillow"), versions=ray_versions())
    data = serving.photos(serving.PHOTOS[:2] if args.smoke else serving.PHOTOS)
    with tempfile.TemporaryDirectory(prefix="jepa-bench-ray-") as tmp:
        shape = serving.SMOKE_MODEL if args.smoke else serving.VIT_S16
        path = args.model or serving.write_model(Path(tmp) / "model.gguf", shape, args.ftype)
        got = measure(args, cells, clients, data, path)
    engine_changed = run.engine_changed()
    summary = summarise(got, cells)
    result = {
        **run.head(),
        "schema": SCHEMA,
        "description": f"jepa_server.ray ({cells.replicas} replicas x {cells.threads} threads on a local "
        f"Ray cluster of {cores} CPUs) against jepa-server (--workers {cells.replicas} --threads "
        f"{cells.threads}, and --workers 1 --threads {cores}) on the same cores, {clients} concurrent "
        "clients posting one photo per /v1/embeddings request; cells interleaved round by round, ratios "
        "paired within rounds, medians over rounds; every vector checked bit for bit against in-process "
        "jepa.embed",
        "note": args.note,
        "server_dirty": serving.server_dirty(),
        "engine_changed_during_run": engine_changed,
        "settings": {
            "model": os.path.basename(args.model) if args.model else
            ("a tiny ViT (64 wide, 2 blocks, 64 px)" if args.smoke else "ViT-S/16") + f" {args.ftype}",
            "clients": clients, "requests": args.requests, "health_requests": args.health_requests,
            "rounds": args.rounds, "max_batch": args.max_batch, "max_wait_ms": 5.0,
            "replicas": cells.replicas, "threads": cells.threads, "cores": cores, "cells": cells.names(),
        },
        "summary": summary,
        "rounds": got["rounds"],
    }  # fmt: skip
    harness.write_record(out, result)
    harness.log(f"wrote {out}: Ray {summary['ray_req_s']} req/s, jepa-server {summary['server_req_s']}, "
                f"ratio {summary['ray_over_server']} (goal {GOAL}); mismatches {summary['mismatches']}")
    return 1 if summary["mismatches"] or engine_changed else 0


if __name__ == "__main__":
    sys.exit(main())
