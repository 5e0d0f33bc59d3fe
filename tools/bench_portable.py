#!/usr/bin/env python3
"""What a portable build (JEPA_NATIVE=OFF, the Docker images' build) costs against the native one,
on this machine -> tests/results/bench-portable.json.

Two interpreters run the same encode in turn, round after round (the order alternating): this
checkout's (the native build) and one whose jepa is the portable wheel (`--portable-python`, e.g.
build/portable-venv/bin/python, made by tests/test_portable_wheel.py or by hand:
`pip wheel -C cmake.define.JEPA_NATIVE=OFF .`). The model is a ViT-S/16 (384 wide, 12 blocks,
224 px) of random weights from jepa.demo, f32 and bf16. The engine's own kernels are chosen at run
time in both builds (AVX-512 / AMX where the CPU has them); what the native build adds is ggml's own
code compiled for this CPU (-march=native) for everything else.

    python tools/bench_portable.py --portable-python build/portable-venv/bin/python"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "results" / "bench-portable.json"

# One timed cell in a child: load the model, warm up, time `reps` encodes, print ms per item.
CHILD = r"""
import json, sys, time, numpy as np, jepa
path, ftype, batch, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
m = jepa.Model(path)
ctx = m.context(threads=int(sys.argv[5]))
x = np.random.default_rng(0).standard_normal((batch, 3, 224, 224)).astype(np.float32)
ctx.encode(x)
t = []
for _ in range(reps):
    t0 = time.perf_counter(); ctx.encode(x); t.append((time.perf_counter() - t0) * 1000 / batch)
print(json.dumps({"ms": min(t), "matmul": m.info.matmul, "version": jepa._engine.ggml_version()}))
"""


def cell(python: str, path: str, ftype: str, batch: int, reps: int, threads: int) -> dict[str, object]:
    r = subprocess.run([python, "-c", CHILD, path, ftype, str(batch), str(reps), str(threads)],
                       capture_output=True, text=True, timeout=600, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--portable-python", required=True, help="an interpreter whose jepa is the portable build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_engine import git_commit, machine_info  # the same machine record as the engine benchmark

    from jepa.demo import write_demo_model

    tmp = ROOT / "tests" / "results" / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    files = {ft: write_demo_model(tmp / f"vit-s16-{ft}.gguf", embed_dim=384, n_layer=12, n_head=6, ftype=ft)
             for ft in ("f32", "bf16")}
    builds = {"native": sys.executable, "portable": args.portable_python}
    cells = []
    for ft, path in files.items():
        for batch in (1, 8):
            samples: dict[str, list[float]] = {b: [] for b in builds}
            info: dict[str, object] = {}
            for r in range(args.rounds):
                order = list(builds) if r % 2 == 0 else list(reversed(builds))
                for b in order:
                    out = cell(builds[b], path, ft, batch, args.reps, args.threads)
                    samples[b].append(float(out["ms"]))  # type: ignore[arg-type]
                    info[b] = {"matmul": out["matmul"], "ggml": out["version"]}
            pairs = zip(samples["portable"], samples["native"], strict=True)
            ratio = statistics.median(po / na for po, na in pairs)
            cells.append({"model": "vit-s16", "ftype": ft, "batch": batch,
                          "ms_per_img": {b: round(statistics.median(v), 2) for b, v in samples.items()},
                          "portable_over_native": round(ratio, 3), "builds": info,
                          "samples_ms": {b: [round(s, 2) for s in v] for b, v in samples.items()}})
            print(f"[{ft} b{batch}] native {statistics.median(samples['native']):.1f} ms, portable "
                  f"{statistics.median(samples['portable']):.1f} ms: x{ratio:.3f}", file=sys.stderr)
    args.out.write_text(json.dumps({
        "benchmark": "bench-portable", "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "commit": git_commit(), "machine": machine_info(args.threads), "threads": args.threads,
        "rounds": args.rounds, "reps": args.reps, "cells": cells,
        "description": "JEPA_NATIVE=OFF wheel vs this checkout's native build, same model files, "
                       "alternating child processes; ratio = portable ms / native ms (above 1: the portable "
                       "build is slower)"}, indent=1) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
