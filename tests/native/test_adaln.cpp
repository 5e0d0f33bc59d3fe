// The engine's fused adaLN-zero ops (LeWM's blocks, gemm.h): the modulated norm LN(LN(x) (1 + scale) +
// shift) w + b in one pass, and a product's epilogue times a gate plus a residual. Each against double
// precision, against the unfused graph it replaces (the same bits: the same operations in the same
// order), the same bits for every thread count, for an item alone as in its batch, and from every
// ISA's kernels this CPU runs. The scale, shift and gate are views into a wider modulation tensor, read
// in place, as the LeWM graph passes them.
#include "check.h"
#include "cpu/paths.h"
#include "cpu/gemm.h"
#include "graph.h"
#include "kernel_fixtures.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

namespace {

using jepa::gemm::Epilogue;

constexpr float kEpsMod = 1e-6f, kEps = 1e-5f;

// Chunk i of a [n_chunks * D, rows] modulation as a [D, rows] view (row stride n_chunks * D).
ggml_tensor * chunk(ggml_context * ctx, ggml_tensor * mod, int64_t D, int i) {
    return ggml_view_2d(ctx, mod, D, mod->ne[1], mod->nb[1], size_t(i) * size_t(D) * sizeof(float));
}

// ---- the modulated norm ----------------------------------------------------------------------

struct AdalnCase {
    int64_t D, rows;
    std::vector<float> x, mod, w, b;  // x [rows][D], mod [rows][6 D]: shift chunk 3, scale chunk 4

    AdalnCase(int64_t D_, int64_t rows_) : D(D_), rows(rows_) {
        x = random_x(rows, D, uint32_t(D + rows));
        for (float & v : x) v = 3.0f + 2.0f * v;  // a mean far from 0, as residual streams have
        mod = random_x(rows, 6 * D, 11);
        w = random_x(1, D, 12);
        b = random_x(1, D, 13);
    }

    // The first n rows through a graph: fused (the engine's op) or the unfused ops LeWM ran before.
    std::vector<float> run(int threads, bool fused, int64_t n) const {
        ggml_tensor * xt = nullptr, * mt = nullptr, * wt = nullptr, * bt = nullptr;
        auto build = [&](ggml_context * ctx) {
            xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, D, n);
            mt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 6 * D, n);
            wt = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, D);
            bt = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, D);
            for (ggml_tensor * t : {xt, mt, wt, bt}) ggml_set_input(t);
            ggml_tensor * shift = chunk(ctx, mt, D, 3), * scale = chunk(ctx, mt, D, 4);
            if (fused) return jepa::gemm::adaln_norm(ctx, xt, shift, scale, wt, bt, kEpsMod, kEps);
            ggml_tensor * h = jepa::gemm::layer_norm(ctx, xt, nullptr, nullptr, kEpsMod);
            h = ggml_mul(ctx, h, ggml_scale_bias(ctx, ggml_cont(ctx, scale), 1.0f, 1.0f));
            h = ggml_add(ctx, h, ggml_cont(ctx, shift));
            return jepa::gemm::layer_norm(ctx, h, wt, bt, kEps);
        };
        auto set = [&] {
            ggml_backend_tensor_set(xt, x.data(), 0, size_t(n * D) * 4);
            ggml_backend_tensor_set(mt, mod.data(), 0, size_t(n * 6 * D) * 4);
            ggml_backend_tensor_set(wt, w.data(), 0, w.size() * 4);
            ggml_backend_tensor_set(bt, b.data(), 0, b.size() * 4);
        };
        return run_graph(threads, build, set);
    }

    // The largest |error| of y against the double-precision modulated norm.
    double error(const std::vector<float> & y) const {
        double worst = 0;
        std::vector<double> m(static_cast<size_t>(D));
        for (int64_t r = 0; r < rows; ++r) {
            const float * xr = x.data() + r * D, * sh = mod.data() + r * 6 * D + 3 * D, * sc = sh + D;
            auto stats = [&](auto at, double eps, double & mean, double & inv) {
                mean = 0;
                for (int64_t j = 0; j < D; ++j) mean += at(j);
                mean /= double(D);
                double var = 0;
                for (int64_t j = 0; j < D; ++j) var += (at(j) - mean) * (at(j) - mean);
                inv = 1.0 / std::sqrt(var / double(D) + eps);
            };
            double mean, inv;
            stats([&](int64_t j) { return double(xr[j]); }, kEpsMod, mean, inv);
            for (int64_t j = 0; j < D; ++j) m[size_t(j)] = (xr[j] - mean) * inv * (1.0 + sc[j]) + sh[j];
            stats([&](int64_t j) { return m[size_t(j)]; }, kEps, mean, inv);
            for (int64_t j = 0; j < D; ++j) {
                const double want = (m[size_t(j)] - mean) * inv * w[size_t(j)] + b[size_t(j)];
                worst = std::max(worst, std::fabs(want - double(y[size_t(r * D + j)])));
            }
        }
        return worst;
    }
};

