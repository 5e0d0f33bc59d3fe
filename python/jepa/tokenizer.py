"""A text model's own tokenizer (its GGUF's jepa.text.tokenizer, read by HF tokenizers): what a
text may be (check_texts), its Tokens, truncation to max_seq_len (counted on every Tokens, never
silent), and the bounds on what HF tokenizers is given at once. It knows nothing of the engine:
jepa.Model.tokenizer builds it from the file's tokenizer string and bounds."""

from __future__ import annotations

import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import InvalidInputError, ModelFileError, UnsupportedError

# Characters one text may have before it is refused (tokenizing costs memory in proportion to it); a
# text longer than max_seq_len tokens but under this is truncated and counted.
MAX_TEXT_CHARS = 100_000
# What HF tokenizers is given at once. It holds some hundred bytes per character while it works (a
# byte-level alignment table, offsets, and every overflowing max_seq_len piece of a truncated text:
# 165 MiB for one 1 M-character text of words), so it is given bounded pieces: at most
# TOKENIZE_CHARS characters a call, and a text first only up to CUT_CHARS_PER_TOKEN characters per
# token of max_seq_len (TextTokenizer.encode says when more of it is read).
TOKENIZE_CHARS = 65_536
CUT_CHARS_PER_TOKEN = 16


@dataclass(frozen=True)
class Tokens:
    """One text as the encoder sees it: ids and token-type ids (int32), and whether truncation cut it."""

    ids: np.ndarray
    type_ids: np.ndarray
    truncated: bool = False

    def __len__(self) -> int:
        return int(self.ids.shape[0])


def require_text(modality: str) -> None:
    """A text task on a model of another modality is refused, naming what the model takes."""
    if modality != "text":
        raise UnsupportedError(
            f"this is an {modality} model: it takes {modality} inputs, not text", param="input"
        )


class TextTokenizer:
    """The model's tokenizer (its GGUF's jepa.text.tokenizer), truncating to its max_seq_len."""

    def __init__(self, tokenizer_json: str, max_seq_len: int, vocab_size: int) -> None:
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - the text extra
            raise UnsupportedError("text models need HF tokenizers: pip install 'jepa[text]'") from None
        self.max_seq_len = max_seq_len
        self.vocab_size = vocab_size
        self.cut_chars = self.max_seq_len * CUT_CHARS_PER_TOKEN  # a text's first read
        try:
            tok = _guarded(Tokenizer.from_str, tokenizer_json)
        except Exception as exc:  # tokenizers raises a bare Exception for a malformed file
            raise ModelFileError(
                f"metadata key jepa.text.tokenizer: HF tokenizers cannot read it ({exc})"
            ) from None
        tok.no_padding()
        tok.enable_truncation(self.max_seq_len)
        self._tok = tok
        self.framing = _framing(tok, self._encode_batch(["a"], "on the one-word text 'a'")[0])
        _check_vocab(tok, self.framing, self.vocab_size)
        self._check_on_hostile_texts()

    def encode(self, texts: Sequence[str], max_chars: int = MAX_TEXT_CHARS) -> list[Tokens]:
        """Tokens for each text, with its special tokens, truncated to max_seq_len (and flagged so).
        A failure of HF tokenizers itself (a Rust panic on a pathological tokenizer.json) is a
        ModelFileError naming the tokenizer (param "tokenizer"): the file is at fault, not the text.

        The tokenizer reads a text only as far as its first max_seq_len tokens need: first its
        `cut_chars` characters, and while that prefix does not decide them, twice as many (up to
        the whole text). A prefix decides them when its tokens overflow max_seq_len and the last one
        kept comes from a word (the pre-tokenizer's) followed by another whole word before the last
        one, the only word a cut can change: the ids and the truncation flag are then the whole
        text's. At most TOKENIZE_CHARS characters go to one call (a longer read goes alone)."""
        check_texts(texts, max_chars)
        out: list[Tokens | None] = [None] * len(texts)
        todo = [(i, self.cut_chars) for i in range(len(texts))]
        while todo:
            more = []
            for run in _runs([min(len(texts[i]), cut) for i, cut in todo], TOKENIZE_CHARS):
                part = [todo[k] for k in run]
                encs = self._encode_batch([texts[i][:cut] for i, cut in part], "on one of these texts")
                for (i, cut), e in zip(part, encs, strict=True):
                    if cut < len(texts[i]) and not _decided(e):
                        more.append((i, 2 * cut))
                        continue
                    ids = np.asarray(e.ids, dtype=np.int32)
                    out[i] = Tokens(ids, np.asarray(e.type_ids, dtype=np.int32), bool(e.overflowing))
            todo = more
        return out  # type: ignore[return-value]  # every text has its Tokens once nothing is left to read

    def groups(self, texts: Sequence[str]) -> list[range]:
        """Consecutive runs of `texts` that encode() reads in one call at first (at most
        TOKENIZE_CHARS characters, or one longer text alone): the pieces a caller may tokenize one at
        a time, so that only one piece's working memory is held at once (the server does)."""
        return _runs([min(len(t), self.cut_chars) for t in texts], TOKENIZE_CHARS)

    def _encode_batch(self, texts: list[str], which: str) -> list[Any]:
        try:
            return _guarded(self._tok.encode_batch, texts, add_special_tokens=True)
        except Exception as exc:  # anything HF tokenizers raises on valid text is the file's fault
            raise ModelFileError(
                f"metadata key jepa.text.tokenizer: HF tokenizers failed ({exc}) {which}", param="tokenizer"
            ) from None

    def _check_on_hostile_texts(self) -> None:
        """Tokenize CHECK_TEXTS once, at load: a tokenizer.json whose regexes give up on long runs or
        odd Unicode (Oniguruma's retry limit is a Rust panic) fails here, not on a request."""
        try:
            self._encode_batch([t for _, t in CHECK_TEXTS], "on the check texts")
        except ModelFileError:
            for what, text in CHECK_TEXTS:  # name the first text it fails on
                self._encode_batch([text], f"on a check text: {what}")
            raise


