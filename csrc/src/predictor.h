// The masked predictor (V-JEPA 2, HF VJEPA2Predictor): the context tokens are embedded into the
// predictor width, one learned mask token is placed at every target position, 3-D RoPE comes from
// each token's id on the encoder grid, then pre-norm blocks, a LayerNorm and a projection back to the
// encoder width; the rows of the targets are returned.
#pragma once

#include "model.h"

namespace jepa {

struct PredGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * tokens = nullptr;    // input  [D_enc, n_ctx, B]: the context tokens
    ggml_tensor * rope_cos = nullptr;  // input  [head_dim, 1, n_ctx + n_tgt, B] (context, then targets)
    ggml_tensor * rope_sin = nullptr;
    ggml_tensor * out = nullptr;       // output [out_dim, n_tgt, B]
    ggml_tensor * ctx_out = nullptr;   // output [out_dim, n_ctx, B]: the context rows (pred.proj_context), when asked
};

struct PredRequest {
    int mask_index = 0;    // the learned mask token (already reduced mod n_mask_tokens)
    bool image = false;    // V-JEPA 2.1: the image modality vector, not the video one
    bool context = false;  // also project the context rows (pred.proj_context)
};

PredGraph build_pred_graph(ggml_context * ctx, const Model & m, int64_t n_ctx, int64_t n_tgt, int B,
                           const PredRequest & req, bool flash);

}  // namespace jepa
