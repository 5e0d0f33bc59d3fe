"""The model's own tokenizer, hardened: a tokenizer.json that does not fit its file fails at load, not
on a request; HF tokenizers' Rust panics (a pathological regex) become ModelFileError naming the
tokenizer; and a long text is tokenized from a bounded prefix with the same ids and truncation flag
as the whole text (tests/test_server_text_hardening.py has the server's side)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jepa
from jepa.convert.random_text import tiny_tokenizer_json, tiny_vocab_size, write_random_bert

pytestmark = pytest.mark.every_path


def test_a_tokenizer_larger_than_the_token_table_fails_at_load(tmp_path: Path) -> None:
    rows = tiny_vocab_size() - 10
    small = write_random_bert(tmp_path / "small.gguf", vocab_size=rows)
    with pytest.raises(jepa.ModelFileError, match=rf"emits token ids up to {tiny_vocab_size() - 1}, past "
                       rf"the {rows} rows of text.tok_embed"):
        _ = jepa.Model(small).tokenizer
    # An id only the post-processor emits ([CLS] renumbered) is checked too.
    doc = json.loads(tiny_tokenizer_json())
    doc["post_processor"]["special_tokens"]["[CLS]"]["ids"] = [10_000]
    framed = write_random_bert(tmp_path / "framed.gguf", tokenizer=json.dumps(doc))
    with pytest.raises(jepa.ModelFileError, match="emits token ids up to 10000"):
        _ = jepa.Model(framed).tokenizer
    # A table larger than the tokenizer (padded rows) is fine.
    big = jepa.Model(write_random_bert(tmp_path / "big.gguf", vocab_size=tiny_vocab_size() + 64))
    assert len(big.tokenizer.encode(["the lazy dog"])[0]) == 5
