"""jepa-quantize: a jepa GGUF file with its weight matrices stored in another type.

The bytes come from the engine's quantization (jepa._engine.quantize, the C API's jepa_quantize):
ggml's own for ggml's types, the engine's one writer for i8c, never from a second implementation.
An i8c matrix is written as two tensors: its int8 rows (`<name>`, ggml's i8) and its rows' f32 scales
(`<name>_scale`, docs/gguf.md). Only the matrices the schema lets be 16-bit
(jepa.gguf.tensors.may_be_half: attention, FFN, projection and head matrices) change type; norms, biases,
tokens, position tables and the patch embedding stay as they are, as the loader requires. Every
metadata key and label is carried over in order, with general.file_type set to the new type. The
input is read through a memory map and written one tensor at a time, so the peak memory is about one
tensor, not the model."""

from __future__ import annotations

import fnmatch
import os
import struct
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from .. import _engine
from ..errors import InvalidInputError, JepaError, ModelFileError, ResourceLimitError, UnsupportedError
from ..gguf.header import read_header
from ..gguf.keys import FILE_TYPES
from ..gguf.tensors import may_be_half
from ..gguf.writer import ARCH, bf16_bits_to_f32

TYPES = ("f16", "bf16", "q8_0", "q6_k", "q5_k", "q5_0", "q4_k", "q4_0", "i8c")
# The types whose matrix carries a second tensor, its scales (`<name>_scale`, f32, one per row).
SCALED = ("i8c",)
SCALE_SUFFIX = "_scale"
SCALE_WHY = "the row scales of an i8c matrix"
# A k-quant packs 256 values per block; a row it cannot take falls back to the 32-value type of about
# the same bits (llama.cpp's rule), said per tensor in the plan.
FALLBACK = {"q4_k": "q4_0", "q5_k": "q5_0", "q6_k": "q8_0"}
# The sources a matrix can be read from as float32 (exactly: both half types widen without rounding).
_READABLE = {
    gguf.GGMLQuantizationType.F32: "f32",
    gguf.GGMLQuantizationType.F16: "f16",
    gguf.GGMLQuantizationType.BF16: "bf16",
}


@dataclass(frozen=True)
class Step:
    """What happens to one tensor."""

    name: str
    shape: tuple[int, ...]  # numpy order: rows first
    source: str  # "f32", "f16", "bf16", or a quantized type's name
    target: str  # the type written ("f32" etc. when kept)
    nbytes: int  # bytes written
    why: str  # why a matrix keeps its type or falls back ("" when it is converted as asked)


@dataclass(frozen=True)
class Plan:
    source: str
    type: str
    steps: tuple[Step, ...]
    in_bytes: int  # the input file's size
    out_bytes: int  # the output file's size (header estimated from the input's)

    def describe(self, verbose: bool = False) -> str:
        """A summary: the tensors by type before and after, each reason a weight matrix is not
        converted as asked on one line (naming a few of them), and the sizes; with `verbose`, the
        table of every tensor first."""
        lines = []
        if verbose:
            lines.append(f"{'tensor':<44} {'shape':<16} {'from':<6} {'to':<6} note")
            for s in self.steps:
                shape = "x".join(map(str, s.shape))
                lines.append(f"{s.name:<44} {shape:<16} {s.source:<6} {s.target:<6} {s.why}")
        before = Counter(s.source for s in self.steps)
        after = Counter(s.target for s in self.steps)
        lines.append(f"tensors by type: {_counts(before)} -> {_counts(after)}")
        fixed = sum(s.source == s.target and not s.why for s in self.steps)
        if fixed:
            lines.append(f"  {fixed} tensors are not weight matrices (norms, biases, tokens, position "
                         "tables, the patch embedding): as they are")
        by_why: dict[str, list[str]] = {}
        for s in self.steps:
            if s.why:
                by_why.setdefault(s.why, []).append(s.name)
        for why, names in by_why.items():
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            lines.append(f"  {why}: {len(names)} {'tensor' if len(names) == 1 else 'tensors'}, {shown}")
        changed = sum(s.source != s.target for s in self.steps)
        lines.append(
            f"{changed} of {len(self.steps)} tensors converted to {self.type}; "
            f"{self.in_bytes / 2**20:.2f} MiB -> {self.out_bytes / 2**20:.2f} MiB "
            f"({self.out_bytes / max(self.in_bytes, 1):.2f}x)"
        )
        return "\n".join(lines)


def _counts(c: Counter[str]) -> str:
    """"54 f32, 12 q4_k", the most common type first."""
    return ", ".join(f"{n} {t}" for t, n in c.most_common())


