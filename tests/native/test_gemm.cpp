// The engine's own GEMM (csrc/src/gemm.*): products against a double-precision reference, every
// output bit independent of the row count and the thread count, the f16 / bf16 layouts, the fused
// bias + GELU epilogue, odd shapes (1 row, 1 column, panel tails, k not a multiple of a block), the
// vectorised erf against std::erf in double, and the same bits from every ISA's f32 kernels (AVX-512,
// AVX2, portable: whichever this CPU runs) on the same problems.
//
//     test_gemm             the checks (ctest)
//     test_gemm --bench     GFLOP/s of the kernels on ViT shapes (a development aid, not a test)
#include "cpu/paths.h"
#include "cpu/gemm.h"
#include "cpu/gemm_kernels.h"
#include "graph.h"
#include "kernel_fixtures.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"
#include "ggml.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

int g_failures = 0;

void check(bool ok, const std::string & what) {
    if (!ok) {
        ++g_failures;
        std::printf("FAIL %s\n", what.c_str());
    }
}

// y = act(x W^T + b) (+ res) through a real ggml graph on the CPU backend with n threads.
std::vector<float> run(const Weight & W, const std::vector<float> & x, int64_t M, int threads,
                       jepa::gemm::Epilogue ep, const std::vector<float> * res = nullptr, bool x_bf16 = false,
                       bool out_bf16 = false) {
    ggml_tensor * xt = nullptr, * rt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_2d(ctx, x_bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, W.K, M);
        ggml_set_input(xt);
        if (res) {
            rt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, W.N, M);
            ggml_set_input(rt);
        }
        return jepa::gemm::linear(ctx, xt, W.w, W.b, ep, rt, out_bf16);
    };
    auto set = [&] {
        if (x_bf16) {
            std::vector<ggml_bf16_t> h(x.size());
            ggml_fp32_to_bf16_row_ref(x.data(), h.data(), int64_t(x.size()));
            ggml_backend_tensor_set(xt, h.data(), 0, h.size() * 2);
        } else {
            ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4);
        }
        if (rt) ggml_backend_tensor_set(rt, res->data(), 0, res->size() * 4);
    };
    return run_graph(threads, build, set);
}

double gelu_ref(double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }

