"""Thin helpers over the `gguf` package: write one jepa GGUF file (schema v1) atomically.

Every key is checked against keys.KEYS and every tensor against the table the hparams imply
(tensors.py) before anything is written, so a converter bug fails here with the key's or the
tensor's name rather than in the engine's loader, and the writer never writes a file it refuses."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

import gguf
import numpy as np

from .keys import FILE_TYPES, GType, keys_for, scopes_of, validate
from .schema import FTYPES, HALF_FTYPES, SCHEMA_VERSION, Encoder, Meta, Preprocess
from .tensors import Expected
from .text_schema import TextEncoder

ARCH = "jepa"


def f32_to_bf16_bits(a: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of float32 values, rounded to nearest, ties to even.

    numpy has no bfloat16, so this works on the bits: bf16 is the top half of an f32. A NaN stays a NaN
    of the same sign (its top payload bits kept, the quiet bit forced, so it never rounds to an
    infinity); overflow rounds to +-inf and subnormals round like any other value, exactly as ggml's
    own ggml_compute_fp32_to_bf16 does."""
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)
    # Finite values and infinities: u + 0x7fff + lsb never overflows 32 bits (at most 0xff807fff).
    rounded = (u + (np.uint32(0x7FFF) + ((u >> np.uint32(16)) & np.uint32(1)))) >> np.uint32(16)
    nan = (u & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    quiet = (u >> np.uint32(16)) | np.uint32(0x0040)
    return np.where(nan, quiet, rounded).astype(np.uint16)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    """float32 values of bfloat16 bit patterns (exact: bf16 widens to f32 without rounding)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


class PartSpec(Protocol):
    """A part beyond the encoder (a predictor, a head): its metadata and its tensor table."""

    def keys(self) -> dict[str, Any]: ...
    def table(self) -> dict[str, Expected]: ...


def _head_keys(meta: Meta, ftype: str) -> dict[str, Any]:
    """The keys every file opens with, in order: what it is, its provenance (when known), its type,
    schema version, family and modality."""
    out: dict[str, Any] = {"general.architecture": ARCH, "general.name": meta.name}
    for key, val in (("general.license", meta.license), ("general.source_url", meta.source_url),
                     ("general.description", meta.description)):
        if val:
            out[key] = val
    out |= {"general.file_type": FILE_TYPES[ftype], "jepa.schema_version": SCHEMA_VERSION,
            "jepa.family": meta.family, "jepa.modality": meta.modality}
    return out


def file_keys(
    meta: Meta, enc: Encoder, pre: Preprocess, ftype: str, parts: Iterable[PartSpec]
) -> dict[str, Any]:
    """Every metadata key of an image or video file, in the order it is written."""
    out = _head_keys(meta, ftype) | enc.keys() | pre.keys() | enc.rope_keys()
    for part in parts:
        out |= part.keys()
    out.setdefault("jepa.head.kind", "none")
    return out


def _add_key(w: gguf.GGUFWriter, key: str, t: GType, val: Any) -> None:
    if t == GType.BOOL:
        w.add_bool(key, val)
    elif t == GType.U32:
        w.add_uint32(key, val)
    elif t == GType.F32:
        w.add_float32(key, float(val))
    elif t == GType.STR:
        w.add_string(key, val)
    elif t == GType.STRS:
        w.add_array(key, list(val))
    elif t == GType.U32S:
        w.add_key_value(key, [int(v) for v in val], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.UINT32)
    else:
        w.add_key_value(key, [float(v) for v in val], gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)


def _checked(
    expected: Mapping[str, Expected], tensors: Iterable[tuple[str, np.ndarray]], ftype: str
) -> list[tuple[str, np.ndarray]]:
    """Validate names and shapes against the table and apply the dtype rule.

    A bf16 tensor comes out as its uint16 bit patterns (written with raw_dtype BF16)."""
    out: list[tuple[str, np.ndarray]] = []
    seen: set[str] = set()
    for name, arr in tensors:
        if name in seen:
            raise ValueError(f"{name}: written twice")
        seen.add(name)
        shape = tuple(arr.shape)
        if name not in expected:
            raise ValueError(f"{name}: not a tensor of this file (see docs/gguf.md)")
        want = expected[name]
        if not want.accepts(shape):
            shapes = want.shapes or (want.shape,)
            if len(shapes) > 1:  # a table whose row count may vary: say which
                rows = " or ".join(str(s[0]) for s in shapes)
                raise ValueError(f"{name}: got {list(shape)}, expected [{rows}, {shapes[0][1]}]")
            raise ValueError(f"{name}: got {list(shape)}, expected {list(want.shape)}")
        if ftype in HALF_FTYPES and want.half:
            if ftype == "bf16":
                out.append((name, f32_to_bf16_bits(arr)))
            else:
                out.append((name, np.ascontiguousarray(arr, dtype=np.float16)))
        else:
            out.append((name, np.ascontiguousarray(arr, dtype=np.float32)))
    missing = [n for n, e in expected.items() if e.required and n not in seen]
    if missing:
        raise ValueError(f"missing tensor(s): {', '.join(missing)}")
    return out


def write_gguf(
    path: str | os.PathLike[str],
    meta: Meta,
    enc: Encoder,
    pre: Preprocess,
    tensors: Iterable[tuple[str, np.ndarray]],
    ftype: str = "f32",
    *,
    parts: Iterable[PartSpec] = (),
) -> str:
    """Write the file at `path` (via a temp file and a rename: readers never see half a file).

    parts: what the file holds beyond the encoder (a predictor, a head), each with its keys and its
    tensor table."""
    if ftype not in FTYPES:
        raise ValueError(f"unsupported ftype={ftype}")
    parts = list(parts)
    values = file_keys(meta, enc, pre, ftype, parts)
    validate(values)
    expected = enc.table()
    for part in parts:
        expected |= part.table()
    checked = _checked(expected, tensors, ftype)
    return _write_file(path, values, checked)


def _write_file(
    path: str | os.PathLike[str], values: Mapping[str, Any], checked: list[tuple[str, np.ndarray]]
) -> str:
    """The validated keys and checked tensors to `path`, via a temp file and a rename."""
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a model file is meant to be shared
        w = gguf.GGUFWriter(tmp, ARCH)
        declared = keys_for(scopes_of(values))
        for key, val in values.items():
            if key != "general.architecture":  # GGUFWriter wrote it
                _add_key(w, key, declared[key][0].type, val)
        for name, arr in checked:
            if arr.dtype == np.uint16:  # bf16 bit patterns (the only uint16 _checked makes)
                w.add_tensor(name, arr, raw_dtype=gguf.GGMLQuantizationType.BF16)
            else:
                w.add_tensor(name, arr)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return str(dest)


def write_text_gguf(
    path: str | os.PathLike[str],
    meta: Meta,
    enc: TextEncoder,
    tensors: Iterable[tuple[str, np.ndarray]],
    ftype: str = "f32",
) -> str:
    """Write a text model's file (family bert): its keys, then its tensors checked against the
    table its hparams imply, exactly as write_gguf does for the vision families."""
    if ftype not in FTYPES:
        raise ValueError(f"unsupported ftype={ftype}")
    if meta.modality != "text":
        raise ValueError(f"unsupported modality={meta.modality} for a text model")
    values = _head_keys(meta, ftype) | enc.keys()
    validate(values)
    return _write_file(path, values, _checked(enc.table(), tensors, ftype))
