#include "predictor.h"

#include "blocks.h"

#include <cmath>

namespace jepa {

PredGraph build_pred_graph(ggml_context * ctx, const Model & m, int64_t n_ctx, int64_t n_tgt, int B,
                           const PredRequest & req, bool flash) {
    const PredHparams & p = m.hp.pred;
    const PredW & w = m.pred;
    const int64_t D_in = int64_t(m.hp.enc.embed_dim) * p.in_levels, D = p.embed_dim, hd = p.head_dim();
    const int64_t n_tok = n_ctx + n_tgt;

    PredGraph pg;
    pg.graph = ggml_new_graph_custom(ctx, 8192, false);
    pg.tokens = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D_in, n_ctx, B);
    ggml_set_name(pg.tokens, "pred.tokens");
    ggml_set_input(pg.tokens);
    pg.rope_cos = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, B);
    pg.rope_sin = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, B);
    ggml_set_name(pg.rope_cos, "pred.rope_cos");
    ggml_set_name(pg.rope_sin, "pred.rope_sin");
    ggml_set_input(pg.rope_cos);
    ggml_set_input(pg.rope_sin);

    ggml_tensor * x = build_linear(ctx, pg.tokens, w.embed);  // [D, n_ctx, B]
    if (w.embed2.w) x = build_linear(ctx, build_act(ctx, x, Act::GeluErf), w.embed2);  // V-JEPA 2.1's MLP input
    ggml_set_name(x, "pred.embed");
    ggml_tensor * mask = ggml_view_2d(ctx, w.mask_tokens, D, 1, w.mask_tokens->nb[1],
                                      size_t(req.mask_index) * w.mask_tokens->nb[1]);
    mask = ggml_repeat_4d(ctx, mask, D, n_tgt, B, 1);
    x = ggml_concat(ctx, x, mask, 1);  // [D, n_ctx + n_tgt, B]
    if (p.modality_embed) x = ggml_add(ctx, x, req.image ? w.mod_img : w.mod_video);  // on every token (2.1)
    ggml_set_name(x, "pred.in");

    AttnOptions attn = attn_options(m, p.block.n_head, hd, flash);
    attn.rope_cos = pg.rope_cos;
    attn.rope_sin = pg.rope_sin;
    for (int il = 0; il < p.n_layer; ++il) {
        x = build_vit_block(ctx, x, w.blocks[size_t(il)], p.block, attn, il, "pred.blk");
    }
    x = build_norm(ctx, x, w.norm, p.block.ln_eps);
    ggml_set_name(x, "pred.norm");

    // The target rows, made contiguous so the projection takes the batched matmul path.
    ggml_tensor * tgt = ggml_cont(ctx, ggml_view_3d(ctx, x, D, n_tgt, B, x->nb[1], x->nb[2], size_t(n_ctx) * x->nb[1]));
    pg.out = graph_output(pg.graph, build_linear(ctx, tgt, w.proj), "pred.out");
    if (req.context) {
        ggml_tensor * rows = ggml_cont(ctx, ggml_view_3d(ctx, x, D, n_ctx, B, x->nb[1], x->nb[2], 0));
        pg.ctx_out = graph_output(pg.graph, build_linear(ctx, rows, w.proj_context), "pred.ctx_out");
    }
    return pg;
}

}  // namespace jepa
