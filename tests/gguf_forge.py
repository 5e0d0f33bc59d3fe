"""Forged GGUF files for the hardening tests, made by patching the bytes of a valid one (fast: no
gguf-py round trip, and byte-exact: everything but the patch stays as the converter wrote it)."""

from __future__ import annotations

import struct
from pathlib import Path


def _string_value_at(data: bytes, key: str) -> int:
    """The offset of the bytes of string key `key`'s value (after its u64 length)."""
    k = key.encode()
    i = data.index(struct.pack("<Q", len(k)) + k)
    at = i + 8 + len(k)
    (vtype,) = struct.unpack_from("<I", data, at)
    assert vtype == 8, f"{key} is not a string key (type {vtype})"
    return at + 4 + 8


def with_bad_string(src: str | Path, dst: Path, key: str) -> str:
    """A copy of `src` whose string key `key` holds bytes that are not UTF-8 (0xff, same length)."""
    data = Path(src).read_bytes()
    at = _string_value_at(data, key)
    (n,) = struct.unpack_from("<Q", data, at - 8)
    dst.write_bytes(data[:at] + b"\xff" * n + data[at + n:])
    return str(dst)


def with_bad_tensor_name(src: str | Path, dst: Path, name: str) -> str:
    """A copy of `src` whose tensor `name` has a first byte 0xff (not UTF-8)."""
    data = Path(src).read_bytes()
    n = name.encode()
    i = data.rindex(struct.pack("<Q", len(n)) + n) + 8
    dst.write_bytes(data[:i] + b"\xff" + data[i + 1:])
    return str(dst)


def with_string_array(src: str | Path, dst: Path, count: int, item: bytes = b"ab") -> str:
    """A copy of `src` with one more key, x.junk00: an array of `count` copies of `item`. Inserted
    as the first key, so the engine reads it too; its size is a multiple of 32 bytes when
    (8 + len(item)) * count is, so the tensor data stays aligned without moving any offset."""
    data = Path(src).read_bytes()
    key = b"x.junk00"  # 8 + 8 + 4 + 4 + 8 = 32 bytes before the entries
    entry = struct.pack("<Q", len(item)) + item
    assert (len(entry) * count) % 32 == 0, "the entries must keep the tensor data aligned"
    kv = struct.pack("<Q", len(key)) + key + struct.pack("<IIQ", 9, 8, count) + entry * count
    (n_kv,) = struct.unpack_from("<Q", data, 16)
    dst.write_bytes(data[:16] + struct.pack("<Q", n_kv + 1) + kv + data[24:])
    return str(dst)
