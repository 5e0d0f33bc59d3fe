#!/usr/bin/env python3
"""jepa against transformers on a V-JEPA 2 video encoder: ViT-L/16 (random weights, real dims: width 1024,
24 layers, 16 heads, MLP 4096, tubelet 2) on one 16-frame 256 px clip = 2048 tokens, same threads.

A transformers VJEPA2Model is built, saved with save_pretrained and converted by jepa-convert to f32 and
f16 GGUF files, so both engines run the same weights. The variants run interleaved (the order rotates
every round) after one untimed warm-up round; the median of the timed rounds is reported in seconds per
clip (and the best round, less sensitive to other load on a shared machine), with the ratios torch / jepa
(above 1: jepa is faster) and each variant's tokens compared with torch's (min token cosine,
max|diff| / max|ref|).

    python tools/bench_video.py --threads 2                  # the full cell (minutes on 2 cores)
    python tools/bench_video.py --threads 2 --layers 2       # a smoke run

`video_cell(threads, rounds, layers, frames)` returns the cell as a dict, for tools/bench_engine.py."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "tests" / "results" / "bench-video.json"
VIT_L = dict(
    hidden_size=1024, num_attention_heads=16, mlp_ratio=4.0, crop_size=256, patch_size=16, tubelet_size=2
)


def _cos_rel(got: np.ndarray, ref: np.ndarray) -> tuple[float, float]:
    a, b = got.astype(np.float64), ref.astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return float(cos.min()), float(np.abs(a - b).max() / np.abs(b).max())


def video_cell(
    threads: int = 2, rounds: int = 3, layers: int = 24, frames: int = 16, seed: int = 0
) -> dict[str, Any]:
    """Time one clip through transformers' VJEPA2Model and through jepa (f32, f16; flash attention as the
    engine picks it, the default `flash_attn=None`: flash everywhere, see jepa.h). Returns the cell: config,
    per-variant times, ratios, parity."""
    import torch
    from transformers import VJEPA2Config, VJEPA2Model

    import jepa
    from jepa.convert import convert

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    cfg = VJEPA2Config(**VIT_L, num_hidden_layers=layers, frames_per_clip=frames, pred_num_hidden_layers=1)
    model = VJEPA2Model(cfg).eval()
    x = np.random.default_rng(seed).standard_normal((1, 3, frames, 256, 256)).astype(np.float32)
    xt = torch.from_numpy(x).permute(0, 2, 1, 3, 4).contiguous()

    def torch_run() -> np.ndarray:
        with torch.inference_mode():
            return model(pixel_values_videos=xt, skip_predictor=True).last_hidden_state.numpy()

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(Path(tmp) / "hf")
        paths = {ft: convert(Path(tmp) / "hf", Path(tmp) / f"{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
        contexts = {f"jepa-{ft}": jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
        runs: dict[str, Any] = {name: (lambda c=c: c.encode(x)) for name, c in contexts.items()}
        runs["torch"] = torch_run
        names = list(runs)
        times: dict[str, list[float]] = {n: [] for n in names}
        outputs: dict[str, np.ndarray] = {}
        for r in range(rounds + 1):
            order = names[r % len(names) :] + names[: r % len(names)]
            for n in order:
                t0 = time.perf_counter()
                outputs[n] = runs[n]()
                if r > 0:  # round 0 is the warm-up
                    times[n].append(time.perf_counter() - t0)
    med = {n: statistics.median(t) for n, t in times.items()}
    best = {n: min(t) for n, t in times.items()}
    parity = {
        n: dict(zip(("min_cos", "rel"), _cos_rel(outputs[n], outputs["torch"]), strict=True))
        for n in names
        if n != "torch"
    }
    n_tok = outputs["torch"].shape[1]
    return {
        "model": f"ViT-L/16 video encoder ({layers} layers), {frames} frames at 256 px = {n_tok} tokens",
        "threads": threads,
        "rounds": rounds,
        "seconds_per_clip": med,
        "ratio_torch_over_jepa": {n: med["torch"] / med[n] for n in names if n != "torch"},
        # Best-of-rounds: less sensitive to other load on a shared machine than the median.
        "best_seconds_per_clip": best,
        "ratio_of_best_torch_over_jepa": {n: best["torch"] / best[n] for n in names if n != "torch"},
        "parity_vs_torch": parity,
        "all_times": times,
        "load_average": os.getloadavg(),
        "torch": f"transformers VJEPA2Model (attn {model.config._attn_implementation}), inference_mode, "
        f"torch {torch.__version__}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=24, help="encoder depth (24 = ViT-L)")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument(
        "--out", type=Path, default=None, help=f"JSON to write (default {DEFAULT_OUT} for the full cell)"
    )
    args = ap.parse_args(argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    cell = video_cell(args.threads, args.rounds, args.layers, args.frames)
    # The run's record, as every results file has it (docs tables name the machine, build and commit).
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_engine import git_commit, machine_info

    cell = {"benchmark": "bench-video", "measured_at": started, "commit": git_commit(),
            "machine": machine_info(args.threads), **cell}
    out = args.out or (
        DEFAULT_OUT if args.layers == 24 else Path(tempfile.gettempdir()) / "bench-video-smoke.json"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(cell, indent=2) + "\n")
    for n, t in cell["seconds_per_clip"].items():
        ratio = cell["ratio_torch_over_jepa"].get(n)
        best = cell["best_seconds_per_clip"][n]
        extra = ""
        if ratio:
            extra = (f"  torch/jepa {ratio:.2f} (best-of {cell['ratio_of_best_torch_over_jepa'][n]:.2f})"
                     f"  parity {cell['parity_vs_torch'][n]}")
        print(f"{n:10s} {t:8.2f} s/clip (best {best:.2f}){extra}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