void check_product(ggml_type type, int64_t M, int64_t K, int64_t N, bool bias, jepa::gemm::Epilogue ep) {
    const std::string name = std::string(ggml_type_name(type)) + " M=" + std::to_string(M) + " K=" + std::to_string(K) +
                             " N=" + std::to_string(N) + (bias ? " +bias" : "") +
                             (ep == jepa::gemm::Epilogue::GeluErf ? " +gelu" : "");
    Weight W(type, K, N, bias, uint32_t(M * 131 + K * 7 + N));
    const std::vector<float> x = random_x(M, K, uint32_t(K + N));
    const std::vector<float> y2 = run(W, x, M, 2, ep);
    // Against double precision. bf16 rounds the activations too: the reference does the same.
    const bool bf16_act = type == GGML_TYPE_BF16 && jepa::cpu::selection().bf16 == jepa::cpu::Bf16::Avx512Bf16;
    double err = 0, ref_max = 0;
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double acc = 0;
            for (int64_t k = 0; k < K; ++k) {
                float xv = x[size_t(m * K + k)];
                if (bf16_act) xv = ggml_bf16_to_fp32(ggml_fp32_to_bf16(xv));
                acc += double(xv) * double(W.value[size_t(n * K + k)]);
            }
            if (W.b) acc += static_cast<const float *>(W.b->data)[n];
            if (ep == jepa::gemm::Epilogue::GeluErf) acc = gelu_ref(acc);
            err = std::max(err, std::fabs(acc - double(y2[size_t(m * N + n)])));
            ref_max = std::max(ref_max, std::fabs(acc));
        }
    }
    const double tol = 2e-6 * std::sqrt(double(K)) * std::max(1.0, ref_max);
    check(err <= tol, name + ": max error " + std::to_string(err) + " > " + std::to_string(tol));
    // Threads: 1 and 3 give the same bits as 2.
    for (int threads : {1, 3}) {
        const std::vector<float> y = run(W, x, M, threads, ep);
        check(same_bits(y.data(), y2.data(), y.size()), name + ": threads " + std::to_string(threads) + " != 2");
    }
    // Rows: each row alone, and the first half, give the rows' bits from the whole product.
    for (int64_t m : {int64_t(0), M / 2, M - 1}) {
        const std::vector<float> xi(x.begin() + m * K, x.begin() + (m + 1) * K);
        const std::vector<float> yi = run(W, xi, 1, 2, ep);
        check(same_bits(yi.data(), y2.data() + m * N, size_t(N)), name + ": row " + std::to_string(m) + " alone differs");
    }
    // bf16 activations in and out (the bf16 kernel only): the same bits as converting the f32 ones.
    if (type == GGML_TYPE_BF16 && jepa::cpu::selection().bf16 == jepa::cpu::Bf16::Avx512Bf16) {
        const std::vector<float> yb = run(W, x, M, 2, ep, nullptr, true, false);
        check(same_bits(yb.data(), y2.data(), y2.size()), name + ": bf16 activations in differ from f32 in");
        if (K <= 2048) {
            const std::vector<float> yo = run(W, x, M, 2, ep, nullptr, false, true);
            bool ok = true;
            for (size_t i = 0; i < yo.size(); ++i) ok = ok && yo[i] == ggml_bf16_to_fp32(ggml_fp32_to_bf16(y2[i]));
            check(ok, name + ": bf16 out is not the f32 result rounded to nearest even");
        }
    }
    // The fused residual: exactly the product's bits plus the residual, rounded once.
    const std::vector<float> res = random_x(M, N, 99);
    const std::vector<float> yr = run(W, x, M, 2, ep, &res);
    std::vector<float> want(y2.size());
    for (size_t i = 0; i < want.size(); ++i) want[i] = y2[i] + res[i];
    check(same_bits(yr.data(), want.data(), want.size()), name + ": fused residual != product + residual");
    if (M > 2) {
        const int64_t h = M / 2 + 1;
        const std::vector<float> xh(x.begin(), x.begin() + h * K);
        const std::vector<float> yh = run(W, xh, h, 2, ep);
        check(same_bits(yh.data(), y2.data(), size_t(h * N)), name + ": first " + std::to_string(h) + " rows differ");
    }
}

// Attention through a graph: x [3 D, N, B] holds q; k; v per token as build_qkv lays a fused
// projection out, viewed as [hd, H, N, B] each; mask NULL or [N, N] (f32 or f16).
std::vector<float> run_attn(const std::vector<float> & x, int64_t hd, int64_t H, int64_t N, int64_t B,
                            const std::vector<float> * mask, bool mask_f16, int threads, bool half,
                            bool out_bf16 = false) {
    const int64_t D = hd * H;
    ggml_tensor * xt = nullptr, * mt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 3 * D, N, B);
        ggml_set_input(xt);
        if (mask) {
            mt = ggml_new_tensor_2d(ctx, mask_f16 ? GGML_TYPE_F16 : GGML_TYPE_F32, N, N);
            ggml_set_input(mt);
        }
        auto view = [&](int i) {
            return ggml_view_4d(ctx, xt, hd, H, N, B, hd * 4, xt->nb[1], xt->nb[2], size_t(i) * D * 4);
        };
        ggml_tensor * q = view(0), * k = view(1), * v = view(2);
        check(jepa::gemm::attention_supported(q, k, v, mt), "attention_supported on a fused qkv view");
        return jepa::gemm::attention(ctx, q, k, v, mt, 1.0f / std::sqrt(float(hd)), half, out_bf16);
    };
    auto set = [&] {
        ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4);
        if (mask && mask_f16) {
            std::vector<ggml_fp16_t> h(mask->size());
            for (size_t i = 0; i < h.size(); ++i) h[i] = ggml_fp32_to_fp16((*mask)[i]);
            ggml_backend_tensor_set(mt, h.data(), 0, h.size() * 2);
        } else if (mask) {
            ggml_backend_tensor_set(mt, mask->data(), 0, mask->size() * 4);
        }
    };
    return run_graph(threads, build, set);
}

