// The NEON vector (simd_neon.h) against the portable one (simd_portable.h), operation by operation,
// lane by lane, bit for bit, on the values where ISAs part ways: NaN of either sign, signed zeros,
// infinities, subnormals, ties of rounding, values past int32, every f16 and bf16 bit pattern, every
// partial load and store. A NaN result need only be a NaN: its sign and payload are the hardware's
// and the compiler's (ARM's FMLS negates a NaN operand, x86's VFNMADD returns it as it is, and a
// compiler may swap the operands of a product or a sum), and no exact-class output is one (the
// inputs are refused unless finite). The kernels' suites (test_gemm) compare whole kernels;
// this points at the operation. ARM64 only (the x86 headers need their ISA's flags to compile, and
// test_gemm compares their kernels); elsewhere it says so and checks nothing.
#include "check.h"

#include <cstdio>

#if defined(__aarch64__) || defined(_M_ARM64)

#include "cpu/simd_neon.h"
#include "cpu/simd_portable.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace {

namespace ne = jepa::gemm::detail::neon;
namespace po = jepa::gemm::detail::portable;

float from_bits(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// The awkward values, then a spread of ordinary ones.
std::vector<float> specials() {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1.5f, 2.5f, -2.5f, 3.5f, inf, -inf,
                            from_bits(0x7fc00000u), from_bits(0xffc00000u), from_bits(0x7fc01234u),
                            1e-40f, -1e-40f, 1.17549435e-38f, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(), 2147483648.0f, 3e9f, 1e20f, -1e20f, 4.0f,
                            0.999999940f, 1.0000001f, 3.4999998f, 88.0f, 88.7f, -87.0f, -87.3f, -88.0f, 16.0f};
    for (int i = 0; i < 30; ++i) v.push_back(std::ldexp(float((i * 37) % 23) - 11.0f, (i % 9) - 4));
    return v;
}

// The values in groups of 16 lanes (the last one padded with the first values).
std::vector<std::vector<float>> groups(const std::vector<float> & v, size_t shift) {
    std::vector<std::vector<float>> g;
    for (size_t i = 0; i < v.size(); i += 16) {
        std::vector<float> x(16);
        for (size_t j = 0; j < 16; ++j) x[j] = v[(i + j + shift) % v.size()];
        g.push_back(x);
    }
    return g;
}

int g_compared = 0;

void same(const std::string & what, const float * a, const float * b, int n = 16) {
    ++g_compared;
    bool ok = true;
    for (int i = 0; i < n; ++i) ok = ok && (std::memcmp(a + i, b + i, 4) == 0 || (std::isnan(a[i]) && std::isnan(b[i])));
    if (ok) return;
    for (int i = 0; i < n; ++i) {
        uint32_t x, y;
        std::memcpy(&x, a + i, 4);
        std::memcpy(&y, b + i, 4);
        if (x != y && !(std::isnan(a[i]) && std::isnan(b[i]))) {
            std::fprintf(stderr, "%s: lane %d neon %08x portable %08x\n", what.c_str(), i, x, y);
            break;
        }
    }
    CHECK(false);
}

// exp is defined up to x = 88, what its callers give it (past that the 2^n of AVX2 and NEON overflows
// its exponent bits where AVX-512's scalef and portable's ldexp scale exactly: no kernel goes there).
std::vector<float> exp_domain() {
    std::vector<float> v;
    for (float x : specials()) {
        if (!(x > 88.0f)) v.push_back(x);
    }
    return v;
}

template <typename FN, typename FP> void unary(const std::string & name, FN fn, FP fp, const std::vector<float> & values = specials()) {
    for (const auto & x : groups(values, 0)) {
        float a[16], b[16];
        ne::store(a, fn(ne::load(x.data())));
        po::store(b, fp(po::load(x.data())));
        same(name, a, b);
    }
}

