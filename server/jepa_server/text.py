"""Text in /v1/embeddings and /embed (text models, family bert): parsing, budgets, tokenization off the
event loop, the batched op, the answers, and /info's truncation counters.

A request's texts are parsed and bounded (items, characters) before anything is tokenized, then
tokenized with the model's own tokenizer (truncated to its max_seq_len, counted) on the model's
preparation threads, in bounded pieces under a server-wide budget of characters (TokenizerGate), and
bounded again in tokens; each text goes to the dispatcher as one task. Its payload is a fixed-shape
int32 row (the length, the ids, the token types), so texts of every length share batches across
requests; the worker-side op (text_op) unpacks it and runs jepa.text.encode_tokens, which orders the
batch by length and cuts it at the token budget: the engine sees real tokens only, never padding. The
vectors are the library's, so a text gives the same bits here as through jepa.text or jepa-embed.

The other direction is refused too: an image or a clip sent to a text model, or text (or token ids)
sent to an image model, is a 400 `wrong_modality` naming the model's modality."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import functools
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from aiohttp import web

import jepa
import jepa.text
from jepa.text import Tokens

from .dispatcher import timing_of
from .errors import ApiError, bad_request, from_jepa
from .inputs import Item, Limits, check_item_count, opt_bool, opt_str, parse_items
from .keys import ADMISSION, SETTINGS
from .scheduler import CostModel
from .settings import FLOAT_JSON_BYTES

if TYPE_CHECKING:
    from .runtime import Engine

_ENTRY_BYTES = 200  # an embedding entry's JSON beside its floats
_HEAD_BYTES = 1024


@dataclass
class TextStats:
    """What one model's text traffic has been (/info): texts, real tokens, texts truncated."""

    texts: int = 0
    tokens: int = 0
    truncated: int = 0


_STATS: weakref.WeakKeyDictionary[Any, TextStats] = weakref.WeakKeyDictionary()


def stats_of(engine: Engine) -> TextStats:
    return _STATS.setdefault(engine, TextStats())


def wrong_modality(model: jepa.Model, got: str, param: str) -> ApiError:
    modality = model.info.modality
    forms = _MEDIA_FORMS.get(modality, _MEDIA_FORMS["video"])
    takes = "strings" if modality == "text" else f"{modality}s ({forms})"
    article = "an" if modality[:1] in "aeiou" else "a"
    return ApiError(
        400,
        f"this is {article} {modality} model: it takes {takes}, not {got}",
        param=param,
        code="wrong_modality",
    )


# The forms each modality takes: an image model encodes single images only (a clip is refused).
_MEDIA_FORMS = {
    "image": '{"b64": ...} or a local path',
    "video": '{"b64": ...}, {"frames": [...]}, {"video": {...}} or a local path',
}


def _is_ids(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_id_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_is_ids(x) for x in v)


# -- parsing ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextInputs:
    """A request's text inputs: strings, or sequences of token ids (OpenAI's array forms)."""

    texts: list[str] | None = None
    ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.ids or [])


def parse_text_inputs(model: jepa.Model, value: Any, name: str, s: Any) -> TextInputs:
    """`input` as OpenAI allows it for a text model: a string, an array of strings, an array of
    token ids, or an array of arrays of token ids. Bounded by items and characters before anything
    is tokenized."""
    if value is None:
        raise bad_request(f"'{name}' is required", param=name, code="missing_field")
    if isinstance(value, str) or _is_id_list(value):
        value = [value]
    if not isinstance(value, list):
        raise _refuse_item(model, value, name)
    check_item_count(value, name, s.max_items)
    if all(isinstance(v, str) for v in value):
        return TextInputs(texts=_checked_texts(value, name, s))
    if all(_is_id_list(v) for v in value):
        if not s.accept_token_ids:
            raise token_ids_refused(name)
        total = sum(len(v) for v in value)
        if total > s.max_request_tokens:
            raise _too_many_tokens(total, s, name)
        return TextInputs(ids=value)
    bad = next(i for i, v in enumerate(value) if not isinstance(v, str))
    raise _refuse_item(model, value[bad], f"{name}[{bad}]")