void check_attention(int64_t hd, int64_t H, int64_t N, int64_t B, bool masked, bool mask_f16, bool half = false) {
    const std::string name = std::string(half ? "bf16 " : "") + "attention hd=" + std::to_string(hd) + " H=" +
                             std::to_string(H) + " N=" + std::to_string(N) + " B=" + std::to_string(B) +
                             (masked ? mask_f16 ? " f16 mask" : " mask" : "");
    const int64_t D = hd * H;
    const std::vector<float> x = random_x(B * N, 3 * D, uint32_t(hd * 7 + N));
    std::vector<float> mask;
    if (masked) {
        // Frame-causal in frames of 5 tokens (the AC predictor's kind of mask).
        mask.assign(size_t(N * N), 0.0f);
        for (int64_t q = 0; q < N; ++q) {
            for (int64_t k = 0; k < N; ++k) {
                if (k / 5 > q / 5) mask[size_t(q * N + k)] = -INFINITY;
            }
        }
    }
    const std::vector<float> * mp = masked ? &mask : nullptr;
    const std::vector<float> y = run_attn(x, hd, H, N, B, mp, mask_f16, 2, half);
    double err = 0, ref_max = 0;
    const double scale = 1.0 / std::sqrt(double(float(hd)));
    for (int64_t b = 0; b < B; ++b) {
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t q = 0; q < N; ++q) {
                std::vector<double> s(static_cast<size_t>(N), 0.0);
                double mx = -INFINITY;
                for (int64_t k = 0; k < N; ++k) {
                    double acc = 0;
                    for (int64_t d = 0; d < hd; ++d) {
                        acc += double(x[size_t((b * N + q) * 3 * D + h * hd + d)]) *
                               double(x[size_t((b * N + k) * 3 * D + D + h * hd + d)]);
                    }
                    s[size_t(k)] = acc * scale + (masked ? double(mask[size_t(q * N + k)]) : 0.0);
                    mx = std::max(mx, s[size_t(k)]);
                }
                double sum = 0;
                for (double & e : s) sum += (e = std::exp(e - mx));
                for (int64_t d = 0; d < hd; ++d) {
                    double o = 0;
                    for (int64_t k = 0; k < N; ++k) o += s[size_t(k)] / sum * double(x[size_t((b * N + k) * 3 * D + 2 * D + h * hd + d)]);
                    err = std::max(err, std::fabs(o - double(y[size_t((b * N + q) * D + h * hd + d)])));
                    ref_max = std::max(ref_max, std::fabs(o));
                }
            }
        }
    }
    // bf16 products: q, k, p and v each rounded to 8 significant bits.
    const double tol = (half && jepa::cpu::selection().bf16 == jepa::cpu::Bf16::Avx512Bf16 ? 3e-2 : 1e-5) * std::max(1.0, ref_max);
    check(err <= tol, name + ": max error " + std::to_string(err));
    for (int threads : {1, 3}) {
        const std::vector<float> yt = run_attn(x, hd, H, N, B, mp, mask_f16, threads, half);
        check(same_bits(yt.data(), y.data(), y.size()), name + ": threads " + std::to_string(threads) + " != 2");
    }
    if (half && jepa::cpu::selection().bf16 == jepa::cpu::Bf16::Avx512Bf16) {
        // bf16 out (for a bf16 product): the f32 result rounded to nearest even.
        const std::vector<float> yb = run_attn(x, hd, H, N, B, mp, mask_f16, 2, half, true);
        bool ok = true;
        for (size_t i = 0; i < y.size(); ++i) ok = ok && yb[i] == ggml_bf16_to_fp32(ggml_fp32_to_bf16(y[i]));
        check(ok, name + ": bf16 out is not the f32 result rounded");
    }
    if (B > 1) {
        // The last item alone gives its bits from the batch.
        const std::vector<float> xl(x.end() - N * 3 * D, x.end());
        const std::vector<float> yl = run_attn(xl, hd, H, N, 1, mp, mask_f16, 2, half);
        check(same_bits(yl.data(), y.data() + (B - 1) * N * D, size_t(N * D)), name + ": last item alone differs");
    }
}

