#include "ac.h"

#include "blocks.h"
#include "rope.h"

#include <cmath>

namespace jepa {

namespace {
constexpr int64_t kCond = 2;  // action, state

// The predictor's attention: the panel kernel for every key count, so that a frame's rows have the
// same bits over its own frames' keys alone (a cached rollout) as over a longer masked prefix.
AttnOptions ac_attn(const Model & m, bool flash) {
    AttnOptions a = attn_options(m, m.hp.pred.block.n_head, m.hp.pred.head_dim(), flash);
    a.one_kernel = true;
    return a;
}

ggml_tensor * input(ggml_context * ctx, ggml_tensor * t, const char * name) {
    ggml_set_name(t, name);
    ggml_set_input(t);
    return t;
}

// Rows [r0, r0 + rows) of every item of a cache tensor [hd, n_head, rows kept, >= B].
ggml_tensor * kv_rows(ggml_context * ctx, ggml_tensor * c, int64_t r0, int64_t rows, int64_t B) {
    return ggml_view_4d(ctx, c, c->ne[0], c->ne[1], rows, B, c->nb[1], c->nb[2], c->nb[3], size_t(r0) * c->nb[2]);
}

// The keys (or values) frame t's attention reads, frames 0 .. t, from cur [hd, n_head, 2 + HW, B],
// frame t's own. Where the cache has room, cur is copied in at frame t (the copy is in the graph
// ahead of the attention) and the attention reads the cache's first t + 1 frames; past it (the last
// step) the kept frames and cur are concatenated.
ggml_tensor * kv_frames(ggml_context * ctx, ggml_cgraph * gf, ggml_tensor * cache, ggml_tensor * cur, int64_t t,
                        int64_t cap) {
    const int64_t per = cur->ne[2], B = cur->ne[3];
    if (t < cap) {
        ggml_build_forward_expand(gf, ggml_cpy(ctx, cur, kv_rows(ctx, cache, t * per, per, B)));
        return t == 0 ? cur : kv_rows(ctx, cache, 0, (t + 1) * per, B);
    }
    if (t == 0) return cur;
    return ggml_concat(ctx, kv_rows(ctx, cache, 0, t * per, B), cur, 2);
}

ggml_tensor * contiguous(ggml_context * ctx, ggml_tensor * t) { return ggml_is_contiguous(t) ? t : ggml_cont(ctx, t); }

// The HW patch rows of every frame of x [D, T*(2+HW), B] through pred.norm and pred.proj.
ggml_tensor * build_ac_out(ggml_context * ctx, const Model & m, ggml_tensor * x, int64_t T, int64_t HW, int B) {
    const PredHparams & p = m.hp.pred;
    const size_t row = x->nb[1];
    ggml_tensor * patches =
        ggml_view_4d(ctx, x, p.embed_dim, HW, T, B, row, row * size_t(kCond + HW), x->nb[2], row * kCond);
    x = ggml_reshape_3d(ctx, ggml_cont(ctx, patches), p.embed_dim, T * HW, B);
    x = build_norm(ctx, x, m.pred.norm, p.block.ln_eps);
    ggml_set_name(x, "ac.norm");
    return build_linear(ctx, x, m.pred.proj);
}
}  // namespace

AcPredGraph build_ac_pred_graph(ggml_context * ctx, const Model & m, int64_t T, int64_t HW, int B, bool flash) {
    const PredHparams & p = m.hp.pred;
    const PredW & w = m.pred;
    const int64_t D_enc = m.hp.enc.embed_dim, D = p.embed_dim, hd = p.head_dim();
    const int64_t per = kCond + HW, n_tok = T * per;

    AcPredGraph g;
    g.graph = ggml_new_graph_custom(ctx, 8192, false);
    g.latents = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D_enc, T * HW, B), "ac.latents");
    g.actions = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.action_dim, T, B), "ac.actions");
    g.states = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.state_dim, T, B), "ac.states");
    g.rope_cos = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, 1), "ac.rope_cos");
    g.rope_sin = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, n_tok, 1), "ac.rope_sin");
    g.mask = input(ctx, ggml_new_tensor_2d(ctx, flash ? GGML_TYPE_F16 : GGML_TYPE_F32, n_tok, n_tok), "ac.mask");

    // [action_t, state_t, x_t] per frame: [D, 2 + HW, T, B] flattened to [D, T*(2+HW), B].
    ggml_tensor * x = ggml_reshape_4d(ctx, build_linear(ctx, g.latents, w.embed), D, HW, T, B);
    ggml_tensor * a = ggml_reshape_4d(ctx, build_linear(ctx, g.actions, w.action_embed), D, 1, T, B);
    ggml_tensor * s = ggml_reshape_4d(ctx, build_linear(ctx, g.states, w.state_embed), D, 1, T, B);
    x = ggml_concat(ctx, ggml_concat(ctx, a, s, 1), x, 1);
    x = ggml_reshape_3d(ctx, x, D, n_tok, B);
    ggml_set_name(x, "ac.in");

    AttnOptions attn = ac_attn(m, flash);
    attn.mask = g.mask;
    attn.rope_cos = g.rope_cos;
    attn.rope_sin = g.rope_sin;
    for (int il = 0; il < p.n_layer; ++il) {
        x = build_vit_block(ctx, x, w.blocks[size_t(il)], p.block, attn, il, "pred.blk");
    }
    g.out = graph_output(g.graph, build_ac_out(ctx, m, x, T, HW, B), "ac.out");
    return g;
}

