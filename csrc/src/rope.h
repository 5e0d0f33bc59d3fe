// 3-D rotary positions, which ggml's rope ops cannot express. The pairs that rotate together are
// (2k, 2k+1) in both of the layouts upstream uses; they differ in which frequency a pair takes:
//   tiled (V-JEPA 2, Meta's kept quirk): element j of an axis chunk of width d uses omega[j mod d/2];
//   interleaved (V-JEPA 2.1): the pair (2i, 2i+1) uses omega[i] (sin/cos.repeat_interleave(2)).
// So the tables are built here on the host and applied in the graph as x * cos + swap_pairs(x) * sin,
// with the rotation's sign folded into the sin table.
//
// Per head (head_dim hd): d = 2 * ((hd / 3) / 2); dims [0, d) rotate with t (in tubelets), [d, 2d)
// with the patch row h, [2d, 3d) with the patch column w; dims [3d, hd) are not rotated (cos 1, sin 0).
// omega_i = 1 / theta^(i / (d/2)), angle = pos * omega, all in float32 as upstream computes them.
// V-JEPA 2.1's encoder interpolates: h and w are scaled onto its pretraining grid (ref_grid),
// h * (ref - 1) / (Hp - 1), so positions are fractional.
#pragma once

#include "ggml.h"

#include <cstdint>
#include <vector>

namespace jepa {

struct RopePos {
    float t = 0, h = 0, w = 0;
};

// Token id on a (., gh, gw) grid -> (t, h, w), token order T-major, then H, then W.
inline RopePos rope_pos_of_id(int64_t id, int gh, int gw) {
    const int64_t per_frame = int64_t(gh) * gw;
    const int64_t in_frame = id % per_frame;
    return {float(id / per_frame), float(in_frame / gw), float(in_frame % gw)};
}

// The frequency layout and the base.
struct RopeSpec {
    float theta = 10000.0f;
    bool interleaved = false;
};

// Tables for n tokens at positions pos (nullptr = an unrotated token, e.g. CLS): cos and sin each
// receive hd * n floats, token-major ([hd, n] in ggml order).
void rope3d_tables(int head_dim, RopeSpec spec, const RopePos * pos, int64_t n, float * cos, float * sin);

// The tables of a whole grid: n_prefix unrotated tokens, then gt x gh x gw patch tokens; ref_grid > 0
// scales rows and columns onto that grid (V-JEPA 2.1's encoder; a side of one patch is refused, as
// upstream divides by zero there).
void rope3d_grid_tables(int head_dim, RopeSpec spec, int n_prefix, int gt, int gh, int gw, int ref_grid,
                        std::vector<float> & cos, std::vector<float> & sin);

// x [hd, H, N, B] (a view whose dims 0 and 1 are contiguous is fine); cos, sin [hd, 1, N, 1 or B].
ggml_tensor * build_rope3d(ggml_context * ctx, ggml_tensor * x, ggml_tensor * cos, ggml_tensor * sin);

}  // namespace jepa
