// Block-causal attention by key ranges (gemm::KeyRanges, gemm::ranged_attention, and build_attn's
// ggml fallback for GPUs and the ggml path): a prefix row reads every key, frame f's patch rows the
// patch keys of frames <= f, and no N x N mask exists. Checked against a double-precision reference
// with the mask applied literally; the engine's kernel bit for bit across thread counts, an item alone
// against a batch of two, and a frame's rows against the same clip with its later frames changed.
// ctest runs it on this CPU's kernels and again with JEPA_GEMM=avx2, portable and ggml (where the
// kernel steps aside and the fallback is what runs).
#include "blocks.h"
#include "check.h"
#include "cpu/gemm.h"
#include "graph.h"

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace {

bool g_kernel = false;  // whether the last build_attn call could take the engine's kernel

struct Shape {
    int64_t hd, H, n_prefix, T, P, B;
    int64_t N() const { return n_prefix + T * P; }
    int64_t D() const { return hd * H; }
};

// x holds q; k; v per token, [3 D, N, B]; the attention through build_attn (own: the engine's kernel
// where it applies, else ggml's ops) or the kernel called directly.
std::vector<float> run(const std::vector<float> & x, const Shape & s, int threads, bool own, bool direct = false) {
    jepa::gemm::KeyRanges spec = jepa::gemm::KeyRanges::block_causal(s.n_prefix, s.T, s.P);
    spec.scale = 1.0f / std::sqrt(float(s.hd));
    ggml_tensor * xt = nullptr;
    auto build = [&](ggml_context * ctx) {
        xt = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, 3 * s.D(), s.N(), s.B);
        ggml_set_input(xt);
        auto view = [&](int i) {
            return ggml_view_4d(ctx, xt, s.hd, s.H, s.N(), s.B, s.hd * 4, xt->nb[1], xt->nb[2], size_t(i) * s.D() * 4);
        };
        ggml_tensor * q = view(0), * k = view(1), * v = view(2);
        if (direct) {
            CHECK(jepa::gemm::ranged_attention_supported(q, k, v, spec));
            return jepa::gemm::ranged_attention(ctx, q, k, v, &spec);
        }
        if (own) g_kernel = jepa::gemm::ranged_attention_supported(q, k, v, spec);
        jepa::AttnOptions o;
        o.n_head = int(s.H);
        o.scale = spec.scale;
        o.own_kernels = own;
        o.ranges = &spec;
        return jepa::build_attn(ctx, q, k, v, o);
    };
    return run_graph(threads, build, [&] { ggml_backend_tensor_set(xt, x.data(), 0, x.size() * 4); });
}

bool allowed(const Shape & s, int64_t q, int64_t k) {
    if (q < s.n_prefix) return true;
    if (k < s.n_prefix) return false;
    return (k - s.n_prefix) / s.P <= (q - s.n_prefix) / s.P;
}

// max |y - reference| over every row, the reference applying the mask entry by entry.
double reference_error(const std::vector<float> & x, const std::vector<float> & y, const Shape & s) {
    const int64_t D = s.D(), N = s.N();
    double err = 0;
    for (int64_t b = 0; b < s.B; ++b) {
        const float * xb = x.data() + b * N * 3 * D;
        for (int64_t h = 0; h < s.H; ++h) {
            for (int64_t q = 0; q < N; ++q) {
                std::vector<double> sc(static_cast<size_t>(N), -INFINITY);
                double mx = -INFINITY, sum = 0;
                for (int64_t k = 0; k < N; ++k) {
                    if (!allowed(s, q, k)) continue;
                    double a = 0;
                    for (int64_t d = 0; d < s.hd; ++d) a += double(xb[q * 3 * D + h * s.hd + d]) * xb[k * 3 * D + D + h * s.hd + d];
                    sc[size_t(k)] = a / std::sqrt(double(s.hd));
                    mx = std::max(mx, sc[size_t(k)]);
                }
                for (double & e : sc) sum += (e = std::exp(e - mx));
                for (int64_t d = 0; d < s.hd; ++d) {
                    double o = 0;
                    for (int64_t k = 0; k < N; ++k) o += sc[size_t(k)] / sum * xb[k * 3 * D + 2 * D + h * s.hd + d];
                    err = std::max(err, std::fabs(o - double(y[size_t((b * N + q) * D + h * s.hd + d)])));
                }
            }
        }
    }
    return err;
}

