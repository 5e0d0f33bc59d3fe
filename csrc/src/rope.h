// 3-D rotary positions with V-JEPA 2's "tiled" frequency layout, which ggml's rope ops cannot
// express: within one axis chunk of width d, element j uses omega[j mod d/2] while the pairs that
// rotate together are (2k, 2k+1). So the tables are built here on the host and applied in the graph
// as x * cos + swap_pairs(x) * sin, with the rotation's sign folded into the sin table.
//
// Per head (head_dim hd): d = 2 * ((hd / 3) / 2); dims [0, d) rotate with t (in tubelets), [d, 2d)
// with the patch row h, [2d, 3d) with the patch column w; dims [3d, hd) are not rotated (cos 1, sin 0).
// omega_i = 1 / theta^(i / (d/2)), angle = pos * omega, all in float32 as upstream computes them.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace jepa {

struct RopePos {
    int32_t t = 0, h = 0, w = 0;
};

// Token id on a (., gh, gw) grid -> (t, h, w), token order T-major, then H, then W.
inline RopePos rope_pos_of_id(int64_t id, int gh, int gw) {
    const int64_t per_frame = int64_t(gh) * gw;
    const int64_t in_frame = id % per_frame;
    return {int32_t(id / per_frame), int32_t(in_frame / gw), int32_t(in_frame % gw)};
}

// Tables for n tokens at positions pos (nullptr = an unrotated token, e.g. CLS): cos and sin each
// receive hd * n floats, token-major ([hd, n] in ggml order).
void rope3d_tables(int head_dim, float theta, const RopePos * pos, int64_t n, float * cos, float * sin);

// The tables of a whole grid: n_prefix unrotated tokens, then gt x gh x gw patch tokens.
void rope3d_grid_tables(int head_dim, float theta, int n_prefix, int gt, int gh, int gw, std::vector<float> & cos,
                        std::vector<float> & sin);

// x [hd, H, N, B] (a view whose dims 0 and 1 are contiguous is fine); cos, sin [hd, 1, N, 1 or B].
ggml_tensor * build_rope3d(ggml_context * ctx, ggml_tensor * x, ggml_tensor * cos, ggml_tensor * sin);

}  // namespace jepa