def token_ids_refused(param: str) -> ApiError:
    """Token-id arrays are another tokenizer's ids as often as this model's (LangChain sends tiktoken's
    cl100k ids by default): read as this model's they give a vector of a text nobody wrote."""
    return bad_request(
        "this server takes a text model's input as strings, not token-id arrays (started without "
        "--accept-token-ids): a client's ids come from its own tokenizer, not this model's. Send strings; "
        "LangChain: OpenAIEmbeddings(..., check_embedding_ctx_length=False)",
        param=param,
        code="token_ids_refused",
    )


def _refuse_item(model: jepa.Model, v: Any, param: str) -> ApiError:
    if isinstance(v, dict):
        return wrong_modality(model, "an image or a video", param)
    what = "an empty array" if v == [] else {int: "an integer", float: "a number", bool: "a boolean"}.get(
        type(v), f"a {type(v).__name__}"
    )
    return bad_request(
        f"'{param}' is {what}; an input of a text model is a non-empty string or a non-empty array of "
        "token ids (all inputs of one kind)",
        param=param,
        code="invalid_item",
    )


def _checked_texts(texts: list[str], name: str, s: Any) -> list[str]:
    total = 0
    for i, t in enumerate(texts):
        if not t:
            raise bad_request(f"'{name}[{i}]' is an empty string", param=f"{name}[{i}]", code="invalid_item")
        total += len(t)
        if total > s.max_request_chars:
            raise ApiError(
                413,
                f"the request's texts hold more than {s.max_request_chars} characters "
                f"(--max-request-chars); send fewer or shorter texts",
                param=name,
                code="input_too_large",
            )
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate escaped in the JSON ("\ud800")
            raise bad_request(
                f"'{name}[{i}]' is not valid Unicode (a lone surrogate)",
                param=f"{name}[{i}]",
                code="invalid_item",
            ) from None
    return texts


def _too_many_tokens(n: int, s: Any, name: str, partial: bool = False) -> ApiError:
    return ApiError(
        413,
        f"the request's texts tokenize to {'more than ' if partial else ''}{n} tokens; this server encodes "
        f"at most {s.max_request_tokens} per request (--max-request-tokens)",
        param=name,
        code="input_too_large",
    )


def _looks_like_text(s: str) -> bool:
    """Words, not a file name: whitespace and no path separator."""
    return any(c.isspace() for c in s) and "/" not in s and "\\" not in s


def media_items(
    engine: Engine, value: Any, resolve: Callable[..., Any], limits: Limits, name: str
) -> list[Item]:
    """parse_items for an image or video model, with text and token ids refused by modality: a
    string is a local file path for these models, and one that reads as words is text."""
    if _is_id_list(value):
        raise wrong_modality(engine.model, "token ids", name)
    forms = value if isinstance(value, list) else [value]
    for i, v in enumerate(forms):
        param = name if not isinstance(value, list) else f"{name}[{i}]"
        if _is_id_list(v):
            raise wrong_modality(engine.model, "token ids", param)
        if isinstance(v, str) and _looks_like_text(v):
            raise wrong_modality(engine.model, "text (a string is a local file path here)", param)
    return parse_items(value, resolve, limits, name)


# -- running ---------------------------------------------------------------------------------------


def pack(t: Tokens, width: int) -> np.ndarray:
    """A text as one fixed-shape row [1 + 2 width]: its length, ids and token types (zeros past the
    length, never read by the engine)."""
    row = np.zeros(1 + 2 * width, np.int32)
    n = len(t)
    row[0] = n
    row[1 : 1 + n] = t.ids
    row[1 + width : 1 + width + n] = t.type_ids
    return row


def unpack(row: np.ndarray) -> Tokens:
    n, width = int(row[0]), (row.shape[0] - 1) // 2
    return Tokens(row[1 : 1 + n].copy(), row[1 + width : 1 + width + n].copy())


