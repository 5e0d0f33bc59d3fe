"""Planner latency as users meet it: one full plan from frames per world model, horizon and file type,
through jepa.plan in this process and through jepa-server's /rollout -> tests/results/bench-world-plan.json
(rendered into docs/world-models.md, "Planner latency").

The models have random weights (jepa.testing.random_world, numpy only), written at each file type from
the same draws (f32, f16, bf16):
- V-JEPA 2-AC at the released size: the predictor (24 blocks x 1024, 16 heads, MLP 4096) behind its
  ViT-g encoder (1408 wide, 40 layers, 22 heads, MLP 6144, 256 px, patch 16, tubelet 2), planned with
  the planner's defaults (Meta's notebook: 25 samples, top 10, 2 CEM iterations) at horizons 1, 2, 4;
- LeWM at the published size (bench.world_models' LEWM_FULL), planned with its eval's solver (300 samples,
  top 30, 30 steps, horizon 5).
A plan starts from frames: two photos (scikit-image's, as JPEG bytes), the current frame and the goal,
and for V-JEPA 2-AC a robot pose; both frames are encoded in every plan, as in a user's call.

Per (model, file type, horizon):
- jepa.plan: a context of --threads threads and max_batch 32 (jepa's default); one untimed warm-up
  plan of one CEM iteration (the same graphs), then --rounds timed plans (their median); the two
  encodes (world.latents) timed apart once per file.
- /rollout: jepa-server on the file with the same max_batch, its "plan" posted by 1 client (--requests
  plans one after another; the server: 1 worker of --threads threads) and by 4 concurrent clients
  (--requests each; min(4, --threads) workers sharing the threads): plans/s over the wall time and the
  latencies the clients saw. Each server is warmed first with one one-iteration plan per worker.
  Every answer's actions are checked bit for bit against jepa.plan's.

    python tools/bench/world_plan.py                 # released sizes (several hours on 2 cores)
    python tools/bench/world_plan.py --quick         # CPU-sized: see QUICK
    python tools/bench/world_plan.py --cpu x86-64-v3 # the AVX2 class -> bench-world-plan-avx2.json
    python tools/bench/world_plan.py --smoke --out /tmp/p.json   # tiny models, every cell (the test)

A benchmark, not a test: its numbers depend on the machine and on what else runs on it (the share of
the cores other processes took is recorded per cell). The run exits non-zero when an answer's plan is
not jepa.plan's or the engine file changed under it."""

from __future__ import annotations

import base64
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/world_plan.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness
from bench.serving import Server, cpu_shares, percentiles, photos, post_plans, same_bits
from bench.world_models import AC_FULL, AC_SMOKE, FTYPES, LEWM_FULL, LEWM_SMOKE

AC_HORIZONS = (1, 2, 4)
PLANNERS = (1, 4)  # concurrent clients posting plans
AC_ENC_LAYERS = 40  # ViT-g's depth (bench.world_models' AC_FULL keeps 1: bench.world starts from latents)
MAX_BATCH = 32  # jepa's context default and the server's most: an AC plan's 25 samples in one chunk
QUICK = dict(ac_layers=2, enc_layers=2, lewm_steps=3)
SMOKE_AC_PLAN = dict(samples=8, topk=3, cem_steps=2)
SMOKE_LEWM_PLAN = dict(num_samples=16, topk=4, n_steps=2, horizon=5)
TIMEOUT_S = 4 * 3600  # the server's request and queue timeouts, and the clients': never the limit here
FRAMES = ("astronaut", "chelsea")  # the current frame, the goal
AC_STATE = (0.35, -0.05, 0.4, 0.0, 0.0, 0.0, 0.5)  # a robot pose: xyz, rotation, gripper


@dataclass(frozen=True)
class Spec:
    """One world model at one size and the plans it is timed on (planner option names)."""

    kind: str  # "ac" | "lewm"
    dims: dict[str, int]
    plans: list[dict[str, Any]] = field(default_factory=list)

    def write(self, path: Path, ftype: str) -> str:
        from jepa.testing.random_world import write_random_ac, write_random_lewm

        writer = write_random_ac if self.kind == "ac" else write_random_lewm
        return writer(path, ftype=ftype, **self.dims)


def _defaults(kind: str, *names: str) -> dict[str, Any]:
    from jepa.world_kinds import WORLD_KINDS

    return {n: WORLD_KINDS[kind].planner_default(n) for n in names}


