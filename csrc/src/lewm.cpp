#include "lewm.h"

#include "blocks.h"

#include <cmath>

namespace jepa {

LewmProjectGraph build_lewm_project_graph(ggml_context * ctx, const Model & m, int B) {
    const EncoderW & w = m.enc;
    LewmProjectGraph g;
    g.graph = ggml_new_graph_custom(ctx, 256, false);
    g.cls = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, m.hp.enc.embed_dim, 1, B);
    ggml_set_name(g.cls, "lewm.cls");
    ggml_set_input(g.cls);
    ggml_tensor * h = build_act(ctx, build_linear(ctx, g.cls, w.proj0), m.hp.enc.proj_act, w.proj0.packed);
    ggml_set_name(h, "lewm.proj.hidden");
    g.out = graph_output(g.graph, build_linear(ctx, h, w.proj2), "lewm.emb");
    return g;
}

namespace {

// le-wm's ConditionalBlock: adaLN-zero around an Attention and a FeedForward that each open with
// their own affine LayerNorm. On the engine's kernels the six chunks of the modulation are views read
// in place, each modulated norm is one pass and each gate rides its product's epilogue with the
// residual; elsewhere they are ggml's copies and elementwise ops.
ggml_tensor * build_adaln_block(ggml_context * ctx, ggml_tensor * x, ggml_tensor * c_act, const VitBlockW & b,
                                const PredHparams & p, const AttnOptions & attn, int layer) {
    const int64_t D = x->ne[0];
    ggml_tensor * mod = build_linear(ctx, c_act, b.adaln);  // [6 D, T, B]
    ggml_format_name(mod, "pred.blk.%d.adaln", layer);
    auto view = [&](int i) {
        return ggml_view_3d(ctx, mod, D, mod->ne[1], mod->ne[2], mod->nb[1], mod->nb[2],
                            size_t(i) * size_t(D) * ggml_element_size(mod));
    };
    const AdalnNorms norms = adaln_norms(x, view(0), view(1), b.ln1, view(3), view(4), b.ln2, b.adaln.packed);
    auto chunk = [&](int i) { return norms.fused ? view(i) : ggml_cont(ctx, view(i)); };
    ggml_tensor * shift1 = chunk(0), * scale1 = chunk(1), * gate1 = chunk(2);
    ggml_tensor * shift2 = chunk(3), * scale2 = chunk(4), * gate2 = chunk(5);

    ggml_tensor * h = build_adaln_norm(ctx, x, shift1, scale1, b.ln1, p.adaln_eps, p.block.ln_eps, norms);
    Qkv qkv = build_qkv(ctx, h, b, p.block.n_head);
    x = build_linear(ctx, build_attn(ctx, qkv.q, qkv.k, qkv.v, attn), b.attn_out, x, gate1);  // x + h gate
    ggml_format_name(x, "pred.blk.%d.attn_res", layer);

    h = build_adaln_norm(ctx, x, shift2, scale2, b.ln2, p.adaln_eps, p.block.ln_eps, norms);
    x = build_mlp(ctx, h, b.ffn_up, b.ffn_down, p.block.act, x, gate2);
    ggml_format_name(x, "pred.blk.%d.out", layer);
    return x;
}

}  // namespace

LewmPredGraph build_lewm_pred_graph(ggml_context * ctx, const Model & m, int64_t T, int B) {
    const PredHparams & p = m.hp.pred;
    const PredW & w = m.pred;
    const int64_t D = p.embed_dim;

    LewmPredGraph g;
    g.graph = ggml_new_graph_custom(ctx, 4096, false);
    g.embs = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, T, B);
    g.actions = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.action_dim, T, B);
    g.mask = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, T, T);
    ggml_set_name(g.embs, "lewm.embs");
    ggml_set_name(g.actions, "lewm.actions");
    ggml_set_name(g.mask, "lewm.mask");
    ggml_set_input(g.embs);
    ggml_set_input(g.actions);
    ggml_set_input(g.mask);

    // The action embedder (its Conv1d is folded into action_embed.0 by the converter).
    g.act_emb = build_mlp(ctx, g.actions, w.action_embed0, w.action_embed2, p.action_act);
    ggml_set_name(g.act_emb, "lewm.act_emb");
    ggml_set_output(g.act_emb);
    // Every block's adaLN reads SiLU(c).
    ggml_tensor * c_act = build_act(ctx, g.act_emb, Act::Silu, w.action_embed2.packed);

    ggml_tensor * pos = ggml_view_2d(ctx, w.pos_embed, D, T, w.pos_embed->nb[1], 0);
    ggml_tensor * x = ggml_add(ctx, g.embs, pos);
    ggml_set_name(x, "pred.in");

    AttnOptions attn = attn_options(m, p.block.n_head, p.head_dim(), false);
    attn.own_kernels = m.n_packed > 0;  // up to 16 keys: the engine's direct kernel whatever flash says
    attn.mask = g.mask;
    for (int il = 0; il < p.n_layer; ++il) {
        x = build_adaln_block(ctx, x, c_act, w.blocks[size_t(il)], p, attn, il);
    }
    g.raw = build_norm(ctx, x, w.norm, p.block.ln_eps);
    ggml_set_name(g.raw, "lewm.pred_raw");
    ggml_set_output(g.raw);
    g.out = build_mlp(ctx, g.raw, w.proj, w.proj2, p.proj_act);
    ggml_set_name(g.out, "lewm.pred");
    ggml_set_output(g.out);
    ggml_build_forward_expand(g.graph, g.act_emb);
    ggml_build_forward_expand(g.graph, g.raw);
    ggml_build_forward_expand(g.graph, g.out);
    return g;
}

}  // namespace jepa