void check_adaln(int64_t D, int64_t rows) {
    const std::string name = "adaln D=" + std::to_string(D) + " rows=" + std::to_string(rows);
    const AdalnCase c(D, rows);
    const std::vector<float> y = c.run(2, true, rows);
    const double err = c.error(y);
    if (!(err < 1e-4)) std::fprintf(stderr, "%s: max error %g\n", name.c_str(), err);
    CHECK(err < 1e-4);
    CHECK(same_bits(y.data(), c.run(2, false, rows).data(), y.size()));  // the unfused graph's bits
    for (int threads : {1, 3}) CHECK(same_bits(y.data(), c.run(threads, true, rows).data(), y.size()));
    // The first row alone (a batch of one) gives its bits from the batch.
    CHECK(same_bits(y.data(), c.run(1, true, 1).data(), size_t(D)));
    // Every ISA's kernel, rows split in two, reading the views in place.
    for (const auto & entry : isa_kernels()) {
        std::vector<float> z(y.size(), -1.0f);
        each_thread(2, [&](int ith, int nth) {
            entry.second->adaln(c.x.data(), D, c.mod.data() + 3 * D, c.mod.data() + 4 * D, 6 * D, z.data(), D, D,
                                rows * ith / nth, rows * (ith + 1) / nth, c.w.data(), c.b.data(), kEpsMod, kEps);
        });
        if (!same_bits(z.data(), y.data(), y.size())) std::fprintf(stderr, "%s: %s differs\n", name.c_str(), entry.first);
        CHECK(same_bits(z.data(), y.data(), y.size()));
    }
}

// ---- the gated epilogue ----------------------------------------------------------------------

// y = act(x W^T + b) * gate + residual, gate chunk 1 of a [3 N, M] tensor: fused, or the unfused ops.
std::vector<float> run_gated(const Weight & W, const std::vector<float> & x, const std::vector<float> & mod,
                             const std::vector<float> & res, int64_t M, int threads, Epilogue ep, bool fused) {
    ggml_tensor * xt = nullptr, * mt = nullptr, * rt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, W.K, M);
        mt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3 * W.N, M);
        rt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, W.N, M);
        for (ggml_tensor * t : {xt, mt, rt}) ggml_set_input(t);
        ggml_tensor * gate = chunk(ctx, mt, W.N, 1);
        if (fused) return jepa::gemm::linear(ctx, xt, W.w, W.b, ep, rt, false, gate);
        return ggml_add(ctx, rt, ggml_mul(ctx, jepa::gemm::linear(ctx, xt, W.w, W.b, ep), ggml_cont(ctx, gate)));
    };
    auto set = [&] {
        ggml_backend_tensor_set(xt, x.data(), 0, size_t(M * W.K) * 4);
        ggml_backend_tensor_set(mt, mod.data(), 0, size_t(M * 3 * W.N) * 4);
        ggml_backend_tensor_set(rt, res.data(), 0, size_t(M * W.N) * 4);
    };
    return run_graph(threads, build, set);
}