std::vector<float> check_layer_norm(int64_t n, int64_t rows, bool affine, bool out_bf16 = false) {
    const std::string name = "layer_norm n=" + std::to_string(n) + (affine ? " affine" : "");
    std::vector<float> x = random_x(rows, n, 5), w = random_x(1, n, 6), b = random_x(1, n, 7);
    for (float & v : x) v = 3.0f + 2.0f * v;  // a mean far from 0, as residual streams have
    ggml_tensor * xt = nullptr, * wt = nullptr, * bt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n, rows);
        wt = affine ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n) : nullptr;
        bt = affine ? ggml_new_tensor_1d(ctx, GGML_TYPE_F32, n) : nullptr;
        for (ggml_tensor * t : {xt, wt, bt}) {
            if (t) ggml_set_input(t);
        }
        return jepa::gemm::layer_norm(ctx, xt, wt, bt, 1e-6f, out_bf16);
    };
    auto set = [&] {
        ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4);
        if (affine) {
            ggml_backend_tensor_set(wt, w.data(), 0, w.size() * 4);
            ggml_backend_tensor_set(bt, b.data(), 0, b.size() * 4);
        }
    };
    ggml_type out_type = GGML_TYPE_F32;
    const std::vector<float> out = run_graph(2, build, set, &out_type);
    double err = 0;
    for (int64_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        for (int64_t j = 0; j < n; ++j) mean += x[size_t(r * n + j)];
        mean /= double(n);
        for (int64_t j = 0; j < n; ++j) var += (x[size_t(r * n + j)] - mean) * (x[size_t(r * n + j)] - mean);
        const double inv = 1.0 / std::sqrt(var / double(n) + 1e-6);
        for (int64_t j = 0; j < n; ++j) {
            double v = (x[size_t(r * n + j)] - mean) * inv;
            if (affine) v = v * w[size_t(j)] + b[size_t(j)];
            err = std::max(err, std::fabs(v - double(out[size_t(r * n + j)])));
        }
    }
    check(err < (out_type == GGML_TYPE_BF16 ? 2e-2 : 2e-5), name + ": max error " + std::to_string(err));
    return out;
}

void check_erf() {
    // 2^20 floats evenly spaced in [-6, 6], every float in [0.9, 0.95] (a region seam) and the
    // special values, against erf in double.
    std::vector<float> xs;
    for (int i = 0; i <= (1 << 20); ++i) xs.push_back(float(-6.0 + 12.0 * i / double(1 << 20)));
    for (float v = 0.9f; v <= 0.95f; v = std::nextafter(v, 1.0f)) xs.push_back(v);
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 0.921875f, 2.0f, 4.0f, 100.0f, -100.0f, INFINITY, -INFINITY}) xs.push_back(v);
    std::vector<float> ys(xs.size());
    jepa::gemm::gelu_erf(xs.data(), ys.data(), int64_t(xs.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        const double ref = gelu_ref(double(xs[i]));
        if (std::isinf(xs[i])) {
            check(xs[i] > 0 ? ys[i] == INFINITY : (ys[i] == 0.0f || std::isnan(ys[i])), "gelu(inf)");
            continue;
        }
        // Error in units of the result's float32 spacing, floored at |x| 2^-24: where erf is near -1,
        // 1 + erf cancels in any float32 evaluation (PyTorch's and ggml's alike).
        const double ulp = std::max(std::fabs(ref) * std::ldexp(1.0, -23), std::fabs(double(xs[i])) * std::ldexp(1.0, -24));
        const double e = std::fabs(double(ys[i]) - ref) / std::max(ulp, 1e-45);
        if (e > worst) {
            worst = e;
            worst_x = xs[i];
        }
    }
    check(worst <= 8.0, "gelu_erf worst error " + std::to_string(worst) + " ulp");
    std::printf("gelu_erf: worst %.2f ulp (at %.9g) over %zu values\n", worst, double(worst_x), xs.size());
    float nan_in = NAN, nan_out = 0;
    jepa::gemm::gelu_erf(&nan_in, &nan_out, 1);
    check(std::isnan(nan_out), "gelu(NaN) is NaN");
}

