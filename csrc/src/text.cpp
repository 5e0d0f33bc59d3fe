#include "text.h"

#include "blocks.h"

#include <cmath>

namespace jepa {

namespace {

bool host_weights(const Model & m) { return m.text.tok && m.text.tok->buffer && ggml_backend_buffer_is_host(m.text.tok->buffer); }

// Attention per sequence: the engine's varlen kernel on the CPU; elsewhere (CUDA, where custom ops do
// not run) or with flash off, ggml's attention on each sequence's rows and a concatenation.
ggml_tensor * per_sequence_attention(ggml_context * ctx, const Model & m, ggml_tensor * q, ggml_tensor * k,
                                     ggml_tensor * v, const gemm::Varlen & varlen, bool flash) {
    if (flash && host_weights(m) && gemm::varlen_attention_supported(q, k, v)) {
        return gemm::varlen_attention(ctx, q, k, v, &varlen);
    }
    AttnOptions o;
    o.n_head = int(q->ne[1]);
    o.scale = varlen.scale;
    ggml_tensor * out = nullptr;
    for (size_t s = 0; s + 1 < varlen.offsets.size(); ++s) {
        const int64_t t0 = varlen.offsets[s], n = varlen.offsets[s + 1] - t0;
        auto rows = [&](ggml_tensor * t) {
            return ggml_view_4d(ctx, t, t->ne[0], t->ne[1], n, 1, t->nb[1], t->nb[2], t->nb[3], size_t(t0) * t->nb[2]);
        };
        ggml_tensor * a = build_attn(ctx, rows(q), rows(k), rows(v), o);  // [D, n, 1]
        out = out ? ggml_concat(ctx, out, a, 1) : a;
    }
    return out;
}

// One post-norm BERT layer: x = ln1(x + attn_out(attn(x))); x = ln2(x + mlp(x)).
ggml_tensor * build_text_block(ggml_context * ctx, const Model & m, ggml_tensor * x, const VitBlockW & b,
                               const gemm::Varlen & varlen, bool flash, int layer) {
    const EncoderHparams & e = m.hp.enc;
    const int64_t hd = e.head_dim(), H = e.n_head, N = x->ne[1];
    auto heads = [&](const LinearW & l) { return ggml_reshape_4d(ctx, build_linear(ctx, x, l), hd, H, N, 1); };
    ggml_tensor * a = per_sequence_attention(ctx, m, heads(b.q), heads(b.k), heads(b.v), varlen, flash);
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
