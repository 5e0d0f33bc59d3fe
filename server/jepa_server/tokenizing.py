"""A text model's requests tokenized off the event loop, within a server-wide budget of characters.

A request's texts are tokenized with the model's own tokenizer (truncated to its max_seq_len,
counted) on the model's preparation threads (--prep-threads), in bounded pieces under a server-wide
budget of characters (TokenizerGate), and bounded again in tokens as the pieces come back; token ids
sent as such are read by the library's own check (jepa.text.tokens_from_ids)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Protocol

import jepa
import jepa.text
from jepa.text import Tokens

from .errors import ApiError, from_jepa
from .inputs import Limits, TextInputs, too_many_tokens


class Submitter(Protocol):
    """What runs the tokenizer: the pipeline's preparation threads."""

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]: ...


class TokenizerGate:
    """The characters HF tokenizers holds at once, server-wide (its working memory is some hundred
    bytes a character). A request's texts are tokenized one group at a time (TextTokenizer.groups:
    at most jepa.text.TOKENIZE_CHARS characters read at first), each holding its texts' characters
    here until its tokenizing has ended, in arrival order. A group whose texts hold more than the
    whole gate (one that may read a long text further) takes all of it: it runs alone."""

    def __init__(self, chars: int) -> None:
        self.capacity = max(1, chars)
        self.free = self.capacity
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def run(self, prep: Submitter, chars: int, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on the preparation threads once `chars` of the gate are free; they are
        given back when fn has returned or will never run (a cancelled caller does not wait for a
        running fn, the gate does)."""
        n = await self._acquire(min(chars, self.capacity))
        loop = asyncio.get_running_loop()
        try:
            job = prep.submit(fn, *args)
        except BaseException:
            self._release(n)
            raise
        job.add_done_callback(lambda _: _soon(loop, self._release, n))
        return await asyncio.wrap_future(job)

    async def _acquire(self, n: int) -> int:
        if not self._waiting and self.free >= n:
            self.free -= n
            return n
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((n, granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self._release(n)  # granted as the caller was cancelled: give it back
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove((n, granted))
                self._grant()
            raise
        return n

    def _release(self, n: int) -> None:
        self.free += n
        self._grant()

    def _grant(self) -> None:
        while self._waiting and self._waiting[0][0] <= self.free:
            n, granted = self._waiting.popleft()
            if not granted.done():
                self.free -= n
                granted.set_result(None)


def _soon(loop: asyncio.AbstractEventLoop, fn: Callable[..., None], *args: Any) -> None:
    """fn(*args) on the event loop, from any thread; nothing once the loop is gone (shutdown)."""
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(fn, *args)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim from the process's own symbols, or None (musl, macOS, Windows)."""
    try:
        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):  # no dlopen(NULL) (Windows)
        return None
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


# Characters after which a request's tokenizing gives freed memory back to the system (below, what
# glibc keeps in its arenas is reused by the next request). Measured on six 1 M-character texts read
# whole: +54 MiB kept with it, +97 MiB without.
TRIM_AFTER_CHARS = 1 << 18


def _give_back() -> None:
    """Return the free pages of glibc's heaps to the system (the tokenizer's threads leave them in
    their arenas otherwise)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


async def tokenize(
    model: jepa.Model, inputs: TextInputs, limits: Limits, prep: Submitter, gate: TokenizerGate
) -> list[Tokens]:
    """The request's Tokens, made on the preparation threads: token ids checked in one piece, texts
    in TextTokenizer.groups one at a time under the gate, stopping at --max-request-tokens. A failure
    of the tokenizer itself is the file's (503 tokenizer_failed); a refusal of the input is mapped by
    its param."""
    try:
        if inputs.texts is None:
            return await asyncio.wrap_future(prep.submit(jepa.text.tokens_from_ids, inputs.ids or [], model))
        return await _tokenize_texts(model, inputs.texts, limits, prep, gate)
    except jepa.ModelFileError as exc:  # the tokenizer itself failed (jepa.text: param "tokenizer")
        raise tokenizer_failed(exc) from None
    except jepa.JepaError as exc:
        raise from_jepa(exc, "input") from None


async def _tokenize_texts(
    model: jepa.Model, texts: list[str], limits: Limits, prep: Submitter, gate: TokenizerGate
) -> list[Tokens]:
    # Built once per model (it reads and checks tokenizer.json: milliseconds to seconds), off the loop.
    tok = await asyncio.wrap_future(prep.submit(getattr, model, "tokenizer"))
    seqs: list[Tokens] = []
    n_tok = 0
    try:
        for run in tok.groups(texts):
            part = texts[run.start : run.stop]
            got = await gate.run(prep, sum(map(len, part)), tok.encode, part, limits.max_chars)
            seqs += got
            n_tok += sum(len(t) for t in got)
            if n_tok > limits.max_tokens:
                raise too_many_tokens(n_tok, limits.max_tokens, "input", partial=run.stop < len(texts))
    finally:
        if sum(map(len, texts)) >= TRIM_AFTER_CHARS:
            with contextlib.suppress(RuntimeError):  # the pipeline closed (the model unloading)
                prep.submit(_give_back)
    return seqs


def tokenizer_failed(exc: jepa.ModelFileError) -> ApiError:
    """The model's own tokenizer failed on a request's texts (HF tokenizers raised, or panicked on a
    pathological regex of the file's tokenizer.json): the file is at fault, not the text, and the
    same text fails again, so no Retry-After."""
    return ApiError(
        503,
        f"the model's tokenizer failed on this request's texts ({exc.message}); the model file's "
        "tokenizer is at fault, not the input",
        param="input",
        code="tokenizer_failed",
    )