void bench() {
    struct Shape {
        int64_t M, K, N;
    };
    const Shape shapes[] = {{197, 384, 1152}, {197, 384, 1536}, {197, 1536, 384}, {1576, 384, 1536},
                            {197, 1024, 4096}, {1576, 1024, 4096}, {1576, 4096, 1024}, {900, 192, 3072},
                            {900, 2048, 192}, {900, 192, 1152}, {1576, 384, 1152}, {1576, 1536, 384}};
    const char * only = std::getenv("BENCH_TYPE");
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
        if (only && std::string(only) != ggml_type_name(t)) continue;
        for (const Shape & s : shapes) {
            Weight W(t, s.K, s.N, true, 1);
            const std::vector<float> x = random_x(s.M, s.K, 2);
            for (int threads : {1, 2}) {
                run(W, x, s.M, threads, jepa::gemm::Epilogue::None);
                double best = 1e30;
                for (int r = 0; r < 5; ++r) {
                    const auto t0 = std::chrono::steady_clock::now();
                    run(W, x, s.M, threads, jepa::gemm::Epilogue::None);
                    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
                }
                std::printf("%-5s M=%5lld K=%5lld N=%5lld threads %d: %7.1f GFLOP/s\n", ggml_type_name(t), (long long) s.M,
                            (long long) s.K, (long long) s.N, threads, 2.0 * s.M * s.K * s.N / best / 1e9);
            }
        }
    }
}

// ---- the same bits on every ISA --------------------------------------------------------------

void check_isa_product(ggml_type type, int64_t M, int64_t K, int64_t N, jepa::gemm::Epilogue ep, bool residual) {
    const std::string name = std::string("isa ") + ggml_type_name(type) + " M=" + std::to_string(M) + " K=" +
                             std::to_string(K) + " N=" + std::to_string(N);
    Weight W(type, K, N, true, uint32_t(M + 3 * K + 5 * N));
    if (!jepa::gemm::can_pack(W.w) || jepa::gemm::takes_bf16(W.w)) return;  // ggml's path / the bf16 kernel
    const std::vector<float> x = random_x(M, K, uint32_t(K * 3 + 1)), res = random_x(M, N, 17);
    kd::Problem p;
    p.x = x.data();
    p.ldx = K;
    p.w = W.w->data;
    p.layout = type == GGML_TYPE_F32 ? kd::Layout::F32 : type == GGML_TYPE_F16 ? kd::Layout::F16 : kd::Layout::Bf16Wide;
    p.bias = static_cast<const float *>(W.b->data);
    p.residual = residual ? res.data() : nullptr;
    p.ldr = N;
    p.M = M, p.N = N, p.K = K;
    p.epilogue = ep;
    p.ldy = N;
    std::vector<float> want;
    for (const auto & entry : isa_kernels()) {
        const char * isa = entry.first;  // (lambdas cannot capture structured bindings in C++17)
        const kd::KernelSet * k = entry.second;
        for (int nth : {1, 3}) {
            std::vector<float> y(size_t(M * N), -1.0f);
            p.y = y.data();
            each_thread(nth, [&](int ith, int n) { k->gemm(p, ith, n); });
            if (want.empty()) want = y;
            check(same_bits(y.data(), want.data(), y.size()), name + ": " + isa + " threads " + std::to_string(nth) + " differs");
        }
    }
}

void check_isa_attention(int64_t hd, int64_t H, int64_t N, int64_t B, bool masked, bool mask_f16) {
    const std::string name = "isa attention hd=" + std::to_string(hd) + " N=" + std::to_string(N) +
                             (masked ? mask_f16 ? " f16 mask" : " mask" : "");
    const int64_t D = hd * H;
    const std::vector<float> x = random_x(B * N, 3 * D, uint32_t(hd + N * 11));
    std::vector<float> mask(size_t(N * N), 0.0f);
    std::vector<ggml_fp16_t> mask16(mask.size());
    for (int64_t q = 0; q < N; ++q) {
        for (int64_t k = 0; k < N; ++k) {
            if (k / 5 > q / 5) mask[size_t(q * N + k)] = -INFINITY;
            mask16[size_t(q * N + k)] = ggml_fp32_to_fp16(mask[size_t(q * N + k)]);
        }
    }
    kd::Attention a;
    a.q = x.data(), a.k = x.data() + D, a.v = x.data() + 2 * D;
    a.q_head = a.k_head = a.v_head = hd;
    a.q_tok = a.k_tok = a.v_tok = 3 * D;
    a.q_item = a.k_item = a.v_item = 3 * D * N;
    a.o_tok = D, a.o_item = D * N;
    a.hd = hd, a.H = H, a.Nq = N, a.Nk = N, a.B = B;
    a.scale = 1.0f / std::sqrt(float(hd));
    if (masked) {
        a.mask = mask_f16 ? static_cast<const void *>(mask16.data()) : mask.data();
        a.mask_f16 = mask_f16;
        a.mask_ld = N;
    }
    std::vector<float> want;
    for (const auto & entry : isa_kernels()) {
        const char * isa = entry.first;
        const kd::KernelSet * k = entry.second;
        std::vector<float> y(size_t(B * N * D), -1.0f);
        a.out = y.data();
        each_thread(2, [&](int ith, int n) { k->attention(a, ith, n); });
        if (want.empty()) want = y;
        check(same_bits(y.data(), want.data(), y.size()), name + ": " + isa + " differs");
    }
}

