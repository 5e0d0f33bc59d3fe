"""JSON at the edge: request bodies parsed into small dataclasses and numpy arrays.

Nothing here touches aiohttp or the engine; every refusal is an ApiError naming its `param`.

An input item is one of
  {"b64": "<image file bytes>"}                      an image (a data: URL prefix is accepted)
  {"frames": [frame, ...]}                           one clip; a frame is {"b64"}, {"path"} or a path
  {"video": {"b64": ...} | {"path": ...} | "path", "frames": N}   a video file, N frames sampled
  {"path": "..."} or a bare string                   a server-local file (only with local files on)
The server fetches nothing: {"url": ...} is refused.

A text model's input is a string or an array of strings (token-id arrays only with
--accept-token-ids); what a text may hold is the library's rule (jepa.text.check_texts), mapped here
by its `param`. Each model's inputs are parsed by its modality (parse_inputs): text sent to an image
model, or an image to a text model, is a 400 `wrong_modality`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

import jepa.text

from .errors import ApiError, bad_request

Source = bytes | str  # decoded file bytes, or a resolved server-local path
_DATA_URL = re.compile(r"^data:[^,]{0,200};base64,", re.IGNORECASE)
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*://")
ITEM_FORMS = '{"b64": ...}, {"frames": [...]}, {"video": {"b64": ...}, "frames": N} or a local path'


@dataclass(frozen=True)
class Item:
    """One input, decoded: what jepa.media.prepare reads, and how."""

    source: Source | list[Source]  # a list is one clip's frames
    param: str  # where it sat in the request, for error messages
    as_video: bool | None = None
    frames: int | None = None
    local: bool = False  # read from a server-local path
    # (resolved, as given) for each local path: a refusal names a file as the client wrote it, never
    # the canonical path the server resolved it to (its directories, where a symlink led).
    paths: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Limits:
    """A request's bounds on its inputs (media and text), read from the settings."""

    max_items: int
    max_frames: int
    max_input_bytes: int | None = None  # a b64 item's decoded size (--max-input-mb)
    max_chars: int = jepa.text.MAX_TEXT_CHARS  # a request's texts together (--max-request-chars)
    max_tokens: int = 1 << 20  # a request's tokens together (--max-request-tokens)
    accept_token_ids: bool = False  # token-id arrays as a text model's input (--accept-token-ids)


@dataclass(frozen=True)
class TextInputs:
    """A text model's request inputs: strings, or sequences of token ids (OpenAI's array forms)."""

    texts: list[str] | None = None
    ids: list[list[int]] | None = None

    def __len__(self) -> int:
        return len(self.texts if self.texts is not None else self.ids or [])


# The deepest nesting a request needs is 4 (`actions` [K][H][dim] in the body); anything far deeper is
# refused at once, so nothing after the parser (numpy, error messages) meets a 10,000-deep value.
MAX_JSON_DEPTH = 32
# The largest magnitude a number of `actions` or `state` may have: far past any pose delta or z-scored
# action, and small enough that the model's arithmetic stays finite (3e38 overflows float32 inside it).
MAX_ABS_NUMBER = 1e6


# resolve(path, param) -> the canonical path to read, or an ApiError
Resolver = Callable[[str, str], str]


