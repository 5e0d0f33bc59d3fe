#!/usr/bin/env python3
"""V-JEPA 2-AC rollouts with and without the key/value cache (Context.world_rollout's `cache`), side
by side: the same file, inputs and thread count, the two variants interleaved (the order rotates
every round), at K candidates x H steps.

The predictor has the released widths (1024 wide, 16 heads, MLP 4096, on 1408-wide ViT-g latents, 256
patch tokens a frame; tools/bench_world.py's AC_FULL) and --ac-layers of its 24 blocks (default 2: a
step's time is close to linear in the depth); random weights (jepa.testing.random_world). Per cell:
the median ms of each variant and their ratio, the frame blocks each computes per candidate (cached H,
recomputed H (H + 1) / 2), whether the outputs are bit-identical (they must be: the run stops
otherwise), the cache's bytes per candidate (2 x layers x (H - 1) x 258 x 1024 x 4) and, with
--memory, each variant's peak memory over the loaded model in a process of its own (VmHWM).

    python tools/bench_ac_cache.py --threads 2                       # K 16 64 x H 2 4, 2 blocks, 1 round
    python tools/bench_ac_cache.py --ac-layers 24 --K 16 --H 2 4      # the released depth
    python tools/bench_ac_cache.py --smoke                           # tiny dims: checks the script runs

The JSON goes to --out (default: the temp dir; a shared machine's figures are not results)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_world import AC_FULL, AC_SMOKE, cpu_info, time_cell, versions

DEFAULT_OUT = Path(tempfile.gettempdir()) / "bench-ac-cache.json"
VARIANTS = {"cache": True, "recompute": False}


def inputs(model: Any, k: int, h: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    from jepa.planning import normalize_reps
    from jepa.planning.rollout import ac_states

    hw, d = int(model.info.pred_grid_size) ** 2, int(model.info.embed_dim)
    rng = np.random.default_rng(seed)
    z = normalize_reps(rng.standard_normal((hw, d)).astype(np.float32))
    acts = (0.05 * rng.standard_normal((k, h, 7))).astype(np.float32)
    state = (0.1 * rng.standard_normal(7)).astype(np.float32)
    return z, acts, np.ascontiguousarray(ac_states(state, acts)[:, :h])


def cache_bytes_per_candidate(model: Any, h: int) -> int:
    i = model.info
    return 2 * int(i.pred_n_layer) * (h - 1) * (2 + int(i.pred_grid_size) ** 2) * int(i.pred_embed_dim) * 4


def hwm_kb() -> int:
    """This process's peak resident memory (VmHWM; ru_maxrss would carry the parent's over exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


def peak_mb(path: str, threads: int, k: int, h: int, cache: bool, seed: int) -> float:
    """One rollout in a process of its own: its peak resident memory over the loaded model and inputs."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import bench_ac_cache as b, jepa\n"
        "m = jepa.Model(sys.argv[2]); c = m.context(threads=int(sys.argv[3]))\n"
        "z, a, s = b.inputs(m, int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[7]))\n"
        "before = b.hwm_kb()\n"
        "c.world_rollout(z, a, s, cache=sys.argv[6] == '1')\n"
        "print((b.hwm_kb() - before) / 1024)\n"
    )
    args = [str(Path(__file__).parent), path, str(threads), str(k), str(h), "1" if cache else "0", str(seed)]
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True, text=True)
    return round(float(out.stdout.strip().splitlines()[-1]), 1)


def measure(ctx: Any, path: str, threads: int, k: int, h: int, rounds: int, memory: bool,
            seed: int) -> dict[str, Any]:
    """One cell: both variants interleaved on the same inputs, their outputs compared bit for bit."""
    z, acts, states = inputs(ctx.model, k, h, seed)
    runs = {n: (lambda c=c: ctx.world_rollout(z, acts, states, cache=c)) for n, c in VARIANTS.items()}

    def same(outs: dict[str, Any]) -> dict[str, Any]:
        if not np.array_equal(outs["cache"].view(np.uint32), outs["recompute"].view(np.uint32)):
            raise SystemExit(f"K={k} H={h}: the cached rollout differs from the recomputed one")
        return {"bit_identical": True}

    cell = {"cell": "ac_rollout", "K": k, "H": h, **time_cell(runs, rounds, warmup=0, check=same)}
    cell["recompute_over_cache"] = round(cell["ms"]["recompute"] / cell["ms"]["cache"], 3)
    cell["frame_blocks_per_candidate"] = {"cache": h, "recompute": h * (h + 1) // 2}
    per, chunk = cache_bytes_per_candidate(ctx.model, h), min(k, int(ctx.max_batch))
    cell["cache_bytes"] = {"per_candidate": per, "per_graph": per * chunk, "candidates_per_graph": chunk}
    if memory:
        cell["peak_mb_over_model"] = {n: peak_mb(path, threads, k, h, c, seed) for n, c in VARIANTS.items()}
    peak = f" peak MB {cell['peak_mb_over_model']}" if memory else ""
    print(f"[K={k} H={h}] ms {cell['ms']} recompute/cache {cell['recompute_over_cache']} "
          f"cache {per / 1e6:.1f} MB/candidate{peak}", file=sys.stderr, flush=True)
    return cell


def run(threads: int, ks: list[int], hs: list[int], layers: int, rounds: int, smoke: bool, memory: bool,
        seed: int) -> dict[str, Any]:
    import jepa
    from jepa.testing.random_world import write_random_ac

    cfg = dict(AC_SMOKE if smoke else AC_FULL)
    if not smoke:
        cfg["n_layer"] = layers
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_ac(Path(tmp) / "ac.gguf", seed=seed, ftype="f32", **cfg)
        ctx = jepa.Model(path).context(threads=threads)
        cells = [measure(ctx, path, threads, k, h, rounds, memory, seed) for h in hs for k in ks]
    return {
        "started": started,
        "seconds": round(time.perf_counter() - t0, 1),
        "smoke": smoke,
        "machine": cpu_info(threads, None),
        "versions": versions(None),
        "config": {**cfg, "tokens_per_frame": (cfg["img_size"] // cfg["patch_size"]) ** 2, "K": ks, "H": hs,
                   "rounds": rounds, "weights": f"random (jepa.testing.random_world), seed {seed}, f32"},
        "cells": cells,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--K", type=int, nargs="+", default=[16, 64], help="candidates")
    ap.add_argument("--H", type=int, nargs="+", default=[2, 4], help="steps")
    ap.add_argument("--ac-layers", type=int, default=2, help="predictor blocks (24 released)")
    ap.add_argument("--rounds", type=int, default=1, help="timed rounds per cell (no warm-up round)")
    ap.add_argument("--memory", action="store_true",
                    help="each variant's peak memory, in a process of its own")
    ap.add_argument("--smoke", action="store_true", help="tiny dims (tools/bench_world.py's AC_SMOKE)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = ap.parse_args(argv)
    data = run(args.threads, args.K, args.H, args.ac_layers, args.rounds, args.smoke, args.memory, args.seed)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
