"""A bounded reader of a GGUF file's header: the metadata keys a caller names, every key name and
string checked as the engine checks them, and the tensor table's extent, without the tensor data.

`jepa-server check` and `jepa-server info` read every model's header with it, and jepa-quantize checks
its input with it before gguf-py parses the whole file. gguf-py's GGUFReader builds numpy views of
every value of every key (47 to 77 s for a header of 3 million strings, which the engine loads in 2 s)
and decodes a string only when asked (a UnicodeDecodeError from wherever that is). This reader reads
the file as a stream, in windows of 64 KiB growing to 1 MiB, keeps only the values asked for, skips
every other value by its length, and refuses a header over a budget (`Limits`) before it costs more
than that: its time is about (keys + strings in arrays + tensors) x a microsecond, its memory one
window and the values kept.

Only a regular file is read (opened O_NONBLOCK, then fstat'ed: a FIFO neither hangs nor is read).
A malformed file raises ModelFileError, a header over the budget ResourceLimitError; each message
names the key, the tensor or the byte offset, and not the file (the caller says which file)."""

from __future__ import annotations

import os
import stat
import struct
from collections.abc import Collection
from dataclasses import dataclass
from typing import IO, Any

from ..errors import ModelFileError, ResourceLimitError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # what ggml's gguf reader takes
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
_WINDOW = 1 << 20  # the largest read; the first is _FIRST (most headers are a few KiB)
_FIRST = 64 << 10

# GGUF value types: fixed-size scalars as struct formats; 8 is a string, 9 an array.
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
_U32, _U64 = struct.Struct("<I"), struct.Struct("<Q")


@dataclass(frozen=True)
class Limits:
    """The budget of one header. A jepa file as the converter writes it holds about a hundred keys,
    at most a few thousand tensors and 100000 labels, and a tokenizer.json of a few MiB: each count
    and size limit is over a hundred times that. The values a caller keeps are short keys."""

    header_bytes: int = 512 << 20  # the keys and the tensor table together
    n_kv: int = 1 << 16
    n_tensors: int = 1 << 20
    array_strings: int = 1 << 24  # the entries of all string arrays together (each is read and checked)
    value_bytes: int = 1 << 20  # a value kept for the caller (a string, an array)


@dataclass(frozen=True)
class Tensor:
    name: str
    type: int  # the ggml type id
    shape: tuple[int, ...]  # ggml order: ne[0] first
    offset: int  # from the start of the data section