def parse_body(raw: bytes, max_values: int) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 (a 413 past `max_values`, --max-json-values).

    The parser holds the interpreter lock for the whole of its run, so the body's size in values is
    bounded before it runs (count_values: a few C-speed passes), and the depth walk visits arrays and
    objects only. Run it off the event loop (the handlers do)."""
    try:
        encoding = json.detect_encoding(raw)
        text = raw.decode(encoding, "surrogatepass")  # as json.loads does
    except UnicodeDecodeError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from None
    utf8 = raw if encoding == "utf-8" else text.encode("utf-8", "surrogatepass")
    values = count_values(utf8, max_values)
    if values > max_values:
        raise ApiError(
            413,
            f"the body holds up to {values} JSON values (counted from its commas and opening brackets "
            f"before parsing); this server parses at most {max_values} (--max-json-values)",
            code="too_many_values",
        )
    try:
        body = json.loads(text, parse_int=_bounded_int)
    except ValueError as exc:
        raise bad_request(f"the body is not valid JSON: {exc}", code="invalid_json") from None
    except RecursionError:  # the parser's own stack limit
        raise _too_deep() from None
    if not isinstance(body, dict):
        raise bad_request(f"the body must be a JSON object, got {_kind(body)}", code="invalid_json")
    if _depth(body) > MAX_JSON_DEPTH:
        raise _too_deep()
    return body


# Every byte but the ones count_values looks at: a quote and the three that start or follow a value.
_NOT_STRUCTURAL = bytes(b for b in range(256) if b not in b'",[{')
_COUNT_WINDOW = 1 << 20
# The longest integer a body may hold: far past any id, count or size in the API (an int64 is 19
# digits), and far short of the 4000-digit ones whose conversion held the interpreter for a second.
MAX_INT_DIGITS = 20


def _bounded_int(digits: str) -> int:
    """json's parse_int: refuses an integer literal past MAX_INT_DIGITS before converting it."""
    if len(digits.lstrip("-")) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(digits)} digits (at most {MAX_INT_DIGITS})")
    return int(digits)


def count_values(utf8: bytes, limit: int) -> int:
    """At least the number of values a JSON text (UTF-8) holds, counted without parsing it: every value
    but the first follows a comma or an opening bracket. Commas and brackets inside strings are counted
    too unless that passes `limit`: then only those outside strings are, from the quotes' parity (a few
    C-speed passes and numpy; a regex that blanked the strings held the interpreter for over a second
    on 6 M short strings or a 30 M-comma string). Whatever the text holds, the parser creates no more
    values than this before it stops: an escape outside a string, which could flip the parity, is
    where the parser stops."""
    n = 1 + utf8.count(b",") + utf8.count(b"[") + utf8.count(b"{")
    if n <= limit:
        return n
    # Escaped backslashes, then escaped quotes, gone: every quote left opens or closes a string.
    plain = utf8.replace(b"\\\\", b"").replace(b'\\"', b"") if b"\\" in utf8 else utf8
    n, odd = 1, 0
    # In windows, each a few milliseconds of the interpreter, given up between them (a 30 M-comma
    # string in one pass held it for 300 ms).
    for start in range(0, len(plain), _COUNT_WINDOW):
        marks = np.frombuffer(plain[start:start + _COUNT_WINDOW].translate(None, _NOT_STRUCTURAL), np.uint8)
        quote = marks == ord('"')
        # Quotes so far odd: inside a string (a uint8 sum wraps at 256, which keeps the parity).
        inside = (np.cumsum(quote, dtype=np.uint8) + odd) & 1
        n += int(np.count_nonzero(~quote & (inside == 0)))
        odd = int(inside[-1]) if len(inside) else odd
        time.sleep(0)
    return n


def _too_deep() -> ApiError:
    return bad_request(f"the body is nested deeper than {MAX_JSON_DEPTH} levels", code="invalid_json")


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in a parsed JSON value, level by level, looking at arrays and
    objects only (no recursion to exhaust); stops counting past MAX_JSON_DEPTH."""
    depth, level = 0, [value] if type(value) in (dict, list) else []
    while level and depth <= MAX_JSON_DEPTH:
        depth += 1
        inner: list[Any] = []
        for v in level:
            inner += [c for c in (v.values() if type(v) is dict else v) if type(c) in (dict, list)]
        level = inner
    return depth


def check_keys(body: Mapping[str, Any], allowed: set[str], where: str = "") -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise bad_request(
            f"unknown field{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}"
            f"{' in ' + where if where else ''}; expected some of {', '.join(sorted(allowed))}",
            param=f"{where}.{unknown[0]}" if where else unknown[0],
            code="unknown_field",
        )


def check_item_count(value: list[Any], name: str, max_items: int) -> None:
    """A request's list of items is refused when empty or longer than --max-items (images and texts alike)."""
    if not value:
        raise bad_request(f"'{name}' is an empty list", param=name)
    if len(value) > max_items:
        raise bad_request(
            f"too many items: {len(value)} (this server takes at most {max_items}, --max-items)",
            param=name,
            code="too_many_items",
        )


