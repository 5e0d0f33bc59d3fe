// The text encoder's per-sequence attention (gemm::varlen_attention): sequences laid end to end, each
// attending to itself only. Checked against a double-precision reference, and each sequence's rows
// bit for bit against the same sequence run alone, at 1 and 3 threads. ctest runs it on this CPU's
// kernels and again with JEPA_GEMM=avx2 and JEPA_GEMM=portable.
#include "check.h"
#include "cpu/gemm.h"
#include "graph.h"

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace {

// q; k; v per token, [3 D, n_tok] (the layout a fused projection would give), viewed per head.
std::vector<float> run_varlen(const std::vector<float> & x, int64_t hd, int64_t H, const std::vector<int64_t> & offsets,
                              int threads) {
    const int64_t D = hd * H, N = offsets.back();
    jepa::gemm::Varlen spec;
    spec.offsets = offsets;
    spec.scale = 1.0f / std::sqrt(float(hd));
    ggml_tensor * xt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, 3 * D, N);
        ggml_set_input(xt);
        auto view = [&](int i) {
            return ggml_view_4d(ctx, xt, hd, H, N, 1, hd * 4, xt->nb[1], xt->nb[1] * N, size_t(i) * D * 4);
        };
        ggml_tensor * q = view(0), * k = view(1), * v = view(2);
        CHECK(jepa::gemm::varlen_attention_supported(q, k, v));
        return jepa::gemm::varlen_attention(ctx, q, k, v, &spec);
    };
    return run_graph(threads, build, [&] { ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4); });
}

void check_varlen(int64_t hd, int64_t H, const std::vector<int64_t> & lens) {
    std::vector<int64_t> offsets = {0};
    for (int64_t n : lens) offsets.push_back(offsets.back() + n);
    const int64_t D = hd * H, N = offsets.back();
    std::mt19937 rng(uint32_t(hd * 31 + N));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(3 * D * N));
    for (float & f : x) f = nd(rng);

    const std::vector<float> y = run_varlen(x, hd, H, offsets, 3);
    CHECK(y == run_varlen(x, hd, H, offsets, 1));  // the thread count changes no bit
    double err = 0;
    for (size_t s = 0; s < lens.size(); ++s) {
        const int64_t t0 = offsets[s], n = lens[s];
        // Alone: the same sequence as the only one of its call.
        std::vector<float> xs(x.begin() + t0 * 3 * D, x.begin() + (t0 + n) * 3 * D);
        const std::vector<float> alone = run_varlen(xs, hd, H, {0, n}, 3);
        CHECK(std::memcmp(alone.data(), y.data() + t0 * D, size_t(n * D) * 4) == 0);
        for (int64_t h = 0; h < H; ++h) {
            for (int64_t q = 0; q < n; ++q) {
                std::vector<double> sc(static_cast<size_t>(n));
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k < n; ++k) {
                    double a = 0;
                    for (int64_t d = 0; d < hd; ++d) a += double(xs[size_t(q * 3 * D + h * hd + d)]) * xs[size_t(k * 3 * D + D + h * hd + d)];
                    sc[size_t(k)] = a / std::sqrt(double(hd));
                    mx = std::max(mx, sc[size_t(k)]);
                }
                for (double & e : sc) sum += (e = std::exp(e - mx));
                for (int64_t d = 0; d < hd; ++d) {
                    double o = 0;
                    for (int64_t k = 0; k < n; ++k) o += sc[size_t(k)] / sum * xs[size_t(k * 3 * D + 2 * D + h * hd + d)];
                    err = std::max(err, std::fabs(o - double(y[size_t((t0 + q) * D + h * hd + d)])));
                }
            }
        }
    }
    std::printf("varlen attention hd=%lld H=%lld %zu sequences, %lld tokens: max |err| %.2e\n", (long long) hd,
                (long long) H, lens.size(), (long long) N, err);
    CHECK(err < 2e-5);
}

}  // namespace

int main() {
    check_varlen(32, 3, {1, 5, 17, 40, 3, 16, 64});  // short (<= 16 keys) and blocked paths, one token
    check_varlen(64, 2, {130, 2});
    check_varlen(24, 4, {7});
    return check_result("test_text");
}