@dataclass(frozen=True)
class Header:
    version: int
    n_kv: int
    values: dict[str, Any]  # the keys asked for that the file holds: int, float, bool, str or a list
    tensors: tuple[Tensor, ...]
    data_offset: int  # where the tensor data starts (the header's end, aligned)
    data_end: int  # where the last tensor's data ends: a file shorter than this is truncated
    file_size: int

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def _name(raw: bytes, where: str, what: str) -> str:
    """A key's or tensor's name as UTF-8, or the engine's refusal naming it (escaped)."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ModelFileError(f'{where} ("{_escaped(raw)}"): {what} valid UTF-8') from None


def _new_name(s: _Stream, seen: set[str], where: str) -> str:
    """The next key's or tensor's name (`where` "metadata key" or "tensor", the #n-th read so far),
    refused when it is not UTF-8 or was given before; kept in `seen`."""
    at = f"{where} #{len(seen)}"
    name = _name(s.string(at), at, f"the {where}'s name is not")
    if name in seen:
        raise ModelFileError(f"{where} {name}: given twice")
    seen.add(name)
    return name


def _escaped(raw: bytes) -> str:
    """A name that is not text, shown as the engine shows it: printable ASCII, other bytes as \\xNN,
    at most 64 bytes."""
    return "".join(chr(c) if 0x20 <= c < 0x7F else f"\\x{c:02x}" for c in raw[:64])


def _text(raw: bytes, what: str) -> str:
    """`raw` as UTF-8, or ModelFileError naming `what` as the engine does. The engine reads a string
    up to its first NUL byte (ggml hands out C strings): so is it checked here."""
    nul = raw.find(b"\0")
    if nul >= 0:
        raw = raw[:nul]
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ModelFileError(f"{what}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start})") \
            from None


class _Stream:
    """The file from offset 0 as a sequence of windows, never past `limit` bytes."""

    def __init__(self, f: IO[bytes], size: int, limit: int) -> None:
        self.f, self.size, self.limit = f, size, limit
        self.buf = b""
        self.base = 0  # the file offset of buf[0]
        self.pos = 0  # the read position in buf
        self.window = _FIRST  # the next read's size: doubles up to _WINDOW

    @property
    def offset(self) -> int:
        return self.base + self.pos

    def _room(self, end: int, what: str) -> None:
        if end > self.size:
            raise ModelFileError(f"truncated: {what} at byte {self.offset} runs past the end of the file "
                                 f"({self.size} bytes)")
        if end > self.limit:
            budget = f"{self.limit >> 20} MiB" if self.limit >= 1 << 20 else f"{self.limit} bytes"
            raise ResourceLimitError(f"the header is larger than this reader's budget of {budget} "
                                     f"({what} at byte {self.offset})")

    def need(self, n: int, what: str) -> None:
        """At least n bytes in buf from pos."""
        if self.pos + n <= len(self.buf):
            return
        self._room(self.offset + n, what)
        rest = self.buf[self.pos:]
        self.base, self.pos = self.offset, 0
        self.f.seek(self.base + len(rest))
        more = min(max(n - len(rest), self.window), min(self.size, self.limit) - self.base - len(rest))
        self.window = min(2 * self.window, _WINDOW)
        self.buf = rest + self.f.read(more)
        if len(self.buf) < n:  # the file shrank under us
            raise ModelFileError(f"truncated: {what} at byte {self.offset} runs past the end of the file")

    def skip(self, n: int, what: str) -> None:
        if self.pos + n <= len(self.buf):
            self.pos += n
            return
        self._room(self.offset + n, what)
        self.base, self.buf, self.pos = self.offset + n, b"", 0

    def u32(self, what: str) -> int:
        self.need(4, what)
        (v,) = _U32.unpack_from(self.buf, self.pos)
        self.pos += 4
        return int(v)

    def u64(self, what: str) -> int:
        self.need(8, what)
        (v,) = _U64.unpack_from(self.buf, self.pos)
        self.pos += 8
        return int(v)

    def raw(self, n: int, what: str) -> bytes:
        self.need(n, what)
        out = self.buf[self.pos:self.pos + n]
        self.pos += n
        return out

    def string(self, what: str) -> bytes:
        return self.raw(self.u64(what), what)

    def scalar(self, vtype: int, what: str) -> Any:
        fmt = "<" + _SCALARS[vtype]
        n = struct.calcsize(fmt)
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.buf, self.pos)
        self.pos += n
        return v

    def check_strings(self, count: int, key: str) -> None:
        """Read `count` strings (an array's entries) and check each is UTF-8, keeping none: the
        inner loop runs on one window at a time."""
        i = 0
        while i < count:
            buf, pos, end = self.buf, self.pos, len(self.buf)
            unpack = _U64.unpack_from
            while i < count and pos + 8 <= end:
                (n,) = unpack(buf, pos)
                if pos + 8 + n > end:
                    break
                s = buf[pos + 8:pos + 8 + n]
                if not s.isascii():
                    self.pos = pos + 8
                    _text(s, f"metadata key {key}[{i}]")
                pos += 8 + n
                i += 1
            self.pos = pos
            if i < count:  # the next string straddles the window, or the window is spent
                _text(self.string(f"metadata key {key}[{i}]"), f"metadata key {key}[{i}]")
                i += 1


@dataclass
class _Budget:
    limits: Limits
    entries: int = 0

    def take(self, n: int, what: str) -> None:
        self.entries += n
        if self.entries > self.limits.array_strings:
            raise ResourceLimitError(f"{what}: the header's string arrays hold more than this reader's "
                                     f"budget of {self.limits.array_strings} strings")


def _value(s: _Stream, vtype: int, key: str, keep: bool, budget: _Budget, limits: Limits) -> Any:
    """The value of `key` (None when not kept); every string is checked as UTF-8 either way."""
    what = f"metadata key {key}"
    if vtype in _SCALARS:
        v = s.scalar(vtype, what)
        return v if keep else None
    if vtype == _STRING:
        n = s.u64(what)
        if keep and n > limits.value_bytes:
            raise ResourceLimitError(f"{what}: a string of {n} bytes, more than this reader keeps "
                                     f"({limits.value_bytes})")
        if keep:
            return _text(s.raw(n, what), what)
        if n <= _WINDOW:
            _text(s.raw(n, what), what)
        else:
            _checked_long(s, n, what)
        return None
    if vtype != _ARRAY:
        raise ModelFileError(f"{what}: unknown value type {vtype}")
    sub, count = s.u32(what), s.u64(what)
    if sub == _STRING:
        budget.take(count, what)
        if keep and count * 8 > limits.value_bytes:
            raise ResourceLimitError(f"{what}: an array of {count} strings, more than this reader keeps")
        if keep:
            return [_text(s.string(f"{what}[{i}]"), f"{what}[{i}]") for i in range(count)]
        s.check_strings(count, key)
        return None
    if sub not in _SCALARS:
        what_sub = "arrays of arrays are not GGUF" if sub == _ARRAY else f"unknown entry type {sub}"
        raise ModelFileError(f"{what}: {what_sub}")
    size = struct.calcsize("<" + _SCALARS[sub])
    if not keep:
        s.skip(count * size, what)
        return None
    if count * size > limits.value_bytes:
        raise ResourceLimitError(f"{what}: an array of {count} entries, more than this reader keeps")
    data = s.raw(count * size, what)
    return list(struct.unpack(f"<{count}{_SCALARS[sub]}", data))


def _checked_long(s: _Stream, n: int, what: str) -> None:
    """A long string nobody asked for, checked window by window (a character may straddle two)."""
    import codecs

    dec = codecs.getincrementaldecoder("utf-8")()
    done = 0
    while done < n:
        part = s.raw(min(n - done, _WINDOW), what)
        nul = part.find(b"\0")
        held = dec.getstate()[0]  # the start of a character cut by the last window
        try:
            dec.decode(part[:nul] if nul >= 0 else part, final=nul >= 0)
        except UnicodeDecodeError as e:
            at = done - len(held) + e.start
            raise ModelFileError(f"{what}: not valid UTF-8 (byte 0x{(held + part)[e.start]:02x} at offset "
                                 f"{at})") from None
        done += len(part)
        if nul >= 0:  # what the engine reads ends here
            s.skip(n - done, what)
            return
    try:
        dec.decode(b"", final=True)
    except UnicodeDecodeError:
        held = dec.getstate()[0]
        raise ModelFileError(f"{what}: not valid UTF-8 (byte 0x{held[0]:02x} at offset {n - len(held)})") \
            from None


def _tensor_bytes(t: Tensor) -> int:
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(t.type)]
    except (ValueError, KeyError):
        raise ModelFileError(f"tensor {t.name}: unknown ggml type {t.type}") from None
    if t.shape[0] % block:
        raise ModelFileError(f"tensor {t.name}: {t.shape[0]} values per row are not whole blocks of "
                             f"{block} ({GGMLQuantizationType(t.type).name})")
    n = t.shape[0] // block * size
    for d in t.shape[1:]:
        n *= d
    return n


def read_header(path: str | os.PathLike[str], keys: Collection[str] = (), *,
                limits: Limits | None = None) -> Header:
    """The header of the GGUF file at `path`, with the values of `keys` (those the file holds)."""
    limits = limits or Limits()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ModelFileError(f"cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        regular = stat.S_ISREG(st.st_mode)
    except OSError:
        regular = False
    if not regular:
        os.close(fd)
        raise ModelFileError("not a regular file")
    with os.fdopen(fd, "rb") as f:
        try:
            return _parse(_Stream(f, st.st_size, limits.header_bytes), set(keys), limits)
        except OSError as e:  # a read error (EIO, a file on a vanished mount)
            raise ModelFileError(f"cannot read: {e.strerror or e}") from None


def _parse(s: _Stream, wanted: set[str], limits: Limits) -> Header:
    magic = s.raw(4, "the magic") if s.size >= 4 else b""
    if magic != MAGIC:
        raise ModelFileError(f"not a GGUF file (it starts with {magic!r}, not {MAGIC!r})")
    version = s.u32("the version")
    if version not in VERSIONS:
        raise ModelFileError(f"GGUF version {version}; this reader takes {' and '.join(map(str, VERSIONS))}")
    n_tensors, n_kv = s.u64("the tensor count"), s.u64("the key count")
    if n_kv > limits.n_kv:
        raise ResourceLimitError(f"{n_kv} metadata keys, more than this reader's budget of {limits.n_kv}")
    if n_tensors > limits.n_tensors:
        raise ResourceLimitError(f"{n_tensors} tensors, more than this reader's budget of {limits.n_tensors}")
    budget = _Budget(limits)
    values: dict[str, Any] = {}
    seen: set[str] = set()
    alignment = DEFAULT_ALIGNMENT
    for _ in range(n_kv):
        key = _new_name(s, seen, "metadata key")
        vtype = s.u32(f"metadata key {key}")
        keep = key in wanted or key == "general.alignment"
        v = _value(s, vtype, key, keep, budget, limits)
        if key == "general.alignment":
            if vtype != 4 or v == 0 or v & (v - 1):
                raise ModelFileError(f"metadata key general.alignment: {v!r} is not a power of two (u32)")
            alignment = v
        if key in wanted:
            values[key] = v
    tensors: list[Tensor] = []
    names: set[str] = set()
    for _ in range(n_tensors):
        name = _new_name(s, names, "tensor")
        n_dims = s.u32(f"tensor {name}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise ModelFileError(f"tensor {name}: {n_dims} dimensions (1 to {MAX_DIMS})")
        shape = tuple(s.u64(f"tensor {name}") for _ in range(n_dims))
        if any(d >= 1 << 62 for d in shape):
            raise ModelFileError(f"tensor {name}: a dimension of {max(shape)}")
        tensors.append(Tensor(name, s.u32(f"tensor {name}"), shape, s.u64(f"tensor {name}")))
    data_offset = -(-s.offset // alignment) * alignment
    end = max((data_offset + t.offset + _tensor_bytes(t) for t in tensors), default=data_offset)
    return Header(version, n_kv, values, tuple(tensors), data_offset, end, s.size)