def parse_items(value: Any, resolve: Resolver, limits: Limits, name: str = "input") -> list[Item]:
    """One item or a list of items."""
    if value is None:
        raise bad_request(f"'{name}' is required", param=name, code="missing_field")
    if isinstance(value, list):
        check_item_count(value, name, limits.max_items)
        return [parse_item(v, f"{name}[{i}]", resolve, limits) for i, v in enumerate(value)]
    return [parse_item(value, name, resolve, limits)]


def parse_item(value: Any, param: str, resolve: Resolver, limits: Limits) -> Item:
    item = _parse_item(value, param, resolve, limits)
    if not item.local:
        return item
    sources = item.source if isinstance(item.source, list) else [item.source]
    resolved = [s for s in sources if isinstance(s, str)]
    return replace(item, paths=tuple(zip(resolved, _given_paths(value), strict=False)))


def _given_paths(value: Any) -> list[str]:
    """The path strings an item names, in the order its sources are read."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        if isinstance(value.get("path"), str):
            return [value["path"]]
        if "video" in value:
            return _given_paths(value["video"])
        if isinstance(value.get("frames"), list):
            return [p for f in value["frames"] for p in _given_paths(f)]
    return []


def _parse_item(value: Any, param: str, resolve: Resolver, limits: Limits) -> Item:
    if isinstance(value, str):
        return Item(_path(value, param, resolve), param, local=True)
    if not isinstance(value, dict):
        raise bad_request(f"an item is {ITEM_FORMS}; got {_kind(value)}", param=param, code="invalid_item")
    if "url" in value:
        raise _fetches_nothing(f"{param}.url")
    if "video" in value:
        check_keys(value, {"video", "frames"}, param)
        frames = _opt_int(value.get("frames"), f"{param}.frames", 1, limits.max_frames, "--max-frames")
        source = _file(value["video"], f"{param}.video", resolve, limits)
        return Item(source, param, as_video=True, frames=frames, local=isinstance(source, str))
    if "frames" in value:
        check_keys(value, {"frames"}, param)
        frames = value["frames"]
        if not isinstance(frames, list) or not frames:
            raise bad_request("'frames' must be a non-empty list of frames", param=f"{param}.frames")
        if len(frames) > limits.max_frames:
            raise bad_request(
                f"too many frames: {len(frames)} (at most {limits.max_frames}, --max-frames)",
                param=f"{param}.frames",
                code="too_many_frames",
            )
        sources = [_file(f, f"{param}.frames[{i}]", resolve, limits) for i, f in enumerate(frames)]
        return Item(sources, param, local=any(isinstance(s, str) for s in sources))
    if "b64" in value or "path" in value:
        source = _file(value, param, resolve, limits)
        return Item(source, param, local=isinstance(source, str))
    raise bad_request(
        f"an item is {ITEM_FORMS}; got an object with {sorted(value)}", param=param, code="invalid_item"
    )


def _file(value: Any, param: str, resolve: Resolver, limits: Limits) -> Source:
    """A file given as {"b64": ...}, {"path": ...} or a path string."""
    max_bytes = limits.max_input_bytes
    if isinstance(value, str):
        return _path(value, param, resolve)
    if isinstance(value, dict):
        if "url" in value:
            raise _fetches_nothing(f"{param}.url")
        if "b64" in value:
            check_keys(value, {"b64"}, param)
            return decode_b64(value["b64"], f"{param}.b64", max_bytes)
        if "path" in value:
            check_keys(value, {"path"}, param)
            if not isinstance(value["path"], str):
                raise bad_request("'path' must be a string", param=f"{param}.path")
            return _path(value["path"], f"{param}.path", resolve)
    raise bad_request(
        f'expected {{"b64": ...}} or a path; got {_kind(value)}', param=param, code="invalid_item"
    )


def _path(value: str, param: str, resolve: Resolver) -> str:
    if _SCHEME.match(value):
        raise _fetches_nothing(param)
    return resolve(value, param)


def _fetches_nothing(param: str) -> ApiError:
    """The refusal of a URL, wherever an item names one."""
    message = 'the server fetches nothing: send the file\'s bytes as {"b64": ...}'
    return bad_request(message, param=param, code="url")


def decode_b64(value: Any, param: str, max_bytes: int | None = None) -> bytes:
    if not isinstance(value, str):
        raise bad_request(f"'b64' must be a string, got {_kind(value)}", param=param)
    text = _DATA_URL.sub("", value, count=1)
    # Refused from the text's length, before decoding: base64 holds 3 bytes in 4 characters.
    if max_bytes is not None and len(text) // 4 * 3 > max_bytes:
        raise ApiError(
            413,
            f"'b64' holds about {len(text) // 4 * 3} bytes; this server reads at most {max_bytes} per input "
            "(--max-input-mb)",
            param=param,
            code="input_too_large",
        )
    try:
        data = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        # Wrapped lines (MIME style) are fine; anything else, or a truncated string, is not.
        try:
            data = base64.b64decode("".join(text.split()), validate=True)
        except (binascii.Error, ValueError):
            raise bad_request(
                "'b64' is not valid base64 (truncated?)", param=param, code="invalid_base64"
            ) from None
    if not data:
        raise bad_request("'b64' is empty", param=param)
    return data


# -- by modality ----------------------------------------------------------------------------------


def parse_inputs(
    model: jepa.Model, value: Any, resolve: Resolver, limits: Limits, name: str = "input"
) -> list[Item] | TextInputs:
    """A request's inputs for this model: TextInputs for a text model, Items for the others."""
    if model.info.modality == "text":
        return parse_texts(model, value, name, limits)
    return parse_media(model, value, resolve, limits, name)