def _reader(path: str | os.PathLike[str]) -> gguf.GGUFReader:
    """gguf-py's reader of `path`, once the bounded header reader has passed it: a regular file (a
    FIFO would hang gguf-py's memory map), within the header budget, every key name, string and tensor
    name UTF-8 (gguf-py decodes a string value only when it is copied) and the data whole."""
    p = os.fspath(path)
    try:
        h = read_header(p, ["general.architecture"])
    except JepaError as exc:  # ModelFileError or ResourceLimitError, in the engine's words
        raise type(exc)(f"{p}: {exc}") from None
    if h.get("general.architecture") != ARCH:
        raise ModelFileError(f"{p}: not a jepa GGUF file (general.architecture is not 'jepa')")
    if h.data_end > h.file_size:
        raise ModelFileError(f"{p}: truncated (its tensors need {h.data_end} bytes, the file has "
                             f"{h.file_size})")
    try:
        return gguf.GGUFReader(p)
    except (OSError, ValueError, KeyError, IndexError, struct.error) as exc:
        raise ModelFileError(f"{p}: not a readable GGUF file ({exc})") from None


def _check_output(dst: str | os.PathLike[str]) -> Path:
    """`dst` as a path a file can be renamed to: checked before any work is done."""
    dest = Path(dst)
    if dest.is_dir():
        raise InvalidInputError(f"{dst}: is a directory", param="dst")
    above = dest.parent
    while not above.exists() and above != above.parent:
        above = above.parent
    if not above.is_dir():
        raise InvalidInputError(f"{dst}: {above} is not a directory", param="dst")
    return dest


def _make_parent(dest: Path, dst: str | os.PathLike[str]) -> None:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InvalidInputError(f"{dst}: cannot create the directory {exc.filename or dest.parent}: "
                                f"{exc.strerror or exc}", param="dst") from None


def _source_name(t: gguf.ReaderTensor) -> str:
    return _READABLE.get(t.tensor_type, t.tensor_type.name.lower())


def _shape(t: gguf.ReaderTensor) -> tuple[int, ...]:
    return tuple(int(n) for n in reversed(t.shape.tolist()))


def _target(
    name: str, shape: tuple[int, ...], source: str, type: str, keep: Sequence[str]
) -> tuple[str, str]:
    """(the type written, why it is not `type` or "")."""
    if not may_be_half(name):
        return source, ""  # not a weight matrix: the loader wants it as it is
    if any(fnmatch.fnmatchcase(name, p) for p in keep):
        return source, "kept (--keep)"
    if source not in ("f32", "f16", "bf16"):
        raise UnsupportedError(
            f"{name} is already {source}: quantize from an f32, f16 or bf16 file "
            "(re-quantizing compounds the error)"
        )
    n = shape[-1]
    try:
        _engine.type_row_bytes(type, n)
        return type, ""
    except UnsupportedError:
        pass
    fallback = FALLBACK.get(type)
    if fallback is not None:
        try:
            _engine.type_row_bytes(fallback, n)
            return fallback, f"rows of {n} do not fit {type}'s 256-value blocks: {fallback}"
        except UnsupportedError:
            pass
    return source, f"rows of {n} fit no block of {type}: kept {source}"


def _bytes_of(shape: tuple[int, ...], type: str) -> int:
    rows = int(np.prod(shape[:-1], dtype=np.int64)) if len(shape) > 1 else 1
    if type == "f32":
        return rows * shape[-1] * 4
    if type in SCALED:  # the int8 values; the scales are a tensor of their own
        return rows * shape[-1]
    return rows * int(_engine.type_row_bytes(type, shape[-1]))


def plan(src: str | os.PathLike[str], type: str, keep: Sequence[str] = ()) -> Plan:
    """What quantizing `src` to `type` would write, tensor by tensor, without writing anything."""
    return _plan(src, _reader(src), type, keep)