template <typename FN, typename FP> void binary(const std::string & name, FN fn, FP fp) {
    const std::vector<float> v = specials();
    for (size_t shift = 0; shift < v.size(); ++shift) {  // every pair of values meets in some lane
        const auto xs = groups(v, 0), ys = groups(v, shift);
        for (size_t g = 0; g < xs.size(); ++g) {
            float a[16], b[16];
            ne::store(a, fn(ne::load(xs[g].data()), ne::load(ys[g].data())));
            po::store(b, fp(po::load(xs[g].data()), po::load(ys[g].data())));
            same(name, a, b);
        }
    }
}

void check_arithmetic() {
    binary("add", [](ne::V a, ne::V b) { return ne::add(a, b); }, [](po::V a, po::V b) { return po::add(a, b); });
    binary("sub", [](ne::V a, ne::V b) { return ne::sub(a, b); }, [](po::V a, po::V b) { return po::sub(a, b); });
    binary("mul", [](ne::V a, ne::V b) { return ne::mul(a, b); }, [](po::V a, po::V b) { return po::mul(a, b); });
    binary("div", [](ne::V a, ne::V b) { return ne::div(a, b); }, [](po::V a, po::V b) { return po::div(a, b); });
    binary("max", [](ne::V a, ne::V b) { return ne::vmax(a, b); }, [](po::V a, po::V b) { return po::vmax(a, b); });
    binary("min", [](ne::V a, ne::V b) { return ne::vmin(a, b); }, [](po::V a, po::V b) { return po::vmin(a, b); });
    binary("or_sign", [](ne::V a, ne::V b) { return ne::or_sign(a, b); }, [](po::V a, po::V b) { return po::or_sign(a, b); });
    binary("lt", [](ne::V a, ne::V b) { return ne::select(ne::lt(a, b), a, b); },
           [](po::V a, po::V b) { return po::select(po::lt(a, b), a, b); });
    binary("ge", [](ne::V a, ne::V b) { return ne::select(ne::ge(a, b), b, a); },
           [](po::V a, po::V b) { return po::select(po::ge(a, b), b, a); });
    // Fused: a b + c and c - a b with c the values once more, shifted again.
    binary("fmadd", [](ne::V a, ne::V b) { return ne::fmadd(a, b, ne::add(a, ne::set1(0.75f))); },
           [](po::V a, po::V b) { return po::fmadd(a, b, po::add(a, po::set1(0.75f))); });
    binary("fnmadd", [](ne::V a, ne::V b) { return ne::fnmadd(a, b, ne::set1(-0.0f)); },
           [](po::V a, po::V b) { return po::fnmadd(a, b, po::set1(-0.0f)); });
    unary("abs", [](ne::V a) { return ne::vabs(a); }, [](po::V a) { return po::vabs(a); });
    unary("round_even", [](ne::V a) { return ne::round_even(a); }, [](po::V a) { return po::round_even(a); });
    unary("exp", [](ne::V a) { return ne::vexp(a); }, [](po::V a) { return po::vexp(a); }, exp_domain());
    unary("erf", [](ne::V a) { return ne::verf(a); }, [](po::V a) { return po::verf(a); });
    unary("gelu", [](ne::V a) { return ne::vgelu(a); }, [](po::V a) { return po::vgelu(a); });
    unary("silu", [](ne::V a) { return ne::vsilu(a); }, [](po::V a) { return po::vsilu(a); });
    // erf's region and the table pick on their own (the region of 2^31 and past: x86's rule).
    const float row[8] = {10, 11, 12, 13, 14, 15, 16, 17};
    unary("erf_region", [&](ne::V a) { const ne::V x = ne::vabs(a); return ne::pick(ne::erf_region(x, ne::lt(x, ne::set1(1.0f))), row); },
          [&](po::V a) { const po::V x = po::vabs(a); return po::pick(po::erf_region(x, po::lt(x, po::set1(1.0f))), row); });
    // 2^n for the n exp makes: every integer in [-126, 127], on values with a rounding to make.
    for (int n0 = -126; n0 <= 127; n0 += 16) {
        float nv[16], a[16], b[16];
        for (int i = 0; i < 16; ++i) nv[i] = float(std::min(n0 + i, 127));
        const float p[16] = {1.0f, 1.4142135f, 0.70710677f, 1.9999999f, 1.0000001f, 0.5f, 1.25f, 1.75f,
                             1.1f, 1.3f, 0.9f, 0.8f, 1.6f, 1.2f, 1.05f, 0.75f};
        ne::store(a, ne::ldexp2(ne::load(p), ne::load(nv)));
        po::store(b, po::ldexp2(po::load(p), po::load(nv)));
        same("ldexp2 n from " + std::to_string(n0), a, b);
    }
}

