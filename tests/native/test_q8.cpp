// The engine's int8 product for q8_0 weights (csrc/src/kernels_q8.inc): its bits against a scalar
// definition written here (activations quantized per row and block of 32, exact int32 block sums,
// blocks met in f32 in k order), its accuracy against the f32 product in double precision, the same
// bits for any row count, thread count and ISA (AVX-512 VNNI, AVX-VNNI, AVX2, portable: whichever this CPU
// runs), the fused epilogue, and what a NaN or a -128 weight does.
//
//     test_q8             the checks (ctest, once per JEPA_GEMM cap)
//     test_q8 --bench     GFLOP/s of the q8_0 and f32 products on ViT shapes (a development aid)
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
        return jepa::gemm::linear(ctx, xt, W.w, W.b, ep, rt);
    };
    auto set = [&] {
        ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4);
        if (rt) ggml_backend_tensor_set(rt, res->data(), 0, res->size() * 4);
    };
    return run_graph(threads, build, set);
}

// The definition, in scalar C++ from ggml's unpacked blocks: what every ISA must give, bit for bit
// (no epilogue but the bias).
std::vector<float> reference(const Weight & W, const std::vector<float> & x, int64_t M) {
    const int64_t K = W.K, N = W.N, nb = K / 32;
    std::vector<float> y(size_t(M * N));
    std::vector<int8_t> qa(static_cast<size_t>(K));
    std::vector<float> da(static_cast<size_t>(nb));
    for (int64_t m = 0; m < M; ++m) {
        const float * xr = x.data() + m * K;
        for (int64_t b = 0; b < nb; ++b) {
            float amax = 0;
            bool finite = true;
            for (int64_t t = 0; t < 32; ++t) {
                finite = finite && std::isfinite(xr[b * 32 + t]);
                amax = std::max(amax, std::fabs(xr[b * 32 + t]));
            }
            const float d = finite ? amax / 127.0f : NAN;
            const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
            for (int64_t t = 0; t < 32; ++t) qa[size_t(b * 32 + t)] = finite ? int8_t(std::nearbyint(xr[b * 32 + t] * id)) : 0;
            da[size_t(b)] = d;
        }
        for (int64_t n = 0; n < N; ++n) {
            float acc = 0;
            for (int64_t b = 0; b < nb; ++b) {
                const uint8_t * blk = W.raw.data() + (n * nb + b) * 34;
                uint16_t hs;
                std::memcpy(&hs, blk, 2);
                int32_t dot = 0;
                for (int64_t t = 0; t < 32; ++t) {
                    dot += std::max(-127, int(int8_t(blk[2 + t]))) * int32_t(qa[size_t(b * 32 + t)]);
                }
                acc = std::fma(float(dot), ggml_fp16_to_fp32(hs) * da[size_t(b)], acc);
            }
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
    const std::string name = "q8_0 M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N) +
                             (bias ? " +bias" : "");
    Weight W(GGML_TYPE_Q8_0, K, N, bias, uint32_t(M * 131 + K * 7 + N));
    check(jepa::gemm::can_pack(W.w), name + ": the engine does not take the q8_0 weight");
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

// The q8_0 products this CPU can run (its features, masked by JEPA_CPU_FEATURES), whatever JEPA_GEMM
// says (the portable one always).
std::vector<std::pair<const char *, void (*)(const kd::Problem &, int, int)>> isa_q8() {
    std::vector<std::pair<const char *, void (*)(const kd::Problem &, int, int)>> v;
#ifndef JEPA_NO_X86_KERNELS
    const uint32_t f = jepa::cpu::features();
    if (f & jepa::cpu::kAmxInt8) v.push_back({"amx-int8", kd::avx512::amx::run_gemm_q8});
    if (f & jepa::cpu::kAvx512Vnni) v.push_back({"avx512-vnni", kd::avx512::run_gemm_q8});
    if (f & jepa::cpu::kAvxVnni) v.push_back({"avx-vnni", kd::avx2::vnni::run_gemm_q8});
    if (jepa::cpu::can_run(jepa::cpu::F32::Avx2)) v.push_back({"avx2", kd::avx2::run_gemm_q8});
#endif
#if defined(__aarch64__)
    if (jepa::cpu::features() & jepa::cpu::kAsimdDp) v.push_back({"neon-dotprod", kd::neon::run_gemm_q8});
#endif
    v.push_back({"portable", kd::portable::run_gemm_q8});
    return v;
}

void check_every_isa(int64_t M, int64_t K, int64_t N) {
    const std::string name = "isa q8_0 M=" + std::to_string(M) + " K=" + std::to_string(K) + " N=" + std::to_string(N);
    Weight W(GGML_TYPE_Q8_0, K, N, true, uint32_t(M + 3 * K + 5 * N));
    if (!jepa::gemm::can_pack(W.w)) jepa::gemm::pack_in_place(W.w);  // ggml's path: packed here for the kernels
    std::vector<float> x = random_x(M, K, uint32_t(K * 3 + 1));
    x[size_t(K / 2)] = NAN;  // row 0's block at K / 2: that row comes out NaN on every ISA
    const std::vector<float> res = random_x(M, N, 17);
    kd::Problem p;
    p.x = x.data();
    p.ldx = K;
    p.w = W.w->data;
    p.layout = kd::Layout::Q8;
    p.bias = static_cast<const float *>(W.b->data);
    p.residual = res.data();
    p.ldr = N;
    p.M = M, p.N = N, p.K = K;
    p.epilogue = Epilogue::GeluErf;
    p.ldy = N;
    std::vector<float> want;
    for (const auto & entry : isa_q8()) {
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
    bool nan_row = true, finite_rest = true;
    for (int64_t n = 0; n < N; ++n) nan_row = nan_row && std::isnan(want[size_t(n)]);
    for (size_t i = size_t(N); i < want.size(); ++i) finite_rest = finite_rest && std::isfinite(want[i]);
    check(nan_row, name + ": a NaN activation does not make its row NaN");
    check(finite_rest, name + ": a NaN in row 0 reached another row");
}

// A weight of -128 (which ggml's quantizer never writes) is read as -127 on every ISA.
void check_minus_128() {
    const int64_t K = 64, N = 16, M = 3;
    Weight a(GGML_TYPE_Q8_0, K, N, false, 5), b(GGML_TYPE_Q8_0, K, N, false, 5);
    for (Weight * w : {&a, &b}) {
        std::vector<uint8_t> blocks = w->raw;
        blocks[2 + 7] = uint8_t(w == &a ? -128 : -127);
        std::memcpy(w->w->data, blocks.data(), blocks.size());
        w->raw = blocks;
        if (jepa::gemm::can_pack(w->w)) jepa::gemm::pack_in_place(w->w);
    }
    if (!jepa::gemm::can_pack(a.w)) return;  // ggml's own product reads the blocks as they are
    const std::vector<float> x = random_x(M, K, 3);
    const std::vector<float> ya = run(a, x, M, 2, Epilogue::None), yb = run(b, x, M, 2, Epilogue::None);
    check(same_bits(ya.data(), yb.data(), ya.size()), "a -128 weight is not read as -127");
}

// --bench: f32 and q8_0 products on ViT shapes, ms and GFLOP/s; --bench q8: q8_0 alone (for perf stat).
void bench(bool q8_only) {
    struct Shape {
        int64_t M, K, N;
    };
    for (const Shape s : {Shape{197, 384, 1536}, Shape{197, 1536, 384}, Shape{197, 1024, 4096}, Shape{2048, 1024, 4096},
                          Shape{1, 1024, 4096}}) {
        const std::vector<float> x = random_x(s.M, s.K, 1);
        for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_Q8_0}) {
            if (q8_only && t != GGML_TYPE_Q8_0) continue;
            Weight W(t, s.K, s.N, true, 7);
            run(W, x, s.M, 2, Epilogue::None);
            const int reps = 5;
            const auto t0 = std::chrono::steady_clock::now();
            for (int r = 0; r < reps; ++r) run(W, x, s.M, 2, Epilogue::None);
            const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
            std::printf("%-5s M=%5lld K=%5lld N=%5lld  %8.3f ms  %7.1f GFLOP/s\n", ggml_type_name(t), (long long)s.M,
                        (long long)s.K, (long long)s.N, sec * 1e3, 2.0 * double(s.M * s.K * s.N) / sec / 1e9);
        }
    }
}

}  // namespace

int main(int argc, char ** argv) {
    std::printf("kernels: %s\n", jepa::cpu::describe());
    if (argc > 1 && std::string(argv[1]) == "--bench") {
        bench(argc > 2 && std::string(argv[2]) == "q8");
        return 0;
    }
    std::string names;
    for (const auto & e : isa_q8()) names += std::string(names.empty() ? "" : ", ") + e.first;
    std::printf("the q8_0 product's bits on every ISA this CPU runs: %s\n", names.c_str());
    check_every_isa(1, 64, 32);
    check_every_isa(29, 96, 40);    // a narrow last panel, a row tail
    check_every_isa(300, 256, 24);  // rows past one quantized block
    check_every_isa(600, 64, 48);   // many rows: threads split rows
    check_minus_128();
    if (!jepa::cpu::selection().own()) {
        std::printf("JEPA_GEMM=ggml: ggml's q8_0 products; the engine's are checked per ISA above\n");
    } else {
        check_product(1, 64, 32, false);
        check_product(29, 96, 40, true);
        check_product(197, 384, 96, true);
        check_product(300, 1024, 17, false);  // rows past one block, one narrow panel
        check_product(3, 32, 1, true);        // one block, one column
        check_product(600, 64, 48, true);     // many rows: threads split rows, not panels
    }
    std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