def _plan(src: str | os.PathLike[str], r: gguf.GGUFReader, type: str, keep: Sequence[str]) -> Plan:
    if type not in TYPES:
        raise InvalidInputError(f"unknown --type {type!r}: use one of {', '.join(TYPES)}", param="type")
    steps = []
    for t in r.tensors:
        shape, source = _shape(t), _source_name(t)
        target, why = _target(t.name, shape, source, type, keep)
        nbytes = int(t.n_bytes) if target == source else _bytes_of(shape, target)
        steps.append(Step(t.name, shape, source, target, nbytes, why))
        if target in SCALED:
            rows = int(np.prod(shape[:-1]))
            steps.append(Step(t.name + SCALE_SUFFIX, shape[:-1], "f32", "f32", 4 * rows, SCALE_WHY))
    in_bytes = os.path.getsize(src)
    header = int(r.data_offset)
    align = int(r.alignment)
    out = header + sum(-(-s.nbytes // align) * align for s in steps)
    return Plan(os.fspath(src), type, tuple(steps), in_bytes, out)


def _as_f32(t: gguf.ReaderTensor) -> np.ndarray:
    shape = _shape(t)
    data = np.asarray(t.data)
    if t.tensor_type == gguf.GGMLQuantizationType.BF16:
        return bf16_bits_to_f32(data.view(np.uint16)).reshape(shape)
    return np.asarray(data, dtype=np.float32).reshape(shape)


def _converted(t: gguf.ReaderTensor, step: Step) -> list[np.ndarray]:
    """The tensor's bytes as written: as read when it keeps its type, else the engine's conversion;
    for an i8c matrix its int8 rows and then its scales."""
    if step.target == step.source:
        return [np.asarray(t.data)]
    x = _as_f32(t)
    q = _engine.quantize(step.target, np.ascontiguousarray(x.reshape(-1, x.shape[-1])))
    if step.target in SCALED:  # each row: its int8 values, then its f32 scale
        n = x.shape[-1]
        values = q[:, :n].view(np.int8).reshape(step.shape)
        return [values, np.ascontiguousarray(q[:, n:]).view(np.float32).reshape(-1)]
    return [q]


def _written_type(t: gguf.ReaderTensor, step: Step) -> gguf.GGMLQuantizationType:
    if step.target == step.source:
        return t.tensor_type
    return gguf.GGMLQuantizationType(_engine.type_id(step.target))


def _add_info(w: gguf.GGUFWriter, t: gguf.ReaderTensor, step: Step) -> None:
    """The tensor's entry in the header, as gguf-py takes each kind: f32 and f16 by their numpy dtype,
    bf16 as uint16 bit patterns, a quantized type by its byte shape."""
    q = _written_type(t, step)
    G = gguf.GGMLQuantizationType
    if q == G.I8:
        w.add_tensor_info(t.name, step.shape, np.dtype(np.int8), step.nbytes)
        scale = t.name + SCALE_SUFFIX
        w.add_tensor_info(scale, step.shape[:-1], np.dtype(np.float32), 4 * int(np.prod(step.shape[:-1])))
    elif q in (G.F32, G.F16):
        w.add_tensor_info(t.name, step.shape, np.dtype(np.float32 if q == G.F32 else np.float16), step.nbytes)
    elif q == G.BF16:
        w.add_tensor_info(t.name, step.shape, np.dtype(np.uint16), step.nbytes, raw_dtype=q)
    else:
        rows = int(np.prod(step.shape[:-1], dtype=np.int64))
        byte_shape = (*step.shape[:-1], step.nbytes // max(rows, 1))
        w.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), step.nbytes, raw_dtype=q)


def _copy_field(w: gguf.GGUFWriter, field: gguf.ReaderField, value: Any) -> None:
    vtype = field.types[0]
    sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
    w.add_key_value(field.name, value, vtype, sub_type=sub)


def quantize(
    src: str | os.PathLike[str], dst: str | os.PathLike[str], type: str, keep: Sequence[str] = ()
) -> Plan:
    """Write `dst`: `src` with its weight matrices in `type` (see the module docstring). Returns the plan."""
    if Path(src).resolve() == Path(dst).resolve():
        raise InvalidInputError("the output must be another file than the input", param="dst")
    dest = _check_output(dst)
    r = _reader(src)  # parsed once: the plan and the copy read the same header
    p = _plan(src, r, type, keep)
    _make_parent(dest, dst)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".tmp", dir=dest.parent)
    except OSError as exc:
        raise InvalidInputError(f"{dst}: cannot write in {dest.parent}: {exc.strerror or exc}",
                                param="dst") from None
    os.close(fd)
    try:
        os.chmod(tmp, 0o644)
        w = gguf.GGUFWriter(tmp, ARCH)
        for field in r.fields.values():
            if field.name.startswith("GGUF.") or field.name == "general.architecture":
                continue  # the writer writes its own header and the architecture
            # general.file_type: what the file now mostly holds, by the one table of its names.
            value = FILE_TYPES[type] if field.name == "general.file_type" else field.contents()
            _copy_field(w, field, value)
        steps = {s.name: s for s in p.steps}
        for t in r.tensors:
            _add_info(w, t, steps[t.name])
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in r.tensors:
            for data in _converted(t, steps[t.name]):
                w.write_tensor_data(np.ascontiguousarray(data))
            del data  # one tensor at a time
        w.close()
        os.replace(tmp, dest)
    except OSError as exc:  # a full disk, the output directory gone or renamed under us
        Path(tmp).unlink(missing_ok=True)
        raise ResourceLimitError(f"{dst}: cannot write: {exc.strerror or exc}", param="dst") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
