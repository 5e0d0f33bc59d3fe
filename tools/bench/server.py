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

    python tools/bench/server.py                    # the full run (about five minutes on 2 cores)
    python tools/bench/server.py --encoding base64  # answers as base64 (what the openai client asks)
    python tools/bench/server.py --smoke            # tiny models, a few requests: the test runs it

A benchmark, not a test: the numbers depend on the machine and on what else runs on it. The engine
file's fingerprint is recorded at the start and checked at the end (a rebuild during a run mixes two
builds and can crash the processes that have it mapped; the run then exits non-zero, as it does on
any mismatched vector or plan). The server, its clients and the checks are bench.serving's."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/server.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness
from bench.serving import (
    PHOTOS,
    SMOKE_MODEL,
    VIT_S16,
    Server,
    cpu_shares,
    getter,
    median_of,
    paired,
    percentiles,
    photos,
    post_plans,
    poster,
    request_body,
    rss_mb,
    rss_peak,
    same_bits,
    server_dirty,
    servers,
    steady,
    write_model,
)
from bench.world_models import LEWM_FULL, LEWM_SMOKE

SCHEMA = 2
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


# -- the cells


def embed_cell(
    server: Server, bodies: list[bytes], clients: int, n: int, warmup: int, expected: list[np.ndarray]
) -> dict[str, Any]:
    """`clients` clients posting the photos without pause: the window's rate and latency, the batching
    /metrics saw in it, the CPU it took, and every answer checked against `expected`."""
    with cpu_shares(server) as shares:
        try:
            w = asyncio.run(steady(server.url, poster(server.url, bodies), clients, n, warmup, True))
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
    """The control: `clients` clients on GET /health, the HTTP stack's rate without the engine."""
    with cpu_shares(server) as shares:
        try:
            w = asyncio.run(steady(server.url, getter(server.url), clients, n, clients, False))
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
    with harness.Load() as load, timed_prepare() as spent, ThreadPoolExecutor(workers) as pool:
        outs = list(
            pool.map(lambda cs: jepa.embed(cs[0], cs[1], pool="mean"), zip(contexts, shares, strict=True))
        )
    seconds = load.seconds
    mismatches = sum(not same_bits(row, expected[(w + j * workers) % len(expected)])
                     for w, out in enumerate(outs) for j, row in enumerate(out))  # fmt: skip
    others = load.others()
    return {
        "seconds": round(seconds, 3),
        "img_s": round(len(items) / seconds, 3),
        "cpu_ms_per_img": round(load.self_s / len(items) * 1000, 2),
        # decode + preprocess inside this run: ms per image, and its share of the workers' time
        "prepare_ms": round(statistics.fmean(spent) * 1000, 2),
        "prepare_share": round(sum(spent) / (seconds * workers), 4),
        "cpu_share": {"self": load.share(load.self_s), "others": others},
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


def planner_memory(server: Server, body: bytes, planners: int) -> tuple[dict[int, float], list[bytes]]:
    """The server's peak memory on cold workers: one plan (one worker's buffers), then `planners` at once
    (every worker's). A worker keeps its buffers, so later plans show no growth."""
    peak: dict[int, float] = {}
    answered: list[bytes] = []
    for n in (1, planners):
        with rss_peak(server.pid) as rss:
            answered += post_plans(server, body, n, 1).answers
        peak[n] = max(rss)
    return peak, answered


def planner_phase(server: Server, body: bytes, n: int, requests: int, plan: dict[str, Any],
                  peak_mb: float) -> tuple[dict[str, Any], list[bytes]]:
    """`n` concurrent planners posting `requests` plans each, every worker warm."""
    with cpu_shares(server) as shares:
        seconds, lat, queued, answers = post_plans(server, body, n, requests)
    plans = len(answers)
    return {
        "planners": n,
        "plans": plans,
        "seconds": round(seconds, 2),
        "plans_s": round(plans / seconds, 3),
        "rollouts_s": round(plans * plan["samples"] * plan["cem_steps"] / seconds, 1),
        "latency_ms": {**percentiles(lat), "max": round(max(lat) * 1000, 1)},
        "queue_ms_max": round(max(queued), 1),
        # summed latency over the wall time: how many plans ran at once on average
        "overlap": round(sum(lat) / seconds, 2),
        "rss_mb_peak": round(peak_mb, 1),  # the cold phase's, with as many planners
        "cpu_share": shares["cpu_share"],
        "others_cpu_share": shares["others_cpu_share"],
    }, answers


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
        peak, answered = planner_memory(server, body, planners)
        out: dict[str, Any] = {}
        for n in (1, planners):
            out[str(n)], answers = planner_phase(server, body, n, requests, plan, peak[n])
            answered += answers
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


def quiet(rounds: list[dict[str, Any]], *cells: str) -> list[dict[str, Any]]:
    """The rounds in which other processes took at most QUIET of the cores during these cells."""
    return [c for c in rounds if all(c[k]["others_cpu_share"] <= QUIET for k in cells)]


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


def options() -> argparse.ArgumentParser:
    p = harness.parser(__doc__, smoke="tiny models and a few requests (the test runs it)", threads=0,
                       threads_help="threads per graph (0: cores / workers)")
    p.add_argument("--model", default=None, help="serve this GGUF instead of writing a random ViT-S/16")
    p.add_argument("--ftype", default="f16", choices=("f32", "f16", "bf16"),
                   help="the random model's matrices")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--requests", type=int, default=64,
                   help="timed requests per embed cell (and images in-process)")
    p.add_argument("--health-requests", type=int, default=1000, help="timed GET /health per control cell")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed requests before each cell (default: its clients)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--planners", type=int, default=4,
                   help="concurrent planners in the planner cell (0: none)")
    p.add_argument("--plan-requests", type=int, default=2, help="plans per planner client in each phase")
    p.add_argument("--encoding", default="float", choices=("float", "base64"),
                   help="the answers' encoding_format")
    p.add_argument("--server-arg", action="append", default=[], help="one more jepa-server flag (repeatable)")
    p.add_argument("--note", default="", help="free text stored in the JSON")
    return p


