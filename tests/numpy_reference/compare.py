"""How an output is compared with a golden: the project's bars (f32: every token cosine >= 0.99999
and max|delta| / max|ref| <= 1e-4), per token along the last axis."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MIN_COS = 0.99999
MAX_REL = 1e-4


@dataclass(frozen=True)
class Agreement:
    max_abs: float
    max_rel: float  # max|got - ref| / max|ref|
    min_cos: float  # the worst token's cosine (tokens along the last axis)

    def __str__(self) -> str:
        return f"max|d|/max|ref| {self.max_rel:.2e}, min token cosine {self.min_cos:.9f}"


def agreement(got: np.ndarray, ref: np.ndarray) -> Agreement:
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if g.shape != r.shape:
        raise ValueError(f"shape {list(g.shape)} != reference shape {list(r.shape)}")
    d = np.abs(g - r)
    gt, rt = g.reshape(-1, g.shape[-1]), r.reshape(-1, r.shape[-1])
    cos = (gt * rt).sum(axis=1) / (np.linalg.norm(gt, axis=1) * np.linalg.norm(rt, axis=1))
    return Agreement(float(d.max()), float(d.max() / np.abs(r).max()), float(cos.min()))


def assert_agrees(got: np.ndarray, ref: np.ndarray, name: str = "output", *, min_cos: float = MIN_COS,
                  max_rel: float = MAX_REL) -> Agreement:
    a = agreement(got, ref)
    if not (a.min_cos >= min_cos and a.max_rel <= max_rel):
        raise AssertionError(f"{name}: {a} (bars: cosine >= {min_cos}, relative <= {max_rel})")
    return a


def assert_rel_close(got: np.ndarray, ref: np.ndarray, name: str = "values", *, rtol: float = 1e-5) -> float:
    """Element-wise relative agreement (energies, costs); returns the worst relative error."""
    g, r = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    if g.shape != r.shape:
        raise ValueError(f"{name}: shape {list(g.shape)} != reference shape {list(r.shape)}")
    worst = float((np.abs(g - r) / np.abs(r)).max())
    if not worst <= rtol:
        raise AssertionError(f"{name}: relative error {worst:.2e} > {rtol}")
    return worst