def specs(smoke: bool, quick: bool, ac_layers: int | None, enc_layers: int | None) -> list[Spec]:
    if smoke:
        ac_dims, lewm_dims = dict(AC_SMOKE), dict(LEWM_SMOKE)
        ac_plan, lewm_plan = dict(SMOKE_AC_PLAN), dict(SMOKE_LEWM_PLAN)
    else:
        ac_dims = {**AC_FULL, "n_layer": ac_layers or (QUICK["ac_layers"] if quick else AC_FULL["n_layer"]),
                   "enc_layers": enc_layers or (QUICK["enc_layers"] if quick else AC_ENC_LAYERS)}
        lewm_dims = dict(LEWM_FULL)
        ac_plan = _defaults("ac", "samples", "topk", "cem_steps")
        lewm_plan = _defaults("lewm", "num_samples", "topk", "n_steps", "horizon")
        if quick:
            lewm_plan["n_steps"] = QUICK["lewm_steps"]
    return [Spec("ac", ac_dims, [{**ac_plan, "horizon": h} for h in AC_HORIZONS]),
            Spec("lewm", lewm_dims, [lewm_plan])]


@dataclass(frozen=True)
class Inputs:
    """What a user's plan call is given: the frames as bytes, and AC's robot pose."""

    frame: bytes
    goal: bytes
    state: np.ndarray | None

    def plan(self, ctx: Any, options: dict[str, Any]) -> dict[str, Any]:
        import jepa

        return jepa.plan(ctx, [self.frame], self.goal, self.state, **options)

    def body(self, kind: str, options: dict[str, Any]) -> bytes:
        """The /rollout request of this plan (the planner's options under the request's field names)."""
        from jepa.world_kinds import WORLD_KINDS

        names = {planner: request for request, planner in WORLD_KINDS[kind].plan_fields.items()}
        def item(data: bytes) -> dict[str, str]:
            return {"b64": base64.b64encode(data).decode("ascii")}

        body: dict[str, Any] = {"context": [item(self.frame)], "goal": item(self.goal),
                                "plan": {names[k]: v for k, v in options.items()}}
        if self.state is not None:
            body["state"] = self.state.tolist()
        return json.dumps(body).encode()


def one_iteration(kind: str, options: dict[str, Any]) -> dict[str, Any]:
    """The same plan cut to one CEM iteration: the warm-up (it builds the same graphs)."""
    from jepa.world_kinds import WORLD_KINDS

    return {**options, WORLD_KINDS[kind].plan_fields["cem_steps"]: 1}


Cells = list[dict[str, Any]]


def inproc(path: str, spec: Spec, inputs: Inputs, threads: int, rounds: int) -> tuple[Cells, dict[str, Any]]:
    """jepa.plan per plan of the spec: its timings, and the encode of the two frames (once)."""
    import jepa
    from jepa import world

    ctx = jepa.Model(path).context(threads=threads, max_batch=MAX_BATCH)
    cells = []
    for options in spec.plans:
        inputs.plan(ctx, one_iteration(spec.kind, options))
        samples: list[float] = []
        out: dict[str, Any] = {}
        with harness.Load() as load:
            for _ in range(rounds):
                t = time.perf_counter()
                out = inputs.plan(ctx, options)
                samples.append(time.perf_counter() - t)
        cells.append({"s": round(statistics.median(samples), 3), "samples_s": [round(x, 3) for x in samples],
                      "others_cpu_share": load.others(sum(samples)), "actions": out["actions"]})
        harness.log(f"[{spec.kind} {Path(path).stem} jepa.plan {options}] {cells[-1]['s']} s")
    enc = []
    for _ in range(2):
        t = time.perf_counter()
        for frame in (inputs.frame, inputs.goal):
            world.latents(ctx, [frame])
        enc.append(time.perf_counter() - t)
    return cells, {"encode_two_frames_s": round(min(enc), 3)}


