#!/usr/bin/env python3
"""Fit the polynomial coefficients of the engine's vectorised erf (csrc/src/erf_avx512.h).

erf is evaluated in three regions, one Horner pass of degree 10 whose coefficients are picked per lane:
    |x| <  0.921875       erf(x) = x * P0(x^2)
    0.921875 <= |x| < 2   erf(x) = 1 - exp(-x^2) * P1(|x| - 1.5)      (P1 ~ erfc(x) exp(x^2))
    2 <= |x| < 4          erf(x) = 1 - exp(-x^2) * P2(|x| - 3)
    |x| >= 4              erf(x) = 1 (erfc(4) = 1.5e-8 rounds away in float32)
Least squares on Chebyshev nodes, weighted to relative error, with mpmath as the reference. Prints the
C++ table and the worst relative error of each fit (before float32 rounding).

    python tools/fit_erf.py > /tmp/erf.txt    # needs mpmath (comes with torch's sympy)
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

mp.mp.dps = 40
DEG = 10
SPLIT, MID, TOP = 0.921875, 2.0, 4.0


def fit(f, a: float, b: float, var) -> tuple[np.ndarray, float]:
    n = 3000
    t = np.cos(np.pi * (np.arange(n) + 0.5) / n)
    x = (a + b) / 2 + (b - a) / 2 * t
    y = np.array([float(f(mp.mpf(float(xi)))) for xi in x])
    w = 1 / np.abs(y)
    c, *_ = np.linalg.lstsq(np.vander(var(x), DEG + 1, increasing=True) * w[:, None], y * w, rcond=None)
    xx = np.linspace(a, b, 20001)
    yy = np.array([float(f(mp.mpf(float(xi)))) for xi in xx])
    return c, float(np.max(np.abs(np.polyval(c[::-1], var(xx)) - yy) / np.abs(yy)))


def main() -> None:
    def p0(z):
        return mp.erf(mp.sqrt(z)) / mp.sqrt(z) if z > 0 else 2 / mp.sqrt(mp.pi)

    def erfcx(x):
        return mp.erfc(x) * mp.exp(x * x)

    fits = [
        fit(p0, 0.0, SPLIT * SPLIT, lambda x: x),
        fit(erfcx, SPLIT, MID, lambda x: x - 1.5),
        fit(erfcx, MID, TOP, lambda x: x - 3.0),
    ]
    for i, (_, err) in enumerate(fits):
        print(f"// region {i}: worst relative error {err:.2e}")
    print(f"constexpr float kErfCoeff[{DEG + 1}][3] = {{  // [power][region], lowest power first")
    for j in range(DEG + 1):
        print("    {" + ", ".join(f"{np.float32(c[j])!r}f".replace("np.float32(", "").replace(")f", "f")
                                  for c, _ in fits) + "},")
    print("};")


if __name__ == "__main__":
    main()
