"""Text models (family bert): tokenization with the model's own tokenizer, length-ordered batching by
a token budget, and the engine's padding-free encode.

A text's tokens go to the engine laid end to end with the other texts of its batch, never padded: the
dense layers run on every real token and the attention per text, so a text's vector is the same bits
alone or in any batch (on the CPU), and no compute goes to padding. The tokenizer is the file's own
tokenizer.json (HF tokenizers, the `text` extra); truncation to the file's max_seq_len is counted on
every `Tokens`, never silent."""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ._engine import Pooling
from .errors import InvalidInputError, ModelFileError, UnsupportedError

if TYPE_CHECKING:
    from .model import Context, Model

TEXT_POOLS = {"cls": Pooling.CLS, "mean": Pooling.MEAN, "last_token": Pooling.LAST}
POOL_NAMES = {v: k for k, v in TEXT_POOLS.items()}
# Characters one text may have before it is refused (tokenizing costs memory in proportion to it); a
# text longer than max_seq_len tokens but under this is truncated and counted.
MAX_TEXT_CHARS = 100_000
# Tokens per engine call: texts are grouped, shortest first, until the next would pass it.
DEFAULT_TOKEN_BUDGET = 8192
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


def require_text_model(model: Model) -> None:
    if model.info.modality != "text":
        raise UnsupportedError(
            f"this is an {model.info.modality} model: it takes {model.info.modality} inputs, not text",
            param="input",
        )


class TextTokenizer:
    """The model's tokenizer (its GGUF's jepa.text.tokenizer), truncating to its max_seq_len."""

    def __init__(self, model: Model) -> None:
        require_text_model(model)
        try:
            from tokenizers import Tokenizer
        except ImportError:  # pragma: no cover - the text extra
            raise UnsupportedError("text models need HF tokenizers: pip install 'jepa[text]'") from None
        self.max_seq_len = model.info.max_seq_len
        self.vocab_size = model.info.vocab_size
        self.cut_chars = self.max_seq_len * CUT_CHARS_PER_TOKEN  # a text's first read
        try:
            tok = _guarded(Tokenizer.from_str, model._native.tokenizer())
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


def check_texts(texts: Sequence[Any], max_chars: int = MAX_TEXT_CHARS) -> None:
    """Every item a non-empty str of at most max_chars characters that encodes to UTF-8."""
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InvalidInputError(f"text {i}: expected a string, got {type(t).__name__}", param="input")
        if not t:
            raise InvalidInputError(f"text {i} is empty", param="input")
        if len(t) > max_chars:
            raise InvalidInputError(
                f"text {i} has {len(t)} characters, over the limit of {max_chars} per text", param="input"
            )
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInputError(
                f"text {i} is not valid Unicode (a lone surrogate)", param="input"
            ) from None


def tokens_from_ids(seqs: Sequence[Any], model: Model) -> list[Tokens]:
    """Sequences of token ids given directly (OpenAI's array-of-ids input): encoded as given. Each must
    be ids made by this model's own tokenizer, unpadded: non-empty, in the vocabulary, at most
    max_seq_len long, framed by the tokenizer's own special tokens ([CLS] ... [SEP]) and free of its
    pad id. Anything else would encode as a text nobody wrote (another tokenizer's ids, padding read
    as tokens), so it is refused rather than answered."""
    info = model.info
    frame = model.tokenizer.framing
    out = []
    for i, s in enumerate(seqs):
        if not isinstance(s, list | tuple | np.ndarray) or not all(
            isinstance(x, int | np.integer) and not isinstance(x, bool) for x in s
        ):
            raise InvalidInputError(f"input {i}: expected a list of integer token ids", param="input")
        if len(s) == 0:
            raise InvalidInputError(f"input {i}: an empty list of token ids", param="input")
        if len(s) > info.max_seq_len:
            raise InvalidInputError(
                f"input {i}: {len(s)} token ids, over the model's max_seq_len of {info.max_seq_len}",
                param="input",
            )
        # Checked as Python ints first: an id past int64 is refused, not an overflow in numpy.
        at = next((j for j, x in enumerate(s) if not 0 <= int(x) < info.vocab_size), None)
        if at is not None:
            raise InvalidInputError(
                f"input {i}: token id {int(s[at])} at position {at} is outside this model's vocabulary "
                f"(ids 0..{info.vocab_size - 1}): ids from another tokenizer (tiktoken's, say) are not "
                "this model's; send the text as a string",
                param="input",
            )
        _check_frame([int(x) for x in s], frame, i)
        out.append(Tokens(np.asarray(s, dtype=np.int32), np.zeros(len(s), np.int32)))
    return out