void check_reductions() {
    for (size_t shift = 0; shift < 16; ++shift) {
        for (const auto & x : groups(specials(), shift)) {
            const float a[2] = {ne::reduce_add(ne::load(x.data())), ne::reduce_max(ne::load(x.data()))};
            const float b[2] = {po::reduce_add(po::load(x.data())), po::reduce_max(po::load(x.data()))};
            same("reduce_add / reduce_max", a, b, 2);
        }
    }
    // Sums whose value depends on the tree: large and small magnitudes mixed.
    for (int s = 0; s < 64; ++s) {
        float x[16];
        for (int i = 0; i < 16; ++i) x[i] = std::ldexp(float(((i + s) * 7919) % 101) - 50.0f, ((i * s) % 40) - 20);
        const float a = ne::reduce_add(ne::load(x)), b = po::reduce_add(po::load(x));
        same("reduce_add tree", &a, &b, 1);
    }
}

void check_memory() {
    float src[16], a[16], b[16];
    for (int i = 0; i < 16; ++i) src[i] = float(i) + 0.5f;
    for (int n = -1; n <= 17; ++n) {
        ne::store(a, ne::load_n(src, n));
        po::store(b, po::load_n(src, n));
        same("load_n " + std::to_string(n), a, b);
        for (int i = 0; i < 16; ++i) a[i] = b[i] = -7.0f;
        ne::store_n(a, n, ne::set1(3.0f));
        po::store_n(b, n, po::set1(3.0f));
        same("store_n " + std::to_string(n), a, b);
        ne::store(a, ne::select(ne::first(n), ne::set1(1.0f), ne::zero()));
        po::store(b, po::select(po::first(n), po::set1(1.0f), po::zero()));
        same("first " + std::to_string(n), a, b);
    }
    // Every f16 and bf16 bit pattern, widened; and a partial 16-bit load.
    std::vector<uint16_t> h(65536);
    for (size_t i = 0; i < h.size(); ++i) h[i] = uint16_t(i);
    int f16_bad = 0, bf16_bad = 0;
    for (size_t i = 0; i < h.size(); i += 16) {
        ne::store(a, ne::load_f16_n(h.data() + i, 16));
        po::store(b, po::load_f16_n(h.data() + i, 16));
        f16_bad += std::memcmp(a, b, 64) != 0;
        ne::store(a, ne::load_bf16_n(h.data() + i, 16));
        po::store(b, po::load_bf16_n(h.data() + i, 16));
        bf16_bad += std::memcmp(a, b, 64) != 0;
    }
    if (f16_bad || bf16_bad) std::fprintf(stderr, "f16: %d, bf16: %d groups of 16 differ\n", f16_bad, bf16_bad);
    CHECK(f16_bad == 0 && bf16_bad == 0);
    for (int n = 0; n <= 16; ++n) {
        ne::store(a, ne::load_f16_n(h.data() + 0x3c00, n));
        po::store(b, po::load_f16_n(h.data() + 0x3c00, n));
        same("load_f16_n " + std::to_string(n), a, b);
    }
}

}  // namespace

int main() {
    check_arithmetic();
    check_reductions();
    check_memory();
    std::printf("neon against portable: %d comparisons of 16 lanes (and every f16 / bf16 pattern)\n", g_compared);
    return check_result("test_simd_ops");
}

#else

int main() {
    std::printf("test_simd_ops: not an ARM64 build: the NEON vector is not compiled here; NOTHING compared "
                "(make arm-test runs it)\n");
    return check_result("test_simd_ops");
}

#endif