def parse_texts(model: jepa.Model, value: Any, name: str, limits: Limits) -> TextInputs:
    """`input` as OpenAI allows it for a text model: a string, an array of strings, an array of
    token ids, or an array of arrays of token ids. Bounded by items and characters before anything
    is tokenized; the ids themselves are checked by the library as they are read
    (jepa.text.tokens_from_ids)."""
    if value is None:
        raise bad_request(f"'{name}' is required", param=name, code="missing_field")
    if isinstance(value, str) or _is_id_list(value):
        value = [value]
    if not isinstance(value, list):
        raise _not_text(model, value, name)
    check_item_count(value, name, limits.max_items)
    if all(isinstance(v, str) for v in value):
        return TextInputs(texts=_checked_texts(value, name, limits))
    if all(_is_id_list(v) for v in value):
        if not limits.accept_token_ids:
            raise token_ids_refused(name)
        total = sum(len(v) for v in value)
        if total > limits.max_tokens:
            raise too_many_tokens(total, limits.max_tokens, name)
        return TextInputs(ids=value)
    bad = next(i for i, v in enumerate(value) if not isinstance(v, str))
    raise _not_text(model, value[bad], f"{name}[{bad}]")


def _checked_texts(texts: list[str], name: str, limits: Limits) -> list[str]:
    total = sum(map(len, texts))
    if total > limits.max_chars:
        raise ApiError(
            413,
            f"the request's texts hold more than {limits.max_chars} characters "
            f"(--max-request-chars); send fewer or shorter texts",
            param=name,
            code="input_too_large",
        )
    try:
        jepa.text.check_texts(texts, limits.max_chars, name)
    except jepa.InvalidInputError as exc:  # the library's rule: the text it names is the item
        raise bad_request(exc.message, param=exc.param, code="invalid_item") from None
    return texts


def too_many_tokens(n: int, max_tokens: int, name: str, partial: bool = False) -> ApiError:
    return ApiError(
        413,
        f"the request's texts tokenize to {'more than ' if partial else ''}{n} tokens; this server encodes "
        f"at most {max_tokens} per request (--max-request-tokens)",
        param=name,
        code="input_too_large",
    )


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


def _not_text(model: jepa.Model, v: Any, param: str) -> ApiError:
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


