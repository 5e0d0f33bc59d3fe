#!/usr/bin/env python3
"""jepa against PyTorch on the same ViT, weights, inputs and thread count -> tests/results/bench-engine.json.

For each model (ViT-S/16, ViT-L/16 at 224, random weights) a transformers ViTModel is built, saved with
save_pretrained and converted by jepa-convert to f32 and f16 GGUF files, so both engines run the same
weights. For each batch size the variants run interleaved (jepa f32, jepa f32 + flash attention, jepa
f16, jepa f16 + flash, torch; the order rotates every round), the first rounds are a warm-up and are
dropped, and the median of the rest is reported as ms per image. Ratios are torch / jepa (above 1,
jepa is faster), each the median over rounds of the ratio within a round. Each variant is also
checked for batch bit-identity (first, middle and last item of the batched call against the same item
encoded alone) and its tokens compared with torch's.

    python tools/bench_engine.py --quick            # ViT-S, batch 1 and 8, few rounds: a smoke run
    python tools/bench_engine.py --threads 2        # the full run (ViT-L at batch 32 takes a while)

A benchmark, not a test: the numbers depend on the machine and on what else runs on it (the share of
the CPUs other processes took during each cell, and the load average around it, are recorded)."""

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# numpy's own OpenBLAS threads spin after start-up and steal cycles from both engines; neither needs them.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-engine.json"
# A smoke run never replaces the committed results unless --out says so.
QUICK_OUT = Path(tempfile.gettempdir()) / "bench-engine-quick.json"

MODELS: dict[str, dict[str, int]] = {
    "vit-s16": dict(hidden_size=384, num_hidden_layers=12, num_attention_heads=6, intermediate_size=1536),
    "vit-l16": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096),
}
IMG, PATCH = 224, 16
# The goal for the bit-identical path: torch / jepa at least this, per batch size.
GOAL = {1: 1.5, 8: 1.2, 32: 1.2}
# Timed rounds (after one warm-up round) per (model, batch): ViT-L at batch 32 is ~20 s a run here.
ROUNDS = {
    ("vit-s16", 1): 11,
    ("vit-s16", 8): 7,
    ("vit-s16", 32): 5,
    ("vit-l16", 1): 7,
    ("vit-l16", 8): 4,
    ("vit-l16", 32): 3,
}
QUICK_ROUNDS = 3
# Untimed rounds first: torch's first calls at a new shape run slow for a while, ggml allocates its graph.
WARMUP = {"vit-s16": 2, "vit-l16": 1}
JEPA_VARIANTS = ("jepa-f32", "jepa-f32-flash", "jepa-f16", "jepa-f16-flash")


@dataclass
class Variant:
    name: str
    run: Callable[[np.ndarray], np.ndarray]


def machine_info(threads: int) -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "threads": threads,
        "simd": sorted(
            f for f in flags if f in {"avx", "avx2", "fma", "f16c", "avx512f", "avx512_bf16", "amx_tile"}
        ),
        "os": platform.platform(),
        "shared": "yes: other jobs may run; runs are interleaved and medians taken",
    }


def versions() -> dict[str, str]:
    import torch
    import transformers

    import jepa

    return {
        "jepa": jepa.__version__,
        "ggml": jepa._engine.ggml_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "numpy": np.__version__,
        "python": platform.python_version(),
    }