@dataclass(frozen=True)
class Framing:
    """What the model's own tokenizer puts around every text ([CLS] ... [SEP] for BERT, <s> ... </s>
    for XLM-R) and its padding id: how ids made by this tokenizer, unpadded, look."""

    prefix: tuple[int, ...]
    suffix: tuple[int, ...]
    pad: int | None


_PAD_TOKENS = ("[PAD]", "<pad>")


def _check_vocab(tok: Any, framing: Framing, rows: int) -> None:
    """Every id the tokenizer can emit (its vocabulary with the added tokens, and the post-processor's
    special tokens) has a row of the token table: checked once at load, so a file whose tokenizer
    outgrew its table fails there, not on the request that meets a high id."""
    top = max([*tok.get_vocab(with_added_tokens=True).values(), *framing.prefix, *framing.suffix])
    if top >= rows:
        raise ModelFileError(
            f"metadata key jepa.text.tokenizer: the tokenizer emits token ids up to {top}, past the {rows} "
            "rows of text.tok_embed (jepa.text.vocab_size): a tokenizer.json from another model?",
            param="tokenizer",
        )


def _runs(sizes: Sequence[int], limit: int) -> list[range]:
    """Consecutive index ranges of at most `limit` in total size (an item over it alone)."""
    runs: list[range] = []
    start, used = 0, 0
    for i, n in enumerate(sizes):
        if i > start and used + n > limit:
            runs.append(range(start, i))
            start, used = i, 0
        used += n
    if start < len(sizes):
        runs.append(range(start, len(sizes)))
    return runs


def _decided(e: Any) -> bool:
    """Whether a prefix's encoding gives the whole text's first max_seq_len tokens: it overflowed
    (so the text is truncated), and between the word of the last token kept and the prefix's last
    word (the one the cut may have split) lies a whole word, so nothing the cut changed is kept."""
    if not e.overflowing:
        return False
    kept = [w for w in e.word_ids if w is not None]
    last = max((w for o in e.overflowing for w in o.word_ids if w is not None), default=None)
    return last is not None and (not kept or max(kept) + 1 < last)


