// The text encoder graph (family bert): sequences laid end to end, no padding. Embeddings (word +
// token type + position), their LayerNorm, then post-norm blocks whose dense layers run on every
// token at once and whose attention runs per sequence. A pure function of (hparams, lengths).
#pragma once

#include "cpu/gemm.h"
#include "model.h"

#include <vector>

namespace jepa {

struct TextGraph {
    ggml_cgraph * graph = nullptr;
    ggml_tensor * ids = nullptr;    // input  i32 [n_tok]
    ggml_tensor * types = nullptr;  // input  i32 [n_tok]
    ggml_tensor * pos = nullptr;    // input  i32 [n_tok]: pos_offset + the token's index in its sequence
    ggml_tensor * out = nullptr;    // output [D, n_tok]
};

// varlen: the sequences' offsets (n_seq + 1) and the attention's scale; it must outlive the graph's run.
// flash: the engine's per-sequence attention kernel on the CPU (the context's flash_attn, on by
// default); off, or off the CPU, ggml's matmul + softmax + matmul on each sequence's rows.
TextGraph build_text_graph(ggml_context * ctx, const Model & m, const gemm::Varlen & varlen, bool flash);

}  // namespace jepa
