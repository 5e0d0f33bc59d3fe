// The 16-lane vector of the engine's f32 kernels on x86-64-v3 (AVX2 + FMA + F16C): two ymm, lanes
// 0-7 and 8-15. Every operation gives the lanes simd_avx512.h gives (the same roundings, the same
// NaN and zero rules, the same reduction tree), so the kernels' bits are the AVX-512 ones. Included
// only by files compiled with AVX2 flags.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace jepa::gemm::detail::avx2 {

struct V {
    __m256 lo, hi;
};
struct Mask {
    __m256 lo, hi;
};
struct Idx {
    __m256i lo, hi;
};

// Register blocking of the micro-kernel: 6 rows x 1 vector (16 columns; 12 accumulators of 16 ymm).
constexpr int kMR = 6;
constexpr int kVecs = 1;

// Lane masks for maskload / maskstore: 8 all-ones then 8 zeros; the mask of the first n of 8 lanes
// starts at 8 - n.
alignas(64) inline constexpr int32_t kMaskRow[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
inline __m256i lanes8(int64_t n) {
    const int64_t c = n <= 0 ? 0 : n >= 8 ? 8 : n;
    return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(kMaskRow + 8 - c));
}

// The first n of 16 lanes as a mask.
inline Mask first(int64_t n) { return {_mm256_castsi256_ps(lanes8(n)), _mm256_castsi256_ps(lanes8(n - 8))}; }

inline V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline V set1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
inline V load(const float * p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline V load_n(const float * p, int64_t n) {
    if (n >= 16) return load(p);
    const __m256 lo = n >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes8(n));
    return {lo, n > 8 ? _mm256_maskload_ps(p + 8, lanes8(n - 8)) : _mm256_setzero_ps()};
}
inline void store(float * p, V a) {
    _mm256_storeu_ps(p, a.lo);
    _mm256_storeu_ps(p + 8, a.hi);
}
inline void store_n(float * p, int64_t n, V a) {
    if (n >= 16) return store(p, a);
    if (n >= 8) _mm256_storeu_ps(p, a.lo);
    else _mm256_maskstore_ps(p, lanes8(n), a.lo);
    if (n > 8) _mm256_maskstore_ps(p + 8, lanes8(n - 8), a.hi);
}
// n 16-bit values (the rest 0), read without touching memory past them.
inline __m256i load_u16_n(const uint16_t * p, int64_t n) {
    if (n >= 16) return _mm256_loadu_si256(reinterpret_cast<const __m256i *>(p));
    alignas(32) uint16_t b[16] = {};
    for (int64_t i = 0; i < n; ++i) b[i] = p[i];
    return _mm256_load_si256(reinterpret_cast<const __m256i *>(b));
}
inline V load_f16_n(const uint16_t * p, int64_t n) {
    const __m256i h = load_u16_n(p, n);
    return {_mm256_cvtph_ps(_mm256_castsi256_si128(h)), _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1))};
}
inline V load_bf16_n(const uint16_t * p, int64_t n) {
    const __m256i h = load_u16_n(p, n);
    auto widen = [](__m128i x) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(x), 16)); };
    return {widen(_mm256_castsi256_si128(h)), widen(_mm256_extracti128_si256(h, 1))};
}

inline V add(V a, V b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline V sub(V a, V b) { return {_mm256_sub_ps(a.lo, b.lo), _mm256_sub_ps(a.hi, b.hi)}; }
inline V mul(V a, V b) { return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)}; }
inline V div(V a, V b) { return {_mm256_div_ps(a.lo, b.lo), _mm256_div_ps(a.hi, b.hi)}; }
inline V fmadd(V a, V b, V c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline V fnmadd(V a, V b, V c) { return {_mm256_fnmadd_ps(a.lo, b.lo, c.lo), _mm256_fnmadd_ps(a.hi, b.hi, c.hi)}; }
inline V vmax(V a, V b) { return {_mm256_max_ps(a.lo, b.lo), _mm256_max_ps(a.hi, b.hi)}; }
inline V vmin(V a, V b) { return {_mm256_min_ps(a.lo, b.lo), _mm256_min_ps(a.hi, b.hi)}; }
inline V vabs(V a) {
    const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    return {_mm256_and_ps(a.lo, m), _mm256_and_ps(a.hi, m)};
}
inline V or_sign(V r, V x) {
    const __m256 s = _mm256_set1_ps(-0.0f);
    return {_mm256_or_ps(r.lo, _mm256_and_ps(x.lo, s)), _mm256_or_ps(r.hi, _mm256_and_ps(x.hi, s))};
}
inline Mask lt(V a, V b) { return {_mm256_cmp_ps(a.lo, b.lo, _CMP_LT_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_LT_OQ)}; }
inline Mask ge(V a, V b) { return {_mm256_cmp_ps(a.lo, b.lo, _CMP_GE_OQ), _mm256_cmp_ps(a.hi, b.hi, _CMP_GE_OQ)}; }
inline V select(Mask m, V if_true, V if_false) {
    return {_mm256_blendv_ps(if_false.lo, if_true.lo, m.lo), _mm256_blendv_ps(if_false.hi, if_true.hi, m.hi)};
}
inline V round_even(V a) {
    constexpr int mode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(a.lo, mode), _mm256_round_ps(a.hi, mode)};
}
// p 2^n for integral n in [-126, 127]: 2^n is a normal float built from its exponent bits, so the
// product is exact where AVX-512's scalef is, and rounds once (to the same value) where subnormal.
inline V ldexp2(V p, V n) {
    auto pow2 = [](__m256 e) {
        return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(e), _mm256_set1_epi32(127)), 23));
    };
    return {_mm256_mul_ps(p.lo, pow2(n.lo)), _mm256_mul_ps(p.hi, pow2(n.hi))};
}

inline Idx erf_region(V a, Mask small) {
    auto one = [](__m256 x, __m256 s) {
        __m256i i = _mm256_cvttps_epi32(_mm256_fmsub_ps(x, _mm256_set1_ps(2.0f), _mm256_set1_ps(1.0f)));
        i = _mm256_min_epi32(_mm256_max_epi32(i, _mm256_set1_epi32(1)), _mm256_set1_epi32(6));
        return _mm256_andnot_si256(_mm256_castps_si256(s), i);
    };
    return {one(a.lo, small.lo), one(a.hi, small.hi)};
}
inline V pick(Idx idx, const float * row) {
    const __m256 r = _mm256_loadu_ps(row);
    return {_mm256_permutevar8x32_ps(r, idx.lo), _mm256_permutevar8x32_ps(r, idx.hi)};
}

// The tree of simd_avx512.h: lanes i + (8 + i), then halves of 4, then (0+2) + (1+3).
inline float reduce_add(V a) {
    const __m256 h = _mm256_add_ps(a.lo, a.hi);
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 t = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}
inline float reduce_max(V a) {
    const __m256 h = _mm256_max_ps(a.lo, a.hi);
    const __m128 q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 t = _mm_max_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_max_ss(t, _mm_shuffle_ps(t, t, 1)));
}

#include "simd_math.inc"

}  // namespace jepa::gemm::detail::avx2
