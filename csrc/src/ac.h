// The V-JEPA 2-AC predictor (Meta's VisionTransformerPredictorAC): the normalised latents are
// embedded into the predictor width; per frame t the sequence is [action_t, state_t, HW patch
// tokens]; pre-norm blocks with the tiled 3-D RoPE (patches at (t, row, col), the two conditioning
// tokens at (t, 0, 0)) and a frame-causal mask; the conditioning tokens are dropped, then the final
// LayerNorm and the projection back to the encoder width. Row block t predicts frame t + 1.
#pragma once

#include "model.h"

#include <vector>

namespace jepa {

struct AcPredGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * latents = nullptr;   // input  [D_enc, T*HW, B]
    ggml_tensor * actions = nullptr;   // input  [action_dim, T, B]
    ggml_tensor * states = nullptr;    // input  [state_dim, T, B]
    ggml_tensor * rope_cos = nullptr;  // input  [head_dim, 1, T*(2+HW), 1]
    ggml_tensor * rope_sin = nullptr;
    ggml_tensor * mask = nullptr;      // input  [T*(2+HW), T*(2+HW)]: frame-causal, additive (f16 for flash)
    ggml_tensor * out = nullptr;       // output [D_enc, T*HW, B]
};

AcPredGraph build_ac_pred_graph(ggml_context * ctx, const Model & m, int64_t T, int64_t HW, int B, bool flash);

// Host inputs of that graph: RoPE tables and the frame-causal mask for T frames of a gh x gw grid.
void ac_rope_tables(const Model & m, int64_t T, int gh, int gw, std::vector<float> & cos, std::vector<float> & sin);
void ac_frame_causal_mask(int64_t T, int64_t per_frame, std::vector<float> & mask);

}  // namespace jepa
