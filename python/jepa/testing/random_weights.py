"""Random weights for any schema tensor table: the one rule every random-weight writer uses
(V-JEPA 2, V-JEPA 2-AC, LeWM), so test and benchmark models are drawn alike."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

import numpy as np

from ..gguf.schema import Encoder, Meta, Preprocess
from ..gguf.tensors import Expected, Role
from ..gguf.writer import PartSpec, write_gguf


def random_tensors(table: Mapping[str, Expected], seed: int) -> Iterator[tuple[str, np.ndarray]]:
    """Every tensor of the table, optional biases included (the released models have them), drawn in
    the table's order: LayerNorm gains 1 + 0.2 N (so a missing or wrong norm cannot hide), Linear
    weights and the patch embedding N / sqrt(fan_in), everything else 0.2 N; all float32."""
    rng = np.random.default_rng(seed)
    for name, e in table.items():
        if e.role == Role.GAIN:
            v = 1.0 + 0.2 * rng.standard_normal(e.shape, dtype=np.float32)
        elif e.role in (Role.MATRIX, Role.EMBED):
            v = rng.standard_normal(e.shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(e.shape[1]))
        else:
            v = 0.2 * rng.standard_normal(e.shape, dtype=np.float32)
        yield name, v.astype(np.float32, copy=False)


def write_random_file(path: str | Path, meta: Meta, enc: Encoder, pre: Preprocess, parts: Iterable[PartSpec],
                      seed: int, ftype: str) -> str:
    """A random-weight file of these hparams, through the same writer (and checks) as a converted one."""
    parts = list(parts)
    table = enc.table()
    for part in parts:
        table |= part.table()
    return write_gguf(path, meta, enc, pre, random_tensors(table, seed), ftype, parts=parts)
