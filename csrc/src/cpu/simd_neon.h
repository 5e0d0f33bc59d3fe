// The 16-lane vector of the engine's f32 kernels on ARM64 Advanced SIMD (NEON): four q registers,
// lanes 0-3, 4-7, 8-11 and 12-15. Every operation gives the lanes simd_portable.h and simd_avx512.h
// give: one rounding for fused products (FMLA / FMLS), x86's max / min (the second operand where
// either is NaN or both are zeros: NEON's FMAX differs, so they are a compare and a select),
// round-to-nearest-even (FRINTN), the same erf region rule (x86's truncation of what does not fit an
// int32 to region 1, where FCVTZS saturates) and the same reduction tree. So the kernels give the x86
// paths' bits. Included only by gemm_neon.cpp (aarch64, -ffp-contract=off).
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::neon {

// The names kernels.inc is written against (V, Mask, Idx, kMR, kVecs, then first, zero, set1, load, ...)
// stand in every simd_*.h, of the same shape on purpose: each header is one ISA's registers and
// instructions behind them, and kernels.inc is compiled once inside each ISA's namespace.
struct V {
    float32x4_t q[4];
};
struct Mask {
    uint32x4_t q[4];
};
struct Idx {
    int32x4_t q[4];
};

// Register blocking of the micro-kernel: 6 rows x 1 vector (16 columns): 24 accumulators and 4
// vectors of the panel's row in the 32 q registers, the row's 6 values of x broadcast from the rest.
constexpr int kMR = 6;
constexpr int kVecs = 1;

// The first n of 16 lanes as a mask.
inline Mask first(int64_t n) {
    const int32x4_t c = vdupq_n_s32(int32_t(n <= 0 ? 0 : n >= 16 ? 16 : n));
    const int32_t base[4] = {0, 1, 2, 3};
    const int32x4_t i0 = vld1q_s32(base);
    Mask m;
    for (int j = 0; j < 4; ++j) m.q[j] = vcltq_s32(vaddq_s32(i0, vdupq_n_s32(4 * j)), c);
    return m;
}

inline V zero() {
    const float32x4_t z = vdupq_n_f32(0.0f);
    return {{z, z, z, z}};
}
inline V set1(float f) {
    const float32x4_t v = vdupq_n_f32(f);
    return {{v, v, v, v}};
}
inline V load(const float * p) { return {{vld1q_f32(p), vld1q_f32(p + 4), vld1q_f32(p + 8), vld1q_f32(p + 12)}}; }
// The first n lanes from p (the rest 0; nothing past them is read).
inline V load_n(const float * p, int64_t n) {
    if (n >= 16) return load(p);
    float b[16] = {};
    if (n > 0) std::memcpy(b, p, size_t(n) * sizeof(float));
    return load(b);
}
inline void store(float * p, V a) {
    for (int j = 0; j < 4; ++j) vst1q_f32(p + 4 * j, a.q[j]);
}
inline void store_n(float * p, int64_t n, V a) {
    if (n >= 16) return store(p, a);
    float b[16];
    store(b, a);
    if (n > 0) std::memcpy(p, b, size_t(n) * sizeof(float));
}
// n 16-bit values (the rest 0), read without touching memory past them.
inline void load_u16_n(const uint16_t * p, int64_t n, uint16x8_t & lo, uint16x8_t & hi) {
    if (n >= 16) {
        lo = vld1q_u16(p);
        hi = vld1q_u16(p + 8);
        return;
    }
    uint16_t b[16] = {};
    if (n > 0) std::memcpy(b, p, size_t(n) * sizeof(uint16_t));
    lo = vld1q_u16(b);
    hi = vld1q_u16(b + 8);
}
// IEEE half to float with FCVTL: exact (subnormals normalised, NaN quieted, as F16C's VCVTPH2PS).
inline V load_f16_n(const uint16_t * p, int64_t n) {
    uint16x8_t lo, hi;
    load_u16_n(p, n, lo, hi);
    auto cvt = [](uint16x4_t h) { return vcvt_f32_f16(vreinterpret_f16_u16(h)); };
    return {{cvt(vget_low_u16(lo)), cvt(vget_high_u16(lo)), cvt(vget_low_u16(hi)), cvt(vget_high_u16(hi))}};
}
// bf16 to float: the 16 bits on top of a zero low half (exact).
inline V load_bf16_n(const uint16_t * p, int64_t n) {
    uint16x8_t lo, hi;
    load_u16_n(p, n, lo, hi);
    auto widen = [](uint16x4_t h) { return vreinterpretq_f32_u32(vshll_n_u16(h, 16)); };
    return {{widen(vget_low_u16(lo)), widen(vget_high_u16(lo)), widen(vget_low_u16(hi)), widen(vget_high_u16(hi))}};
}

// Lane-wise f(a.q[j], b.q[j]) for each of the four registers.
template <typename F> inline V each(V a, V b, F f) { return {{f(a.q[0], b.q[0]), f(a.q[1], b.q[1]), f(a.q[2], b.q[2]), f(a.q[3], b.q[3])}}; }

inline V add(V a, V b) { return each(a, b, [](float32x4_t x, float32x4_t y) { return vaddq_f32(x, y); }); }
inline V sub(V a, V b) { return each(a, b, [](float32x4_t x, float32x4_t y) { return vsubq_f32(x, y); }); }
inline V mul(V a, V b) { return each(a, b, [](float32x4_t x, float32x4_t y) { return vmulq_f32(x, y); }); }
inline V div(V a, V b) { return each(a, b, [](float32x4_t x, float32x4_t y) { return vdivq_f32(x, y); }); }
// a b + c and c - a b, each rounded once (FMLA, FMLS).
inline V fmadd(V a, V b, V c) {
    return {{vfmaq_f32(c.q[0], a.q[0], b.q[0]), vfmaq_f32(c.q[1], a.q[1], b.q[1]), vfmaq_f32(c.q[2], a.q[2], b.q[2]),
             vfmaq_f32(c.q[3], a.q[3], b.q[3])}};
}
inline V fnmadd(V a, V b, V c) {
    return {{vfmsq_f32(c.q[0], a.q[0], b.q[0]), vfmsq_f32(c.q[1], a.q[1], b.q[1]), vfmsq_f32(c.q[2], a.q[2], b.q[2]),
             vfmsq_f32(c.q[3], a.q[3], b.q[3])}};
}
// x86's max / min: a where a > b (a < b), else b: NaN in either and equal values (+0 and -0) give b.
// (NEON's FMAX returns the NaN, and +0 for +0 / -0 in either order.)
inline float32x4_t max4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcgtq_f32(a, b), a, b); }
inline float32x4_t min4(float32x4_t a, float32x4_t b) { return vbslq_f32(vcltq_f32(a, b), a, b); }
inline V vmax(V a, V b) { return each(a, b, max4); }
inline V vmin(V a, V b) { return each(a, b, min4); }
inline V vabs(V a) { return {{vabsq_f32(a.q[0]), vabsq_f32(a.q[1]), vabsq_f32(a.q[2]), vabsq_f32(a.q[3])}}; }
inline V or_sign(V r, V x) {
    return each(r, x, [](float32x4_t a, float32x4_t b) {
        const uint32x4_t s = vandq_u32(vreinterpretq_u32_f32(b), vdupq_n_u32(0x80000000u));
        return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(a), s));
    });
}
// Ordered comparisons: false where either is NaN (x86's _CMP_LT_OQ / _CMP_GE_OQ).
inline Mask lt(V a, V b) {
    return {{vcltq_f32(a.q[0], b.q[0]), vcltq_f32(a.q[1], b.q[1]), vcltq_f32(a.q[2], b.q[2]), vcltq_f32(a.q[3], b.q[3])}};
}
inline Mask ge(V a, V b) {
    return {{vcgeq_f32(a.q[0], b.q[0]), vcgeq_f32(a.q[1], b.q[1]), vcgeq_f32(a.q[2], b.q[2]), vcgeq_f32(a.q[3], b.q[3])}};
}
inline V select(Mask m, V if_true, V if_false) {
    V r;
    for (int j = 0; j < 4; ++j) r.q[j] = vbslq_f32(m.q[j], if_true.q[j], if_false.q[j]);
    return r;
}
inline V round_even(V a) { return {{vrndnq_f32(a.q[0]), vrndnq_f32(a.q[1]), vrndnq_f32(a.q[2]), vrndnq_f32(a.q[3])}}; }
// p 2^n for integral n in [-126, 127] (what exp needs): 2^n is a normal float built from its exponent
// bits, so the product is exact, or rounds once where subnormal, as AVX-512's scalef and ldexp do.
// Lanes past that range (which exp discards) are some value, never a trap.
inline V ldexp2(V p, V n) {
    V r;
    for (int j = 0; j < 4; ++j) {
        const int32x4_t e = vaddq_s32(vcvtnq_s32_f32(n.q[j]), vdupq_n_s32(127));
        r.q[j] = vmulq_f32(p.q[j], vreinterpretq_f32_s32(vshlq_n_s32(e, 23)));
    }
    return r;
}

