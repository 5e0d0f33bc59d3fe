// The engine's int8 product for i8c weights (csrc/src/cpu/kernels_i8.inc): its bits against a scalar
// definition written here (activations quantized per row, one exact int32 sum over the whole of k,
// scaled once), its accuracy against the f32 product in double precision, the same bits for any row
// count, thread count and ISA (AMX-INT8 tiles, AVX-512 VNNI, AVX-VNNI, AVX2, NEON SDOT, portable:
// whichever this CPU runs), the fused epilogue, what a NaN or a -128 weight does, and the writer's
// refusals (jepa_quantize "i8c").
//
//     test_i8             the checks (ctest, once per JEPA_GEMM cap)
//     test_i8 --bench     GFLOP/s of the i8c, q8_0 and f32 products on ViT shapes (a development aid)
#include "cpu/features.h"
#include "cpu/paths.h"
#include "cpu/gemm.h"
#include "check.h"
#include "cpu/gemm_kernels.h"
#include "graph.h"
#include "kernel_fixtures.h"

#include "ggml.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Epilogue = jepa::gemm::Epilogue;

std::vector<float> run(const Weight & W, const std::vector<float> & x, int64_t M, int threads, Epilogue ep,
                       const std::vector<float> * res = nullptr) {
    ggml_tensor * xt = nullptr, * rt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, W.K, M);
        ggml_set_input(xt);
        if (res) {
            rt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, W.N, M);
            ggml_set_input(rt);
        }
        return jepa::gemm::linear(ctx, xt, W.w, W.b, ep, rt, false, nullptr, W.s);
    };
    auto set = [&] {
        ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4);
        if (rt) ggml_backend_tensor_set(rt, res->data(), 0, res->size() * 4);
    };
    return run_graph(threads, build, set);
}

// The definition, in scalar C++ from the unpacked rows: what every ISA must give, bit for bit (no
// epilogue but the bias).
std::vector<float> reference(const Weight & W, const std::vector<float> & x, int64_t M) {
    const int64_t K = W.K, N = W.N;
    std::vector<float> y(size_t(M * N));
    std::vector<int8_t> qa(static_cast<size_t>(K));
    const auto * ws = static_cast<const float *>(W.s->data);
    for (int64_t m = 0; m < M; ++m) {
        const float * xr = x.data() + m * K;
        float amax = 0;
        bool finite = true;
        for (int64_t k = 0; k < K; ++k) {
            finite = finite && std::isfinite(xr[k]);
            amax = std::max(amax, std::fabs(xr[k]));
        }
        const float d = finite ? amax / 127.0f : NAN;
        const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
        for (int64_t k = 0; k < K; ++k) qa[size_t(k)] = finite ? int8_t(std::nearbyint(xr[k] * id)) : 0;
        for (int64_t n = 0; n < N; ++n) {
            int32_t dot = 0;
            for (int64_t k = 0; k < K; ++k) {
                dot += std::max(-127, int(int8_t(W.raw[size_t(n * K + k)]))) * int32_t(qa[size_t(k)]);
            }
            float acc = float(dot) * (ws[n] * d);
            if (W.b) acc += static_cast<const float *>(W.b->data)[n];
            y[size_t(m * N + n)] = acc;
        }
    }
    return y;
}

double cosine(const std::vector<float> & a, const std::vector<double> & b) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < a.size(); ++i) ab += a[i] * b[i], aa += double(a[i]) * a[i], bb += b[i] * b[i];
    return ab / std::sqrt(aa * bb);
}