def served(path: str, spec: Spec, inputs: Inputs, threads: int, planners: int, requests: int,
           want: list[np.ndarray]) -> list[dict[str, Any]]:
    """/rollout plans from `planners` concurrent clients, `requests` each, per plan of the spec."""
    workers = 1 if planners == 1 else min(planners, threads)
    per = max(1, threads // workers)
    flags = ["--request-timeout-s", str(TIMEOUT_S), "--queue-timeout-s", str(TIMEOUT_S)]
    server = Server(path, workers, per, MAX_BATCH, flags).start()
    cells = []
    try:
        for options, actions in zip(spec.plans, want, strict=True):
            warm = inputs.body(spec.kind, one_iteration(spec.kind, options))
            post_plans(server, warm, workers, 1, TIMEOUT_S)  # one per worker
            with cpu_shares(server) as shares:
                seconds, lat, queued, answers = post_plans(server, inputs.body(spec.kind, options), planners,
                                                           requests, TIMEOUT_S)
            cells.append({
                "planners": planners, "workers": workers, "threads_per_worker": per, "plans": len(answers),
                "seconds": round(seconds, 2), "plans_s": round(len(answers) / seconds, 4),
                "latency_ms": {**percentiles(lat), "max": round(max(lat) * 1000, 1)},
                "queue_ms_max": round(max(queued), 1), "cpu_share": shares["cpu_share"],
                "others_cpu_share": shares["others_cpu_share"],
                "mismatches": sum(not same_bits(json.loads(raw)["actions"], actions) for raw in answers),
            })
            harness.log(f"[{spec.kind} {Path(path).stem} /rollout x{planners} {options}] "
                        f"{cells[-1]['plans_s']} plans/s")
    finally:
        server.stop()
    return cells


def measure(spec: Spec, ftype: str, tmp: Path, inputs: Inputs, threads: int, rounds: int,
            requests: int) -> list[dict[str, Any]]:
    """Every cell of one model at one file type: in process, then served (the in-process model freed
    first: two copies of a released AC file do not fit every machine)."""
    path = spec.write(tmp / f"{spec.kind}-{ftype}.gguf", ftype)
    try:
        plans, enc = inproc(path, spec, inputs, threads, rounds)
        gc.collect()
        want = [p.pop("actions") for p in plans]
        serve = {str(n): served(path, spec, inputs, threads, n, requests, want) for n in PLANNERS}
    finally:
        Path(path).unlink()
    return [{"model": spec.kind, "ftype": ftype, "horizon": options["horizon"], "plan": options,
             "jepa_plan": {**p, **enc}, "rollout": {n: cells[i] for n, cells in serve.items()}}
            for i, (options, p) in enumerate(zip(spec.plans, plans, strict=True))]


def reduced(all_specs: list[Spec], smoke: bool) -> list[str]:
    """What a CPU-sized run left out of the released sizes."""
    ac, lewm = all_specs[0].dims, all_specs[1].plans[0]
    out = []
    if not smoke and ac["n_layer"] != AC_FULL["n_layer"]:
        out.append(f"V-JEPA 2-AC predictor {ac['n_layer']} of {AC_FULL['n_layer']} blocks")
    if not smoke and ac["enc_layers"] != AC_ENC_LAYERS:
        out.append(f"its encoder {ac['enc_layers']} of {AC_ENC_LAYERS} layers")
    if not smoke and lewm["n_steps"] != _defaults("lewm", "n_steps")["n_steps"]:
        out.append(f"LeWM plan {lewm['n_steps']} of its 30 CEM steps")
    return out


def run(args: Any, rounds: int) -> dict[str, Any]:
    rec = harness.Run("bench-world-plan", args.threads, args.smoke, args.quick)
    data = photos(FRAMES)
    all_specs = specs(args.smoke, args.quick, args.ac_layers, args.enc_layers)
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as d:
        for spec in all_specs:
            inputs = Inputs(data[FRAMES[0]], data[FRAMES[1]],
                            np.asarray(AC_STATE, np.float32) if spec.kind == "ac" else None)
            for ft in args.ftypes:
                cells += measure(spec, ft, Path(d), inputs, args.threads, rounds, args.requests)
    return {
        **rec.head(),
        "reduced": reduced(all_specs, args.smoke),
        "engine_changed": rec.engine_changed(),
        "config": {"ac": all_specs[0].dims, "lewm": all_specs[1].dims, "threads": args.threads,
                   "max_batch": MAX_BATCH, "rounds": rounds, "requests_per_client": args.requests,
                   "planners": list(PLANNERS),
                   "frames": f"scikit-image's {FRAMES[0]} (the current frame) and {FRAMES[1]} (the goal), "
                             "JPEG bytes", "ac_state": list(AC_STATE),
                   "weights": "random (jepa.testing.random_world)"},
        "cells": cells,
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__, smoke="tiny models and plans, 1 round: the tool runs",
                        quick=f"CPU-sized: AC predictor {QUICK['ac_layers']} of 24 blocks and encoder "
                        f"{QUICK['enc_layers']} of 40 layers, LeWM {QUICK['lewm_steps']} of 30 steps "
                        "(widths as released)", threads_help="jepa.plan's; the server's, over its workers")
    ap.add_argument("--rounds", type=int, default=None, help="timed jepa.plan calls a cell (2; quick: 1)")
    ap.add_argument("--requests", type=int, default=1, help="plans each /rollout client posts per cell")
    ap.add_argument("--ac-layers", type=int, default=None, help="AC predictor blocks (24 released)")
    ap.add_argument("--enc-layers", type=int, default=None, help="AC encoder layers (40 released)")
    ap.add_argument("--ftypes", nargs="+", choices=FTYPES, default=list(FTYPES))
    a = harness.parse(ap, argv)  # --cpu before jepa loads: the servers inherit JEPA_CPU_FEATURES
    data = run(a, a.rounds or (1 if a.smoke or a.quick else 2))
    out = harness.out_path(a, "bench-world-plan")
    harness.write_record(out, data, indent=2)
    bad = sum(c["rollout"][n]["mismatches"] for c in data["cells"] for n in c["rollout"])
    print(f"wrote {out} ({data['seconds']:.0f} s; {bad} plans not jepa.plan's)")
    return 1 if bad or data["engine_changed"] else 0


if __name__ == "__main__":
    sys.exit(main())