def build_models(name: str, cfg: dict[str, int], workdir: Path, seed: int) -> tuple[Any, dict[str, str]]:
    """A random-weight transformers ViTModel and its f32 / f16 GGUF conversions (same weights)."""
    import torch
    from transformers import ViTConfig, ViTModel
    from transformers.utils import logging as hf_logging

    from jepa.convert import convert

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    model = ViTModel(ViTConfig(**cfg, image_size=IMG, patch_size=PATCH), add_pooling_layer=False).eval()
    # LayerNorms away from 1 / 0, as in the parity tests, so the two engines do the same work.
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.add_(0.1 * torch.randn(mod.weight.shape))
                mod.bias.add_(0.1 * torch.randn(mod.bias.shape))
    src = workdir / f"{name}-hf"
    model.save_pretrained(src)
    files = {ft: convert(src, workdir / f"{name}-{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
    return model, files


def machine_busy_s() -> float:
    """CPU-seconds all processes on the machine have used since boot (/proc/stat; 0 where absent)."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return 0.0
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def self_busy_s() -> float:
    t = os.times()
    return t.user + t.system


def bit_identical(run: Callable[[np.ndarray], np.ndarray], x: np.ndarray, batched: np.ndarray) -> bool:
    """Items of a batched call equal (bit for bit) the same items encoded alone (first, middle, last)."""
    b = x.shape[0]
    for i in sorted({0, b // 2, b - 1}):
        alone = run(x[i : i + 1])
        if alone[0].view(np.uint32).tobytes() != batched[i].view(np.uint32).tobytes():
            return False
    return True


def time_cell(
    variants: list[Variant], x: np.ndarray, rounds: int, warmup: int
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    """Interleaved rounds, the first `warmup` untimed. Returns ms/img samples and one output per variant."""
    b = x.shape[0]
    samples: dict[str, list[float]] = {v.name: [] for v in variants}
    outputs: dict[str, Any] = {}
    for r in range(warmup + rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        for v in order:
            t0 = time.perf_counter()
            out = v.run(x)
            dt = time.perf_counter() - t0
            if r == 0:
                outputs[v.name] = out
            if r >= warmup:
                samples[v.name].append(1000.0 * dt / b)
    return samples, outputs


def run_model(
    name: str,
    batches: list[int],
    threads: int,
    rounds_for: Callable[[str, int], int],
    workdir: Path,
    seed: int,
) -> list[dict[str, Any]]:
    import torch

    import jepa

    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    tmodel, files = build_models(name, MODELS[name], workdir, seed)
    print(f"[{name}] built and converted in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    jm = {ft: jepa.Model(path) for ft, path in files.items()}
    ctxs = {
        "jepa-f32": jm["f32"].context(threads=threads, flash_attn=False),
        "jepa-f32-flash": jm["f32"].context(threads=threads, flash_attn=True),
        "jepa-f16": jm["f16"].context(threads=threads, flash_attn=False),
        "jepa-f16-flash": jm["f16"].context(threads=threads, flash_attn=True),
    }

    def torch_run(x: np.ndarray) -> np.ndarray:
        with torch.inference_mode():
            return tmodel(pixel_values=torch.from_numpy(x)).last_hidden_state.numpy()

    variants = [Variant(k, c.encode) for k, c in ctxs.items()] + [Variant("torch", torch_run)]
    rng = np.random.default_rng(seed)
    cells = []
    for b in batches:
        x = rng.standard_normal((b, 3, IMG, IMG)).astype(np.float32)
        rounds = rounds_for(name, b)
        load_before = os.getloadavg()[0]
        busy0, self0 = machine_busy_s(), self_busy_s()
        t0 = time.perf_counter()
        samples, outputs = time_cell(variants, x, rounds, WARMUP.get(name, 1))
        elapsed = time.perf_counter() - t0
        # The share of the machine's CPUs that other processes used while this cell ran.
        others = (machine_busy_s() - busy0 - (self_busy_s() - self0)) / (elapsed * (os.cpu_count() or 1))
        # Ratios paired within each round (the variants of a round run back to back, so a burst of load
        # from elsewhere mostly hits both sides of a pair): the median over rounds.
        paired = {
            k: statistics.median(t / j for t, j in zip(samples["torch"], samples[k], strict=True))
            for k in ctxs
        }
        ms = {k: statistics.median(v) for k, v in samples.items()}
        ident = {k: (None if b == 1 else bit_identical(ctxs[k].encode, x, outputs[k])) for k in ctxs}
        ident["torch"] = None if b == 1 else bit_identical(torch_run, x, outputs["torch"])
        ref = outputs["torch"]
        scale = float(np.abs(ref).max())
        agree = {k: float(f"{np.abs(outputs[k] - ref).max() / scale:.3g}") for k in ctxs}
        cell = {
            "model": name,
            "batch": b,
            "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "rounds": rounds,
            "warmup_rounds": WARMUP.get(name, 1),
            "ms_per_img": {k: round(v, 2) for k, v in ms.items()},
            "ratio_torch_over": {k: round(paired[k], 3) for k in ctxs},
            "ratio_of_medians": {k: round(ms["torch"] / ms[k], 3) for k in ctxs},
            "batch_bit_identical": ident,
            "goal": GOAL.get(b),
            "max_rel_diff_vs_torch": agree,
            "samples_ms_per_img": {k: [round(s, 2) for s in v] for k, v in samples.items()},
            "load_avg_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "others_cpu_share": round(max(others, 0.0), 3),
            "seconds": round(elapsed, 1),
        }
        cells.append(cell)
        summary = "  ".join(f"{k}={v:.1f}" for k, v in ms.items())
        print(f"[{name} b{b}] ms/img {summary}  ({elapsed:.0f} s, load {load_before:.1f})", file=sys.stderr)
    return cells


def paired_ratio(samples: dict[str, list[float]], num: str, den: str) -> float:
    """Median over rounds of samples[num] / samples[den]. The variants of a round run back to back, so a
    burst of load from elsewhere mostly hits both sides of a pair."""
    return statistics.median(a / b for a, b in zip(samples[num], samples[den], strict=True))


def summarise(cells: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell: the fastest batch-bit-identical jepa variant, its ratio, and whether the goal is met."""
    out = []
    for c in cells:
        ok = [k for k in JEPA_VARIANTS if c["batch_bit_identical"][k] is not False]
        best = max(ok, key=lambda k: c["ratio_torch_over"][k]) if ok else None
        ratio = c["ratio_torch_over"][best] if best else None
        flash_f32 = paired_ratio(c["samples_ms_per_img"], "jepa-f32", "jepa-f32-flash")
        flash_f16 = paired_ratio(c["samples_ms_per_img"], "jepa-f16", "jepa-f16-flash")
        out.append(
            {
                "model": c["model"],
                "batch": c["batch"],
                "best_bit_identical": best,
                "ratio": ratio,
                "goal": c["goal"],
                "meets_goal": None if ratio is None or c["goal"] is None else ratio >= c["goal"],
                "flash_speedup_f32": round(flash_f32, 3),
                "flash_speedup_f16": round(flash_f16, 3),
            }
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="ViT-S only, batch 1 and 8, few rounds (a smoke run)")
    p.add_argument(
        "--threads", type=int, default=min(2, os.cpu_count() or 1), help="threads for both engines"
    )
    p.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"JSON to write (default {DEFAULT_OUT.relative_to(ROOT)}; with --quick, {QUICK_OUT})",
    )
    p.add_argument("--models", default=None, help="comma-separated subset of " + ",".join(MODELS))
    p.add_argument("--batches", default=None, help="comma-separated batch sizes (default 1,8,32)")
    p.add_argument(
        "--rounds", type=int, default=None, help="timed rounds per cell (default: by model and batch)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--note", default="", help="free text stored in the JSON (e.g. the engine commit)")
    p.add_argument(
        "--update",
        action="store_true",
        help="keep the other cells of an existing --out file (re-measure one model or batch size)",
    )
    args = p.parse_args(argv)

    models = args.models.split(",") if args.models else (["vit-s16"] if args.quick else list(MODELS))
    batches = (
        [int(b) for b in args.batches.split(",")] if args.batches else ([1, 8] if args.quick else [1, 8, 32])
    )
    unknown = [m for m in models if m not in MODELS]
    if unknown:
        p.error(f"unknown model(s): {', '.join(unknown)}")

    def rounds_for(model: str, batch: int) -> int:
        if args.rounds:
            return args.rounds
        return QUICK_ROUNDS if args.quick else ROUNDS.get((model, batch), 3)

    out: Path = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.perf_counter()
    cells: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="jepa-bench-") as tmp:
        for m in models:
            cells += run_model(m, batches, args.threads, rounds_for, Path(tmp), args.seed)
    seconds = time.perf_counter() - t0
    if args.update and out.is_file():
        old = json.loads(out.read_text())
        done = {(c["model"], c["batch"]) for c in cells}
        kept = [c for c in old["cells"] if (c["model"], c["batch"]) not in done]
        cells = sorted(kept + cells, key=lambda c: (list(MODELS).index(c["model"]), c["batch"]))
        started = min(started, old["started"]) if kept else started
        seconds += sum(c["seconds"] for c in kept)
    result = {
        "benchmark": "bench-engine",
        "description": "jepa (ggml) vs transformers ViTModel (PyTorch eager, default attention), same "
        "weights, inputs and threads; interleaved rounds, warm-up dropped, medians; "
        "ratio = torch / jepa (> 1: jepa faster)",
        "started": started,
        "seconds": round(seconds, 1),
        "quick": bool(args.quick),
        "note": args.note,
        "machine": machine_info(args.threads),
        "versions": versions(),
        "image_size": IMG,
        "variants": {
            "jepa-f32": "f32 weights, flash_attn=False",
            "jepa-f32-flash": "f32 weights, flash_attn=True",
            "jepa-f16": "f16 attention/FFN matrices (norms, biases, patch embedding f32), flash_attn=False",
            "jepa-f16-flash": "f16 matrices, flash_attn=True",
            "torch": "transformers ViTModel, torch.inference_mode(), torch.set_num_threads(threads)",
        },
        "cells": cells,
        "summary": summarise(cells),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
