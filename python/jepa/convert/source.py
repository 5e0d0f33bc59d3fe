"""Reading a checkpoint's files: its JSON files (load_json), and its tensors, safetensors through its
numpy API (no torch), with bookkeeping so a converter can prove it used every source tensor exactly
once."""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import SafetensorError, safe_open


def safetensors_files(src: Path) -> list[Path]:
    """The weight files of a checkpoint: a .safetensors file, or a directory holding one file or a
    sharded set listed by model.safetensors.index.json. Each is a regular file (a FIFO would hang
    the reader)."""
    if src.is_file():
        return [_regular(src)]
    index = src / "model.safetensors.index.json"
    if index.is_file():
        return [_regular(src / s) for s in _shards(index)]
    files = sorted(src.glob("*.safetensors"))
    if len(files) != 1:
        found = ", ".join(f.name for f in files) or "none"
        raise ValueError(f"{src}: expected one .safetensors file (or an index), found {found}")
    return [_regular(files[0])]


def _shards(index: Path) -> list[str]:
    """The shard files model.safetensors.index.json's weight_map names (bare names in its folder)."""
    doc = load_json(index)
    weight_map = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise ValueError(f"{index}: weight_map must be an object of tensor name -> shard file")
    shards = set()
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or Path(shard).name != shard:
            raise ValueError(f"{index}: weight_map[{json.dumps(name)[:60]}] must be the name of a shard file "
                             f"in its folder, got {json.dumps(shard)[:60]}")
        shards.add(shard)
    return sorted(shards)


def load_json(path: Path) -> Any:
    """A checkpoint's JSON file, or a ValueError naming it (not UTF-8, not JSON, unreadable)."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not UTF-8 text (byte 0x{e.object[e.start]:02x} at offset "
                         f"{e.start})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise ValueError(f"{path}: not valid JSON (nested too deep)") from None


def _regular(path: Path) -> Path:
    try:
        st = os.stat(path)
    except OSError as e:
        raise ValueError(f"{path}: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ValueError(f"{path}: not a regular file")
    return path


@contextmanager
def _opened(path: Path) -> Iterator[Any]:
    """safe_open(path), its refusals (a truncated file, a header that is not JSON, ...) a ValueError
    naming the file."""
    try:
        f = safe_open(str(path), framework="np")
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{path}: not a readable safetensors file ({e})") from None
    with f:
        try:
            yield f
        except SafetensorError as e:
            raise ValueError(f"{path}: not a readable safetensors file ({e})") from None


def _read_bf16(path: Path, key: str) -> np.ndarray:
    # numpy has no bfloat16: read the raw bytes and widen (bf16 is the top half of an f32).
    with path.open("rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        info = json.loads(f.read(n))[key]
        start, end = info["data_offsets"]
        f.seek(8 + n + start)
        raw = np.frombuffer(f.read(end - start), dtype="<u2")
    return (raw.astype(np.uint32) << 16).view(np.float32).reshape(info["shape"])


class TensorSource:
    """Source tensors by name, with an optional model prefix (e.g. "vit.", "backbone.") stripped.

    take() marks a tensor used; skip() marks one deliberately left out; unused() lists the rest."""

    def __init__(self, files: list[Path], prefixes: tuple[str, ...] = ()) -> None:
        self._where: dict[str, tuple[Path, str]] = {}
        for path in files:
            with _opened(path) as f:
                for key in f.keys():  # noqa: SIM118 - safe_open is not a Mapping
                    name = next((key[len(p):] for p in prefixes if key.startswith(p)), key)
                    if name in self._where:
                        raise ValueError(f"source tensor {key!r} clashes with {self._where[name][1]!r}")
                    self._where[name] = (path, key)
        self._used: set[str] = set()

    def names(self) -> list[str]:
        return sorted(self._where)

    def has(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        path, key = self._loc(name)
        with _opened(path) as f:
            return tuple(f.get_slice(key).get_shape())

    def take(self, name: str) -> np.ndarray:
        """The tensor as float32 (f16/bf16/f64 sources are widened or narrowed exactly once here)."""
        path, key = self._loc(name)
        self._used.add(name)
        with _opened(path) as f:
            if f.get_slice(key).get_dtype() == "BF16":
                return _read_bf16(path, key)
            return np.asarray(f.get_tensor(key), dtype=np.float32)

    def take_optional(self, name: str) -> np.ndarray | None:
        return self.take(name) if self.has(name) else None

    def linear(self, dst: str, src: str, bias: bool | None = None) -> Iterator[tuple[str, np.ndarray]]:
        """A module's weight and bias under the GGUF name `dst`; bias True: required, False: none,
        None: when the source has one."""
        yield f"{dst}.weight", self.take(f"{src}.weight")
        if bias or (bias is None and self.has(f"{src}.bias")):
            yield f"{dst}.bias", self.take(f"{src}.bias")

    def count(self, pattern: str) -> int:
        """How many layers i = 0, 1, ... have the tensor `pattern.format(i=i)`."""
        n = 0
        while self.has(pattern.format(i=n)):
            n += 1
        return n

    def first(self, modules: list[str]) -> str:
        """The first of these module names whose weight the source has (the names a layout may use)."""
        for m in modules:
            if self.has(f"{m}.weight"):
                return m
        raise ValueError(f"missing source tensor '{modules[0]}.weight'")

    def skip(self, name: str) -> None:
        self._loc(name)
        self._used.add(name)

    def unused(self) -> list[str]:
        return [self._where[n][1] for n in sorted(set(self._where) - self._used)]

    def _loc(self, name: str) -> tuple[Path, str]:
        try:
            return self._where[name]
        except KeyError:
            raise ValueError(f"missing source tensor {name!r}") from None
