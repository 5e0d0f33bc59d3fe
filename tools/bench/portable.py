"""What a portable build (JEPA_NATIVE=OFF, the Docker images' build) costs against the native one,
on this machine -> tests/results/bench-portable.json.

Two interpreters run the same encode in turn, round after round (the order alternating): this
checkout's (the native build) and one whose jepa is the portable wheel (`--portable-python`, e.g.
build/portable-venv/bin/python, made by tests/test_portable_wheel.py or by hand:
`pip wheel -C cmake.define.JEPA_NATIVE=OFF .`). The model is a ViT-S/16 (384 wide, 12 blocks,
224 px) of random weights from jepa.demo, f32 and bf16. The engine's own kernels are chosen at run
time in both builds (AVX-512 / AMX where the CPU has them); what the native build adds is ggml's own
code compiled for this CPU (-march=native) for everything else.

    python tools/bench/portable.py --portable-python build/portable-venv/bin/python
    python tools/bench/portable.py --smoke --portable-python .venv/bin/python   # a tiny ViT (a test)
    python tools/bench/portable.py --cpu x86-64-v3 --portable-python ...   # both held to AVX2
                                                             # -> tests/results/bench-portable-avx2.json

Each cell runs in a child process of each interpreter (JEPA_CPU_FEATURES, where --cpu set it,
inherited): the minimum over --reps encodes after a warm-up, as ms per image."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/portable.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from bench import harness

# name -> the demo model's dims (jepa.demo.write_demo_model), its image size, the batches it runs.
MODELS = {"vit-s16": (dict(embed_dim=384, n_layer=12, n_head=6, img_size=224), (1, 8))}
SMOKE_MODELS = {"vit-tiny": (dict(embed_dim=64, n_layer=2, n_head=4, img_size=32), (1, 2))}
FTYPES = ("f32", "bf16")
BUILDS = ("native", "portable")

# One timed cell in a child: load the model, warm up, time `reps` encodes, print ms per item.
CHILD = r"""
import json, sys, time, numpy as np, jepa
path, (batch, reps, threads, img) = sys.argv[1], map(int, sys.argv[2:6])
m = jepa.Model(path)
ctx = m.context(threads=threads)
x = np.random.default_rng(0).standard_normal((batch, 3, img, img)).astype(np.float32)
ctx.encode(x)
t = []
for _ in range(reps):
    t0 = time.perf_counter(); ctx.encode(x); t.append((time.perf_counter() - t0) * 1000 / batch)
print(json.dumps({"ms": min(t), "matmul": m.info.matmul, "version": jepa.ggml_version()}))
"""


def cell(python: str, path: str, batch: int, reps: int, threads: int, img: int) -> dict[str, Any]:
    r = subprocess.run([python, "-c", CHILD, path, str(batch), str(reps), str(threads), str(img)],
                       capture_output=True, text=True, timeout=600, check=True)
    out: dict[str, Any] = json.loads(r.stdout.strip().splitlines()[-1])
    return out


def measure(builds: dict[str, str], name: str, ftype: str, path: str, batch: int, img: int, rounds: int,
            reps: int, threads: int) -> dict[str, Any]:
    """One (model, file type, batch): the builds' children in rotating order, their ratio paired by round."""
    samples: dict[str, list[float]] = {b: [] for b in builds}
    info: dict[str, Any] = {}
    for r in range(rounds):
        for b in harness.rotated(list(builds), r):
            out = cell(builds[b], path, batch, reps, threads, img)
            samples[b].append(float(out["ms"]))
            info[b] = {"matmul": out["matmul"], "ggml": out["version"]}
    ratio = harness.paired(samples, ["portable"], "native") or 0.0
    ms = {b: statistics.median(v) for b, v in samples.items()}
    harness.log(f"[{ftype} b{batch}] native {ms['native']:.1f} ms, portable {ms['portable']:.1f} ms: "
                f"x{ratio:.3f}")
    return {"model": name, "ftype": ftype, "batch": batch,
            "ms_per_img": {b: round(v, 2) for b, v in ms.items()}, "portable_over_native": round(ratio, 3),
            "builds": info,
            "samples_ms": {b: [round(s, 2) for s in v] for b, v in samples.items()}}


def main(argv: list[str] | None = None) -> int:
    p = harness.parser(__doc__, smoke="a tiny ViT, 1 round of 2 encodes: checks the script runs")
    p.add_argument("--portable-python", required=True, help="an interpreter whose jepa is the portable build")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--reps", type=int, default=5)
    args = harness.parse(p, argv)
    out = harness.out_path(args, "bench-portable")
    rounds, reps = (1, 2) if args.smoke else (args.rounds, args.reps)

    from jepa.demo import write_demo_model

    run = harness.Run("bench-portable", args.threads, args.smoke)
    builds = dict(zip(BUILDS, (sys.executable, args.portable_python), strict=True))
    cells = []
    with tempfile.TemporaryDirectory(prefix="bench-portable-") as tmp:
        for name, (dims, batches) in (SMOKE_MODELS if args.smoke else MODELS).items():
            for ft in FTYPES:
                path = write_demo_model(Path(tmp) / f"{name}-{ft}.gguf", ftype=ft, **dims)
                cells += [measure(builds, name, ft, path, b, dims["img_size"], rounds, reps, args.threads)
                          for b in batches]
    harness.write_record(out, {
        **run.head(), "threads": args.threads, "rounds": rounds, "reps": reps, "cells": cells,
        "description": "JEPA_NATIVE=OFF wheel vs this checkout's native build, same model files, "
                       "alternating child processes; ratio = portable ms / native ms (above 1: the portable "
                       "build is slower), the median over rounds of the ratio within a round"})
    harness.log(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
