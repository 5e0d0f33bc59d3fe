// Vectorised exp and exact-form erf / GELU on 16 float lanes (AVX-512 F + DQ). Included only by
// files compiled with AVX-512 flags. erf is within ~2 ulp of the correctly rounded value (tested in
// tests/native/test_gemm.cpp against double precision); ggml's own GELU-erf calls scalar erff.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jepa::gemm::detail {

// The mask of the first n of 16 lanes (all for n >= 16, none for n <= 0): row and panel tails.
inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n > 0 ? n : 0)) - 1); }

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
constexpr float kErfCoeff[7][7] = {  // [power][region], lowest power first
    {1.1283791065216064f, 0.36782291531562805f, 0.284972220659256f, 0.23108725249767303f, 0.19366209208965302f, 0.1663353443145752f, 0.14558972418308258f},
    {-0.3761262595653534f, -0.20882190763950348f, -0.1309763491153717f, -0.08848650753498077f, -0.06323763728141785f, -0.04719940200448036f, -0.03645625710487366f},
    {0.1128358244895935f, 0.1067955493927002f, 0.05576362460851669f, 0.03199262544512749f, 0.019758593291044235f, 0.012937290593981743f, 0.008878755383193493f},
    {-0.026853691786527634f, -0.050213705748319626f, -0.022258812561631203f, -0.011001707054674625f, -0.005934218876063824f, -0.003435426624491811f, -0.002107264706864953f},
    {0.005188099108636379f, 0.02201126143336296f, 0.008404247462749481f, 0.0036189672537148f, 0.001719571417197585f, 0.0008860005182214081f, 0.00048822074313648045f},
    {-0.0008008189033716917f, -0.009227780625224113f, -0.003058795817196369f, -0.0011550248600542545f, -0.0004860074259340763f, -0.00022381033340934664f, -0.00011116403038613498f},
    {7.847259257687256e-05f, 0.0035890035796910524f, 0.0010479973861947656f, 0.000350985093973577f, 0.0001319478906225413f, 5.468573726830073e-05f, 2.4616818336653523e-05f},
};

inline __m512 erf_ps(__m512 x) {
    const __m512 a = _mm512_abs_ps(x);
    const __m512 z = _mm512_mul_ps(a, a);
    const __mmask16 small = _mm512_cmp_ps_mask(a, _mm512_set1_ps(1.0f), _CMP_LT_OQ);
    // Region k = floor(2 |x| - 1) in 1..6 outside |x| < 1 (region 0); NaN lanes land in some
    // outer region and stay NaN through the polynomial.
    __m512i idx = _mm512_cvttps_epi32(_mm512_fmsub_ps(a, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f)));
    idx = _mm512_min_epi32(_mm512_max_epi32(idx, _mm512_set1_epi32(1)), _mm512_set1_epi32(6));
    idx = _mm512_mask_mov_epi32(idx, small, _mm512_setzero_si512());
    auto pick = [&](const float * row) {
        return _mm512_permutexvar_ps(idx, _mm512_setr_ps(row[0], row[1], row[2], row[3], row[4], row[5], row[6], 0, 0,
                                                         0, 0, 0, 0, 0, 0, 0));
    };
    // The variable: x^2 in region 0, |x| minus the region's centre (0.5 k + 0.75) elsewhere.
    static constexpr float kCentre[7] = {0.0f, 1.25f, 1.75f, 2.25f, 2.75f, 3.25f, 3.75f};
    const __m512 v = _mm512_mask_mov_ps(_mm512_sub_ps(a, pick(kCentre)), small, z);
    __m512 p = pick(kErfCoeff[6]);
    for (int j = 5; j >= 0; --j) p = _mm512_fmadd_ps(p, v, pick(kErfCoeff[j]));
    // 1 - e^(-x^2) P outside; z is capped so lanes past 4 (answer 1) stay finite.
    const __m512 e = exp_ps(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_min_ps(z, _mm512_set1_ps(16.0f))));
    __m512 r = _mm512_fnmadd_ps(e, p, _mm512_set1_ps(1.0f));
    r = _mm512_mask_mul_ps(r, small, a, p);
    r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(a, _mm512_set1_ps(4.0f), _CMP_GE_OQ), _mm512_set1_ps(1.0f));
    // erf is odd.
    const __m512 sign = _mm512_and_ps(x, _mm512_set1_ps(-0.0f));
    return _mm512_or_ps(r, sign);
}

// 0.5 x (1 + erf(x / sqrt 2)), the erf form of GELU (PyTorch's default).
inline __m512 gelu_erf_ps(__m512 x) {
    const __m512 t = erf_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.70710678118654752f)));
    return _mm512_mul_ps(_mm512_mul_ps(x, _mm512_set1_ps(0.5f)), _mm512_add_ps(t, _mm512_set1_ps(1.0f)));
}

}  // namespace jepa::gemm::detail