// erf's region of |x|: 0 below 1 (`small`), else floor(2 |x| - 1) clamped to 1..6. x86 truncates
// what does not fit an int32 (and NaN) to INT32_MIN, which the clamp makes 1; FCVTZS saturates
// instead (and gives NaN 0), so those lanes are set to 1 here as x86 sets them.
inline Idx erf_region(V a, Mask small) {
    Idx r;
    for (int j = 0; j < 4; ++j) {
        const float32x4_t t = vfmaq_f32(vdupq_n_f32(-1.0f), a.q[j], vdupq_n_f32(2.0f));
        int32x4_t i = vminq_s32(vmaxq_s32(vcvtq_s32_f32(t), vdupq_n_s32(1)), vdupq_n_s32(6));
        i = vbslq_s32(vcgeq_f32(t, vdupq_n_f32(2147483648.0f)), vdupq_n_s32(1), i);
        r.q[j] = vbslq_s32(small.q[j], vdupq_n_s32(0), i);
    }
    return r;
}
// row[idx] per lane (row holds 8 values): a byte table lookup of 32 bytes, lane k taking bytes 4k..4k+3.
inline V pick(Idx idx, const float * row) {
    const uint8x16x2_t table = {{vreinterpretq_u8_f32(vld1q_f32(row)), vreinterpretq_u8_f32(vld1q_f32(row + 4))}};
    const uint32x4_t bytes = vdupq_n_u32(0x03020100u);
    V r;
    for (int j = 0; j < 4; ++j) {
        const uint32x4_t k4 = vshlq_n_u32(vreinterpretq_u32_s32(idx.q[j]), 2);
        const uint32x4_t sel = vmlaq_n_u32(bytes, k4, 0x01010101u);
        r.q[j] = vreinterpretq_f32_u8(vqtbl2q_u8(table, vreinterpretq_u8_u32(sel)));
    }
    return r;
}

// The tree of simd_avx512.h: lanes i + (8 + i), then halves of 4, then (0+2) + (1+3).
inline float reduce_add(V a) {
    const float32x4_t q = vaddq_f32(vaddq_f32(a.q[0], a.q[2]), vaddq_f32(a.q[1], a.q[3]));
    const float32x2_t t = vadd_f32(vget_low_f32(q), vget_high_f32(q));
    return vget_lane_f32(t, 0) + vget_lane_f32(t, 1);
}
inline float reduce_max(V a) {
    const float32x4_t q = max4(max4(a.q[0], a.q[2]), max4(a.q[1], a.q[3]));
    const float32x2_t lo = vget_low_f32(q), hi = vget_high_f32(q);
    const float32x2_t t = vbsl_f32(vcgt_f32(lo, hi), lo, hi);
    const float t0 = vget_lane_f32(t, 0), t1 = vget_lane_f32(t, 1);
    return t0 > t1 ? t0 : t1;
}

#include "simd_math.inc"

}  // namespace jepa::gemm::detail::neon