def _is_panic(exc: BaseException) -> bool:
    """A Rust panic inside HF tokenizers reaches Python as pyo3_runtime.PanicException, which derives
    from BaseException: `except Exception` does not see it."""
    t = type(exc)
    return t.__name__ == "PanicException" and t.__module__ == "pyo3_runtime"


def _guarded(call: Any, *args: Any, **kwargs: Any) -> Any:
    """call(...) into HF tokenizers, a Rust panic raised as RuntimeError("a Rust panic: ...")."""
    try:
        return call(*args, **kwargs)
    except BaseException as exc:
        if _is_panic(exc):
            raise RuntimeError(f"a Rust panic: {exc}") from None
        raise


def _check_texts() -> tuple[tuple[str, str], ...]:
    """What a tokenizer must take at load (TextTokenizer._check_on_hostile_texts): a run of
    CHECK_RUN of each printable ASCII character, of whitespace and of odd Unicode (combining marks,
    CJK, kana, Hangul, RTL scripts, emoji and ZWJ sequences, invisible and separator characters),
    and a few mixtures. About 60 000 characters: milliseconds for a sound tokenizer."""
    odd = ("\u00e9", "e\u0301", "\u0301", "\u4e2d", "\u3042", "\uac00", "\u0627", "\u05d0", "\u0e01",
           "\u0905", "\U0001f600", "\U0001f469\u200d\U0001f4bb", "\u200b", "\u200d", "\ufeff", "\u00a0",
           "\u2028", "\u3000", "\ufffd", "\U00010348", "\x00", "\x7f")
    runs = [*string.printable, *odd]
    texts = [(f"a run of {c!r}", c * (CHECK_RUN // len(c))) for c in runs]
    mixed = ("aA1!", "a ", "ab", "the ", "é ", "a\u0301", "中文", "😀 ", string.ascii_letters)
    texts += [(f"{m!r} repeated", m * (CHECK_RUN // len(m))) for m in mixed]
    return tuple(texts)


# Characters of each check run: catastrophic backtracking (Oniguruma's retry limit, 10⁷ steps) shows
# on runs far shorter.
CHECK_RUN = 512
CHECK_TEXTS = _check_texts()


def _framing(tok: Any, e: Any) -> Framing:
    """The post-processor's tokens around a one-word text (`e`, its encoding): the leading and trailing
    special tokens."""
    ids, special = list(e.ids), list(e.special_tokens_mask)
    lead = next((i for i, m in enumerate(special) if not m), len(ids))
    trail = next((i for i, m in enumerate(reversed(special)) if not m), 0)
    pads = [tok.token_to_id(t) for t in _PAD_TOKENS]
    return Framing(
        tuple(ids[:lead]), tuple(ids[len(ids) - trail :]), next((p for p in pads if p is not None), None)
    )


def check_texts(texts: Sequence[Any], max_chars: int = MAX_TEXT_CHARS, name: str = "input") -> None:
    """Every item a non-empty str of at most max_chars characters that encodes to UTF-8: the one rule
    of what a text may be (the server maps a refusal by its param, `name[i]`)."""
    for i, t in enumerate(texts):
        param = f"{name}[{i}]"
        if not isinstance(t, str):
            raise InvalidInputError(f"'{param}': expected a string, got {type(t).__name__}", param=param)
        if not t:
            raise InvalidInputError(f"'{param}' is an empty string", param=param)
        if len(t) > max_chars:
            raise InvalidInputError(
                f"'{param}' has {len(t)} characters, over the limit of {max_chars} per text", param=param
            )
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\\ud800" escaped in JSON)
            message = f"'{param}' is not valid Unicode (a lone surrogate)"
            raise InvalidInputError(message, param=param) from None


