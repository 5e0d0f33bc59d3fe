"""Random weights for any schema tensor table: the one rule every random-weight writer uses
(V-JEPA 2, V-JEPA 2-AC, LeWM), so test and benchmark models are drawn alike."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# LayerNorm gains: 1 + noise, so a missing or wrong norm cannot hide.
GAINS = ("ln1.weight", "ln2.weight", "norm.weight", "ln_kv.weight")


def random_tensors(
    shapes: dict[str, tuple[int, ...]], seed: int, not_matrices: tuple[str, ...] = ()
) -> Iterator[tuple[str, np.ndarray]]:
    """Gains 1 + 0.2 N, 2-D matrices N / sqrt(fan_in), everything else 0.2 N, all float32.

    not_matrices: name suffixes of 2-D tensors that are tables or tokens, not Linear weights."""
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        if name.endswith(GAINS):
            v = 1.0 + 0.2 * rng.standard_normal(shape, dtype=np.float32)
        elif len(shape) == 2 and not name.endswith(not_matrices):
            v = rng.standard_normal(shape, dtype=np.float32) * np.float32(1.0 / np.sqrt(shape[1]))
        else:
            v = 0.2 * rng.standard_normal(shape, dtype=np.float32)
        yield name, v.astype(np.float32, copy=False)