AcSharedGraph build_ac_shared_graph(ggml_context * ctx, const Model & m, int64_t HW) {
    const PredHparams & p = m.hp.pred;
    const int64_t hd = p.head_dim();
    AcSharedGraph g;
    g.graph = ggml_new_graph_custom(ctx, 1024, false);
    g.latents = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, m.hp.enc.embed_dim, HW, 1), "ac.shared.latents");
    g.rope_cos = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, HW, 1), "ac.shared.rope_cos");
    g.rope_sin = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, HW, 1), "ac.shared.rope_sin");
    AttnOptions attn = ac_attn(m, false);
    attn.rope_cos = g.rope_cos;
    attn.rope_sin = g.rope_sin;
    ggml_tensor * x = build_linear(ctx, g.latents, m.pred.embed);
    const Qkv qkv = build_block_qkv(ctx, x, m.pred.blocks[0], p.block, attn);
    g.x = graph_output(g.graph, x, "ac.shared.x");
    g.q = graph_output(g.graph, contiguous(ctx, qkv.q), "ac.shared.q");
    g.k = graph_output(g.graph, contiguous(ctx, qkv.k), "ac.shared.k");
    g.v = graph_output(g.graph, contiguous(ctx, qkv.v), "ac.shared.v");
    return g;
}

AcKvCache ac_kv_cache_tensors(ggml_context * ctx, const Model & m, int64_t cap, int64_t HW, int B) {
    const PredHparams & p = m.hp.pred;
    AcKvCache c;
    c.cap = cap;
    if (cap < 1) return c;
    for (int il = 0; il < p.n_layer; ++il) {
        for (auto * list : {&c.k, &c.v}) {
            ggml_tensor * t =
                ggml_new_tensor_4d(ctx, GGML_TYPE_F32, p.head_dim(), p.block.n_head, cap * (kCond + HW), B);
            ggml_format_name(t, "ac.cache.%s.%d", list == &c.k ? "k" : "v", il);
            list->push_back(t);
        }
    }
    return c;
}