void check_product(int64_t M, int64_t K, int64_t N, bool bias) {
    const std::string name = "i8c M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                             (bias ? " +bias" : "");
    Weight W(GGML_TYPE_I8, K, N, bias, uint32_t(M * 131 + K * 7 + N));
    check(jepa::gemm::can_pack(W.w), name + ": the engine does not take the i8c weight");
    const std::vector<float> x = random_x(M, K, uint32_t(K + N));
    const std::vector<float> y2 = run(W, x, M, 2, Epilogue::None);
    const std::vector<float> want = reference(W, x, M);
    check(same_bits(y2.data(), want.data(), want.size()), name + ": differs from the definition");
    // Accuracy: against the f32 product of the same (dequantized) weights, in double precision.
    std::vector<double> exact(size_t(M * N));
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double acc = W.b ? double(static_cast<const float *>(W.b->data)[n]) : 0.0;
            for (int64_t k = 0; k < K; ++k) acc += double(x[size_t(m * K + k)]) * W.value[size_t(n * K + k)];
            exact[size_t(m * N + n)] = acc;
        }
    }
    const double cos = cosine(y2, exact);
    check(cos >= 0.9999, name + ": cosine against the f32 product " + std::to_string(cos));
    for (int threads : {1, 3}) {
        const std::vector<float> y = run(W, x, M, threads, Epilogue::None);
        check(same_bits(y.data(), y2.data(), y.size()), name + ": threads " + std::to_string(threads) + " != 2");
    }
    for (int64_t m : {int64_t(0), M / 2, M - 1}) {
        const std::vector<float> xi(x.begin() + m * K, x.begin() + (m + 1) * K);
        const std::vector<float> yi = run(W, xi, 1, 2, Epilogue::None);
        check(same_bits(yi.data(), y2.data() + m * N, size_t(N)), name + ": row " + std::to_string(m) + " alone differs");
    }
    // The fused epilogue: GELU of the product (bias included), then the residual, each rounded as alone.
    const std::vector<float> res = random_x(M, N, 99);
    const std::vector<float> yg = run(W, x, M, 2, Epilogue::GeluErf, &res);
    std::vector<float> g(y2.size());
    jepa::gemm::gelu_erf(y2.data(), g.data(), int64_t(g.size()));
    for (size_t i = 0; i < g.size(); ++i) g[i] += res[i];
    check(same_bits(yg.data(), g.data(), g.size()), name + ": fused gelu + residual != the unfused ops");
}

// The i8c products this CPU can run (its features, masked by JEPA_CPU_FEATURES), whatever JEPA_GEMM
// says (the portable one always).
std::vector<std::pair<const char *, void (*)(const kd::Problem &, int, int)>> isa_i8() {
    std::vector<std::pair<const char *, void (*)(const kd::Problem &, int, int)>> v;
#ifndef JEPA_NO_X86_KERNELS
    const uint32_t f = jepa::cpu::features();
    if (f & jepa::cpu::kAmxInt8) v.push_back({"amx-int8", kd::avx512::amx::run_gemm_i8});
    if (f & jepa::cpu::kAvx512Vnni) v.push_back({"avx512-vnni", kd::avx512::run_gemm_i8});
    if (f & jepa::cpu::kAvxVnni) v.push_back({"avx-vnni", kd::avx2::vnni::run_gemm_i8});
    if (jepa::cpu::can_run(jepa::cpu::F32::Avx2)) v.push_back({"avx2", kd::avx2::run_gemm_i8});
#endif
#if defined(__aarch64__)
    if (jepa::cpu::features() & jepa::cpu::kAsimdDp) v.push_back({"neon-dotprod", kd::neon::run_gemm_i8});
#endif
    v.push_back({"portable", kd::portable::run_gemm_i8});
    return v;
}