class Grid:
    """The cells of one run: in-process jepa.embed at each max-batch, the embed and /health cells of each
    (max-batch, clients) on that max-batch's server, and one client on the --max-wait-ms 0 server."""

    def __init__(self, args: argparse.Namespace, batches: tuple[int, ...], clients: tuple[int, ...]) -> None:
        self.args, self.batches, self.clients = args, batches, clients
        self.wait0_batch = WAIT0_BATCH if WAIT0_BATCH in batches else max(batches)
        self.wait0 = f"embed-b{self.wait0_batch}-c1-wait0"
        self.cells = [f"inproc-b{b}" for b in batches]
        self.cells += [f"embed-b{b}-c{c}" for b in batches for c in clients]
        self.cells += [f"health-b{b}-c{c}" for b in batches for c in clients]
        self.cells.append(self.wait0)

    def configs(self) -> dict[str, tuple[int, list[str]]]:
        """One server per configuration: name -> (max-batch, extra flags)."""
        out = {f"b{b}": (b, self.args.server_arg) for b in self.batches}
        out["wait0"] = (self.wait0_batch, [*self.args.server_arg, "--max-wait-ms", "0"])
        return out

    def one(self, name: str, running: dict[str, Server], model: Any, threads: int, bodies: list[bytes],
            items: list[bytes], expected: list[np.ndarray]) -> dict[str, Any]:
        a = self.args
        kind, *spec = name.split("-")
        b = int(spec[0].removeprefix("b"))
        if kind == "inproc":
            return inproc_cell(model, a.workers, threads, b, items, expected)
        c = int(spec[1].removeprefix("c"))
        server = running["wait0" if name == self.wait0 else f"b{b}"]
        if kind == "health":
            return health_cell(server, c, a.health_requests)
        return embed_cell(server, bodies, c, a.requests, c if a.warmup is None else a.warmup, expected)

    def rounds(self, running: dict[str, Server], model: Any, threads: int, bodies: list[bytes],
               items: list[bytes], expected: list[np.ndarray]) -> list[dict[str, Any]]:
        """Every cell once a round, the order rotating."""
        out = []
        for r in range(self.args.rounds):
            done: dict[str, Any] = {}
            for name in harness.rotated(self.cells, r):
                done[name] = self.one(name, running, model, threads, bodies, items, expected)
                rate = done[name]["img_s" if name.startswith("inproc") else "req_s"]
                harness.log(f"round {r} {name}: {rate:.2f}/s")
            out.append(done)
        return out


