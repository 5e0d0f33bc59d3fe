"""V-JEPA 2-AC rollouts with and without the key/value cache (Context.world_rollout's `cache`), side
by side: the same file, inputs and thread count, the two variants interleaved (the order rotates
every round), at K candidates x H steps.

The predictor has the released widths (1024 wide, 16 heads, MLP 4096, on 1408-wide ViT-g latents, 256
patch tokens a frame; bench.world_models' AC_FULL) and --ac-layers of its 24 blocks (default 2: a
step's time is close to linear in the depth); random weights (jepa.testing.random_world). Per cell:
the median ms of each variant and their ratio, the frame blocks each computes per candidate (cached H,
recomputed H (H + 1) / 2), whether the outputs are bit-identical (they must be: the run stops
otherwise), the cache's bytes per candidate (2 x layers x (H - 1) x 258 x 1024 x 4) and, with
--memory, each variant's peak memory over the loaded model in a process of its own (VmHWM).

    python tools/bench/ac_cache.py --threads 2                      # K 16 64 x H 2 4, 2 blocks, 1 round
    python tools/bench/ac_cache.py --ac-layers 24 --K 16 --H 2 4    # the released depth
    python tools/bench/ac_cache.py --smoke                          # tiny dims: checks the script runs

The JSON goes to --out (default: the temp dir, bench-ac-cache.json; a shared machine's figures are not
results)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/ac_cache.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness
from bench.world import time_cell
from bench.world_models import AC_FULL, AC_SMOKE

VARIANTS = {"cache": True, "recompute": False}
# One rollout in a child (argv: tools/, the file, threads, K, H, cache 1/0, seed): its peak memory over
# the loaded model and inputs, in MB.
PEAK_CHILD = """
import sys; sys.path.insert(0, sys.argv[1]); import jepa; from bench import ac_cache as b
m = jepa.Model(sys.argv[2]); c = m.context(threads=int(sys.argv[3]))
z, a, s = b.inputs(m, int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[7]))
before = b.hwm_kb()
c.world_rollout(z, a, s, cache=sys.argv[6] == '1')
print((b.hwm_kb() - before) / 1024)
"""


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
    args = [str(harness.TOOLS), path, str(threads), str(k), str(h), "1" if cache else "0", str(seed)]
    out = subprocess.run([sys.executable, "-c", PEAK_CHILD, *args], check=True, capture_output=True,
                         text=True)
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
    harness.log(f"[K={k} H={h}] ms {cell['ms']} recompute/cache {cell['recompute_over_cache']} "
                f"cache {per / 1e6:.1f} MB/candidate{peak}")
    return cell


def run(args: Any) -> dict[str, Any]:
    import jepa
    from jepa.testing.random_world import write_random_ac

    rec = harness.Run("bench-ac-cache", args.threads, args.smoke)
    cfg = dict(AC_SMOKE if args.smoke else AC_FULL)
    if not args.smoke:
        cfg["n_layer"] = args.ac_layers
    with tempfile.TemporaryDirectory() as tmp:
        path = write_random_ac(Path(tmp) / "ac.gguf", seed=args.seed, ftype="f32", **cfg)
        ctx = jepa.Model(path).context(threads=args.threads)
        cells = [measure(ctx, path, args.threads, k, h, args.rounds, args.memory, args.seed)
                 for h in args.H for k in args.K]
    return {
        **rec.head(),
        "config": {**cfg, "tokens_per_frame": (cfg["img_size"] // cfg["patch_size"]) ** 2, "K": args.K,
                   "H": args.H, "rounds": args.rounds,
                   "weights": f"random (jepa.testing.random_world), seed {args.seed}, f32"},
        "cells": cells,
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__, smoke="tiny dims (bench.world_models' AC_SMOKE): checks the script runs")
    ap.add_argument("--K", type=int, nargs="+", default=[16, 64], help="candidates")
    ap.add_argument("--H", type=int, nargs="+", default=[2, 4], help="steps")
    ap.add_argument("--ac-layers", type=int, default=2, help="predictor blocks (24 released)")
    ap.add_argument("--rounds", type=int, default=1, help="timed rounds per cell (no warm-up round)")
    ap.add_argument("--memory", action="store_true",
                    help="each variant's peak memory, in a process of its own")
    ap.add_argument("--seed", type=int, default=0)
    args = harness.parse(ap, argv)
    # Not a result to commit: every run goes to the temp folder unless --out says otherwise.
    out = args.out or harness.TMP / f"bench-ac-cache{'-smoke' if args.smoke else ''}.json"
    data = run(args)
    harness.write_record(out, data, indent=2)
    print(f"wrote {out} ({data['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
