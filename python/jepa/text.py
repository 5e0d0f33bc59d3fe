"""Text models (family bert): the model's own tokenizer (jepa.tokenizer), length-ordered batching by
a token budget, and the engine's padding-free encode.

A text's tokens go to the engine laid end to end with the other texts of its batch, never padded: the
dense layers run on every real token and the attention per text, so a text's vector is the same bits
alone or in any batch (on the CPU), and no compute goes to padding. The tokenizer is the file's own
tokenizer.json (HF tokenizers, the `text` extra); truncation to the file's max_seq_len is counted on
every `Tokens`, never silent."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._engine import Pooling
from .errors import InvalidInputError
from .pooling import POOLINGS, check_pool
from .tokenizer import (
    CUT_CHARS_PER_TOKEN,
    MAX_TEXT_CHARS,
    TOKENIZE_CHARS,
    Framing,
    TextTokenizer,
    Tokens,
    check_texts,
    require_text,
)

if TYPE_CHECKING:
    from .model import Context, Model

# Tokens per engine call: texts are grouped, shortest first, until the next would pass it.
DEFAULT_TOKEN_BUDGET = 8192

# The tokenizer's names, read through jepa.text as well (the text task's one module for its users).
__all__ = [
    "CUT_CHARS_PER_TOKEN", "DEFAULT_TOKEN_BUDGET", "MAX_TEXT_CHARS", "TOKENIZE_CHARS", "TextTokenizer",
    "Tokens", "check_texts", "embed_text", "encode_tokens", "require_text", "resolve_pool",
    "token_batches", "tokens_from_ids",
]


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
    # Inside the frame, none of the frame's own tokens: this tokenizer never writes them there (a
    # [SEP] mid-sequence is a sentence pair or two texts run together, not one text).
    specials = set(frame.prefix) | set(frame.suffix)
    at = next((j for j in range(p, len(ids) - q) if ids[j] in specials), None)
    if at is not None:
        raise InvalidInputError(
            f"input {i}: token id {ids[at]} at position {at} is one of the tokenizer's own special tokens "
            f"({sorted(specials)}), which it writes only around a text: send each text's ids on their own",
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
    """The pooling (jepa.check_pool: the file's unless overridden) and normalisation to use."""
    norm = model.info.text_normalize if normalize is None else bool(normalize)
    return POOLINGS[check_pool(model, pool)], norm


def encode_tokens(
    context: Context, seqs: Sequence[Tokens], pool: str | None = None, normalize: bool | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET,
) -> np.ndarray:
    """Tokenized texts -> float32 [n, D] in input order, pooled (and normalised) as the file says
    unless overridden. Batches are length-ordered and cut at token_budget tokens."""
    model = context.model
    require_text(model.info.modality)
    mode, norm = resolve_pool(model, pool, normalize)
    out = np.empty((len(seqs), model.embed_dim), np.float32)
    for batch in token_batches([len(s) for s in seqs], token_budget, context.max_batch):
        vecs = context.encode_text([seqs[i] for i in batch], pool=mode, normalize=norm)
        out[batch] = vecs
    return out


def embed_text(
    context: Context, texts: Iterable[str], pool: str | None = None, normalize: bool | None = None,
    token_budget: int = DEFAULT_TOKEN_BUDGET, max_chars: int = MAX_TEXT_CHARS,
) -> np.ndarray:
    """Texts -> float32 [n, D] in input order: tokenized by the model's tokenizer (truncated to its
    max_seq_len), encoded without padding, pooled and normalised as the file says."""
    if isinstance(texts, str):
        raise InvalidInputError("embed_text expects a list of texts, got one str: wrap it in a list")
    texts = list(texts)
    return encode_tokens(
        context, context.model.tokenizer.encode(texts, max_chars), pool, normalize, token_budget
    )
