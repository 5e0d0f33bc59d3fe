#include "ac.h"

#include "blocks.h"
#include "rope.h"

#include <cmath>

namespace jepa {

namespace {
constexpr int64_t kCond = 2;  // action, state
}  // namespace

AcPredGraph build_ac_pred_graph(ggml_context * ctx, const Model & m, int64_t T, int64_t HW, int B, bool flash) {
    const PredHparams & p = m.hp.pred;
    const PredW & w = m.pred;
    const int64_t D_enc = m.hp.enc.embed_dim, D = p.embed_dim, hd = p.head_dim();
    const int64_t per = kCond + HW, n_tok = T * per;

    AcPredGraph g;
    g.graph = ggml_new_graph_custom(ctx, 8192, false);
    g.latents = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D_enc, T * HW, B);
    g.actions = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.action_dim, T, B);
    g.states = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.state_dim, T, B);
    g.rope_cos = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, 1);
    g.rope_sin = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, 1);
    g.mask = ggml_new_tensor_2d(ctx, flash ? GGML_TYPE_F16 : GGML_TYPE_F32, n_tok, n_tok);
    ggml_set_name(g.latents, "ac.latents");
    ggml_set_name(g.actions, "ac.actions");
    ggml_set_name(g.states, "ac.states");
    ggml_set_name(g.rope_cos, "ac.rope_cos");
    ggml_set_name(g.rope_sin, "ac.rope_sin");
    ggml_set_name(g.mask, "ac.mask");
    for (ggml_tensor * t : {g.latents, g.actions, g.states, g.rope_cos, g.rope_sin, g.mask}) ggml_set_input(t);

    // [action_t, state_t, x_t] per frame: [D, 2 + HW, T, B] flattened to [D, T*(2+HW), B].
    ggml_tensor * x = ggml_reshape_4d(ctx, build_linear(ctx, g.latents, w.embed), D, HW, T, B);
    ggml_tensor * a = ggml_reshape_4d(ctx, build_linear(ctx, g.actions, w.action_embed), D, 1, T, B);
    ggml_tensor * s = ggml_reshape_4d(ctx, build_linear(ctx, g.states, w.state_embed), D, 1, T, B);
    x = ggml_concat(ctx, ggml_concat(ctx, a, s, 1), x, 1);
    x = ggml_reshape_3d(ctx, x, D, n_tok, B);
    ggml_set_name(x, "ac.in");

    AttnOptions attn = attn_options(m, p.block.n_head, hd, flash);
    attn.mask = g.mask;
    attn.rope_cos = g.rope_cos;
    attn.rope_sin = g.rope_sin;
    for (int il = 0; il < p.n_layer; ++il) {
        x = build_vit_block(ctx, x, w.blocks[size_t(il)], p.block, attn, il, "pred.blk");
    }

    // Drop the conditioning tokens: the HW patch rows of every frame.
    const size_t row = x->nb[1];
    ggml_tensor * patches = ggml_view_4d(ctx, x, D, HW, T, B, row, row * size_t(per), x->nb[2], row * kCond);
    x = ggml_reshape_3d(ctx, ggml_cont(ctx, patches), D, T * HW, B);
    x = build_norm(ctx, x, w.norm, p.block.ln_eps);
    ggml_set_name(x, "ac.norm");
    g.out = graph_output(g.graph, build_linear(ctx, x, w.proj), "ac.out");
    return g;
}

void ac_rope_tables(const Model & m, int64_t T, int gh, int gw, std::vector<float> & cos, std::vector<float> & sin) {
    const PredHparams & p = m.hp.pred;
    const int hd = p.head_dim();
    const int64_t HW = int64_t(gh) * gw, per = kCond + HW, n_tok = T * per;
    std::vector<RopePos> pos(static_cast<size_t>(n_tok));
    for (int64_t i = 0; i < n_tok; ++i) {
        const int64_t t = i / per, j = i % per - kCond;
        pos[size_t(i)] = j < 0 ? RopePos{int32_t(t), 0, 0} : RopePos{int32_t(t), int32_t(j / gw), int32_t(j % gw)};
    }
    cos.assign(size_t(n_tok) * size_t(hd), 0.0f);
    sin.assign(cos.size(), 0.0f);
    rope3d_tables(hd, p.rope_theta, pos.data(), n_tok, cos.data(), sin.data());
}

void ac_frame_causal_mask(int64_t T, int64_t per_frame, std::vector<float> & mask) {
    const int64_t n = T * per_frame;
    mask.assign(size_t(n * n), 0.0f);
    for (int64_t q = 0; q < n; ++q) {
        for (int64_t k = 0; k < n; ++k) {
            if (k / per_frame > q / per_frame) mask[size_t(q * n + k)] = -INFINITY;
        }
    }
}

}  // namespace jepa
