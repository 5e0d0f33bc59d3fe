// The 16-lane vector of the engine's f32 kernels in plain C++, for CPUs without an x86 path of
// their own (ARM, and x86 without AVX2 + FMA when asked for): each operation is written as x86's
// instruction defines it (one rounding for fused products, the second operand of max / min where
// either is NaN, the same reduction tree), so the kernels give the x86 paths' bits. The file that
// includes it is compiled with -ffp-contract=off: a product and a sum are fused only where the
// kernel says so. Fast where std::fma is an instruction (every ARM64 CPU); slow, but exact, elsewhere.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace jepa::gemm::detail::portable {

// The names kernels.inc is written against (V, Mask, Idx, kMR, kVecs, then first, zero, set1, load, ...)
// stand in every simd_*.h, of the same shape on purpose: each header is one ISA's registers and
// instructions behind them, and kernels.inc is compiled once inside each ISA's namespace.
struct V {
    float l[16];
};
struct Mask {
    bool l[16];
};
struct Idx {
    int32_t l[16];
};

constexpr int kMR = 4;
constexpr int kVecs = 1;

template <typename F> inline V map(F f) {
    V r;
    for (int i = 0; i < 16; ++i) r.l[i] = f(i);
    return r;
}

inline Mask first(int64_t n) {
    Mask m;
    for (int i = 0; i < 16; ++i) m.l[i] = i < n;
    return m;
}

inline V zero() { return map([](int) { return 0.0f; }); }
inline V set1(float f) { return map([f](int) { return f; }); }
inline V load(const float * p) { return map([p](int i) { return p[i]; }); }
inline V load_n(const float * p, int64_t n) { return map([p, n](int i) { return i < n ? p[i] : 0.0f; }); }
inline void store(float * p, V a) { std::memcpy(p, a.l, sizeof a.l); }
inline void store_n(float * p, int64_t n, V a) {
    for (int i = 0; i < 16 && i < n; ++i) p[i] = a.l[i];
}

inline float bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint32_t float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
// IEEE half to float, exactly (subnormals normalised; NaN quieted, as F16C's VCVTPH2PS does).
inline float half_to_float(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return bits_float(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
    if (exp != 0) return bits_float(sign | ((exp + 112) << 23) | (man << 13));
    if (man == 0) return bits_float(sign);
    int e = 113;  // a subnormal half is man 2^-24: shift its leading one into place
    uint32_t m = man;
    while (!(m & 0x400)) {
        m <<= 1;
        --e;
    }
    return bits_float(sign | (uint32_t(e) << 23) | ((m & 0x3ff) << 13));
}
inline V load_f16_n(const uint16_t * p, int64_t n) { return map([p, n](int i) { return i < n ? half_to_float(p[i]) : 0.0f; }); }
inline V load_bf16_n(const uint16_t * p, int64_t n) {
    return map([p, n](int i) { return i < n ? bits_float(uint32_t(p[i]) << 16) : 0.0f; });
}

inline V add(V a, V b) { return map([&](int i) { return a.l[i] + b.l[i]; }); }
inline V sub(V a, V b) { return map([&](int i) { return a.l[i] - b.l[i]; }); }
inline V mul(V a, V b) { return map([&](int i) { return a.l[i] * b.l[i]; }); }
inline V div(V a, V b) { return map([&](int i) { return a.l[i] / b.l[i]; }); }
inline V fmadd(V a, V b, V c) { return map([&](int i) { return std::fma(a.l[i], b.l[i], c.l[i]); }); }
inline V fnmadd(V a, V b, V c) { return map([&](int i) { return std::fma(-a.l[i], b.l[i], c.l[i]); }); }
inline V vmax(V a, V b) { return map([&](int i) { return a.l[i] > b.l[i] ? a.l[i] : b.l[i]; }); }
inline V vmin(V a, V b) { return map([&](int i) { return a.l[i] < b.l[i] ? a.l[i] : b.l[i]; }); }
inline V vabs(V a) { return map([&](int i) { return bits_float(float_bits(a.l[i]) & 0x7fffffffu); }); }
inline V or_sign(V r, V x) {
    return map([&](int i) { return bits_float(float_bits(r.l[i]) | (float_bits(x.l[i]) & 0x80000000u)); });
}
inline Mask lt(V a, V b) {
    Mask m;
    for (int i = 0; i < 16; ++i) m.l[i] = a.l[i] < b.l[i];
    return m;
}
inline Mask ge(V a, V b) {
    Mask m;
    for (int i = 0; i < 16; ++i) m.l[i] = a.l[i] >= b.l[i];
    return m;
}
inline V select(Mask m, V if_true, V if_false) { return map([&](int i) { return m.l[i] ? if_true.l[i] : if_false.l[i]; }); }
inline V round_even(V a) { return map([&](int i) { return std::nearbyint(a.l[i]); }); }
// n past [-126, 127] (lanes exp discards, and NaN) is clamped first: converting it to int would be UB.
inline V ldexp2(V p, V n) {
    return map([&](int i) { return std::ldexp(p.l[i], int(std::fmax(std::fmin(n.l[i], 128.0f), -150.0f))); });
}

// x86 truncates what does not fit an int32 (and NaN) to INT32_MIN, which the clamp makes 1.
inline Idx erf_region(V a, Mask small) {
    Idx r;
    for (int i = 0; i < 16; ++i) {
        const float t = std::fma(a.l[i], 2.0f, -1.0f);
        const int32_t k = (t >= 2147483648.0f) ? 1 : (t >= 7.0f) ? 6 : (t >= 1.0f) ? int32_t(t) : 1;
        r.l[i] = small.l[i] ? 0 : k;
    }
    return r;
}
inline V pick(Idx idx, const float * row) { return map([&](int i) { return row[idx.l[i]]; }); }

// The tree of simd_avx512.h.
template <typename F> inline float reduce(V a, F op) {
    float h[8], q[4];
    for (int i = 0; i < 8; ++i) h[i] = op(a.l[i], a.l[8 + i]);
    for (int i = 0; i < 4; ++i) q[i] = op(h[i], h[4 + i]);
    return op(op(q[0], q[2]), op(q[1], q[3]));
}
inline float reduce_add(V a) { return reduce(a, [](float x, float y) { return x + y; }); }
inline float reduce_max(V a) { return reduce(a, [](float x, float y) { return x > y ? x : y; }); }

#include "simd_math.inc"

}  // namespace jepa::gemm::detail::portable
