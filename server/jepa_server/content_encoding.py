"""A request body's Content-Encoding undone by the server itself, after the request is admitted and
authenticated, off the event loop and bounded as it inflates.

aiohttp would inflate gzip and deflate bodies in its HTTP parser, on the event loop, as the bytes
arrive: before the size check and before the API key (four 199 KB gzip bodies of 200 MiB each held
/health for 12.8 s; a 995 KB one sent without the key, 1.8 s). The server's runner turns that off
(protocol.JepaAppRunner, auto_decompress=False), so the body reaches the handler as sent and is
inflated here, on a thread, stopping at --max-body-mb of output."""

from __future__ import annotations

import zlib

from .errors import ApiError, bad_request

# What a request may declare: identity, gzip (RFC 1952, several members allowed), deflate (the zlib
# format of RFC 1950, or a raw deflate stream as some clients send).
ENCODINGS = ("identity", "gzip", "x-gzip", "deflate")
# Output per decompress call: the bound is checked between calls, so an inflating bomb stops within
# this much of the limit.
_STEP = 1 << 20


def encoding_of(header: str | None) -> str:
    """The body's one Content-Encoding (lower case), or a 415 naming what is accepted."""
    value = (header or "identity").strip().lower()
    if value in ENCODINGS:
        return value
    raise ApiError(
        415,
        f"Content-Encoding {value[:40]!r} is not accepted: send the body as identity, gzip or deflate",
        code="unsupported_encoding",
    )


def _inflate_stream(d: zlib._Decompress, data: bytes, limit: int, out: list[bytes], total: int) -> int:
    """Feed `data` to d, appending the output, refusing once more than `limit` bytes came out."""
    buf = data
    while True:
        chunk = d.decompress(buf, _STEP)
        total += len(chunk)
        if total > limit:
            raise ApiError(413, f"the request body inflates to more than {limit} bytes; this server takes at "
                           f"most {limit} (--max-body-mb)", code="request_too_large")
        out.append(chunk)
        buf = d.unconsumed_tail
        if not buf and (d.eof or not chunk):  # all of it read and nothing left pending
            return total


def _zlib_header(raw: bytes) -> bool:
    """A zlib (RFC 1950) header: deflate method, and the check bits right."""
    return len(raw) >= 2 and raw[0] & 0x0F == 8 and ((raw[0] << 8) | raw[1]) % 31 == 0


def inflate(raw: bytes, encoding: str, limit: int) -> bytes:
    """The body `raw` with its `encoding` undone, at most `limit` bytes of it (413 past that, 400 for a
    stream that is broken or ends early). Runs on a thread: its cost grows with the output."""
    if encoding == "identity":
        return raw
    out: list[bytes] = []
    total = 0
    try:
        if encoding == "deflate":
            d = zlib.decompressobj(zlib.MAX_WBITS if _zlib_header(raw) else -zlib.MAX_WBITS)
            total = _inflate_stream(d, raw, limit, out, total)
            if not d.eof:
                raise bad_request("the request body's deflate stream ends early", code="invalid_body")
            return b"".join(out)
        data = raw
        while True:  # gzip: one member after another
            d = zlib.decompressobj(16 + zlib.MAX_WBITS)
            total = _inflate_stream(d, data, limit, out, total)
            if not d.eof:
                raise bad_request("the request body's gzip stream ends early", code="invalid_body")
            data = d.unused_data
            if not data.strip(b"\0"):  # trailing zero padding is allowed after the last member
                return b"".join(out)
    except zlib.error as exc:
        raise bad_request(f"the request body is not valid {encoding}: {exc}", code="invalid_body") from None
