// The int8 dot of the q8_0 product (kernels_q8.inc) on AVX2 CPUs with AVX-VNNI (Alder Lake and later
// Intel cores without AVX-512): VPDPBUSD on ymm, as simd_q8_vnni.h does on zmm: weights stored as
// w + 128, each block's sum started at -128 * (the sum of its activations). Included only by
// gemm_q8_avxvnni.cpp (AVX2 + AVX-VNNI flags), after simd_avx2.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::avx2::vnni {

struct QW {
    __m256i lo, hi;  // columns 0-7 and 8-15, 4 k each, unsigned (w + 128)
};
struct QI {
    __m256i lo, hi;
};

constexpr int kQR = 4;
constexpr bool kQOffset = true;

inline QW qload(const uint8_t * w) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32))};
}
inline QI qset1(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
inline QI qdot(QI acc, QW w, const int8_t * a4) {
    int32_t a32;
    std::memcpy(&a32, a4, 4);
    const __m256i a = _mm256_set1_epi32(a32);
    return {_mm256_dpbusd_avx_epi32(acc.lo, w.lo, a), _mm256_dpbusd_avx_epi32(acc.hi, w.hi, a)};
}
inline V qtof(QI a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
inline void qstore_i8(int8_t * p, V v) {
    const __m256i lo = _mm256_cvtps_epi32(v.lo), hi = _mm256_cvtps_epi32(v.hi);
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p),
                     _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
}

}  // namespace jepa::gemm::detail::avx2::vnni