void check_every_isa(int64_t M, int64_t K, int64_t N) {
    const std::string name = "isa i8c M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    Weight W(GGML_TYPE_I8, K, N, true, uint32_t(M + 3 * K + 5 * N));
    if (!jepa::gemm::can_pack(W.w)) jepa::gemm::pack_in_place(W.w);  // ggml's path: packed here for the kernels
    std::vector<float> x = random_x(M, K, uint32_t(K * 3 + 1));
    x[size_t(K / 2)] = NAN;  // row 0: that row comes out NaN on every ISA
    if (M > 40) x[size_t(37 * K + 3)] = -INFINITY;  // row 37 too, inside a tile's rows
    const std::vector<float> res = random_x(M, N, 17);
    kd::Problem p;
    p.x = x.data();
    p.ldx = K;
    p.w = W.w->data;
    p.layout = kd::Layout::I8;
    p.wscale = static_cast<const float *>(W.s->data);
    p.bias = static_cast<const float *>(W.b->data);
    p.residual = res.data();
    p.ldr = N;
    p.M = M, p.N = N, p.K = K;
    p.epilogue = Epilogue::GeluErf;
    p.ldy = N;
    std::vector<float> want;
    for (const auto & entry : isa_i8()) {
        const char * isa = entry.first;
        for (int nth : {1, 3}) {
            std::vector<float> y(size_t(M * N), -1.0f);
            p.y = y.data();
            each_thread(nth, [&](int ith, int n) { entry.second(p, ith, n); });
            if (want.empty()) want = y;
            const std::string where = first_difference(y, want);
            check(where.empty(), name + ": " + isa + " threads " + std::to_string(nth) + " differs" + where);
        }
    }
    auto row_nan = [&](int64_t r) {
        bool all = true;
        for (int64_t n = 0; n < N; ++n) all = all && std::isnan(want[size_t(r * N + n)]);
        return all;
    };
    check(row_nan(0), name + ": a NaN activation does not make its row NaN");
    if (M > 40) check(row_nan(37), name + ": an infinite activation does not make its row NaN");
    bool finite_rest = true;
    for (int64_t r = 1; r < M; ++r) {
        if (r == 37 && M > 40) continue;
        for (int64_t n = 0; n < N; ++n) finite_rest = finite_rest && std::isfinite(want[size_t(r * N + n)]);
    }
    check(finite_rest, name + ": a non-finite row reached another row");
}

// A weight of -128 (which the writer never writes) is read as -127 on every ISA.
void check_minus_128() {
    const int64_t K = 64, N = 16, M = 3;
    Weight a(GGML_TYPE_I8, K, N, false, 5), b(GGML_TYPE_I8, K, N, false, 5);
    for (Weight * w : {&a, &b}) {
        std::vector<uint8_t> rows = w->raw;
        rows[7] = uint8_t(w == &a ? -128 : -127);
        std::memcpy(w->w->data, rows.data(), rows.size());
        w->raw = rows;
        if (jepa::gemm::can_pack(w->w)) jepa::gemm::pack_in_place(w->w);
    }
    if (!jepa::gemm::can_pack(a.w) && !jepa::cpu::selection().own()) return;  // nothing runs i8c here
    const std::vector<float> x = random_x(M, K, 3);
    const std::vector<float> ya = run(a, x, M, 2, Epilogue::None), yb = run(b, x, M, 2, Epilogue::None);
    check(same_bits(ya.data(), yb.data(), ya.size()), "a -128 weight is not read as -127");
}

// The writer: scale amax / 127, values in [-127, 127], rows of 16 up to 65536, non-finite refused.
void check_writer() {
    const float x[16] = {1.0f, -2.0f, 0.5f, 127.0f, -127.0f, 0.0f, 3.0f, -3.0f, 1, 1, 1, 1, 1, 1, 1, 64.0f};
    uint8_t out[20];
    check(jepa_quantize("i8c", x, 1, 16, out, sizeof out) == JEPA_OK, "i8c: a row of 16 is refused");
    float d;
    std::memcpy(&d, out + 16, 4);
    check(d == 1.0f, "i8c: the scale of a row with amax 127 is not 1");
    check(int8_t(out[3]) == 127 && int8_t(out[4]) == -127 && int8_t(out[1]) == -2, "i8c: values are not x / scale");
    check(jepa_type_row_bytes("i8c", 16) == 20, "i8c: a row of 16 is not 16 bytes and a scale");
    check(jepa_type_row_bytes("i8c", 24) < 0 && jepa_error_status() == JEPA_ERR_UNSUPPORTED, "i8c: a row of 24 is taken");
    check(jepa_type_row_bytes("i8c", 65536 + 16) < 0, "i8c: a row past 65536 is taken");
    check(jepa_type_id("i8c") == int(GGML_TYPE_I8), "i8c is not stored as ggml's i8");
    float bad[16] = {};
    bad[5] = NAN;
    check(jepa_quantize("i8c", bad, 1, 16, out, sizeof out) == JEPA_ERR_INVALID_ARG, "i8c: a NaN weight is taken");
    check(std::strstr(jepa_error_text(), "NaN") != nullptr, std::string("i8c: the NaN refusal says ") + jepa_error_text());
    const float zeros[16] = {};
    check(jepa_quantize("i8c", zeros, 1, 16, out, sizeof out) == JEPA_OK, "i8c: a row of zeros is refused");
    std::memcpy(&d, out + 16, 4);
    check(d == 0.0f && out[0] == 0, "i8c: a row of zeros is not scale 0 and zeros");
}

