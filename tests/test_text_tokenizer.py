"""The model's own tokenizer, hardened: a tokenizer.json that does not fit its file fails at load, not
on a request; HF tokenizers' Rust panics (a pathological regex) become ModelFileError naming the
tokenizer; and a long text is tokenized from a bounded prefix with the same ids and truncation flag
as the whole text (tests/test_server_text_hardening.py has the server's side)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import jepa
from jepa.testing.random_text import (
    WORDS,
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


# -- a long text is read only as far as its tokens need ---------------------------------------------


def _bpe_tokenizer_json() -> str:
    """A byte-level BPE tokenizer (RoBERTa's layout: <s> ... </s>), trained on the tiny words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([" ".join(WORDS)] * 20 + WORDS, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0))
    return tok.to_str()


def _unigram_tokenizer_json() -> str:
    """A SentencePiece-style Unigram tokenizer (XLM-R's layout: NFKC, Metaspace), trained on the tiny
    words."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace("  ", " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=150, special_tokens=["<s>", "<pad>", "</s>", "<unk>"],
                                      unk_token="<unk>")
    tok.train_from_iterator([" ".join(WORDS)] * 20 + WORDS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)]
    )
    return tok.to_str()


TOKENIZERS = {
    "wordpiece": tiny_tokenizer_json,
    "bpe": _bpe_tokenizer_json,
    "unigram": _unigram_tokenizer_json,
}


def long_texts(cut: int, n: int) -> list[str]:
    """Texts around and far past a cut of `cut` characters, for a tokenizer truncating to `n`
    tokens: words, words of every length at the boundary, one long word across it (so the prefix
    does not decide), runs, scripts."""
    import random

    rng = random.Random(5)
    words = [*WORDS, "internationalization", "Zebra", "x" * 40, "3.14159", "naïve", "中文", "😀", "!?"]

    def prose(n: int) -> str:
        out: list[str] = []
        size = 0
        while size < n:  # mostly words, some random letters of 1 to 30 characters
            w = rng.choice(words)
            if rng.random() < 0.1:
                w = "".join(rng.choices("abcxyz", k=rng.randint(1, 30)))
            out.append(w)
            size += len(w) + 1
        return " ".join(out)[:n]

    texts = [prose(n) for n in (cut - 2, cut - 1, cut, cut + 1, cut + 2, 3 * cut, 40_000)]
    texts += [prose(rng.randint(cut // 2, 4 * cut)) for _ in range(40)]
    texts += [
        "hello " * 100 + "x" * 2000 + " world" * 50,  # the cut falls inside a long word
        # The kept tokens reach a word the cut splits: whole, its 120 characters are one [UNK]
        # (WordPiece's max_input_chars_per_word is 100); cut to 30, they would be 30 pieces.
        "hello " * (n - 4) + "x" * (cut - 31 - 6 * (n - 4)) + " " + "ab" * 60 + " world" * 100,
        "x" * 5000 + " hello" * 10,  # one long word first: the prefix holds fewer than max_seq_len tokens
        "a" * 20_000,
        "\u3042" * 5000,
        "\U0001f600" * 3000,
        "中文" * 3000,
        "   " * 2000 + "word",
        "!?" * 3000,
        "1234567890" * 500,
        "line\n" * 2000,
        "e\u0301" * 3000,
    ]
    return texts


@pytest.mark.parametrize("kind", sorted(TOKENIZERS))
def test_a_cut_text_has_the_whole_texts_ids_and_truncation(tmp_path: Path, kind: str) -> None:
    from tokenizers import Tokenizer

    doc = TOKENIZERS[kind]()
    whole = Tokenizer.from_str(doc)
    path = write_random_bert(tmp_path / f"{kind}.gguf", tokenizer=doc, vocab_size=whole.get_vocab_size())
    tok = jepa.Model(path).tokenizer
    whole.no_padding()
    whole.enable_truncation(tok.max_seq_len)
    texts = long_texts(tok.cut_chars, tok.max_seq_len)
    got = tok.encode(texts)
    for i, (t, e) in enumerate(zip(got, whole.encode_batch(texts), strict=True)):
        ours = (t.ids.tolist(), t.type_ids.tolist(), t.truncated)
        theirs = (e.ids, e.type_ids, bool(e.overflowing))
        assert ours == theirs, (kind, i, texts[i][:60])
    assert sum(t.truncated for t in got) > len(texts) // 2


class _Spy:
    """A tokenizer's encode_batch, recording the characters of every text it is given."""

    def __init__(self, tok: object) -> None:
        self.tok = tok
        self.calls: list[list[int]] = []

    def encode_batch(self, texts: list[str], **kwargs: object) -> object:
        self.calls.append([len(t) for t in texts])
        return self.tok.encode_batch(texts, **kwargs)  # type: ignore[attr-defined]


def test_a_long_text_is_read_only_as_far_as_its_tokens_need(tmp_path: Path) -> None:
    tok = jepa.Model(write_random_bert(tmp_path / "t.gguf", max_seq_len=64)).tokenizer
    assert tok.cut_chars == 64 * 16
    spy = _Spy(tok._tok)
    tok._tok = spy  # type: ignore[assignment]
    prose = ("the quick brown fox jumps over the lazy dog " * 25_000)[:1_000_000]
    (t,) = tok.encode([prose], max_chars=1_000_000)
    assert len(t) == 64 and t.truncated
    assert spy.calls == [[1024]]  # before: [[1_000_000]], 165 MiB in the tokenizer
    # Many texts: at most TOKENIZE_CHARS characters a call; groups() are those calls' texts.
    spy.calls.clear()
    texts = [prose[i * 488 : (i + 1) * 488] for i in range(2048)]
    tok.encode(texts, max_chars=1_000_000)
    assert max(sum(c) for c in spy.calls) <= jepa.text.TOKENIZE_CHARS
    assert [len(r) for r in tok.groups(texts)] == [len(c) for c in spy.calls]
    # A text whose prefix cannot decide (one word longer than any cut) is read further, doubling.
    spy.calls.clear()
    (w,) = tok.encode(["x" * 99_000 + " hello"])
    assert w.ids.tolist() == [2, 1, spy.tok.token_to_id("hello"), 3] and not w.truncated  # type: ignore[attr-defined]
    assert [c[0] for c in spy.calls] == [1024 * 2**k for k in range(7)] + [99_006]
