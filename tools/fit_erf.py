#!/usr/bin/env python3
"""Fit the polynomial coefficients of the engine's vectorised erf (csrc/src/simd_math.inc).

erf is evaluated in seven regions by one degree-6 Horner pass whose coefficients (and the variable's
centre) are picked per lane with a permute:
    |x| < 1                                  erf(x) = x * P0(x^2)
    0.5 k + 0.5 <= |x| < 0.5 k + 1, k = 1..6  erf(x) = 1 - exp(-x^2) * Pk(|x| - (0.5 k + 0.75))
                                             (Pk ~ erfc(x) exp(x^2) on its half-unit interval)
    |x| >= 4                                 erf(x) = 1 (erfc(4) = 1.5e-8 rounds away in float32)
Least squares on Chebyshev nodes, weighted to relative error, with mpmath as the reference. Prints the
C++ table and the worst relative error of each fit (before float32 rounding; float32's is 6e-8).

    python tools/fit_erf.py > /tmp/erf.txt    # needs mpmath (comes with torch's sympy)
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

mp.mp.dps = 40
DEG = 6
REGIONS = 7


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

    fits = [fit(p0, 0.0, 1.0, lambda x: x)]
    for k in range(1, REGIONS):
        lo, centre = 0.5 * k + 0.5, 0.5 * k + 0.75
        fits.append(fit(erfcx, lo, lo + 0.5, lambda x, c=centre: x - c))
    for i, (_, err) in enumerate(fits):
        print(f"// region {i}: worst relative error {err:.2e}")
    print(f"constexpr float kErfCoeff[{DEG + 1}][{REGIONS}] = {{  // [power][region], lowest power first")
    for j in range(DEG + 1):
        print("    {" + ", ".join(f"{float(np.float32(c[j]))!r}f" for c, _ in fits) + "},")
    print("};")


if __name__ == "__main__":
    main()