def text_op(
    ctx: jepa.Context, inputs: list[np.ndarray], arg: tuple[str | None, bool | None, int]
) -> list[np.ndarray]:
    """The worker-side operation of a text group: length-ordered engine calls within the token budget."""
    pool, normalize, budget = arg
    vecs = jepa.text.encode_tokens(ctx, [unpack(r) for r in inputs], pool, normalize, budget)
    return [v.copy() for v in vecs]


@dataclass(frozen=True)
class TextEmbedded:
    vectors: list[np.ndarray]
    tokens: int  # real tokens encoded (special tokens included), for `usage`
    truncated: int  # texts cut to max_seq_len
    queue_s: float
    inference_s: float


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

    async def run(self, pipeline: Any, chars: int, fn: Callable[..., Any], *args: Any) -> Any:
        """fn(*args) on the pipeline's preparation threads once `chars` of the gate are free; they are
        given back when fn has returned or will never run (a cancelled caller does not wait for a
        running fn, the gate does)."""
        n = await self._acquire(min(chars, self.capacity))
        loop = asyncio.get_running_loop()
        try:
            job = pipeline.submit(fn, *args)
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


_GATES: weakref.WeakKeyDictionary[web.Application, TokenizerGate] = weakref.WeakKeyDictionary()


def tokenizer_gate(app: web.Application) -> TokenizerGate:
    """The app's gate: a group of jepa.text.TOKENIZE_CHARS per preparation thread (--prep-threads)."""
    gate = _GATES.get(app)
    if gate is None:
        gate = _GATES[app] = TokenizerGate(app[SETTINGS].decode_threads * jepa.text.TOKENIZE_CHARS)
    return gate


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


async def _tokenize(engine: Engine, inputs: TextInputs, s: Any, gate: TokenizerGate) -> list[Tokens]:
    """The request's Tokens, made on the model's preparation threads: token ids checked in one piece,
    texts in TextTokenizer.groups one at a time under the gate, stopping at --max-request-tokens."""
    model, pipeline = engine.model, engine.pipeline
    if inputs.texts is None:
        return await asyncio.wrap_future(pipeline.submit(jepa.text.tokens_from_ids, inputs.ids or [], model))
    texts = inputs.texts
    # Built once per model (it reads and checks tokenizer.json: milliseconds to seconds), off the loop.
    tok = await asyncio.wrap_future(pipeline.submit(getattr, model, "tokenizer"))
    seqs: list[Tokens] = []
    n_tok = 0
    try:
        for run in tok.groups(texts):
            part = texts[run.start : run.stop]
            got = await gate.run(pipeline, sum(map(len, part)), tok.encode, part, s.max_request_chars)
            seqs += got
            n_tok += sum(len(t) for t in got)
            if n_tok > s.max_request_tokens:
                raise _too_many_tokens(n_tok, s, "input", partial=run.stop < len(texts))
    finally:
        if sum(map(len, texts)) >= TRIM_AFTER_CHARS:
            with contextlib.suppress(RuntimeError):  # the pipeline closed (the model unloading)
                pipeline.submit(_give_back)
    return seqs


async def embed_texts(
    engine: Engine, inputs: TextInputs, pool: str | None, normalize: bool | None, s: Any, gate: TokenizerGate
) -> TextEmbedded:
    model = engine.model
    try:
        seqs = await _tokenize(engine, inputs, s, gate)
    except jepa.ModelFileError as exc:  # the tokenizer itself failed (jepa.text: param "tokenizer")
        raise tokenizer_failed(exc) from None
    except jepa.JepaError as exc:
        raise from_jepa(exc, "input") from None
    n_tok = sum(len(t) for t in seqs)  # within --max-request-tokens: _tokenize, parse_text_inputs
    width = model.info.max_seq_len
    rows = [pack(t, width) for t in seqs]
    try:
        # Each text's cost is its real tokens: the scheduler's queue orders texts by length across
        # requests, and a device's batch budget counts what it will compute (no padding).
        cost = CostModel.of(model)
        costs = [cost.item(len(t)) for t in seqs]
        done = await engine.dispatcher.run_batched(
            text_op, (pool, normalize, s.text_token_budget), rows, costs
        )
    except jepa.JepaError as exc:
        raise from_jepa(exc, "input", computing=True) from None
    truncated = sum(t.truncated for t in seqs)
    st = stats_of(engine)
    st.texts += len(seqs)
    st.tokens += n_tok
    st.truncated += truncated
    return TextEmbedded([d.value for d in done], n_tok, truncated, *timing_of(done))


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


