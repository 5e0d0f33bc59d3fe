// The int8 dot of the q8_0 product (kernels_q8.inc) on AVX2 CPUs with AVX-VNNI (Alder Lake and later
// Intel cores without AVX-512): VPDPBUSD on ymm, as simd_q8_vnni.h does on zmm: weights stored as
// w + 128, each block's sum started at -128 * (the sum of its activations). Included only by
// gemm_q8_avxvnni.cpp (AVX2 + AVX-VNNI flags), after simd_avx2.h.
#pragma once

#include "simd_q8_avx2.h"

#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::avx2::vnni {

// QI, qset1, qtof and qstore_i8 are AVX2's (simd_q8_avx2.h, the enclosing namespace); the weights
// stay unsigned and the dot is VPDPBUSD.
struct QW {
    __m256i lo, hi;  // columns 0-7 and 8-15, 4 k each, unsigned (w + 128)
};

constexpr int kQR = 4;
constexpr bool kQOffset = true;

inline QW qload(const uint8_t * w) {
    return {_mm256_loadu_si256(reinterpret_cast<const __m256i *>(w)),
            _mm256_loadu_si256(reinterpret_cast<const __m256i *>(w + 32))};
}
inline QI qdot(QI acc, QW w, const int8_t * a4) {
    int32_t a32;
    std::memcpy(&a32, a4, 4);
    const __m256i a = _mm256_set1_epi32(a32);
    return {_mm256_dpbusd_avx_epi32(acc.lo, w.lo, a), _mm256_dpbusd_avx_epi32(acc.hi, w.hi, a)};
}

}  // namespace jepa::gemm::detail::avx2::vnni