void check_isa_rows() {
    // LayerNorm (affine and not, odd lengths) and GELU over a wide range with the special values.
    for (int64_t n : {int64_t(37), int64_t(384), int64_t(1000)}) {
        std::vector<float> x = random_x(9, n, uint32_t(n)), w = random_x(1, n, 2), b = random_x(1, n, 3);
        for (float & v : x) v = 3.0f + 2.0f * v;
        for (bool affine : {false, true}) {
            std::vector<float> want;
            for (const auto & entry : isa_kernels()) {
                const char * isa = entry.first;
                const kd::KernelSet * k = entry.second;
                std::vector<float> y(x.size(), -1.0f);
                k->layer_norm(x.data(), n, y.data(), nullptr, n, n, 0, 9, affine ? w.data() : nullptr,
                              affine ? b.data() : nullptr, 1e-6f);
                if (want.empty()) want = y;
                check(same_bits(y.data(), want.data(), y.size()), "isa layer_norm n=" + std::to_string(n) + ": " + isa + " differs");
            }
        }
    }
    std::vector<float> xs;
    for (int i = 0; i <= (1 << 18); ++i) xs.push_back(float(-12.0 + 24.0 * i / double(1 << 18)));
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-40f, 0.5f, 1.0f, 1.5f, 4.0f, 5.656854f, 88.0f, -88.0f, 1e20f, -1e20f,
                    3e9f, INFINITY, -INFINITY}) {
        xs.push_back(v);
    }
    std::vector<float> want;
    for (const auto & entry : isa_kernels()) {
        const char * isa = entry.first;
        const kd::KernelSet * k = entry.second;
        std::vector<float> y(xs.size());
        k->gelu(xs.data(), y.data(), int64_t(y.size()) - 3);  // a tail shorter than a vector
        y.resize(y.size() - 3);
        if (want.empty()) want = y;
        check(same_bits(y.data(), want.data(), y.size()), std::string("isa gelu: ") + isa + " differs");
    }
    // SiLU: the same bits everywhere, and within 4 ulp of x / (1 + e^-x) in double (an absolute 1e-36
    // floor below x = -88, where the kernel answers -0).
    std::vector<float> want_silu;
    for (const auto & entry : isa_kernels()) {
        const char * isa = entry.first;
        const kd::KernelSet * k = entry.second;
        std::vector<float> y(xs.size());
        k->silu(xs.data(), y.data(), int64_t(y.size()));
        if (want_silu.empty()) want_silu = y;
        check(same_bits(y.data(), want_silu.data(), y.size()), std::string("isa silu: ") + isa + " differs");
    }
    double worst = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        if (std::isinf(xs[i])) continue;
        const double ref = double(xs[i]) / (1.0 + std::exp(-double(xs[i])));
        const double ulp = std::max(std::fabs(ref) * std::ldexp(1.0, -23), xs[i] < -88.0f ? 1e-36 : 1e-44);
        worst = std::max(worst, std::fabs(double(want_silu[i]) - ref) / ulp);
    }
    check(worst <= 4.0, "silu worst error " + std::to_string(worst) + " ulp");
    std::printf("silu: worst %.2f ulp\n", worst);
}