def _check_frame(ids: list[int], frame: Framing, i: int) -> None:
    """Ids as this tokenizer makes them: its special tokens around the text, no padding."""
    if frame.pad is not None and frame.pad in ids:
        raise InvalidInputError(
            f"input {i}: holds the pad id {frame.pad} at position {ids.index(frame.pad)}: send each text's "
            "ids unpadded (padding would be read as tokens)",
            param="input",
        )
    p, q = len(frame.prefix), len(frame.suffix)
    if (
        len(ids) <= p + q
        or tuple(ids[:p]) != frame.prefix
        or tuple(ids[len(ids) - q :]) != frame.suffix
    ):
        raise InvalidInputError(
            f"input {i}: token ids must be this model's own tokenizer's, starting with {list(frame.prefix)} "
            f"and ending with {list(frame.suffix)} (its special tokens) around at least one token; got "
            f"{ids[:4]}{'...' if len(ids) > 4 else ''}: send the text as a string",
            param="input",
        )


def token_batches(lengths: Sequence[int], budget: int, max_items: int) -> list[list[int]]:
    """Indices grouped for engine calls: ordered by length (so a batch holds texts of similar cost),
    each batch at most `budget` tokens and `max_items` texts; a text longer than the budget runs alone."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i in order:
        n = int(lengths[i])
        if cur and (used + n > budget or len(cur) >= max_items):
            batches.append(cur)
            cur, used = [], 0
        cur.append(i)
        used += n
    if cur:
        batches.append(cur)
    return batches


def resolve_pool(model: Model, pool: str | None, normalize: bool | None) -> tuple[Pooling, bool]:
    """The pooling and normalisation to use: the file's unless overridden."""
    info = model.info
    if pool is None:
        mode = info.pooling
    elif pool in TEXT_POOLS:
        mode = TEXT_POOLS[pool]
    else:
        raise InvalidInputError(
            f"unknown text pooling {pool!r} (expected one of: {', '.join(TEXT_POOLS)})", param="pool"
        )
    return mode, info.text_normalize if normalize is None else bool(normalize)


def encode_tokens(
    context: Context,
    seqs: Sequence[Tokens],
    pool: str | None = None,
    normalize: bool | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> np.ndarray:
    """Tokenized texts -> float32 [n, D] in input order, pooled (and normalised) as the file says
    unless overridden. Batches are length-ordered and cut at token_budget tokens."""
    model = context.model
    require_text_model(model)
    mode, norm = resolve_pool(model, pool, normalize)
    out = np.empty((len(seqs), model.embed_dim), np.float32)
    for batch in token_batches([len(s) for s in seqs], token_budget, context.max_batch):
        vecs = context.encode_text([seqs[i] for i in batch], pool=mode, normalize=norm)
        out[batch] = vecs
    return out


def embed_text(
    context: Context,
    texts: Iterable[str],
    pool: str | None = None,
    normalize: bool | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
    max_chars: int = MAX_TEXT_CHARS,
) -> np.ndarray:
    """Texts -> float32 [n, D] in input order: tokenized by the model's tokenizer (truncated to its
    max_seq_len), encoded without padding, pooled and normalised as the file says."""
    if isinstance(texts, str):
        raise InvalidInputError("embed_text expects a list of texts, got one str: wrap it in a list")
    texts = list(texts)
    return encode_tokens(
        context, context.model.tokenizer.encode(texts, max_chars), pool, normalize, token_budget
    )
