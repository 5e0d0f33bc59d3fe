// The 16-lane vector the engine's f32 kernels are written in (simd_math.inc, kernels.inc), on
// AVX-512 F/BW/DQ/VL: one zmm. Included only by files compiled with AVX-512 flags. simd_avx2.h and
// simd_portable.h give the same operations the same results lane for lane, so one kernel source
// gives the same bits on every ISA.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jepa::gemm::detail::avx512 {

struct V {
    __m512 v;
};
struct Mask {
    __mmask16 m;
};
struct Idx {
    __m512i i;
};

// Register blocking of the micro-kernel: kMR rows x kVecs vectors (32 columns, a whole panel).
constexpr int kMR = 14;
constexpr int kVecs = 2;

// The mask of the first n of 16 lanes (all for n >= 16, none for n <= 0).
inline __mmask16 lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n > 0 ? n : 0)) - 1); }

// The first n of 16 lanes as a mask.
inline Mask first(int64_t n) { return {lanes(n)}; }

inline V zero() { return {_mm512_setzero_ps()}; }
inline V set1(float f) { return {_mm512_set1_ps(f)}; }
inline V load(const float * p) { return {_mm512_loadu_ps(p)}; }
// The first n lanes from p (the rest 0; nothing past them is read).
inline V load_n(const float * p, int64_t n) { return {_mm512_maskz_loadu_ps(lanes(n), p)}; }
inline void store(float * p, V a) { _mm512_storeu_ps(p, a.v); }
inline void store_n(float * p, int64_t n, V a) { _mm512_mask_storeu_ps(p, lanes(n), a.v); }
// n f16 / bf16 values widened exactly (the rest 0).
inline V load_f16_n(const uint16_t * p, int64_t n) { return {_mm512_cvtph_ps(_mm256_maskz_loadu_epi16(lanes(n), p))}; }
inline V load_bf16_n(const uint16_t * p, int64_t n) {
    return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(lanes(n), p)), 16))};
}

inline V add(V a, V b) { return {_mm512_add_ps(a.v, b.v)}; }
inline V sub(V a, V b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline V mul(V a, V b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline V div(V a, V b) { return {_mm512_div_ps(a.v, b.v)}; }
inline V fmadd(V a, V b, V c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }    // a b + c, rounded once
inline V fnmadd(V a, V b, V c) { return {_mm512_fnmadd_ps(a.v, b.v, c.v)}; }  // c - a b, rounded once
// x86's max / min: the second operand where either is NaN (or both are zeros).
inline V vmax(V a, V b) { return {_mm512_max_ps(a.v, b.v)}; }
inline V vmin(V a, V b) { return {_mm512_min_ps(a.v, b.v)}; }
inline V vabs(V a) { return {_mm512_abs_ps(a.v)}; }
inline V or_sign(V r, V x) { return {_mm512_or_ps(r.v, _mm512_and_ps(x.v, _mm512_set1_ps(-0.0f)))}; }
inline Mask lt(V a, V b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ)}; }
inline Mask ge(V a, V b) { return {_mm512_cmp_ps_mask(a.v, b.v, _CMP_GE_OQ)}; }
inline V select(Mask m, V if_true, V if_false) { return {_mm512_mask_mov_ps(if_false.v, m.m, if_true.v)}; }
inline V round_even(V a) { return {_mm512_roundscale_ps(a.v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)}; }
// p 2^n for integral n in [-126, 127] (what exp needs): exact scaling, one rounding where subnormal.
inline V ldexp2(V p, V n) { return {_mm512_scalef_ps(p.v, n.v)}; }

// erf's region of |x|: 0 below 1 (`small`), else floor(2 |x| - 1) clamped to 1..6 (NaN: 1).
inline Idx erf_region(V a, Mask small) {
    __m512i i = _mm512_cvttps_epi32(_mm512_fmsub_ps(a.v, _mm512_set1_ps(2.0f), _mm512_set1_ps(1.0f)));
    i = _mm512_min_epi32(_mm512_max_epi32(i, _mm512_set1_epi32(1)), _mm512_set1_epi32(6));
    return {_mm512_mask_mov_epi32(i, small.m, _mm512_setzero_si512())};
}
// row[idx] per lane (row holds 8 values).
inline V pick(Idx idx, const float * row) {
    return {_mm512_permutexvar_ps(idx.i, _mm512_zextps256_ps512(_mm256_loadu_ps(row)))};
}

// The 16 lanes summed in one fixed tree: halves of 8, of 4, then (0+2) + (1+3). Every ISA sums so.
inline float reduce_add(V a) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a.v), _mm512_extractf32x8_ps(a.v, 1));
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 t = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
inline float reduce_max(V a) {
    const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(a.v), _mm512_extractf32x8_ps(a.v, 1));
    const __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 t = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_shuffle_ps(t, t, 1)));
}

#include "simd_math.inc"

}  // namespace jepa::gemm::detail::avx512
