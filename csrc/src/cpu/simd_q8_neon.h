// The int8 dot of the q8_0 product (kernels_q8.inc) on ARM64 with the dot-product extension
// (ARMv8.2 DotProd: SDOT, Neoverse N1 / V1 / V2, Apple M1 on, Cortex-A55 / A76 on): SDOT multiplies
// signed by signed bytes, four per int32 lane, so the stored weights (w + 128, the VNNI path's form)
// are flipped back to signed and no offset is needed: the exact int32 sum. Included only by
// gemm_q8_neon.cpp (compiled with +dotprod, run where HWCAP says so), after simd_neon.h.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::neon {

struct QW {
    int8x16_t q[4];  // columns 4j .. 4j + 3, 4 k each, signed
};
struct QI {
    int32x4_t q[4];
};

// Rows per micro-kernel call: 3 x (4 int32 + 4 f32) accumulators and the 4 weight registers fit
// the 32 q registers.
constexpr int kQR = 3;
constexpr bool kQOffset = false;

inline QW qload(const uint8_t * w) {
    const uint8x16_t flip = vdupq_n_u8(0x80);
    QW r;
    for (int j = 0; j < 4; ++j) r.q[j] = vreinterpretq_s8_u8(veorq_u8(vld1q_u8(w + 16 * j), flip));
    return r;
}
inline QI qset1(int32_t v) {
    const int32x4_t s = vdupq_n_s32(v);
    return {{s, s, s, s}};
}
inline QI qdot(QI acc, const QW & w, const int8_t * a4) {
    int32_t a32;
    std::memcpy(&a32, a4, 4);
    const int8x16_t a = vreinterpretq_s8_s32(vdupq_n_s32(a32));
    for (int j = 0; j < 4; ++j) acc.q[j] = vdotq_s32(acc.q[j], w.q[j], a);
    return acc;
}
inline V qtof(const QI & a) {
    return {{vcvtq_f32_s32(a.q[0]), vcvtq_f32_s32(a.q[1]), vcvtq_f32_s32(a.q[2]), vcvtq_f32_s32(a.q[3])}};
}
// 16 lanes holding integers in [-127, 127], as bytes.
inline void qstore_i8(int8_t * p, V v) {
    const int16x8_t lo = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(v.q[0])), vqmovn_s32(vcvtnq_s32_f32(v.q[1])));
    const int16x8_t hi = vcombine_s16(vqmovn_s32(vcvtnq_s32_f32(v.q[2])), vqmovn_s32(vcvtnq_s32_f32(v.q[3])));
    vst1q_s8(p, vcombine_s8(vqmovn_s16(lo), vqmovn_s16(hi)));
}

}  // namespace jepa::gemm::detail::neon
