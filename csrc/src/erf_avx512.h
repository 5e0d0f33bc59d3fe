// Vectorised exp and exact-form erf / GELU on 16 float lanes (AVX-512 F + DQ). Included only by
// files compiled with AVX-512 flags. erf is within ~2 ulp of the correctly rounded value (tested in
// tests/native/test_gemm.cpp against double precision); ggml's own GELU-erf calls scalar erff.
#pragma once

#include <immintrin.h>

namespace jepa::gemm::detail {

// e^x for x up to 88: x = n ln2 + r with a two-part ln2, e^r by its degree-7 Taylor polynomial
// (|r| <= ln2/2: truncation below 6e-9 relative), then scaled by 2^n. Below -87 (and at -inf) 0.
inline __m512 exp_ps(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_mask_mov_ps(_mm512_scalef_ps(p, n), under, _mm512_setzero_ps());
}

// Coefficients from tools/fit_erf.py (regions and forms described there).
constexpr float kErfCoeff[11][3] = {  // [power][region], lowest power first
    {1.1283792f, 0.32158542f, 0.17900115f},
    {-0.37612638f, -0.16362292f, -0.054372262f},
    {0.11283792f, 0.07615104f, 0.015884371f},
    {-0.026866172f, -0.032930896f, -0.0044794152f},
    {0.0052239774f, 0.013377301f, 0.0012230411f},
    {-0.0008548318f, -0.005146148f, -0.00032421478f},
    {0.00012055023f, 0.0018866159f, 8.3558254e-05f},
    {-1.4918759e-05f, -0.000660403f, -2.0786429e-05f},
    {1.6363168e-06f, 0.00022089743f, 5.1191146e-06f},
    {-1.5470927e-07f, -7.808827e-05f, -1.4321099e-06f},
    {1.0071146e-08f, 2.7607664e-05f, 3.2659014e-07f},
};

inline __m512 erf_ps(__m512 x) {
    const __m512 a = _mm512_abs_ps(x);
    const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(0.921875f), _CMP_LT_OQ);
    const __mmask16 mid = _mm512_cmp_ps_mask(a, _mm512_set1_ps(2.0f), _CMP_LT_OQ) & ~small;
    const __mmask16 big = ~(small | mid);
    const __m512 z = _mm512_mul_ps(a, a);
    // The polynomial's variable and coefficient row per lane: region 0 (small), 1 (mid), 2 (big).
    __m512 v = _mm512_sub_ps(a, _mm512_set1_ps(3.0f));
    v = _mm512_mask_sub_ps(v, mid, a, _mm512_set1_ps(1.5f));
    v = _mm512_mask_mov_ps(v, small, z);
    __m512i idx = _mm512_set1_epi32(2);
    idx = _mm512_mask_mov_epi32(idx, mid, _mm512_set1_epi32(1));
    idx = _mm512_mask_mov_epi32(idx, small, _mm512_setzero_si512());
    auto row = [&](int j) {
        return _mm512_permutexvar_ps(idx, _mm512_setr_ps(kErfCoeff[j][0], kErfCoeff[j][1], kErfCoeff[j][2], 0, 0, 0,
                                                         0, 0, 0, 0, 0, 0, 0, 0, 0, 0));
    };
    __m512 p = row(10);
    for (int j = 9; j >= 0; --j) p = _mm512_fmadd_ps(p, v, row(j));
    // 1 - e^(-x^2) P for the outer regions; z is capped so lanes past 4 (answer 1) stay finite.
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_min_ps(z, _mm512_set1_ps(16.0f))));
    __m512 r = _mm512_fnmadd_ps(e, p, _mm512_set1_ps(1.0f));
    r = _mm512_mask_mul_ps(r, small, a, p);
    r = _mm512_mask_mov_ps(r, big & _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ), _mm512_set1_ps(1.0f));
    // erf is odd; NaN lanes stay NaN (they fall in the "big" region and P(NaN) is NaN).
    const __m512 sign = _mm512_and_ps(x, _mm512_set1_ps(-0.0f));
    return _mm512_or_ps(r, sign);
}

// 0.5 x (1 + erf(x / sqrt 2)), the erf form of GELU (PyTorch's default).
inline __m512 gelu_erf_ps(__m512 x) {
    const __m512 t = erf_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
    return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(t, _mm512_set1_ps(1.0f)));
}

}  // namespace jepa::gemm::detail