void check_same_bits_every_isa() {
    std::string names;
    for (const auto & [isa, k] : isa_kernels()) names += std::string(names.empty() ? "" : ", ") + isa;
    std::printf("same bits on every ISA this CPU runs: %s\n", names.c_str());
    using jepa::gemm::Epilogue;
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
        check_isa_product(t, 1, 64, 32, Epilogue::None, false);
        check_isa_product(t, 29, 96, 40, Epilogue::GeluErf, true);
        check_isa_product(t, 33, 600, 70, Epilogue::None, true);   // k past one block
        check_isa_product(t, 97, 130, 17, Epilogue::GeluErf, false);
        check_isa_product(t, 600, 64, 48, Epilogue::None, false);  // rows split between threads
    }
    check_isa_attention(64, 3, 197, 2, false, false);
    check_isa_attention(80, 2, 61, 2, true, false);
    check_isa_attention(64, 2, 40, 1, true, true);
    check_isa_attention(64, 4, 3, 3, true, false);   // the direct path (a few keys)
    check_isa_attention(72, 2, 16, 2, false, false);
    check_isa_rows();
}

}  // namespace

int main(int argc, char ** argv) {
    if (argc > 1 && std::string(argv[1]) == "--bench") {
        std::printf("kernels: %s\n", jepa::cpu::describe());
        bench();
        return 0;
    }
    const jepa::cpu::Selection & isa = jepa::cpu::selection();
    std::printf("kernels: %s\n", jepa::cpu::describe());
    check_same_bits_every_isa();
    if (isa.f32 == jepa::cpu::F32::Ggml) {
        std::printf("JEPA_GEMM=ggml: ggml's products; the erf of the portable kernels is checked\n");
        check_erf();
        std::printf("%d failures\n", g_failures);
        return g_failures ? 1 : 0;
    }
    using jepa::gemm::Epilogue;
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
        check_product(t, 1, 64, 32, false, Epilogue::None);
        check_product(t, 29, 96, 40, true, Epilogue::None);          // panel tail, row tail
        check_product(t, 197, 384, 96, true, Epilogue::GeluErf);
        check_product(t, 33, 600, 70, true, Epilogue::None);         // k past one block, not a multiple of 32
        check_product(t, 400, 130, 17, false, Epilogue::GeluErf);    // rows past one block, one narrow panel
        check_product(t, 3, 2, 1, true, Epilogue::None);
        check_product(t, 600, 64, 48, true, Epilogue::None);     // many rows: threads split rows, not panels
        check_product(t, 40, 2100, 32, false, Epilogue::None);    // k past one bf16 block (2048)
    }
    check_attention(64, 3, 197, 3, false, false);
    check_attention(80, 2, 61, 2, false, false);   // head_dim tail (80 = 2.5 panels), keys tail
    check_attention(32, 2, 300, 1, false, false);  // keys past one k block of the output product
    check_attention(64, 2, 40, 2, true, false);
    check_attention(64, 2, 40, 2, true, true);
    check_attention(16, 1, 1, 2, false, false);    // one token
    check_attention(64, 4, 3, 5, true, false);     // a few keys (LeWM's causal 3-frame window): direct path
    check_attention(72, 2, 16, 3, false, false);   // the direct path's largest key count, head_dim tail
    check_attention(64, 2, 17, 2, false, false);   // one key past it: the packed path
    for (bool masked : {false, true}) {
        check_attention(64, 3, 197, 3, masked, true, true);
        check_attention(80, 2, 61, 2, masked, false, true);
    }
    check_attention(16, 1, 1, 2, false, false, true);
    check_layer_norm(384, 197, true);
    check_layer_norm(37, 5, false);  // a row length that is not a multiple of 16
    if (isa.bf16 == jepa::cpu::Bf16::Avx512Bf16) {
        // bf16 out (for a bf16 product): the f32 result rounded to nearest even.
        const std::vector<float> f = check_layer_norm(100, 7, true), h = check_layer_norm(100, 7, true, true);
        bool ok = true;
        for (size_t i = 0; i < f.size(); ++i) ok = ok && h[i] == ggml_bf16_to_fp32(ggml_fp32_to_bf16(f[i]));
        check(ok, "layer_norm bf16 out is not the f32 result rounded");
    }
    check_erf();
    std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
