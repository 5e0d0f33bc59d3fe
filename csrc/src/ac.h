// The V-JEPA 2-AC predictor (Meta's VisionTransformerPredictorAC): the normalised latents are
// embedded into the predictor width; per frame t the sequence is [action_t, state_t, HW patch
// tokens]; pre-norm blocks with the tiled 3-D RoPE (patches at (t, row, col), the two conditioning
// tokens at (t, 0, 0)) and a frame-causal mask; the conditioning tokens are dropped, then the final
// LayerNorm and the projection back to the encoder width. Row block t predicts frame t + 1.
//
// The mask is frame-causal, so when a rollout appends frame t the hidden states of frames < t do not
// change: a cached rollout keeps each layer's keys and values (after RoPE) per candidate and builds
// frame t's block alone, attending over the kept frames and its own (build_ac_step_graph). Every
// product is row-invariant and the attention sums over keys in order (a masked key adds exact
// zeros), so the block has the bits the whole prefix's graph gives its last frame.
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

// Host inputs of that graph: RoPE tables of frames t0 .. t0 + T - 1 of a gh x gw grid, and the
// frame-causal mask of T frames.
void ac_rope_tables(const Model & m, int64_t t0, int64_t T, int gh, int gw, std::vector<float> & cos,
                    std::vector<float> & sin);
void ac_frame_causal_mask(int64_t T, int64_t per_frame, std::vector<float> & mask);

// ---- cached rollouts ------------------------------------------------------------------------------

// The context frame's patch rows as every candidate has them until layer 0's attention mixes the
// conditioning tokens in: embedded, and layer 0's q, k, v with RoPE. One graph per rollout.
struct AcSharedGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * latents = nullptr;   // input  [D_enc, HW, 1]: the context frame
    ggml_tensor * rope_cos = nullptr;  // input  [head_dim, 1, HW, 1]: frame 0's patch positions
    ggml_tensor * rope_sin = nullptr;
    ggml_tensor * x = nullptr;         // output [D, HW, 1]: pred.embed(latents)
    ggml_tensor * q = nullptr;         // output [head_dim, n_head, HW, 1] each
    ggml_tensor * k = nullptr;
    ggml_tensor * v = nullptr;
};

AcSharedGraph build_ac_shared_graph(ggml_context * ctx, const Model & m, int64_t HW);

// The keys and values a rollout keeps, per layer [head_dim, n_head, cap * (2 + HW), B] each (after
// RoPE; frame f at rows [f * (2 + HW), (f + 1) * (2 + HW))); B may exceed a step's candidates.
struct AcKvCache {
    std::vector<ggml_tensor *> k, v;
    int64_t cap = 0;  // frames kept: a rollout of H steps keeps H - 1 (the last frame's are not read)
};

// The cache's tensors in ctx (not allocated), [cap frames of 2 + HW rows, B] for every layer.
AcKvCache ac_kv_cache_tensors(ggml_context * ctx, const Model & m, int64_t cap, int64_t HW, int B);

struct AcStepGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * latents = nullptr;   // input  [D_enc, HW, B]: frame t's latents (t >= 1; NULL at t = 0)
    ggml_tensor * shared_x = nullptr;  // input at t = 0 (else NULL): AcSharedGraph's x, q, k, v
    ggml_tensor * shared_q = nullptr;
    ggml_tensor * shared_k = nullptr;
    ggml_tensor * shared_v = nullptr;
    ggml_tensor * actions = nullptr;   // input  [action_dim, 1, B]: action t
    ggml_tensor * states = nullptr;    // input  [state_dim, 1, B]: state t
    ggml_tensor * rope_cos = nullptr;  // input  [head_dim, 1, 2 + HW, 1]: frame t's positions
    ggml_tensor * rope_sin = nullptr;
    ggml_tensor * out = nullptr;       // output [D_enc, HW, B]: row block t, predicting frame t + 1
};

// Frame t of B candidates over the frames 0 .. t - 1 kept in `cache`; frame t's keys and values go
// into the cache where t < cache.cap.
AcStepGraph build_ac_step_graph(ggml_context * ctx, const Model & m, int64_t t, int64_t HW, int B, bool flash,
                                const AcKvCache & cache);

}  // namespace jepa
