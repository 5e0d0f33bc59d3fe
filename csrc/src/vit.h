// The ViT encoder graph: patch embedding (one matmul over host-patchified pixels), positions,
// CLS and register tokens, pre-norm blocks, final LayerNorm. A pure function of (hparams, shape).
#pragma once

#include "cpu/gemm.h"
#include "model.h"

#include <memory>
#include <vector>

namespace jepa {

struct InputShape {
    int B = 1, C = 3, T = 1, H = 0, W = 0;
    bool levels = false;  // every level's norm, concatenated [L*D, n_tok, B] (V-JEPA 2.1), not the last one alone
    int64_t n_keep = 0;   // > 0: the masked encoder, on n_keep patch tokens per item (ids given with the pixels)
};

struct EncoderGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * patches = nullptr;  // input  [C*t*P*P, n_patch, B]
    ggml_tensor * out = nullptr;      // output [D, n_tok, B]
    ggml_tensor * keep = nullptr;     // input int32 [n_keep, B]: the masked encoder's token ids
    ggml_tensor * rope_cos = nullptr; // input [head_dim, 1, n_tok, 1] (rope3d models; see rope.h); [.., n_keep, B] masked
    ggml_tensor * rope_sin = nullptr;
    // Block-causal encoders: the attention's key range per query group, read by the graph's
    // attention nodes while it computes (so it lives as long as this graph).
    std::shared_ptr<gemm::KeyRanges> ranges;
};

// Patch-grid of one item: ceil(T / tubelet) x (H / P) x (W / P). Throws for a shape the model cannot take.
// A clip whose frame count is not a multiple of the tubelet repeats its last frame (upstream V-JEPA).
struct PatchGrid {
    int t = 1, h = 0, w = 0;
    int64_t n() const { return int64_t(t) * h * w; }
};
PatchGrid encoder_grid(const Model & m, int C, int T, int H, int W);
int64_t encoder_n_tokens(const Model & m, int C, int T, int H, int W);

EncoderGraph build_encoder_graph(ggml_context * ctx, const Model & m, const InputShape & s, bool flash);

// pixels [B, C, T, H, W] -> patches [B, n_patch, C*t*P*P] with tokens T-major, then H, then W and each
// patch flattened in C, t, y, x order (the Conv3d / Conv2d weight layout). Frames past T - 1 (filling
// the last tubelet) repeat frame T - 1.
void patchify(const float * pixels, const InputShape & s, int tubelet, int patch, float * out);

}  // namespace jepa