def _pool_arg(body: dict[str, Any]) -> str | None:
    pool = opt_str(body, "pool")
    if pool is not None and pool not in jepa.text.TEXT_POOLS:
        raise bad_request(
            f"'pool' is {pool!r}; a text model pools {', '.join(jepa.text.TEXT_POOLS)}", param="pool"
        )
    return pool


def _check_answer(n: int, width: int, fmt: str, s: Any) -> None:
    from .budget import check_response

    per = FLOAT_JSON_BYTES if fmt == "float" else 16 / 3
    check_response(int(_HEAD_BYTES + n * (_ENTRY_BYTES + width * per)), s)


async def embeddings(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    """/v1/embeddings for a text model, OpenAI-shaped; `usage` counts the real tokens."""
    from .handlers import _dimensions, _encode, _json, truncate

    s = request.app[SETTINGS]
    fmt = opt_str(body, "encoding_format", ("float", "base64")) or "float"
    dims = _dimensions(engine, body)
    pool = _pool_arg(body)
    inputs = parse_text_inputs(engine.model, body.get("input"), "input", s)
    _check_answer(len(inputs), dims or engine.model.embed_dim, fmt, s)
    async with request.app[ADMISSION].slot():
        result = await embed_texts(engine, inputs, pool, None, s, tokenizer_gate(request.app))
    data = []
    for i, v in enumerate(result.vectors):
        v = truncate(v, dims, normalize=False)
        data.append(
            {"object": "embedding", "index": i, "embedding": _encode(v, fmt), "dim": int(v.shape[-1])}
        )
    usage = {
        "prompt_tokens": result.tokens,
        "total_tokens": result.tokens,
        "truncated_inputs": result.truncated,
    }
    return await _json({"object": "list", "data": data, "model": engine.model_id, "usage": usage}, result)  # type: ignore[arg-type]


async def embed_tei(request: web.Request, engine: Engine, body: dict[str, Any]) -> web.StreamResponse:
    """/embed for a text model, TEI-style bare vectors; `normalize` re-normalises (the file's own
    normalisation already applies when it has one)."""
    from .handlers import _dimensions, _json, truncate

    s = request.app[SETTINGS]
    dims = _dimensions(engine, body)
    normalize = opt_bool(body, "normalize", False)
    pool = _pool_arg(body)
    inputs = parse_text_inputs(engine.model, body.get("inputs"), "inputs", s)
    _check_answer(len(inputs), dims or engine.model.embed_dim, "float", s)
    async with request.app[ADMISSION].slot():
        result = await embed_texts(engine, inputs, pool, None, s, tokenizer_gate(request.app))
    return await _json([truncate(v, dims, normalize).tolist() for v in result.vectors], result)  # type: ignore[arg-type]


def info_fields(engine: Engine) -> dict[str, Any]:
    """/info's text block of a text model (its tokenizer's bounds, its pooling, the counters)."""
    info = engine.model.info
    if info.modality != "text":
        return {}
    st = stats_of(engine)
    return {
        "text": {
            "vocab_size": info.vocab_size,
            "max_seq_len": info.max_seq_len,
            "pooling": jepa.text.POOL_NAMES[info.pooling],
            "normalize": bool(info.text_normalize),
            "texts": st.texts,
            "tokens": st.tokens,
            "truncated": st.truncated,
        }
    }
