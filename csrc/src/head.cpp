#include "head.h"

#include "blocks.h"

#include <cmath>

namespace jepa {

HeadGraph build_head_graph(ggml_context * ctx, const Model & m, int64_t n_tok, int B, bool flash) {
    const HeadHparams & h = m.hp.head;
    const HeadW & w = m.head;
    const int64_t D = m.hp.enc.embed_dim;
    const int n_head = h.block.n_head;
    const int64_t hd = D / n_head;

    HeadGraph hg;
    hg.graph = ggml_new_graph_custom(ctx, 4096, false);
    hg.tokens = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, n_tok, B);
    ggml_set_name(hg.tokens, "head.tokens");
    ggml_set_input(hg.tokens);

    AttnOptions attn = attn_options(m, n_head, hd, flash);
    ggml_tensor * x = hg.tokens;
    for (int il = 0; il < h.n_pool_layers; ++il) {
        x = build_vit_block(ctx, x, w.blocks[size_t(il)], h.block, attn, il, "head.blk");
    }

    // Cross-attention. The query's projection depends on the weights only: computed once, on one row,
    // so an item's result is the same whatever the batch.
    ggml_tensor * kv = build_norm(ctx, x, w.ln_kv, h.block.ln_eps);
    ggml_set_name(kv, "head.xattn.kv");
    ggml_tensor * k = ggml_reshape_4d(ctx, build_linear(ctx, kv, w.k), hd, n_head, n_tok, B);
    ggml_tensor * v = ggml_reshape_4d(ctx, build_linear(ctx, kv, w.v), hd, n_head, n_tok, B);
    ggml_tensor * q = build_linear(ctx, w.query, w.q);  // [D, 1]
    q = ggml_repeat_4d(ctx, ggml_reshape_4d(ctx, q, hd, n_head, 1, 1), hd, n_head, 1, B);
    AttnOptions xattn = attn;
    xattn.flash = false;  // one query row: ggml's flash path would split the keys by thread
    ggml_tensor * y = build_attn(ctx, q, k, v, xattn);  // [D, 1, B]
    y = ggml_add(ctx, y, w.query);                      // query + attn (broadcast over items)
    ggml_set_name(y, "head.xattn.attn_res");
    y = ggml_add(ctx, y, build_mlp(ctx, build_norm(ctx, y, w.ln2, h.block.ln_eps), w.ffn_up, w.ffn_down, h.block.act));
    ggml_set_name(y, "head.pooled");
    ggml_set_output(y);
    hg.pooled = y;

    hg.logits = build_linear(ctx, y, w.cls);
    ggml_set_name(hg.logits, "head.logits");
    ggml_set_output(hg.logits);
    ggml_build_forward_expand(hg.graph, hg.pooled);
    ggml_build_forward_expand(hg.graph, hg.logits);
    return hg;
}

}  // namespace jepa