struct Shape {
    int64_t M, K, N;
};

// --bench [M K N [reps]]: f32, q8_0 and i8c products on ViT shapes (or the one given: i8c alone, for
// perf), ms and GFLOP/s.
void bench(const std::vector<Shape> & shapes, bool i8_only, int reps) {
    for (const Shape s : shapes) {
        const std::vector<float> x = random_x(s.M, s.K, 1);
        for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_Q8_0, GGML_TYPE_I8}) {
            if (i8_only && t != GGML_TYPE_I8) continue;
            Weight W(t, s.K, s.N, true, 7);
            run(W, x, s.M, 2, Epilogue::None);
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) run(W, x, s.M, 2, Epilogue::None);
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
            std::printf("%-5s M=%5lld K=%5lld N=%5lld  %8.3f ms  %7.1f GFLOP/s\n", t == GGML_TYPE_I8 ? "i8c" : ggml_type_name(t),
                        (long long) s.M, (long long) s.K, (long long) s.N, sec * 1e3, 2.0 * double(s.M * s.K * s.N) / sec / 1e9);
        }
    }
}

}  // namespace

int main(int argc, char ** argv) {
    std::printf("kernels: %s\n", jepa::cpu::describe());
    if (argc > 1 && std::string(argv[1]) == "--bench") {
        if (argc >= 5) {
            bench({Shape{std::atoll(argv[2]), std::atoll(argv[3]), std::atoll(argv[4])}}, true, argc > 5 ? std::atoi(argv[5]) : 5);
        } else {
            bench({Shape{197, 384, 1536}, Shape{1576, 384, 1536}, Shape{1576, 1536, 384}, Shape{2048, 1024, 4096},
                   Shape{1, 1024, 4096}}, false, 5);
        }
        return 0;
    }
    std::string names;
    for (const auto & e : isa_i8()) names += std::string(names.empty() ? "" : ", ") + e.first;
    std::printf("the i8c product's bits on every ISA this CPU runs: %s\n", names.c_str());
    check_writer();
    check_every_isa(1, 64, 32);
    check_every_isa(29, 96, 40);     // a narrow last panel, a row tail, k not a whole tile step
    check_every_isa(70, 128, 72);    // tile pairs of rows and panels, a tile row left, a narrow panel
    check_every_isa(300, 256, 24);   // rows past one quantized block
    check_every_isa(600, 64, 48);    // many rows: threads split rows
    check_minus_128();
    // On every path, ggml's too (i8c has no product in ggml: the engine's runs there, portable).
    check_product(1, 64, 32, false);
    check_product(29, 96, 40, true);
    check_product(197, 384, 96, true);
    check_product(300, 1024, 17, false);  // rows past one block, one narrow panel
    check_product(3, 16, 1, true);        // the shortest row, one column
    check_product(600, 64, 48, true);     // many rows: threads split rows, not panels
    check_product(64, 4096, 32, true);    // sums past 2^24: one rounding, the same everywhere
    std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
