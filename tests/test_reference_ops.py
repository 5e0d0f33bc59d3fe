"""The numpy reference's building blocks: erf/GELU, the tiled 3-D RoPE quirk, the AC sequence
layout and mask."""

from __future__ import annotations

import math

import numpy as np

from numpy_reference.ops import LayerNorm, Linear, erf, gelu, rope3d, rope_axis_dim, rope_tiled
from numpy_reference.vjepa2_ac import ACPredictor


def test_erf_and_gelu_are_exact() -> None:
    x = np.linspace(-7, 7, 2001)
    np.testing.assert_array_equal(erf(x), [math.erf(v) for v in x])
    np.testing.assert_allclose(gelu(np.array([-1.0, 0.0, 2.0])),
                               [-0.15865525393145707, 0.0, 1.9544997361036416], rtol=1e-15)


def test_rope_tiled_uses_angle_j_mod_half_on_adjacent_pairs() -> None:
    rng = np.random.default_rng(0)
    d, n = 20, 5
    x = rng.standard_normal((2, 3, n, d))
    pos = np.arange(n) * 1.0
    omega = 1.0 / 10000 ** (np.arange(d // 2) / (d / 2))
    want = np.empty_like(x)
    for i in range(n):
        for j in range(d):
            a = pos[i] * omega[j % (d // 2)]  # tiled, not interleaved: [a0..a9, a0..a9]
            partner = -x[..., i, j + 1] if j % 2 == 0 else x[..., i, j - 1]
            want[..., i, j] = x[..., i, j] * math.cos(a) + partner * math.sin(a)
    np.testing.assert_allclose(rope_tiled(x, pos), want, atol=1e-14)


def test_rope3d_chunks_and_the_unrotated_tail() -> None:
    assert rope_axis_dim(64) == 20 and rope_axis_dim(88) == 28
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 4, 64))
    t, h, w = np.array([0, 1, 2, 3]), np.array([1, 0, 2, 0]), np.array([0, 0, 1, 1])
    y = rope3d(x, t, h, w)
    np.testing.assert_array_equal(y[..., 60:], x[..., 60:])
    np.testing.assert_allclose(y[..., 20:40], rope_tiled(x[..., 20:40], h))
    zero = np.zeros(4)
    np.testing.assert_allclose(rope3d(x, t, zero, zero)[..., 20:], x[..., 20:])  # (t, 0, 0): time only


def test_ac_layout_interleaves_conditioning_tokens_causally_over_frames() -> None:
    z = np.zeros((4, 4))
    pred = ACPredictor(Linear(z), Linear(z), Linear(z), [], LayerNorm(1e-6), Linear(z), grid=(2, 3))
    (t, h, w), allowed = pred.layout(2)
    per = 2 + 6
    assert list(t) == [0] * per + [1] * per
    assert list(h[:per]) == [0, 0, 0, 0, 0, 1, 1, 1] and list(w[:per]) == [0, 0, 0, 1, 2, 0, 1, 2]
    assert allowed[:per, :per].all() and not allowed[:per, per:].any() and allowed[per:].all()
