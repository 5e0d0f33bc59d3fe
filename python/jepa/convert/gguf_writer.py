"""Thin helpers over the `gguf` package: write one jepa GGUF file (schema v1) atomically.

Every tensor is checked against the names and shapes the hparams imply before anything is written,
so a converter bug fails here with the tensor's name rather than in the engine's loader."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .schema import (
    FTYPES,
    HALF_FTYPES,
    SCHEMA_VERSION,
    Encoder,
    Meta,
    Preprocess,
    expected_shapes,
    may_be_half,
    pos_rows_allowed,
)

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


def _add_extra(w: gguf.GGUFWriter, key: str, val: Any) -> None:
    """One more key (predictor, head, RoPE): bool, int (u32), float (f32), str, [str] or [float]."""
    if isinstance(val, bool):
        w.add_bool(key, val)
    elif isinstance(val, int):
        w.add_uint32(key, val)
    elif isinstance(val, float):
        w.add_float32(key, val)
    elif isinstance(val, str):
        w.add_string(key, val)
    elif isinstance(val, list | tuple) and all(isinstance(v, str) for v in val):
        w.add_array(key, list(val))
    elif isinstance(val, list | tuple) and all(isinstance(v, float) for v in val):
        w.add_key_value(key, list(val), gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.FLOAT32)
    else:
        raise ValueError(f"{key}: unsupported metadata value {val!r}")


def _add_keys(
    w: gguf.GGUFWriter, meta: Meta, enc: Encoder, pre: Preprocess, ftype: str, extra: Mapping[str, Any]
) -> None:
    # general.architecture is written by GGUFWriter itself (arch=ARCH).
    w.add_string("general.name", meta.name)
    for key, val in (
        ("general.license", meta.license),
        ("general.source_url", meta.source_url),
        ("general.description", meta.description),
    ):
        if val:
            w.add_string(key, val)
    w.add_uint32("general.file_type", FTYPES[ftype])
    w.add_uint32("jepa.schema_version", SCHEMA_VERSION)
    w.add_string("jepa.family", meta.family)
    w.add_string("jepa.modality", meta.modality)

    for key in ("embed_dim", "n_layer", "n_head", "ffn_dim", "patch_size", "tubelet_size", "img_size",
                "n_frames", "in_chans", "n_registers"):
        w.add_uint32(f"jepa.enc.{key}", int(getattr(enc, key)))
    w.add_float32("jepa.enc.ln_eps", float(enc.ln_eps))
    w.add_string("jepa.enc.act", enc.act)
    w.add_string("jepa.enc.pos_type", enc.pos_type)
    for key in ("cls_token", "qkv_fused", "layer_scale"):
        w.add_bool(f"jepa.enc.{key}", bool(getattr(enc, key)))

    f32 = gguf.GGUFValueType.FLOAT32
    w.add_key_value("jepa.pre.mean", [float(v) for v in pre.mean], gguf.GGUFValueType.ARRAY, f32)
    w.add_key_value("jepa.pre.std", [float(v) for v in pre.std], gguf.GGUFValueType.ARRAY, f32)
    w.add_float32("jepa.pre.rescale", float(pre.rescale))
    w.add_uint32("jepa.pre.resize_short", int(pre.resize_short))
    w.add_uint32("jepa.pre.crop", int(pre.crop))
    w.add_string("jepa.pre.resample", pre.resample)
    w.add_string("jepa.pre.resize_mode", pre.resize_mode)

    for key, val in extra.items():
        _add_extra(w, key, val)
    if "jepa.head.kind" not in extra:
        w.add_string("jepa.head.kind", "none")


def _checked(
    enc: Encoder,
    tensors: Iterable[tuple[str, np.ndarray]],
    ftype: str,
    extra_shapes: Mapping[str, tuple[tuple[int, ...], bool]],
) -> list[tuple[str, np.ndarray]]:
    """Validate names and shapes against the hparams and apply the dtype rule.

    A bf16 tensor comes out as its uint16 bit patterns (written with raw_dtype BF16)."""
    expected = expected_shapes(enc) | dict(extra_shapes)
    pos_rows = pos_rows_allowed(enc)
    out: list[tuple[str, np.ndarray]] = []
    seen: set[str] = set()
    for name, arr in tensors:
        if name in seen:
            raise ValueError(f"{name}: written twice")
        seen.add(name)
        shape = tuple(arr.shape)
        if name == "enc.pos_embed" and pos_rows:
            rows = pos_rows
            if len(shape) != 2 or shape[0] not in rows or shape[1] != enc.embed_dim:
                raise ValueError(f"{name}: got {list(shape)}, expected [{' or '.join(map(str, rows))}, "
                                 f"{enc.embed_dim}]")
        elif name not in expected:
            raise ValueError(f"{name}: not a tensor of this encoder (hparams: {enc})")
        elif shape != expected[name][0]:
            raise ValueError(f"{name}: got {list(shape)}, expected {list(expected[name][0])}")
        if ftype in HALF_FTYPES and may_be_half(name):
            if ftype == "bf16":
                out.append((name, f32_to_bf16_bits(arr)))
            else:
                out.append((name, np.ascontiguousarray(arr, dtype=np.float16)))
        else:
            out.append((name, np.ascontiguousarray(arr, dtype=np.float32)))
    missing = [n for n, (_, req) in expected.items() if req and n not in seen]
    if pos_rows and "enc.pos_embed" not in seen:
        missing.insert(0, "enc.pos_embed")
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
    extra_keys: Mapping[str, Any] | None = None,
    extra_shapes: Mapping[str, tuple[tuple[int, ...], bool]] | None = None,
) -> str:
    """Write the file at `path` (via a temp file and a rename: readers never see half a file).

    extra_keys / extra_shapes: metadata and tensors beyond the encoder (a predictor, a head, RoPE
    keys), name -> value and name -> (numpy shape, required)."""
    if ftype not in FTYPES:
        raise ValueError(f"unsupported ftype={ftype}")
    checked = _checked(enc, tensors, ftype, extra_shapes or {})
    dest = Path(path)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; a model file is meant to be shared
        w = gguf.GGUFWriter(tmp, ARCH)
        _add_keys(w, meta, enc, pre, ftype, extra_keys or {})
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
