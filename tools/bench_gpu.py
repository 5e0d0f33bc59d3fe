#!/usr/bin/env python3
"""jepa on a GPU against PyTorch on the same GPU -> tests/results/bench-gpu.json.

The GPU half of the engine benchmark (tools/gpu_check.sh runs it on a lent machine): for ViT-S/16,
ViT-L/16 and the V-JEPA 2 ViT-L video encoder, the transformers model (random weights, built as
tools/bench_engine.py builds it) runs in PyTorch on the device in f32 and bf16 (autocast off, weights
cast), and its jepa-convert GGUF (f32, f16) runs on the same device through jepa.Model(device=...).
Rounds are interleaved, the first is a warm-up, medians are reported with ratios torch / jepa (above 1
jepa is faster) and the errors of jepa's tokens against torch f32.

    python tools/bench_gpu.py --device cuda:0                # the full run (a few minutes on an H200)
    python tools/bench_gpu.py --device cpu --smoke --out /tmp/x.json   # checks the script runs (CI)

A benchmark, not a test. Needs a CUDA build of jepa (-DJEPA_CUDA=ON) for a cuda device."""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_engine as be  # the model specs, builders and machine record are shared

DEFAULT_OUT = be.ROOT / "tests" / "results" / "bench-gpu.json"
FULL = {"vit-s16": (1, 8, 32), "vit-l16": (1, 8, 32), "vjepa2-l16": (1, 4)}
SMOKE = {"vit-tiny": (1, 2), "vjepa2-tiny": (1,)}


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def cell(name: str, batch: int, device: str, rounds: int, work: Path, seed: int) -> dict[str, Any]:
    import torch

    import jepa
    from jepa.convert import convert

    spec = {**be.MODELS, **be.SMOKE_MODELS}[name]
    model = be.build_torch(spec, seed)
    src = work / f"{name}-hf"
    model.save_pretrained(src)
    files = {ft: convert(src, work / f"{name}-{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
    x = np.random.default_rng(seed).standard_normal(spec.input_shape(batch)).astype(np.float32)
    xt = torch.from_numpy(be.hf_layout(spec, x)).to(device)
    wrapped = be.last_hidden(model, spec.kind).to(device)
    half = copy.deepcopy(wrapped).to(dtype=torch.bfloat16)  # the same weights, cast

    def torch_run(m: Any, inp: Any) -> Callable[[], np.ndarray]:
        def run() -> np.ndarray:
            with torch.no_grad():
                out = m(inp)
            _sync(device)
            return out.float().cpu().numpy()

        return run

    runs: dict[str, Callable[[], np.ndarray]] = {
        "torch-f32": torch_run(wrapped, xt),
        "torch-bf16": torch_run(half, xt.to(torch.bfloat16)),
    }
    contexts = {ft: jepa.Model(path, device=device).context() for ft, path in files.items()}
    for ft, ctx in contexts.items():
        runs[f"jepa-{ft}"] = lambda ctx=ctx: ctx.encode(x)
    ref = runs["torch-f32"]()
    scale = float(np.abs(ref).max())
    errors = {k: float(np.abs(f() - ref).max()) / scale for k, f in runs.items() if k != "torch-f32"}
    samples: dict[str, list[float]] = {k: [] for k in runs}
    order = list(runs)
    for r in range(rounds + 1):
        for k in order[r % len(order):] + order[: r % len(order)]:
            t0 = time.perf_counter()
            runs[k]()
            if r > 0:
                samples[k].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) * 1000 / batch for k, v in samples.items()}
    return {
        "model": name,
        "batch": batch,
        "ms_per_item": med,
        "ratio_torch_f32_over_jepa_f32": med["torch-f32"] / med["jepa-f32"],
        "ratio_torch_bf16_over_jepa_f16": med["torch-bf16"] / med["jepa-f16"],
        "max_rel_error_vs_torch_f32": errors,
        "rounds": rounds,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda:0")
    p.add_argument("--smoke", action="store_true", help="tiny models, 2 rounds (runs on the CPU too)")
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=None)
    a = p.parse_args(argv)
    import torch

    plan = SMOKE if a.smoke else FULL
    rounds = 2 if a.smoke else a.rounds
    out = a.out or (Path(tempfile.gettempdir()) / "bench-gpu-smoke.json" if a.smoke else DEFAULT_OUT)
    gpu = torch.cuda.get_device_name(0) if a.device.startswith("cuda") and torch.cuda.is_available() else None
    cells = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, batches in plan.items():
            for b in batches:
                c = cell(name, b, a.device, rounds, Path(tmp), a.seed)
                print(json.dumps({k: c[k] for k in ("model", "batch", "ms_per_item")}), flush=True)
                cells.append(c)
    data = {"device": a.device, "gpu": gpu, "machine": be.machine_info(torch.get_num_threads()),
            "commit": be.git_commit(), "date": time.strftime("%Y-%m-%d"), "smoke": a.smoke, "cells": cells}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
