// The int8 dot of the q8_0 product (kernels_q8.inc) on AVX-512 VNNI: VPDPBUSD multiplies unsigned by
// signed bytes, so the weights are stored as w + 128 (gemm.cpp packs them so) and each block's sum
// starts at -128 * (the sum of its activations): the exact int32 sum of w * a either way. Included
// only by files compiled with AVX-512 + VNNI flags, after simd_avx512.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::avx512 {

struct QW {
    __m512i v;  // 16 columns x 4 k, unsigned (w + 128)
};
struct QI {
    __m512i v;  // 16 int32 sums
};

// Rows per micro-kernel call: 8 int32 and 8 f32 accumulators; VPDPBUSD's latency wants >= 5 chains.
constexpr int kQR = 8;
constexpr bool kQOffset = true;

inline QW qload(const uint8_t * w) { return {_mm512_loadu_si512(w)}; }
inline QI qset1(int32_t v) { return {_mm512_set1_epi32(v)}; }
inline QI qdot(QI acc, QW w, const int8_t * a4) {
    int32_t a;
    std::memcpy(&a, a4, 4);
    return {_mm512_dpbusd_epi32(acc.v, w.v, _mm512_set1_epi32(a))};
}
inline V qtof(QI a) { return {_mm512_cvtepi32_ps(a.v)}; }  // exact: |sum| < 2^24
// 16 lanes holding integers in [-127, 127], as bytes.
inline void qstore_i8(int8_t * p, V v) { _mm_storeu_si128(reinterpret_cast<__m128i *>(p), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(v.v))); }

}  // namespace jepa::gemm::detail::avx512
