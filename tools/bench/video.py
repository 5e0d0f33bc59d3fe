"""jepa against transformers on a V-JEPA 2 video encoder -> tests/results/bench-video.json: ViT-L/16
(bench.vit's vjepa2-l16: random weights, real dims: width 1024, 24 layers, 16 heads, MLP 4096,
tubelet 2) on one 16-frame 256 px clip = 2048 tokens, same threads.

A transformers VJEPA2Model is built (bench.vit.build_torch), saved with save_pretrained and converted
by jepa-convert to f32 and f16 GGUF files, so both engines run the same weights. The variants run
interleaved (the order rotates every round) after one untimed warm-up round; the median of the timed
rounds is reported in seconds per clip (and the best round, less sensitive to other load on a shared
machine), with the ratios torch / jepa (above 1: jepa is faster; of the medians, of the best rounds
and paired within a round) and each variant's tokens compared with torch's (min token cosine,
max|diff| / max|ref|).

    python tools/bench/video.py --threads 2              # the full cell (minutes on 2 cores)
    python tools/bench/video.py --layers 2 --frames 4    # a reduced cell (-> the temp folder)
    python tools/bench/video.py --smoke                  # a tiny encoder (a test runs it)
    python tools/bench/video.py --cpu x86-64-v3          # stand for an AVX2-only CPU
                                                         # -> tests/results/bench-video-avx2.json

`video_cell(spec, threads, rounds)` returns the cell as a dict."""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/video.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np

from bench import harness
from bench.vit import MODELS, SMOKE_MODELS, Spec, build_torch, hf_layout, last_hidden

RELEASED = MODELS["vjepa2-l16"]
SMOKE = SMOKE_MODELS["vjepa2-tiny"]
TORCH = "torch"


def _cos_rel(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    a, b = got.astype(np.float64), ref.astype(np.float64)
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    return {"min_cos": float(cos.min()), "rel": float(np.abs(a - b).max() / np.abs(b).max())}


def describe(spec: Spec, tokens: int) -> str:
    """The record's model line: the released encoder by its name, a smaller one by its width too."""
    wide = spec.hidden == RELEASED.hidden
    name = "ViT-L/16 video encoder" if wide else f"V-JEPA 2 encoder {spec.hidden} wide"
    return f"{name} ({spec.layers} layers), {spec.frames} frames at {spec.img} px = {tokens} tokens"


def video_cell(spec: Spec, threads: int = 2, rounds: int = 3, seed: int = 0) -> dict[str, Any]:
    """Time one clip through transformers' VJEPA2Model and through jepa (f32, f16; flash attention as the
    engine picks it, the default `flash_attn=None`: flash everywhere, see jepa.h). Returns the cell: config,
    per-variant times, ratios, parity."""
    import torch

    import jepa
    from jepa.convert import convert

    torch.set_num_threads(threads)
    model = build_torch(spec, seed)
    forward = last_hidden(model, spec.kind)
    x = np.random.default_rng(seed).standard_normal(spec.input_shape(1)).astype(np.float32)
    xt = torch.from_numpy(hf_layout(spec, x))

    def torch_run() -> np.ndarray:
        with torch.inference_mode():
            return np.asarray(forward(xt).numpy())

    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(Path(tmp) / "hf")
        paths = {ft: convert(Path(tmp) / "hf", Path(tmp) / f"{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
        contexts = {f"jepa-{ft}": jepa.Model(p).context(threads=threads) for ft, p in paths.items()}
        runs: dict[str, Any] = {name: (lambda c=c: c.encode(x)) for name, c in contexts.items()}
        runs[TORCH] = torch_run
        with harness.Load() as load:
            got = harness.interleave(runs, rounds, warmup=1)
    med, best = got.medians(), got.best()
    jepas = [n for n in runs if n != TORCH]
    n_tok = int(got.outputs[TORCH].shape[1])
    return {
        "model": describe(spec, n_tok),
        "threads": threads,
        "rounds": rounds,
        "seconds_per_clip": med,
        "ratio_torch_over_jepa": {n: med[TORCH] / med[n] for n in jepas},
        # Best-of-rounds: less sensitive to other load on a shared machine than the median.
        "best_seconds_per_clip": best,
        "ratio_of_best_torch_over_jepa": {n: best[TORCH] / best[n] for n in jepas},
        "ratio_paired_torch_over_jepa": {n: got.paired([TORCH], n) for n in jepas},
        "parity_vs_torch": {n: _cos_rel(got.outputs[n], got.outputs[TORCH]) for n in jepas},
        "all_times": got.samples,
        "load": load.record(),
        "torch": f"transformers VJEPA2Model (attn {model.config._attn_implementation}), inference_mode, "
        f"torch {torch.__version__}",
    }


def main(argv: list[str] | None = None) -> int:
    ap = harness.parser(__doc__, smoke="a tiny V-JEPA 2 encoder, 1 round: checks the script runs")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--layers", type=int, default=None, help=f"encoder depth (default {RELEASED.layers})")
    ap.add_argument("--frames", type=int, default=None, help=f"clip length (default {RELEASED.frames})")
    args = harness.parse(ap, argv)
    spec = SMOKE if args.smoke else RELEASED
    spec = replace(spec, layers=args.layers or spec.layers, frames=args.frames or spec.frames)
    # A reduced cell is not the committed result: it goes to the temp folder unless --out says otherwise.
    reduced = not args.smoke and spec != RELEASED and args.out is None
    out = harness.TMP / "bench-video-reduced.json" if reduced else harness.out_path(args, "bench-video")
    run = harness.Run("bench-video", args.threads, args.smoke, modules=("torch", "transformers"))
    cell = video_cell(spec, args.threads, 1 if args.smoke else args.rounds)
    data = {**run.head(), **cell}
    harness.write_record(out, data, indent=2)
    for n, t in cell["seconds_per_clip"].items():
        ratio = cell["ratio_torch_over_jepa"].get(n)
        extra = ""
        if ratio:
            extra = (f"  torch/jepa {ratio:.2f} (best-of {cell['ratio_of_best_torch_over_jepa'][n]:.2f})"
                     f"  parity {cell['parity_vs_torch'][n]}")
        print(f"{n:10s} {t:8.2f} s/clip (best {cell['best_seconds_per_clip'][n]:.2f}){extra}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
