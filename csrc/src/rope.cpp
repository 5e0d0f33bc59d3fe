#include "rope.h"

#include <cmath>

namespace jepa {

void rope3d_tables(int head_dim, RopeSpec spec, const RopePos * pos, int64_t n, float * cos, float * sin) {
    const int d = 2 * ((head_dim / 3) / 2);
    const int half = d / 2;
    // omega in float32, in upstream's order of operations: i / (d/2), theta^that, its reciprocal.
    std::vector<float> omega(size_t(half > 0 ? half : 0));
    for (int i = 0; i < half; ++i) {
        const float e = float(i) / (float(d) / 2.0f);
        omega[size_t(i)] = 1.0f / std::pow(spec.theta, e);
    }
    for (int64_t k = 0; k < n; ++k) {
        float * c = cos + k * head_dim;
        float * s = sin + k * head_dim;
        for (int j = 0; j < head_dim; ++j) {
            c[j] = 1.0f;
            s[j] = 0.0f;
        }
        if (!pos) continue;
        const float axis_pos[3] = {pos[k].t, pos[k].h, pos[k].w};
        for (int a = 0; a < 3; ++a) {
            for (int j = 0; j < d; ++j) {
                const float angle = axis_pos[a] * omega[size_t(spec.interleaved ? j / 2 : j % half)];
                const float sn = float(std::sin(double(angle)));
                c[a * d + j] = float(std::cos(double(angle)));
                // rotate_pairs(x)[2k] = -x[2k+1], [2k+1] = x[2k]: the sign lives in the table.
                s[a * d + j] = (j % 2 == 0) ? -sn : sn;
            }
        }
    }
}

void rope3d_grid_tables(int head_dim, RopeSpec spec, int n_prefix, int gt, int gh, int gw, int ref_grid,
                        std::vector<float> & cos, std::vector<float> & sin) {
    const int64_t n_patch = int64_t(gt) * gh * gw;
    const int64_t n = n_prefix + n_patch;
    cos.assign(size_t(n * head_dim), 0.0f);
    sin.assign(size_t(n * head_dim), 0.0f);
    rope3d_tables(head_dim, spec, nullptr, n_prefix, cos.data(), sin.data());
    // Upstream's float32 arithmetic: pos * (ref - 1) / (side - 1), left to right.
    const float ref = float(ref_grid - 1);
    std::vector<RopePos> pos(static_cast<size_t>(n_patch));
    for (int64_t i = 0; i < n_patch; ++i) {
        RopePos p = rope_pos_of_id(i, gh, gw);
        if (ref_grid > 0) {
            p.h = p.h * ref / float(gh - 1);
            p.w = p.w * ref / float(gw - 1);
        }
        pos[size_t(i)] = p;
    }
    rope3d_tables(head_dim, spec, pos.data(), n_patch, cos.data() + size_t(n_prefix) * head_dim,
                  sin.data() + size_t(n_prefix) * head_dim);
}

ggml_tensor * build_rope3d(ggml_context * ctx, ggml_tensor * x, ggml_tensor * cos, ggml_tensor * sin) {
    const int64_t hd = x->ne[0], H = x->ne[1], N = x->ne[2], B = x->ne[3];
    const size_t es = ggml_element_size(x);
    GGML_ASSERT(x->nb[0] == es && x->nb[1] == size_t(hd) * es && hd % 2 == 0);
    // swap_pairs(x): the even and odd elements as two strided views, concatenated the other way round.
    ggml_tensor * even = ggml_view_4d(ctx, x, 1, hd / 2 * H, N, B, 2 * es, x->nb[2], x->nb[3], 0);
    ggml_tensor * odd = ggml_view_4d(ctx, x, 1, hd / 2 * H, N, B, 2 * es, x->nb[2], x->nb[3], es);
    ggml_tensor * swapped = ggml_reshape_4d(ctx, ggml_concat(ctx, odd, even, 0), hd, H, N, B);
    return ggml_add(ctx, ggml_mul(ctx, x, cos), ggml_mul(ctx, swapped, sin));
}

}  // namespace jepa
