// The int8 dot of the q8_0 product (kernels_q8.inc) on AVX2, without VNNI: VPMADDUBSW multiplies
// unsigned by signed bytes and adds pairs into saturating int16, so it takes |a| and w with a's sign
// (VPSIGNB): a pair is at most 2 * 127 * 127 in magnitude, never saturated (the packer reads a
// weight of -128 as -127, gemm.cpp), then VPMADDWD adds the pairs into int32: the exact sum. Stored
// weights are w + 128 (the VNNI path's form), flipped back here. Included only by files compiled
// with AVX2 flags, after simd_avx2.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::avx2 {

struct QW {
    __m256i lo, hi;  // columns 0-7 and 8-15, 4 k each, signed
};
struct QI {
    __m256i lo, hi;
};

constexpr int kQR = 4;
constexpr bool kQOffset = false;

inline QW qload(const uint8_t * w) {
    const __m256i flip = _mm256_set1_epi8(char(0x80));
    return {_mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)), flip),
            _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32)), flip)};
}
inline QI qset1(int32_t v) { return {_mm256_set1_epi32(v), _mm256_set1_epi32(v)}; }
inline QI qdot(QI acc, QW w, const int8_t * a4) {
    int32_t a32;
    std::memcpy(&a32, a4, 4);
    const __m256i a = _mm256_set1_epi32(a32), aa = _mm256_abs_epi8(a), ones = _mm256_set1_epi16(1);
    const __m256i lo = _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(w.lo, a)), ones);
    const __m256i hi = _mm256_madd_epi16(_mm256_maddubs_epi16(aa, _mm256_sign_epi8(w.hi, a)), ones);
    return {_mm256_add_epi32(acc.lo, lo), _mm256_add_epi32(acc.hi, hi)};
}
inline V qtof(QI a) { return {_mm256_cvtepi32_ps(a.lo), _mm256_cvtepi32_ps(a.hi)}; }
inline void qstore_i8(int8_t * p, V v) {
    const __m256i lo = _mm256_cvtps_epi32(v.lo), hi = _mm256_cvtps_epi32(v.hi);
    // int32 -> int16 -> int8 (saturating; the values fit), then lanes back in order.
    const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(lo, hi), 0xD8);
    const __m128i b8 = _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i *>(p), b8);
}

}  // namespace jepa::gemm::detail::avx2
