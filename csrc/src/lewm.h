// LeWM (LeWorldModel) graphs: the embedding of a frame (the encoder's CLS through the projector),
// and the autoregressive predictor of adaLN-zero blocks conditioned on the action embedding, causal
// over the time steps of a window of at most n_frames embeddings (docs/world-models.md).
#pragma once

#include "model.h"

namespace jepa {

struct LewmProjectGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * cls = nullptr;  // input  [E, 1, B]: the encoder's CLS rows (after its final norm)
    ggml_tensor * out = nullptr;  // output [D, 1, B]: enc.proj.2(act(enc.proj.0(cls)))
};

LewmProjectGraph build_lewm_project_graph(ggml_context * ctx, const Model & m, int B);

struct LewmPredGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * embs = nullptr;     // input  [D, T, B]
    ggml_tensor * actions = nullptr;  // input  [A, T, B]
    ggml_tensor * mask = nullptr;     // input  [T, T]: 0 on and below the diagonal, -inf above
    ggml_tensor * act_emb = nullptr;  // output [D, T, B]: the action embedder's output
    ggml_tensor * raw = nullptr;      // output [D, T, B]: after pred.norm, before the projector
    ggml_tensor * out = nullptr;      // output [D, T, B]: pred.proj.2(act(pred.proj.0(raw)))
};

LewmPredGraph build_lewm_pred_graph(ggml_context * ctx, const Model & m, int64_t T, int B);

}  // namespace jepa