void check(const Shape & s) {
    const int64_t D = s.D(), N = s.N(), item = 3 * D * N;
    std::mt19937 rng(uint32_t(s.hd * 7 + N * 13 + s.B));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> x(size_t(item * s.B));
    for (float & f : x) f = nd(rng);

    const std::vector<float> y = run(x, s, 3, true);
    const bool kernel = g_kernel;
    const double err = reference_error(x, y, s);
    const double err_ggml = reference_error(x, run(x, s, 2, false), s);
    std::printf("block-causal hd=%lld H=%lld prefix=%lld T=%lld P=%lld B=%lld (%s): max |err| %.2e, ggml ops %.2e\n",
                (long long) s.hd, (long long) s.H, (long long) s.n_prefix, (long long) s.T, (long long) s.P,
                (long long) s.B, kernel ? "engine kernel" : "ggml ops", err, err_ggml);
    CHECK(err < 2e-5);
    CHECK(err_ggml < 2e-5);
    if (kernel) CHECK(y == run(x, s, 3, true, true));  // build_attn took the kernel

    CHECK(y == run(x, s, 1, true));  // the thread count changes no bit
    // Each item alone gives its rows of the batch bit for bit.
    Shape one = s;
    one.B = 1;
    for (int64_t b = 0; b < s.B; ++b) {
        std::vector<float> xb(x.begin() + b * item, x.begin() + (b + 1) * item);
        const std::vector<float> alone = run(xb, one, 2, true);
        CHECK(std::memcmp(alone.data(), y.data() + b * N * D, size_t(N * D) * 4) == 0);
    }
    // Later frames changed: the earlier frames' patch rows keep their bits, the prefix rows do not.
    if (s.T > 1) {
        std::vector<float> x2 = x;
        for (int64_t t = s.n_prefix + (s.T - 1) * s.P; t < N; ++t) {
            for (int64_t j = 0; j < 3 * D; ++j) x2[size_t(t * 3 * D + j)] += 1.0f;
        }
        const std::vector<float> y2 = run(x2, s, 3, true);
        const size_t early = size_t((s.T - 1) * s.P * D);
        CHECK(std::memcmp(y2.data() + s.n_prefix * D, y.data() + s.n_prefix * D, early * 4) == 0);
        if (s.n_prefix > 0) CHECK(std::memcmp(y2.data(), y.data(), size_t(s.n_prefix * D) * 4) != 0);
    }
}

void check_ranges() {
    const jepa::gemm::KeyRanges r = jepa::gemm::KeyRanges::block_causal(1, 3, 4);
    CHECK(r.n_tok() == 13);
    CHECK((r.q_start == std::vector<int64_t>{0, 1, 5, 9, 13}));
    CHECK((r.k_lo == std::vector<int64_t>{0, 1, 1, 1}));
    CHECK((r.k_hi == std::vector<int64_t>{13, 5, 9, 13}));
    const jepa::gemm::KeyRanges n = jepa::gemm::KeyRanges::block_causal(0, 2, 3);  // no prefix token
    CHECK((n.q_start == std::vector<int64_t>{0, 3, 6}));
    CHECK((n.k_lo == std::vector<int64_t>{0, 0}));
    CHECK((n.k_hi == std::vector<int64_t>{3, 6}));
}

}  // namespace

int main() {
    check_ranges();
    check({64, 2, 1, 4, 16, 2});   // the LeVJEPA bundle's shape: 16 patches a frame (the few-key kernel first)
    check({32, 3, 1, 3, 37, 2});   // the blocked kernel, rows not a multiple of the tile
    check({24, 2, 0, 2, 5, 1});    // no prefix token
    check({16, 1, 1, 1, 9, 3});    // one frame: every row reads every patch
    return check_result("test_block_causal");
}
