"""The model's own tokenizer, hardened: a tokenizer.json that does not fit its file fails at load, not
on a request; HF tokenizers' Rust panics (a pathological regex) become ModelFileError naming the
tokenizer; and a long text is tokenized from a bounded prefix with the same ids and truncation flag
as the whole text (tests/test_server_text_hardening.py has the server's side)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jepa
from jepa.convert.random_text import (
    tiny_tokenizer_json,
    tiny_vocab_size,
    with_split_regex,
    write_random_bert,
)

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


# Catastrophic backtracking: Oniguruma's retry limit ends the match with a Rust panic
# (pyo3_runtime.PanicException, a BaseException) on a run of 'a'.
PANICS_ON_A_RUN = "(a+)+b"
# The same on 'xq' then a run of 'z': no hostile-looking text of the load check meets it.
PANICS_ON_XQ = "xq(z+z+)+!"


def _split(pattern: str) -> str:
    return with_split_regex(tiny_tokenizer_json(), pattern)


def test_a_tokenizer_that_panics_on_hostile_text_fails_at_load(tmp_path: Path) -> None:
    path = write_random_bert(tmp_path / "p.gguf", tokenizer=_split(PANICS_ON_A_RUN))
    panic = r"\(a Rust panic: Onig: Regex search error: retry-limit-in-match over\)"
    why = rf"jepa\.text\.tokenizer: HF tokenizers failed {panic} on a check text: a run of 'a'"
    with pytest.raises(jepa.ModelFileError, match=why) as e:
        _ = jepa.Model(path).tokenizer
    assert e.value.param == "tokenizer"


def test_a_panic_on_a_request_is_a_model_file_error_and_the_tokenizer_lives_on(tmp_path: Path) -> None:
    path = write_random_bert(tmp_path / "q.gguf", tokenizer=_split(PANICS_ON_XQ))
    tok = jepa.Model(path).tokenizer  # loads: the check texts do not meet it
    with pytest.raises(jepa.ModelFileError, match=r"HF tokenizers failed \(a Rust panic: .*retry-limit") as e:
        tok.encode(["fine", "xq" + "z" * 40])
    assert e.value.param == "tokenizer"
    assert len(tok.encode(["the lazy dog"])[0]) == 5
