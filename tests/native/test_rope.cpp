// The 3-D RoPE block (csrc/src/rope.h) against a scalar transcription of upstream's
// rotate_queries_or_keys + apply_rotary_embeddings: per-axis chunks of d = 2*((hd/3)/2), pairs
// (2k, 2k+1) rotating as (-x[2k+1], x[2k]), the tail unrotated; cos/sin tiled as
// [a_0..a_{d/2-1}, a_0..a_{d/2-1}] (V-JEPA 2, HF and Meta alike) or interleaved as
// [a_0, a_0, a_1, a_1, ...] (V-JEPA 2.1's RoPEAttention), the latter also with 2.1's encoder
// interpolation (rows and columns scaled onto a 16-patch grid: fractional positions). Head dims 32,
// 64, 80 and 66 (tails 2, 4, 2, 0); contiguous input and a strided view as the fused-qkv layout gives it.
#include "rope.h"

#include "ggml-cpu.h"
#include "ggml.h"

#include "check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

namespace {


// One head's vector x (hd floats) at grid position (t, h, w), upstream's arithmetic in float32.
void reference(const float * x, int hd, float t, float h, float w, bool interleaved, float * out) {
    const int d = 2 * ((hd / 3) / 2);
    const float pos[3] = {t, h, w};
    for (int j = 0; j < hd; ++j) out[j] = x[j];
    for (int a = 0; a < 3; ++a) {
        const float * xa = x + a * d;
        std::vector<float> emb_cos(static_cast<size_t>(d)), emb_sin(static_cast<size_t>(d));
        for (int i = 0; i < d / 2; ++i) {
            float omega = float(i);
            omega /= float(d) / 2.0f;
            omega = 1.0f / std::pow(10000.0f, omega);
            const float freq = pos[a] * omega;
            if (interleaved) {  // 2.1: .repeat_interleave(2)
                emb_cos[size_t(2 * i)] = emb_cos[size_t(2 * i + 1)] = std::cos(freq);
                emb_sin[size_t(2 * i)] = emb_sin[size_t(2 * i + 1)] = std::sin(freq);
            } else {  // 2: .repeat(1, 1, 1, 2), the angle vector tiled
                emb_cos[size_t(i)] = emb_cos[size_t(i + d / 2)] = std::cos(freq);
                emb_sin[size_t(i)] = emb_sin[size_t(i + d / 2)] = std::sin(freq);
            }
        }
        for (int k = 0; k < d / 2; ++k) {
            const float y0 = -xa[2 * k + 1], y1 = xa[2 * k];  // stack((-y2, y1)).flatten
            out[a * d + 2 * k] = xa[2 * k] * emb_cos[size_t(2 * k)] + y0 * emb_sin[size_t(2 * k)];
            out[a * d + 2 * k + 1] = xa[2 * k + 1] * emb_cos[size_t(2 * k + 1)] + y1 * emb_sin[size_t(2 * k + 1)];
        }
    }
}

void run_case(int hd, bool strided, bool interleaved, int ref_grid) {
    const int H = 3, gt = 2, gh = 3, gw = 4, B = 2;
    const int N = gt * gh * gw;
    const int64_t row = strided ? 3 * int64_t(hd) * H : int64_t(hd) * H;  // fused qkv: [q | k | v] per token

    std::vector<float> cos, sin;
    jepa::rope3d_grid_tables(hd, {10000.0f, interleaved}, 0, gt, gh, gw, ref_grid, cos, sin);

    ggml_init_params ip{size_t(64) << 20, nullptr, false};
    ggml_context * ctx = ggml_init(ip);
    ggml_tensor * buf = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, row, N, B);
    std::mt19937 rng(hd * 7 + strided);
    std::normal_distribution<float> nd;
    float * bd = static_cast<float *>(buf->data);
    for (int64_t i = 0; i < ggml_nelements(buf); ++i) bd[i] = nd(rng);
    // q: the first hd*H floats of each token row (a strided view when the row holds q, k and v).
    ggml_tensor * q = ggml_view_4d(ctx, buf, hd, H, N, B, size_t(hd) * sizeof(float), buf->nb[1], buf->nb[2], 0);
    ggml_tensor * c = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, N, 1);
    ggml_tensor * s = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, N, 1);
    std::copy(cos.begin(), cos.end(), static_cast<float *>(c->data));
    std::copy(sin.begin(), sin.end(), static_cast<float *>(s->data));
    ggml_tensor * out = jepa::build_rope3d(ctx, q, c, s);
    ggml_cgraph * gf = ggml_new_graph(ctx);
    ggml_build_forward_expand(gf, out);
    CHECK(ggml_graph_compute_with_ctx(ctx, gf, 2) == GGML_STATUS_SUCCESS);

    double worst = 0.0;
    std::vector<float> ref(static_cast<size_t>(hd));
    const float * od = static_cast<const float *>(out->data);
    for (int b = 0; b < B; ++b) {
        for (int n = 0; n < N; ++n) {
            jepa::RopePos p = jepa::rope_pos_of_id(n, gh, gw);
            if (ref_grid > 0) {  // upstream: h * (ref - 1) / (Hp - 1) in float32
                p.h = p.h * float(ref_grid - 1) / float(gh - 1);
                p.w = p.w * float(ref_grid - 1) / float(gw - 1);
            }
            for (int h = 0; h < H; ++h) {
                const float * x = bd + (size_t(b) * N + size_t(n)) * size_t(row) + size_t(h) * hd;
                reference(x, hd, p.t, p.h, p.w, interleaved, ref.data());
                const float * got = od + ((size_t(b) * N + size_t(n)) * H + size_t(h)) * hd;
                // std::max, not std::fmax (the same answer here): GCC 12 for aarch64 fails on
                // vectorising this fmax reduction (an internal compiler error in tree-vect-loop).
                for (int j = 0; j < hd; ++j) worst = std::max(worst, std::fabs(double(got[j]) - double(ref[size_t(j)])));
                // The tail is copied exactly.
                for (int j = 3 * (2 * ((hd / 3) / 2)); j < hd; ++j) CHECK(got[j] == x[j]);
            }
        }
    }
    std::printf("rope3d hd=%d %s %s ref_grid=%d: max |engine - reference| = %.3g\n", hd,
                strided ? "strided" : "contiguous", interleaved ? "interleaved" : "tiled", ref_grid, worst);
    CHECK(worst < 1e-5);
    ggml_free(ctx);
}

}  // namespace

int main() {
    // Positions: token id -> (t, h, w), T-major then H then W.
    const jepa::RopePos p = jepa::rope_pos_of_id(2 * 12 + 1 * 4 + 3, 3, 4);
    CHECK(p.t == 2 && p.h == 1 && p.w == 3);
    for (int hd : {32, 64, 80, 66}) {
        run_case(hd, false, false, 0);
        run_case(hd, true, false, 0);
        run_case(hd, false, true, 0);
        run_case(hd, true, true, 16);
    }
    // The two layouts differ (a table that ignored the flag would pass the cases above only if so).
    std::vector<float> c0, s0, c1, s1;
    jepa::rope3d_grid_tables(32, {10000.0f, false}, 0, 1, 2, 2, 0, c0, s0);
    jepa::rope3d_grid_tables(32, {10000.0f, true}, 0, 1, 2, 2, 0, c1, s1);
    CHECK(c0 != c1 && s0 != s1);
    return check_result("test_rope");
}
