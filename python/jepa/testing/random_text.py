"""Tiny random text models (family bert) and the tiny WordPiece tokenizer they carry: numpy and HF
tokenizers only, for tests, the schema check and the server's test suite (no torch)."""

from __future__ import annotations

import json
import os
import string
from pathlib import Path
from typing import Any

import numpy as np

from ..gguf.schema import Meta
from ..gguf.text_schema import TextEncoder
from ..gguf.writer import write_text_gguf

SPECIAL = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# Enough whole words and pieces that ordinary English splits into real tokens, not [UNK].
WORDS = [
    "the",
    "a",
    "an",
    "and",
    "or",
    "of",
    "to",
    "in",
    "on",
    "is",
    "are",
    "was",
    "be",
    "it",
    "that",
    "this",
    "with",
    "for",
    "as",
    "at",
    "by",
    "from",
    "not",
    "no",
    "yes",
    "model",
    "text",
    "image",
    "video",
    "token",
    "vector",
    "embed",
    "server",
    "query",
    "caption",
    "cat",
    "dog",
    "photo",
    "run",
    "fast",
    "slow",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "hello",
    "world",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "lazy",
]


def tiny_tokenizer_json(words: tuple[str, ...] | list[str] = WORDS) -> str:
    """A BERT-style WordPiece tokenizer.json (lower-casing normaliser, [CLS] ... [SEP] template): the
    special tokens, single characters and their ## pieces, then `words`."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    chars = list(string.ascii_lowercase + string.digits + string.punctuation)
    vocab_list = [*SPECIAL, *chars, *(f"##{c}" for c in chars), *dict.fromkeys(words)]
    vocab = {t: i for i, t in enumerate(dict.fromkeys(vocab_list))}
    tok = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])],
    )
    doc = json.loads(tok.to_str())
    doc["padding"] = doc["truncation"] = None
    return json.dumps(doc, separators=(",", ":"))


def with_split_regex(tokenizer_json: str, pattern: str) -> str:
    """A tokenizer.json whose pre-tokenizer first splits on the regex `pattern` (a Split, isolating
    each match), then as before: tests write pathological ones (HF tokenizers' Oniguruma gives up
    on catastrophic backtracking with a Rust panic)."""
    doc = json.loads(tokenizer_json)
    split = {"type": "Split", "pattern": {"Regex": pattern}, "behavior": "Isolated", "invert": False}
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split, doc["pre_tokenizer"]]}
    return json.dumps(doc, separators=(",", ":"))


def tiny_vocab_size() -> int:
    """How many tokens tiny_tokenizer_json() knows: the vocab_size of a model built for it."""
    return len(json.loads(tiny_tokenizer_json())["model"]["vocab"])


def random_text_tensors(enc: TextEncoder, seed: int = 0) -> list[tuple[str, np.ndarray]]:
    """Every tensor of enc's table, random: matrices and tables ~ N(0, 0.2²) (so the attention is not
    uniform), LayerNorm gains around 1 and biases around 0, all randomised (so a missing or swapped
    norm shows)."""
    rng = np.random.default_rng(seed)
    out = []
    for name, e in enc.table().items():
        if name.endswith("weight") and len(e.shape) == 1:  # a LayerNorm gain
            arr = 1.0 + 0.2 * rng.standard_normal(e.shape)
        elif len(e.shape) == 1:
            arr = 0.1 * rng.standard_normal(e.shape)
        else:
            arr = 0.2 * rng.standard_normal(e.shape)
        out.append((name, arr.astype(np.float32)))
    return out


def write_random_bert(
    path: str | os.PathLike[str], *, embed_dim: int = 32, n_layer: int = 2, n_head: int = 4,
    ffn_dim: int = 64, n_positions: int = 66, n_token_types: int = 2, max_seq_len: int = 64,
    pos_offset: int = 0, pooling: str = "mean", normalize: bool = True, seed: int = 0, ftype: str = "f32",
    tokenizer: str | None = None, name: str = "tiny-bert", vocab_size: int | None = None,
) -> str:
    """A tiny random family-bert file with the tiny WordPiece tokenizer (or `tokenizer`, carried as
    given: tests write malformed ones); the vocabulary is the tiny tokenizer's unless vocab_size."""
    tok = tokenizer if tokenizer is not None else tiny_tokenizer_json()
    vocab = vocab_size or tiny_vocab_size()
    enc = TextEncoder(
        embed_dim=embed_dim, n_layer=n_layer, n_head=n_head, ffn_dim=ffn_dim, vocab_size=vocab,
        n_positions=n_positions, n_token_types=n_token_types, pooling=pooling, max_seq_len=max_seq_len,
        tokenizer=tok, normalize=normalize, pos_offset=pos_offset,
    )
    meta = Meta(family="bert", name=name, modality="text")
    return write_text_gguf(path, meta, enc, random_text_tensors(enc, seed), ftype)


def write_st_layout(
    root: Path, dim: int, pooling: dict[str, Any], normalize: bool, max_seq_length: int
) -> None:
    """Make a save_pretrained directory a sentence-transformers one: Transformer, Pooling (`pooling`:
    its pooling_mode_* flags), Normalize when `normalize` (what convert/bert.py reads back)."""
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    if normalize:
        modules.append(
            {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
        )
        (root / "2_Normalize").mkdir()
    (root / "modules.json").write_text(json.dumps(modules))
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": dim, **pooling}))
    (root / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": max_seq_length}))