def parse_media(model: jepa.Model, value: Any, resolve: Resolver, limits: Limits, name: str) -> list[Item]:
    """parse_items for an image or video model, with text and token ids refused by modality: a
    string is a local file path for these models, and one that reads as words is text."""
    if _is_id_list(value):
        raise wrong_modality(model, "token ids", name)
    if isinstance(value, list):  # the count before any per-item work (499 k items once took 0.3 s)
        check_item_count(value, name, limits.max_items)
    forms = value if isinstance(value, list) else [value]
    for i, v in enumerate(forms):
        param = name if not isinstance(value, list) else f"{name}[{i}]"
        if _is_id_list(v):
            raise wrong_modality(model, "token ids", param)
        if isinstance(v, str) and _looks_like_text(v):
            raise wrong_modality(model, "text (a string is a local file path here)", param)
    return parse_items(value, resolve, limits, name)


# The forms each modality takes: an image model encodes single images only (a clip is refused).
_MEDIA_FORMS = {
    "image": '{"b64": ...} or a local path',
    "video": '{"b64": ...}, {"frames": [...]}, {"video": {...}} or a local path',
}


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


def _is_id_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


_SPACE = re.compile(r"\s")
_PATH_MAX = 4096  # Linux's PATH_MAX: no local path is longer


def _looks_like_text(s: str) -> bool:
    """Words, not a file name: whitespace and no path separator. A string longer than any path is
    taken as one, to be refused as a path is (nothing scans a 30 MB string for spaces, and a name too
    long under --files-root gets that root's one refusal)."""
    if len(s) > _PATH_MAX:
        return False
    return "/" not in s and "\\" not in s and _SPACE.search(s) is not None


# -- scalar parameters --------------------------------------------------------------------------


def opt_str(body: Mapping[str, Any], key: str, choices: tuple[str, ...] | None = None) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or (choices is not None and value not in choices):
        want = f"one of {', '.join(choices)}" if choices else "a non-empty string"
        raise bad_request(f"'{key}' must be {want}, got {json.dumps(value)[:80]}", param=key)
    return value


def opt_bool(body: Mapping[str, Any], key: str, default: bool = False) -> bool:
    value = body.get(key, default)
    if not isinstance(value, bool):
        raise bad_request(f"'{key}' must be true or false", param=key)
    return value


def _opt_int(value: Any, param: str, lo: int, hi: int | None = None, flag: str | None = None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"'{param}' must be an integer, got {_kind(value)}", param=param)
    if value < lo or (hi is not None and value > hi):
        limit = f" (this server takes at most {hi}{', ' + flag if flag else ''})" if hi is not None else ""
        raise bad_request(f"'{param}' must be at least {lo}{limit}, got {value}", param=param)
    return value


def opt_int(body: Mapping[str, Any], key: str, lo: int, hi: int | None = None) -> int | None:
    return _opt_int(body.get(key), key, lo, hi)


def opt_number(body: Mapping[str, Any], key: str, lo: float | None = None) -> float | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise bad_request(f"'{key}' must be a number", param=key)
    if lo is not None and value <= lo:
        raise bad_request(f"'{key}' must be more than {lo}", param=key)
    return float(value)


def numeric_array(value: Any, param: str, ndims: tuple[int, ...], shapes: str) -> np.ndarray:
    """A rectangular, finite array of numbers of one of the given ranks, as float32. `shapes`
    describes the accepted shapes for the refusal ("[K][H][dim] or [H][dim]")."""
    try:
        arr = np.asarray(value)
    except ValueError:  # ragged
        arr = np.asarray(None)
    numeric = arr.dtype.kind in "iuf"
    if not numeric or arr.ndim not in ndims or arr.size == 0:
        got = f"shape {list(arr.shape)}" if numeric else "not a rectangular array of numbers"
        raise bad_request(f"'{param}' must be {shapes}; got {got}", param=param, code="invalid_shape")
    big = np.abs(arr.astype(np.float64)) > MAX_ABS_NUMBER  # before the cast, which would overflow
    if big.any():
        raise bad_request(
            f"'{param}' holds a number of magnitude over {MAX_ABS_NUMBER:g} (the bound on world-model "
            "inputs)",
            param=param,
        )
    out = arr.astype(np.float32)
    if not np.isfinite(out).all():
        raise bad_request(f"'{param}' holds a non-finite number", param=param)
    return out


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)
