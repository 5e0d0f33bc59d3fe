"""The numpy building blocks of the reference forward passes (float64 throughout, so the reference
sits closer to the exact result than any float32 implementation it checks)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

F64 = np.float64


@dataclass(frozen=True)
class Linear:
    weight: np.ndarray  # [out, in], PyTorch layout
    bias: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        # As one 2-D product: numpy runs stacked matmuls through BLAS only for 2-D operands.
        y = (np.ascontiguousarray(x).reshape(-1, x.shape[-1]) @ self.weight.T).reshape(*x.shape[:-1], -1)
        return y if self.bias is None else y + self.bias


@dataclass(frozen=True)
class LayerNorm:
    """Biased variance over the last axis; no weight/bias = the non-affine form."""

    eps: float
    weight: np.ndarray | None = None
    bias: np.ndarray | None = None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        mu = x.mean(axis=-1, keepdims=True)
        var = ((x - mu) ** 2).mean(axis=-1, keepdims=True)
        y = (x - mu) / np.sqrt(var + self.eps)
        if self.weight is not None:
            y = y * self.weight
        return y if self.bias is None else y + self.bias


@dataclass(frozen=True)
class BatchNorm:
    """BatchNorm1d in eval mode (running statistics)."""

    mean: np.ndarray
    var: np.ndarray
    weight: np.ndarray
    bias: np.ndarray
    eps: float = 1e-5

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return (x - self.mean) / np.sqrt(self.var + self.eps) * self.weight + self.bias


def f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x, dtype=F64)


_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The C library's erf, element by element (numpy has none; ~0.1 s per million values)."""
    return np.asarray(_ERF(f64(x)), dtype=F64)


def gelu(x: np.ndarray) -> np.ndarray:
    """Exact GELU (PyTorch's default, approximate='none')."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


ACTS = {"gelu_erf": gelu, "silu": silu}


def softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, allowed: np.ndarray | None = None) -> np.ndarray:
    """SDPA with scale head_dim^-0.5; q, k, v [B, heads, N, d]; allowed [N, N] (True = may attend)."""
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if allowed is not None:
        s = np.where(allowed, s, -np.inf)
    return softmax(s) @ v


def causal(n: int) -> np.ndarray:
    return np.tril(np.ones((n, n), dtype=bool))


def split_heads(x: np.ndarray, n_head: int) -> np.ndarray:
    """[B, N, heads*d] (head-major) -> [B, heads, N, d]."""
    b, n, w = x.shape
    return x.reshape(b, n, n_head, w // n_head).transpose(0, 2, 1, 3)


def merge_heads(x: np.ndarray) -> np.ndarray:
    b, h, n, d = x.shape
    return x.transpose(0, 2, 1, 3).reshape(b, n, h * d)


def rope_axis_dim(head_dim: int) -> int:
    """Width of each of the three RoPE chunks (t, h, w): 2 * ((head_dim // 3) // 2)."""
    return 2 * ((head_dim // 3) // 2)


def rope_tiled(x: np.ndarray, pos: np.ndarray, theta: float = 10000.0) -> np.ndarray:
    """Meta's `rotate_queries_or_keys` on one chunk x [..., N, d] at positions pos [N].

    The kept quirk: the d/2 angles are tiled [a_0..a_{d/2-1}, a_0..a_{d/2-1}] while the rotated
    pairs are adjacent elements (2k, 2k+1), so element j uses angle a_{j mod d/2}."""
    d = x.shape[-1]
    omega = 1.0 / theta ** (np.arange(d // 2, dtype=F64) / (d / 2.0))
    ang = np.tile(f64(pos)[:, None] * omega[None, :], (1, 2))  # [N, d]
    pairs = x.reshape(*x.shape[:-1], d // 2, 2)
    rot = np.stack([-pairs[..., 1], pairs[..., 0]], axis=-1).reshape(x.shape)
    return x * np.cos(ang) + rot * np.sin(ang)


def rope3d(x: np.ndarray, t: np.ndarray, h: np.ndarray, w: np.ndarray) -> np.ndarray:
    """3-D RoPE on q or k [B, heads, N, head_dim]: dims [0,d) by t, [d,2d) by h, [2d,3d) by w, the
    rest unrotated. A position of None-like (all zero) still rotates by angle 0, i.e. not at all."""
    d = rope_axis_dim(x.shape[-1])
    out = x.copy()
    for i, pos in enumerate((t, h, w)):
        out[..., i * d:(i + 1) * d] = rope_tiled(x[..., i * d:(i + 1) * d], pos)
    return out
