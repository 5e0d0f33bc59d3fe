#include "text.h"

#include "blocks.h"

#include <cmath>

namespace jepa {

namespace {

// The graph runs on the CPU backend (the engine's custom ops run there only).
bool host_weights(const Model & m) { return m.text.tok && m.text.tok->buffer && ggml_backend_buffer_is_host(m.text.tok->buffer); }

// One post-norm BERT layer: x = ln1(x + attn_out(attn(x))); x = ln2(x + mlp(x)).
ggml_tensor * build_text_block(ggml_context * ctx, const Model & m, ggml_tensor * x, const VitBlockW & b,
                               const gemm::Varlen & varlen, bool flash, int layer) {
    const EncoderHparams & e = m.hp.enc;
    const int64_t hd = e.head_dim(), H = e.n_head, N = x->ne[1];
    auto heads = [&](const LinearW & l) { return ggml_reshape_4d(ctx, build_linear(ctx, x, l), hd, H, N, 1); };
    ggml_tensor * a = build_varlen_attn(ctx, heads(b.q), heads(b.k), heads(b.v), varlen, flash && host_weights(m));
    a = ggml_reshape_2d(ctx, a, hd * H, N);
    x = build_norm(ctx, build_linear(ctx, a, b.attn_out, x), b.ln1, e.ln_eps);
    ggml_format_name(x, "text.blk.%d.attn_res", layer);
    x = build_norm(ctx, build_mlp(ctx, x, b.ffn_up, b.ffn_down, e.act, x), b.ln2, e.ln_eps);
    ggml_format_name(x, "text.blk.%d.out", layer);
    return x;
}

ggml_tensor * input_ids(ggml_context * ctx, int64_t n, const char * name) {
    ggml_tensor * t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

}  // namespace

TextGraph build_text_graph(ggml_context * ctx, const Model & m, const gemm::Varlen & varlen, bool flash) {
    const TextW & w = m.text;
    const int64_t n_tok = varlen.offsets.back();
    TextGraph tg;
    tg.graph = ggml_new_graph_custom(ctx, 16384, false);
    tg.ids = input_ids(ctx, n_tok, "ids");
    tg.types = input_ids(ctx, n_tok, "type_ids");
    tg.pos = input_ids(ctx, n_tok, "pos_ids");
    // HF's order: (word + token type) + position, then the LayerNorm.
    ggml_tensor * x = ggml_add(ctx, ggml_get_rows(ctx, w.tok, tg.ids), ggml_get_rows(ctx, w.type, tg.types));
    x = ggml_add(ctx, x, ggml_get_rows(ctx, w.pos, tg.pos));
    x = build_norm(ctx, x, w.embed_norm, m.hp.enc.ln_eps);
    ggml_set_name(x, "text.embed");
    for (int il = 0; il < m.hp.enc.n_layer; ++il) {
        x = build_text_block(ctx, m, x, w.blocks[size_t(il)], varlen, flash, il);
    }
    tg.out = graph_output(tg.graph, x, "text.out");
    return tg;
}

}  // namespace jepa
