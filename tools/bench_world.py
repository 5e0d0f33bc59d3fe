#!/usr/bin/env python3
"""The world models' planning cells, timed -> tests/results/bench-world.json.

Random-weight GGUFs at the released dimensions, written from numpy (jepa.convert.random_world):

- V-JEPA 2-AC: predictor 24 blocks x 1024, 16 heads, MLP 4096, reading ViT-g latents (width 1408),
  16 x 16 = 256 patch tokens per frame, action / state 7. The rollouts start from latents, so the
  encoder is not timed (the file holds a 1-layer ViT-g-wide encoder only to be a valid file).
  Cells: one rollout step at the horizon's longest prefix (`ctx.ac_predict` on K candidates x 2 frames
  = K x 516 tokens) and one CEM iteration (a 1-iteration `ctx.ac_plan`: a full H = 2 rollout of K
  samples), at K = 16 and 64, H = 2.
- LeWM: ViT-tiny encoder (192 wide, 12 layers, 3 heads, patch 14, 224 px), projectors 192 -> 2048 ->
  192, predictor 6 adaLN-zero blocks, 16 heads x 64, MLP 2048, a 3-frame window, actions 5 x 2.
  Cells: one predict step at K = 300 (the eval's num_samples; `ctx.lewm_predict` on [300, 3, 192])
  and a full `ctx.lewm_plan` with the eval's solver config (300 samples, top 30, 30 steps, horizon 5)
  from a 1-frame history.

Every cell runs f32 and f16 weights interleaved (the order rotates every round) after one untimed
warm-up round; the median of the timed rounds is reported in ms, with the share of the machine's CPUs
other processes used meanwhile and the load average around the cell.

    python tools/bench_world.py --threads 2                 # everything at the released sizes
    python tools/bench_world.py --quick                     # CPU-sized: see QUICK below
    python tools/bench_world.py --smoke --out /tmp/w.json   # tiny dims, 1 round (the test)

`--quick` keeps every width and token count but runs the AC predictor with --ac-layers blocks (default
2 of 24; its cost is close to linear in the depth) and the LeWM plan with fewer samples and steps; the
JSON and the docs say so. `--upstream PATH` would time the same cells through a local checkout of the
upstream PyTorch code; without one the JSON records that it was not available."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_engine import machine_busy_s, machine_info, self_busy_s

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-world.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "bench-world-smoke.json"
FTYPES = ("f32", "f16")

# Released dimensions (V-JEPA 2-AC on ViT-g; LeWM per config/train/model/lewm.yaml).
AC_FULL = dict(embed_dim=1024, n_layer=24, n_head=16, ffn_dim=4096, enc_dim=1408, enc_layers=1, enc_heads=22,
               enc_ffn_dim=6144, img_size=256, patch_size=16, tubelet_size=2, n_frames=64)
LEWM_FULL: dict[str, int] = {}  # write_random_lewm's defaults are the published model
AC_SMOKE = dict(embed_dim=64, n_layer=1, n_head=2, ffn_dim=128, enc_dim=64, enc_layers=1, enc_heads=1,
                img_size=32, patch_size=16)
LEWM_SMOKE = dict(enc_dim=32, enc_layers=1, enc_heads=2, img_size=28, embed_dim=32, n_layer=1, n_head=2,
                  head_dim=16, ffn_dim=64, proj_hidden=64)
AC_K = (16, 64)
AC_H = 2
LEWM_K = 300
LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=30, horizon=5)  # config/eval/solver/cem.yaml, PushT
QUICK_AC_LAYERS = 2
QUICK_LEWM_PLAN = dict(num_samples=300, topk=30, n_steps=3, horizon=5)
SMOKE_LEWM_PLAN = dict(num_samples=16, topk=4, n_steps=2, horizon=5)


def versions() -> dict[str, str]:
    import jepa

    return {"jepa": jepa.__version__, "ggml": jepa._engine.ggml_version(), "numpy": np.__version__,
            "python": platform.python_version()}


def time_cell(runs: dict[str, Callable[[], Any]], rounds: int, warmup: int = 1) -> dict[str, Any]:
    """Run the variants interleaved (order rotating each round); the first `warmup` rounds are dropped."""
    names = list(runs)
    samples: dict[str, list[float]] = {n: [] for n in names}
    load_before = os.getloadavg()[0]
    busy0, self0 = machine_busy_s(), self_busy_s()
    t0 = time.perf_counter()
    for r in range(warmup + rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for n in order:
            s = time.perf_counter()
            runs[n]()
            if r >= warmup:
                samples[n].append(1000 * (time.perf_counter() - s))
    elapsed = time.perf_counter() - t0
    others = (machine_busy_s() - busy0 - (self_busy_s() - self0)) / (elapsed * (os.cpu_count() or 1))
    return {
        "ms": {n: round(statistics.median(v), 2) for n, v in samples.items()},
        "rounds": rounds,
        "warmup_rounds": warmup,
        "samples_ms": {n: [round(x, 2) for x in v] for n, v in samples.items()},
        "others_cpu_share": round(max(others, 0.0), 3),
        "load_avg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "seconds": round(elapsed, 1),
    }


def ac_cells(paths: dict[str, str], threads: int, rounds: int, seed: int) -> list[dict[str, Any]]:
    import jepa

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    info = next(iter(ctxs.values())).model.info
    hw, d = int(info["pred_grid_size"]) ** 2, int(info["embed_dim"])
    rng = np.random.default_rng(seed)
    z = rng.standard_normal((hw, d)).astype(np.float32)
    goal = rng.standard_normal((hw, d)).astype(np.float32)
    state = (0.1 * rng.standard_normal(7)).astype(np.float32)
    cells = []
    for k in AC_K:
        lat = rng.standard_normal((k, AC_H * hw, d)).astype(np.float32)
        acts = (0.05 * rng.standard_normal((k, AC_H, 7))).astype(np.float32)
        states = (0.1 * rng.standard_normal((k, AC_H, 7))).astype(np.float32)
        step = {ft: partial(c.ac_predict, lat, acts, states) for ft, c in ctxs.items()}
        cell = {"cell": "ac_step", "K": k, "H": AC_H, "tokens": k * AC_H * (2 + hw),
                **time_cell(step, rounds)}
        cells.append(cell)
        print(f"[ac_step K={k}] {cell['ms']}  ({cell['seconds']:.0f} s)", file=sys.stderr)
        plan = {ft: partial(c.ac_plan, z, state, goal, samples=k, topk=min(10, k // 2), cem_steps=1,
                            horizon=AC_H, seed=seed) for ft, c in ctxs.items()}
        cell = {"cell": "ac_cem_iter", "K": k, "H": AC_H, **time_cell(plan, rounds)}
        cells.append(cell)
        print(f"[ac_cem_iter K={k}] {cell['ms']}  ({cell['seconds']:.0f} s)", file=sys.stderr)
    return cells


def lewm_cells(paths: dict[str, str], threads: int, rounds: int, seed: int, k: int,
               plan_cfg: dict[str, int]) -> list[dict[str, Any]]:
    import jepa

    ctxs = {ft: jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
    info = next(iter(ctxs.values())).model.info
    d, a, window = int(info["wm_embed_dim"]), int(info["pred_action_dim"]), int(info["pred_n_frames"])
    rng = np.random.default_rng(seed)
    embs = rng.standard_normal((k, window, d)).astype(np.float32)
    acts = rng.standard_normal((k, window, a)).astype(np.float32)
    history = rng.standard_normal((1, d)).astype(np.float32)
    goal = rng.standard_normal(d).astype(np.float32)
    step = {ft: partial(c.lewm_predict, embs, acts) for ft, c in ctxs.items()}
    cells = [{"cell": "lewm_step", "K": k, "T": window, **time_cell(step, rounds)}]
    print(f"[lewm_step K={k}] {cells[-1]['ms']}  ({cells[-1]['seconds']:.0f} s)", file=sys.stderr)
    plan = {ft: partial(c.lewm_plan, history, goal, seed=seed, **plan_cfg) for ft, c in ctxs.items()}
    cells.append({"cell": "lewm_plan", "K": plan_cfg["num_samples"], **plan_cfg, **time_cell(plan, rounds)})
    print(f"[lewm_plan] {cells[-1]['ms']}  ({cells[-1]['seconds']:.0f} s)", file=sys.stderr)
    return cells


def run(threads: int, rounds: int, *, quick: bool, smoke: bool, ac_layers: int | None, seed: int = 0,
        upstream: Path | None = None, only: str | None = None) -> dict[str, Any]:
    from jepa.convert.random_world import write_random_ac, write_random_lewm

    if smoke:
        ac_cfg, lewm_cfg, plan_cfg, k_lewm = dict(AC_SMOKE), dict(LEWM_SMOKE), SMOKE_LEWM_PLAN, 16
    else:
        ac_cfg, lewm_cfg = dict(AC_FULL), dict(LEWM_FULL)
        plan_cfg, k_lewm = (QUICK_LEWM_PLAN if quick else LEWM_PLAN), LEWM_K
        ac_cfg["n_layer"] = ac_layers or (QUICK_AC_LAYERS if quick else AC_FULL["n_layer"])
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        if only in (None, "ac"):
            ac = {ft: write_random_ac(Path(tmp) / f"ac-{ft}.gguf", seed=seed, ftype=ft, **ac_cfg)
                  for ft in FTYPES}
            cells += ac_cells(ac, threads, rounds, seed)
            for p in ac.values():
                Path(p).unlink()
        if only in (None, "lewm"):
            lw = {ft: write_random_lewm(Path(tmp) / f"lewm-{ft}.gguf", seed=seed, ftype=ft, **lewm_cfg)
                  for ft in FTYPES}
            cells += lewm_cells(lw, threads, rounds, seed, k_lewm, plan_cfg)
    reduced = []
    if not smoke and ac_cfg["n_layer"] != AC_FULL["n_layer"]:
        reduced.append(f"AC predictor {ac_cfg['n_layer']} of {AC_FULL['n_layer']} blocks (--ac-layers)")
    if not smoke and plan_cfg != LEWM_PLAN:
        reduced.append(f"LeWM plan {plan_cfg['num_samples']} samples x {plan_cfg['n_steps']} steps "
                       f"(eval: {LEWM_PLAN['num_samples']} x {LEWM_PLAN['n_steps']})")
    return {
        "started": started,
        "seconds": round(time.perf_counter() - t0, 1),
        "quick": quick,
        "smoke": smoke,
        "reduced": reduced,
        "machine": machine_info(threads),
        "versions": versions(),
        "config": {
            "ac": {**ac_cfg, "tokens_per_frame": (ac_cfg["img_size"] // ac_cfg["patch_size"]) ** 2,
                   "K": list(AC_K), "H": AC_H, "cem": "samples K, topk min(10, K/2), 1 iteration"},
            "lewm": {**(lewm_cfg or {"published": True}), "K_step": k_lewm, "plan": plan_cfg,
                     "history_frames": 1},
            "weights": f"random (jepa.convert.random_world), seed {seed}",
        },
        "upstream": "not available here" if upstream is None else f"{upstream}: timing through it is not "
        "implemented yet",
        "cells": cells,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per cell (after 1 warm-up round)")
    ap.add_argument("--quick", action="store_true",
                    help=f"CPU-sized: AC predictor {QUICK_AC_LAYERS} blocks, LeWM plan "
                    f"{QUICK_LEWM_PLAN['n_steps']} CEM steps (all widths and token counts as released)")
    ap.add_argument("--smoke", action="store_true", help="tiny dims, 1 round: checks the script runs")
    ap.add_argument("--ac-layers", type=int, default=None, help="AC predictor blocks (24 released)")
    ap.add_argument("--only", choices=("ac", "lewm"), default=None, help="one model's cells only")
    ap.add_argument("--upstream", type=Path, default=None,
                    help="a local checkout of the upstream PyTorch code to time the same cells through")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None,
                    help=f"JSON to write (default {DEFAULT_OUT}; {SMOKE_OUT} for --smoke)")
    args = ap.parse_args(argv)
    if args.upstream is not None and not args.upstream.exists():
        ap.error(f"--upstream {args.upstream}: no such path")
    rounds = 1 if args.smoke else args.rounds
    data = run(args.threads, rounds, quick=args.quick, smoke=args.smoke, ac_layers=args.ac_layers,
               seed=args.seed, upstream=args.upstream, only=args.only)
    out = args.out or (SMOKE_OUT if args.smoke else DEFAULT_OUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