AcStepGraph build_ac_step_graph(ggml_context * ctx, const Model & m, int64_t t, int64_t HW, int B, bool flash,
                                const AcKvCache & cache) {
    const PredHparams & p = m.hp.pred;
    const PredW & w = m.pred;
    const int64_t D = p.embed_dim, hd = p.head_dim(), nh = p.block.n_head, per = kCond + HW;

    AcStepGraph g;
    g.graph = ggml_new_graph_custom(ctx, 8192, false);
    g.actions = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.action_dim, 1, B), "ac.step.actions");
    g.states = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, p.state_dim, 1, B), "ac.step.states");
    g.rope_cos = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, per, 1), "ac.step.rope_cos");
    g.rope_sin = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, 1, per, 1), "ac.step.rope_sin");
    AttnOptions attn = ac_attn(m, flash);
    attn.rope_cos = g.rope_cos;
    attn.rope_sin = g.rope_sin;

    // [action_t, state_t]: [D, 2, B].
    ggml_tensor * cond = ggml_concat(ctx, build_linear(ctx, g.actions, w.action_embed),
                                     build_linear(ctx, g.states, w.state_embed), 1);
    auto kv = [&](Qkv qkv, int il) {
        const bool kept = cache.cap > 0;
        qkv.k = kv_frames(ctx, g.graph, kept ? cache.k[size_t(il)] : nullptr, qkv.k, t, cache.cap);
        qkv.v = kv_frames(ctx, g.graph, kept ? cache.v[size_t(il)] : nullptr, qkv.v, t, cache.cap);
        return qkv;
    };
    ggml_tensor * x = nullptr;
    int il = 0;
    if (t == 0) {
        // The context frame: its patch rows' embedding and layer-0 q, k, v are the shared graph's;
        // the conditioning rows (RoPE rows 0 and 1, both at (0, 0, 0)) join them here.
        g.shared_x = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, D, HW, 1), "ac.step.shared_x");
        g.shared_q = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, nh, HW, 1), "ac.step.shared_q");
        g.shared_k = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, nh, HW, 1), "ac.step.shared_k");
        g.shared_v = input(ctx, ggml_new_tensor_4d(ctx, GGML_TYPE_F32, hd, nh, HW, 1), "ac.step.shared_v");
        AttnOptions ca = attn;
        auto cond_rows = [&](ggml_tensor * tab) {
            return ggml_view_4d(ctx, tab, hd, 1, kCond, 1, tab->nb[1], tab->nb[2], tab->nb[3], 0);
        };
        ca.rope_cos = cond_rows(g.rope_cos);
        ca.rope_sin = cond_rows(g.rope_sin);
        const VitBlockW & b0 = w.blocks[0];
        const Qkv c = build_block_qkv(ctx, cond, b0, p.block, ca);
        auto join = [&](ggml_tensor * rows, ggml_tensor * shared) {
            return ggml_concat(ctx, rows, ggml_repeat_4d(ctx, shared, hd, nh, HW, B), 2);
        };
        x = ggml_concat(ctx, cond, ggml_repeat_4d(ctx, g.shared_x, D, HW, B, 1), 1);
        ggml_set_name(x, "ac.step.in");
        x = build_vit_block_rest(ctx, x, kv({join(c.q, g.shared_q), join(c.k, g.shared_k), join(c.v, g.shared_v)}, 0),
                                 b0, p.block, attn, 0, "pred.blk");
        il = 1;
    } else {
        g.latents = input(ctx, ggml_new_tensor_3d(ctx, GGML_TYPE_F32, m.hp.enc.embed_dim, HW, B), "ac.step.latents");
        x = ggml_concat(ctx, cond, build_linear(ctx, g.latents, w.embed), 1);  // [D, 2 + HW, B]
        ggml_set_name(x, "ac.step.in");
    }
    for (; il < p.n_layer; ++il) {
        const VitBlockW & b = w.blocks[size_t(il)];
        x = build_vit_block_rest(ctx, x, kv(build_block_qkv(ctx, x, b, p.block, attn), il), b, p.block, attn, il,
                                 "pred.blk");
    }
    g.out = graph_output(g.graph, build_ac_out(ctx, m, x, 1, HW, B), "ac.step.out");
    return g;
}

void ac_rope_tables(const Model & m, int64_t t0, int64_t T, int gh, int gw, std::vector<float> & cos,
                    std::vector<float> & sin) {
    const PredHparams & p = m.hp.pred;
    const int hd = p.head_dim();
    const int64_t HW = int64_t(gh) * gw, per = kCond + HW, n_tok = T * per;
    std::vector<RopePos> pos(static_cast<size_t>(n_tok));
    for (int64_t i = 0; i < n_tok; ++i) {
        const int64_t t = t0 + i / per, j = i % per - kCond;
        pos[size_t(i)] = j < 0 ? RopePos{float(t), 0, 0} : RopePos{float(t), float(j / gw), float(j % gw)};
    }
    cos.assign(size_t(n_tok) * size_t(hd), 0.0f);
    sin.assign(cos.size(), 0.0f);
    rope3d_tables(hd, {p.rope_theta, p.rope_interleaved}, pos.data(), n_tok, cos.data(), sin.data());
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