void check_gated(ggml_type type, int64_t M, int64_t K, int64_t N, Epilogue ep) {
    const std::string name = std::string("gated ") + ggml_type_name(type) + " M=" + std::to_string(M) + " K=" +
                             std::to_string(K) + " N=" + std::to_string(N) + (ep == Epilogue::GeluErf ? " +gelu" : "");
    Weight W(type, K, N, true, uint32_t(M + K + N));
    if (!jepa::gemm::can_pack(W.w)) return;  // ggml's products: LeWM keeps its unfused graph there
    const std::vector<float> x = random_x(M, K, 21), mod = random_x(M, 3 * N, 22), res = random_x(M, N, 23);
    const std::vector<float> y = run_gated(W, x, mod, res, M, 2, ep, true);
    CHECK(same_bits(y.data(), run_gated(W, x, mod, res, M, 2, ep, false).data(), y.size()));
    for (int threads : {1, 3}) CHECK(same_bits(y.data(), run_gated(W, x, mod, res, M, threads, ep, true).data(), y.size()));
    CHECK(same_bits(y.data(), run_gated(W, x, mod, res, 1, 1, ep, true).data(), size_t(N)));  // one row alone
    if (type != GGML_TYPE_F32) return;  // the half layouts' own rounding: bit checks only
    double worst = 0, scale = 0;
    for (int64_t m = 0; m < M; ++m) {
        for (int64_t n = 0; n < N; ++n) {
            double h = static_cast<const float *>(W.b->data)[n];
            for (int64_t k = 0; k < K; ++k) h += double(x[size_t(m * K + k)]) * W.value[size_t(n * K + k)];
            if (ep == Epilogue::GeluErf) h = 0.5 * h * (1.0 + std::erf(h / std::sqrt(2.0)));
            const double want = h * mod[size_t(m * 3 * N + N + n)] + res[size_t(m * N + n)];
            worst = std::max(worst, std::fabs(want - double(y[size_t(m * N + n)])));
            scale = std::max(scale, std::fabs(want));
        }
    }
    if (!(worst <= 1e-5 * scale)) std::fprintf(stderr, "%s: max error %g of %g\n", name.c_str(), worst, scale);
    CHECK(worst <= 1e-5 * scale);
}

// The gate on every ISA's f32 kernel: the same bits, rows and panels split between threads.
void check_isa_gated(int64_t M, int64_t K, int64_t N) {
    Weight W(GGML_TYPE_F32, K, N, true, 7);
    if (!jepa::gemm::can_pack(W.w)) return;
    const std::vector<float> x = random_x(M, K, 31), mod = random_x(M, 3 * N, 32), res = random_x(M, N, 33);
    kd::Problem p;
    p.x = x.data(), p.ldx = K;
    p.w = W.w->data, p.layout = kd::Layout::F32;
    p.bias = static_cast<const float *>(W.b->data);
    p.gate = mod.data() + N, p.ldg = 3 * N;
    p.residual = res.data(), p.ldr = N;
    p.M = M, p.N = N, p.K = K, p.ldy = N;
    std::vector<float> want;
    for (const auto & entry : isa_kernels()) {
        for (int nth : {1, 3}) {
            std::vector<float> y(size_t(M * N), -1.0f);
            p.y = y.data();
            each_thread(nth, [&](int ith, int n) { entry.second->gemm(p, ith, n); });
            if (want.empty()) want = y;
            if (!same_bits(y.data(), want.data(), y.size())) std::fprintf(stderr, "isa gated: %s differs\n", entry.first);
            CHECK(same_bits(y.data(), want.data(), y.size()));
        }
    }
}

}  // namespace

int main() {
    std::printf("kernels: %s\n", jepa::cpu::describe());
    if (!jepa::cpu::selection().own()) {
        std::printf("JEPA_GEMM=ggml: no engine kernels; LeWM runs its unfused graph\n");
        return check_result("test_adaln");
    }
    check_adaln(192, 15);  // LeWM's width: 5 items x 3 steps
    check_adaln(37, 7);    // a row that is not a whole number of vectors
    check_adaln(16, 1);
    for (ggml_type t : {GGML_TYPE_F32, GGML_TYPE_F16, GGML_TYPE_BF16}) {
        check_gated(t, 15, 192, 192, Epilogue::None);     // LeWM's attention out: 16 x 64 -> 192 (here K = 192)
        check_gated(t, 29, 96, 40, Epilogue::GeluErf);    // panel and row tails
        check_gated(t, 33, 600, 70, Epilogue::None);      // k past one block
    }
    check_isa_gated(15, 192, 192);
    check_isa_gated(600, 64, 48);  // rows split between threads
    return check_result("test_adaln");
}
