// The int8 dot of the q8_0 product (kernels_q8.inc) in plain C++: the exact int32 sums every ISA
// forms, written as the definition. Stored weights are w + 128 (the VNNI path's form), read back as
// signed here. Included after simd_portable.h.
#pragma once

#include <cmath>
#include <cstdint>

namespace jepa::gemm::detail::portable {

struct QW {
    int8_t w[16][4];
};
struct QI {
    int32_t l[16];
};

constexpr int kQR = 4;
constexpr bool kQOffset = false;

inline QW qload(const uint8_t * w) {
    QW r;
    for (int j = 0; j < 16; ++j) {
        for (int t = 0; t < 4; ++t) r.w[j][t] = int8_t(int(w[j * 4 + t]) - 128);
    }
    return r;
}
inline QI qset1(int32_t v) {
    QI r;
    for (int j = 0; j < 16; ++j) r.l[j] = v;
    return r;
}
inline QI qdot(QI acc, const QW & w, const int8_t * a4) {
    for (int j = 0; j < 16; ++j) {
        for (int t = 0; t < 4; ++t) acc.l[j] += int32_t(w.w[j][t]) * int32_t(a4[t]);
    }
    return acc;
}
inline V qtof(const QI & a) { return map([&](int i) { return float(a.l[i]); }); }
inline void qstore_i8(int8_t * p, V v) {
    for (int i = 0; i < 16; ++i) p[i] = int8_t(std::lrint(v.l[i]));
}

}  // namespace jepa::gemm::detail::portable
