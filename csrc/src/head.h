// The attentive-pool classifier head (V-JEPA 2's SSv2 / K400 probes, HF VJEPA2AttentivePooler):
//   n_pool_layers pre-norm self-attention blocks over the encoder tokens (no positions);
//   one cross-attention: the raw learned query attends to LayerNorm(tokens) (K/V only are
//   normalised; separate q / k / v; no output projection); y = query + attn; y += MLP(LayerNorm(y));
//   pooled = y (no final norm); logits = Linear(pooled).
#pragma once

#include "model.h"

namespace jepa {

struct HeadGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * tokens = nullptr;  // input  [D, N, B]: encoder output tokens
    ggml_tensor * pooled = nullptr;  // output [D, 1, B]
    ggml_tensor * logits = nullptr;  // output [n_classes, 1, B]
};

// flash: ggml_flash_attn_ext for the self-attention blocks. The single-query cross-attention always
// takes the plain path, whose result for an item does not depend on the batch or the thread count.
HeadGraph build_head_graph(ggml_context * ctx, const Model & m, int64_t n_tok, int B, bool flash);

}  // namespace jepa