def measure(args: argparse.Namespace, grid: Grid, data: dict[str, bytes], threads: int,
            tmp: Path) -> dict[str, Any]:
    """The grid's rounds on one model file (and the planner cell on its own)."""
    import jepa

    names = list(data)
    shape = SMOKE_MODEL if args.smoke else VIT_S16
    path = args.model or write_model(tmp / "model.gguf", shape, args.ftype)
    model = jepa.Model(path)
    ref_ctx = model.context(threads=threads, max_batch=1)
    expected = [jepa.embed(ref_ctx, [data[n]], pool="mean")[0] for n in names]  # each alone
    del ref_ctx
    bodies = [request_body(data[n], args.encoding) for n in names]
    items = [data[names[i % len(names)]] for i in range(args.requests)]
    cost = decode_cost(model, data, 3 if args.smoke else 9)
    with servers(path, args.workers, threads, grid.configs()) as running:
        rounds = grid.rounds(running, model, threads, bodies, items, expected)
        startup = {k: s.startup for k, s in running.items()}
    planner = None
    if args.planners:
        harness.log("planner cell")
        planner = planner_cell(tmp, args.smoke, args.planners, args.plan_requests, data, os.cpu_count() or 1)
    return {"shape": shape, "rounds": rounds, "startup": startup, "decode": cost, "planner": planner}


def main(argv: list[str] | None = None) -> int:
    args = harness.parse(options(), argv)
    batches, clients = (SMOKE_BATCHES, SMOKE_CLIENTS) if args.smoke else (BATCHES, CLIENTS)
    if args.smoke:
        args.requests, args.health_requests, args.rounds = min(args.requests, 8), 16, 1
        args.planners = min(args.planners, 2)
    threads = args.threads or max(1, (os.cpu_count() or 1) // args.workers)
    out = harness.out_path(args, "server-bench")
    run = harness.Run("server-bench", threads, args.smoke, modules=("aiohttp", "pillow"))
    data = photos(PHOTOS[:2] if args.smoke else PHOTOS)
    grid = Grid(args, batches, clients)
    with tempfile.TemporaryDirectory(prefix="jepa-bench-server-") as tmp:
        got = measure(args, grid, data, threads, Path(tmp))
    rounds, planner = got["rounds"], got["planner"]
    engine_changed = run.engine_changed()
    if engine_changed:
        harness.log("warning: the engine was rebuilt during the run; its figures mix two builds")
    summary = summarise(rounds, batches, clients, grid.wait0_batch)
    summary["prepare_ms"] = median_of(rounds, f"inproc-b{max(batches)}", "prepare_ms")
    summary["prepare_share_of_worker"] = median_of(rounds, f"inproc-b{max(batches)}", "prepare_share",
                                                   digits=4)
    if planner is not None:
        summary["mismatches"] += planner["mismatches"]
    result = {
        **run.head(),
        "schema": SCHEMA,
        "description": "jepa-server (subprocesses on loopback, one per configuration: --max-batch "
        f"{'/'.join(map(str, batches))}, and {grid.wait0_batch} at --max-wait-ms 0) under "
        f"{'/'.join(map(str, clients))} concurrent aiohttp clients posting one photo per /v1/embeddings "
        "request, a GET /health control on the same servers, in-process jepa.embed on the same JPEG "
        "bytes, model, threads and max-batch as the ceiling; cells interleaved round by round, ratios "
        "paired within rounds, medians over rounds; and a LeWM planner cell (/rollout with a plan)",
        "note": args.note,
        "server_dirty": server_dirty(),
        "engine_changed_during_run": engine_changed,
        "model": {"file": "random" if args.model is None else os.path.basename(args.model),
                  **({} if args.model else got["shape"]),
                  "ftype": args.ftype if args.model is None else None},
        "settings": {"workers": args.workers, "threads": threads, "max_batch": list(batches),
                     "clients": list(clients), "requests": args.requests, "warmup": args.warmup,
                     "health_requests": args.health_requests, "rounds": args.rounds,
                     "encoding_format": args.encoding, "server_args": args.server_arg, "photos": list(data),
                     "quiet": QUIET},
        "server_startup": got["startup"],
        "decode": got["decode"],
        "rounds": rounds,
        "planner": planner,
        "summary": summary,
    }  # fmt: skip
    harness.write_record(out, result)
    harness.log(json.dumps({k: v for k, v in summary.items() if k != "cells"}, indent=1))
    if planner is not None:
        harness.log(json.dumps({k: v for k, v in planner.items() if k not in ("phases", "server_startup")}))
    harness.log(f"wrote {out}")
    return 1 if summary["mismatches"] or engine_changed else 0


if __name__ == "__main__":
    sys.exit(main())
