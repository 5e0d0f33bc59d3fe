// Context: the world-model entries (docs/world-models.md), one pair for every predictor kind:
// world_latents (encoder tokens -> the predictor's latents) and world_predict (one predictor pass),
// and V-JEPA 2-AC's whole rollout, world_rollout (cached, or every prefix recomputed as upstream).
// Each call chunks the batch by max_batch (and max_graph_bytes); an item's rows never depend on the
// other items of its batch.
#include "context.h"

#include "ac.h"
#include "error.h"
#include "input_checks.h"
#include "lewm.h"

#include <algorithm>
#include <cmath>

namespace jepa {

namespace {

void need_world(const Model & m, jepa_pred_kind want, const char * what) {
    const jepa_pred_kind have = m.hp.pred.kind;
    if (have != JEPA_PRED_AC && have != JEPA_PRED_LEWM) {
        fail(JEPA_ERR_UNSUPPORTED, "%s: this model is not a world model (no LeWM or V-JEPA 2-AC predictor%s%s)",
             what, have == JEPA_PRED_NONE ? "" : "; its predictor is ", pred_kind_name(have));
    }
    if (want != have) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "kind", "%s: the input is tagged \"%s\", the model's predictor is \"%s\"", what,
                 pred_kind_name(want), pred_kind_name(have));
    }
}

// Actions and states as wide as the predictor takes them (world_predict and world_rollout alike).
void check_action_state_widths(const PredHparams & p, int A, int S, const char * what) {
    if (A != p.action_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "actions", "%s: actions have width %d, this model's are %d wide", what, A,
                 p.action_dim);
    }
    if (S != p.state_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "states", "%s: states have width %d, this model's are %d wide", what, S,
                 p.state_dim);
    }
}

void need_len(size_t have, int64_t per_item, int B, const char * what, const char * name) {
    if (have / size_t(B) < size_t(per_item)) {
        fail_arg(JEPA_ERR_INVALID_ARG, name, "%s: %s holds %zu floats, needs %lld", what, name, have,
                 (long long) (per_item * B));
    }
}

// numpy's pairwise sum of n doubles (numpy/_core/src/umath/loops_utils.h.src, PW_BLOCKSIZE 128):
// the non-affine LayerNorm of the AC latents returns the bits upstream's float64 arithmetic (and
// the numpy reference) gives.
double pairwise_sum(const double * a, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; ++i) res += a[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int k = 0; k < 8; ++k) r[k] = a[k];
        int64_t i = 8;
        for (; i < n - (n % 8); i += 8) {
            for (int k = 0; k < 8; ++k) r[k] += a[i + k];
        }
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; ++i) res += a[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return pairwise_sum(a, n2) + pairwise_sum(a + n2, n - n2);
}

// F.layer_norm(x, (D,)) without affine, in float64, rounded to float32.
void normalize_rows(const float * x, int64_t rows, int D, double eps, float * out) {
    std::vector<double> v(static_cast<size_t>(D)), d(static_cast<size_t>(D));
    for (int64_t r = 0; r < rows; ++r) {
        const float * row = x + size_t(r) * size_t(D);
        for (int i = 0; i < D; ++i) v[size_t(i)] = double(row[i]);
        const double mu = pairwise_sum(v.data(), D) / double(D);
        for (int i = 0; i < D; ++i) d[size_t(i)] = (v[size_t(i)] - mu) * (v[size_t(i)] - mu);
        const double sd = std::sqrt(pairwise_sum(d.data(), D) / double(D) + eps);
        float * o = out + size_t(r) * size_t(D);
        for (int i = 0; i < D; ++i) o[i] = float((v[size_t(i)] - mu) / sd);
    }
}

}  // namespace

void Context::world_latents(const float * tokens, int B, int64_t N, int E, float * out, size_t out_len) {
    const Model & m = model_;
    need_world(m, m.hp.pred.kind, "world_latents");
    if (!tokens) fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "world_latents: tokens must not be NULL");
    if (!out) fail_arg(JEPA_ERR_INVALID_ARG, "out", "world_latents: out must not be NULL");
    if (B < 1 || N < 1) {
        fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "world_latents: bad shape [%d, %lld, %d]", B, (long long) N, E);
    }
    if (E != m.hp.enc.embed_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "world_latents: tokens have width %d, the encoder gives %d", E,
                 m.hp.enc.embed_dim);
    }
    const int64_t out_item = m.hp.pred.kind == JEPA_PRED_AC ? N * E : m.hp.pred.embed_dim;
    check_output(mul_sat({B, out_item}), params_.max_output_bytes, "world_latents");
    check_finite(tokens, size_t(B) * size_t(N) * size_t(E), size_t(N) * size_t(E), "tokens", "world_latents");
    if (m.hp.pred.kind == JEPA_PRED_AC) {
        need_len(out_len, N * E, B, "world_latents", "out");
        normalize_rows(tokens, int64_t(B) * N, E, double(m.hp.pred.norm_reps_eps), out);
        return;
    }
    // LeWM: the CLS row (token 0, after the encoder's final norm) through the projector.
    const int64_t D = m.hp.pred.embed_dim;
    need_len(out_len, D, B, "world_latents", "out");
    std::vector<float> cls(size_t(params_.max_batch) * size_t(E));
    for (int b0 = 0; b0 < B; b0 += params_.max_batch) {
        const int b = std::min(params_.max_batch, B - b0);
        for (int i = 0; i < b; ++i) {
            std::copy_n(tokens + size_t(b0 + i) * size_t(N) * size_t(E), size_t(E), cls.data() + size_t(i) * size_t(E));
        }
        LewmProjectGraph g = build_lewm_project_graph(graph_ctx(), m, b);
        allocate(g.graph);
        ggml_backend_tensor_set(g.cls, cls.data(), 0, ggml_nbytes(g.cls));
        compute(g.graph);
        ggml_backend_tensor_get(g.out, out + size_t(b0) * size_t(D), 0, ggml_nbytes(g.out));
    }
}

void Context::world_predict(const jepa_world_input & in, const jepa_world_output & out) {
    const Model & m = model_;
    need_world(m, in.kind, "world_predict");
    const PredHparams & p = m.hp.pred;
    const char * what = "world_predict";
    if (!in.latents) fail_arg(JEPA_ERR_INVALID_ARG, "latents", "%s: latents must not be NULL", what);
    if (!in.actions) fail_arg(JEPA_ERR_INVALID_ARG, "actions", "%s: actions must not be NULL", what);
    if (!out.pred) fail_arg(JEPA_ERR_INVALID_ARG, "out", "%s: out.pred must not be NULL", what);
    if (in.B < 1 || in.T < 1 || in.P < 1) {
        fail_arg(JEPA_ERR_INVALID_ARG, "latents", "%s: bad shape (B %d, T %d, P %d)", what, in.B, in.T, in.P);
    }
    const int D = m.hp.pred.kind == JEPA_PRED_LEWM ? p.embed_dim : m.hp.enc.embed_dim;
    if (in.D != D) fail_arg(JEPA_ERR_INVALID_ARG, "latents", "%s: latents have width %d, expected %d", what, in.D, D);
    check_action_state_widths(p, in.A, in.S, what);
    const int64_t rows = mul_sat({in.B, in.T, in.P});
    const int n_out = 1 + (out.raw ? 1 : 0) + (out.act_emb ? 1 : 0);
    check_output(mul_sat({rows, in.D, n_out}), params_.max_output_bytes, what);
    const size_t steps = size_t(in.B) * size_t(in.T);
    check_finite(in.latents, size_t(rows) * size_t(in.D), size_t(in.T) * size_t(in.P) * size_t(in.D), "latents", what);
    check_finite(in.actions, steps * size_t(in.A), size_t(in.T) * size_t(in.A), "actions", what);
    if (in.states) check_finite(in.states, steps * size_t(in.S), size_t(in.T) * size_t(in.S), "states", what);
    if (p.kind == JEPA_PRED_LEWM) {
        if (in.P != 1) fail_arg(JEPA_ERR_INVALID_ARG, "latents", "%s: a lewm step is one latent row, got %d", what, in.P);
        if (in.states) fail_arg(JEPA_ERR_INVALID_ARG, "states", "%s: a lewm model takes no states", what);
        lewm_predict(in, out);
    } else {
        if (!in.states) fail_arg(JEPA_ERR_INVALID_ARG, "states", "%s: an ac model needs states", what);
        if (out.raw || out.act_emb) fail_arg(JEPA_ERR_UNSUPPORTED, "out", "%s: an ac predictor has no taps", what);
        ac_predict(in, out);
    }
}

void Context::lewm_predict(const jepa_world_input & in, const jepa_world_output & out) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    const int B = in.B, D = in.D, A = p.action_dim;
    const int64_t T = in.T;
    if (T > p.n_frames) {
        fail_arg(JEPA_ERR_INVALID_ARG, "latents", "world_predict: %lld time steps, but the lewm predictor's window is %d",
                 (long long) T, p.n_frames);
    }
    const int64_t per_item = T * D;
    need_len(out.len, per_item, B, "world_predict", "out");

    std::vector<float> mask(size_t(T * T), 0.0f);
    for (int64_t q = 0; q < T; ++q) {
        for (int64_t k = q + 1; k < T; ++k) mask[size_t(q * T + k)] = -INFINITY;
    }
    auto build = [&](int b) { return build_lewm_pred_graph(graph_ctx(), m, T, b).graph; };
    const int chunk = fit_chunk(build, std::min(B, params_.max_batch), format("prediction of %lld steps", (long long) T));
    for (int b0 = 0; b0 < B; b0 += chunk) {
        const int b = std::min(chunk, B - b0);
        LewmPredGraph g = build_lewm_pred_graph(graph_ctx(), m, T, b);
        allocate(g.graph);
        ggml_backend_tensor_set(g.embs, in.latents + size_t(b0) * size_t(per_item), 0, ggml_nbytes(g.embs));
        ggml_backend_tensor_set(g.actions, in.actions + size_t(b0) * size_t(T * A), 0, ggml_nbytes(g.actions));
        ggml_backend_tensor_set(g.mask, mask.data(), 0, ggml_nbytes(g.mask));
        compute(g.graph);
        const size_t off = size_t(b0) * size_t(per_item);
        ggml_backend_tensor_get(g.out, out.pred + off, 0, ggml_nbytes(g.out));
        if (out.raw) ggml_backend_tensor_get(g.raw, out.raw + off, 0, ggml_nbytes(g.raw));
        if (out.act_emb) ggml_backend_tensor_get(g.act_emb, out.act_emb + off, 0, ggml_nbytes(g.act_emb));
    }
}

struct Context::AcTables {
    std::vector<float> cos, sin, mask;
    std::vector<ggml_fp16_t> mask16;  // the mask for flash attention
    bool flash = false;

    AcTables(const Model & m, int64_t T, bool use_flash) : flash(use_flash) {
        const int g = m.hp.pred.grid_size;
        ac_rope_tables(m, 0, T, g, g, cos, sin);
        ac_frame_causal_mask(T, 2 + int64_t(g) * g, mask);
        if (flash) {
            mask16.resize(mask.size());
            for (size_t i = 0; i < mask.size(); ++i) mask16[i] = ggml_fp32_to_fp16(mask[i]);
        }
    }
};

namespace {

// The AC predictor's frame checks, shared by world_predict and world_rollout.
// param: the argument the frames are ("latents" for world_predict, "context" for world_rollout).
void need_ac_frames(const Model & m, int64_t T, int64_t HW, const char * what, const char * param) {
    const int g = m.hp.pred.grid_size;
    if (HW != int64_t(g) * g) {
        fail_arg(JEPA_ERR_UNSUPPORTED, param,
                 "%s: %lld tokens per frame; this ac predictor runs the native %dx%d grid (%d)", what, (long long) HW,
                 g, g, g * g);
    }
    if (T * (2 + HW) > (1 << 16)) {
        fail_arg(JEPA_ERR_INVALID_ARG, param, "%s: %lld frames is too many", what, (long long) T);
    }
}

}  // namespace

void Context::ac_pred_graph(const AcTables & tab, int64_t T, int64_t HW, int b, const float * latents,
                            const float * actions, const float * states, float * out) {
    AcPredGraph pg = build_ac_pred_graph(graph_ctx(), model_, T, HW, b, tab.flash);
    allocate(pg.graph);
    ggml_backend_tensor_set(pg.latents, latents, 0, ggml_nbytes(pg.latents));
    ggml_backend_tensor_set(pg.actions, actions, 0, ggml_nbytes(pg.actions));
    ggml_backend_tensor_set(pg.states, states, 0, ggml_nbytes(pg.states));
    ggml_backend_tensor_set(pg.rope_cos, tab.cos.data(), 0, ggml_nbytes(pg.rope_cos));
    ggml_backend_tensor_set(pg.rope_sin, tab.sin.data(), 0, ggml_nbytes(pg.rope_sin));
    ggml_backend_tensor_set(pg.mask, tab.flash ? static_cast<const void *>(tab.mask16.data()) : tab.mask.data(), 0,
                            ggml_nbytes(pg.mask));
    compute(pg.graph);
    ggml_backend_tensor_get(pg.out, out, 0, ggml_nbytes(pg.out));
}

void Context::ac_predict(const jepa_world_input & in, const jepa_world_output & out) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    const int B = in.B, D = in.D;
    const int64_t T = in.T, HW = in.P;
    need_ac_frames(m, T, HW, "world_predict", "latents");
    const int64_t per_item = T * HW * D;
    need_len(out.len, per_item, B, "world_predict", "out");

    const AcTables tab(m, T, use_flash());
    auto build = [&](int b) { return build_ac_pred_graph(graph_ctx(), m, T, HW, b, tab.flash).graph; };
    const int chunk = fit_chunk(build, std::min(B, params_.max_batch),
                                format("prediction of %lld frames", (long long) T));
    for (int b0 = 0; b0 < B; b0 += chunk) {
        const int b = std::min(chunk, B - b0);
        ac_pred_graph(tab, T, HW, b, in.latents + size_t(b0) * size_t(per_item),
                      in.actions + size_t(b0) * size_t(T * p.action_dim),
                      in.states + size_t(b0) * size_t(T * p.state_dim), out.pred + size_t(b0) * size_t(per_item));
    }
}

void Context::world_rollout(const jepa_world_rollout_input & in, const jepa_world_rollout_params & params, float * out,
                            size_t out_len) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    const char * what = "world_rollout";
    need_world(m, in.kind, what);
    if (p.kind != JEPA_PRED_AC) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "kind", "%s: a lewm rollout's window slides over its steps, so it runs over "
                 "world_predict (jepa.planning.lewm_rollout)", what);
    }
    if (!in.context) fail_arg(JEPA_ERR_INVALID_ARG, "context", "%s: context must not be NULL", what);
    if (!in.actions) fail_arg(JEPA_ERR_INVALID_ARG, "actions", "%s: actions must not be NULL", what);
    if (!in.states) fail_arg(JEPA_ERR_INVALID_ARG, "states", "%s: states must not be NULL", what);
    if (!out) fail_arg(JEPA_ERR_INVALID_ARG, "out", "%s: out must not be NULL", what);
    if (in.B < 1 || in.H < 1 || in.P < 1) {
        fail_arg(JEPA_ERR_INVALID_ARG, "actions", "%s: bad shape (B %d, H %d, P %d)", what, in.B, in.H, in.P);
    }
    if (in.D != m.hp.enc.embed_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "context", "%s: latents have width %d, expected %d", what, in.D,
                 m.hp.enc.embed_dim);
    }
    check_action_state_widths(p, in.A, in.S, what);
    need_ac_frames(m, in.H, in.P, what, "context");
    const int64_t n_out = mul_sat({in.B, in.H, in.P, in.D});
    check_output(n_out, params_.max_output_bytes, what);
    need_len(out_len, n_out / in.B, in.B, what, "out");
    const size_t steps = size_t(in.B) * size_t(in.H);
    check_finite(in.context, size_t(in.P) * size_t(in.D), size_t(in.P) * size_t(in.D), "context", what);
    check_finite(in.actions, steps * size_t(in.A), size_t(in.H) * size_t(in.A), "actions", what);
    check_finite(in.states, steps * size_t(in.S), size_t(in.H) * size_t(in.S), "states", what);
    if (params.cache) {
        ac_rollout_cached(in, out);
    } else {
        ac_rollout_recompute(in, out);
    }
}

namespace {

// Rows [t, t + n) of item i of a [B, H, w] array, for items [b0, b0 + b): into dst [b, n, w].
void gather_steps(const float * src, int64_t H, int64_t w, int b0, int b, int64_t t, int64_t n, float * dst) {
    for (int i = 0; i < b; ++i) {
        std::copy_n(src + (size_t(b0 + i) * size_t(H) + size_t(t)) * size_t(w), size_t(n * w),
                    dst + size_t(i) * size_t(n * w));
    }
}

// The owner of a rollout's key/value cache: its tensors' context and their backend buffer.
struct KvBuffer {
    ggml_context * ctx = nullptr;
    ggml_backend_buffer_t buf = nullptr;
    AcKvCache cache;

    KvBuffer(const Model & m, ggml_backend_t backend, int64_t cap, int64_t HW, int B) {
        if (cap < 1) return;
        const size_t n = 2 * size_t(m.hp.pred.n_layer);
        ggml_init_params ip{ggml_tensor_overhead() * n, nullptr, /*no_alloc =*/ true};
        ctx = ggml_init(ip);
        if (!ctx) fail(JEPA_ERR_RESOURCE, "cannot create the rollout's key/value cache context");
        cache = ac_kv_cache_tensors(ctx, m, cap, HW, B);
        buf = ggml_backend_alloc_ctx_tensors(ctx, backend);
        if (!buf) {
            ggml_free(ctx);
            fail(JEPA_ERR_RESOURCE, "out of memory: the rollout's key/value cache for %d candidates x %lld frames",
                 B, (long long) cap);
        }
    }
    ~KvBuffer() {
        if (buf) ggml_backend_buffer_free(buf);
        if (ctx) ggml_free(ctx);
    }
    KvBuffer(const KvBuffer &) = delete;
    KvBuffer & operator=(const KvBuffer &) = delete;
};

}  // namespace

void Context::ac_rollout_recompute(const jepa_world_rollout_input & in, float * out) {
    // Upstream's loop, one jepa_world_predict graph per step: frames 0 .. t in, the last block out.
    const Model & m = model_;
    const int64_t H = in.H, HW = in.P, D = in.D, A = in.A, S = in.S, frame = HW * D;
    const double eps = double(m.hp.pred.norm_reps_eps);
    std::vector<float> lat, act, st, pred;
    for (int64_t t = 0; t < H; ++t) {
        const int64_t T = t + 1;
        const AcTables tab(m, T, use_flash());
        auto build = [&](int b) { return build_ac_pred_graph(graph_ctx(), m, T, HW, b, tab.flash).graph; };
        const int chunk = fit_chunk(build, std::min(in.B, params_.max_batch),
                                    format("prediction of %lld frames", (long long) T));
        for (int b0 = 0; b0 < in.B; b0 += chunk) {
            const int b = std::min(chunk, in.B - b0);
            lat.resize(size_t(b * T * frame));
            for (int i = 0; i < b; ++i) {
                float * z = lat.data() + size_t(i * T * frame);
                std::copy_n(in.context, size_t(frame), z);
                std::copy_n(out + size_t(b0 + i) * size_t(H * frame), size_t(t * frame), z + frame);
            }
            act.resize(size_t(b * T * A));
            st.resize(size_t(b * T * S));
            gather_steps(in.actions, H, A, b0, b, 0, T, act.data());
            gather_steps(in.states, H, S, b0, b, 0, T, st.data());
            pred.resize(lat.size());
            ac_pred_graph(tab, T, HW, b, lat.data(), act.data(), st.data(), pred.data());
            for (int i = 0; i < b; ++i) {
                normalize_rows(pred.data() + size_t((i * T + t) * frame), HW, int(D), eps,
                               out + (size_t(b0 + i) * size_t(H) + size_t(t)) * size_t(frame));
            }
        }
    }
}

void Context::ac_rollout_cached(const jepa_world_rollout_input & in, float * out) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    const int64_t H = in.H, HW = in.P, D = in.D, A = in.A, S = in.S, frame = HW * D;
    const int64_t per = 2 + HW, hd = p.head_dim(), cap = H - 1;
    const double eps = double(p.norm_reps_eps);
    const bool flash = use_flash();
    std::vector<float> cos, sin;  // [H frames][per rows][hd]
    ac_rope_tables(m, 0, H, p.grid_size, p.grid_size, cos, sin);
    const size_t tab = size_t(per * hd);

    // What every candidate shares, once per call: the context frame's embedded patch rows and their
    // layer-0 q, k, v.
    std::vector<float> sx, sq, sk, sv;
    {
        AcSharedGraph sg = build_ac_shared_graph(graph_ctx(), m, HW);
        allocate(sg.graph);
        ggml_backend_tensor_set(sg.latents, in.context, 0, ggml_nbytes(sg.latents));
        ggml_backend_tensor_set(sg.rope_cos, cos.data() + 2 * hd, 0, ggml_nbytes(sg.rope_cos));
        ggml_backend_tensor_set(sg.rope_sin, sin.data() + 2 * hd, 0, ggml_nbytes(sg.rope_sin));
        compute(sg.graph);
        const std::pair<ggml_tensor *, std::vector<float> *> outs[] = {
            {sg.x, &sx}, {sg.q, &sq}, {sg.k, &sk}, {sg.v, &sv}};
        for (const auto & [t, v] : outs) {
            v->resize(size_t(ggml_nelements(t)));
            ggml_backend_tensor_get(t, v->data(), 0, ggml_nbytes(t));
        }
    }

    // Candidates per graph: the last step's graph, its cache made of graph tensors that are never
    // freed (outputs), so the measured size is the step's compute buffer and the cache together.
    auto build = [&](int b) {
        ggml_context * gc = graph_ctx();
        AcKvCache c = ac_kv_cache_tensors(gc, m, cap, HW, b);
        for (auto * list : {&c.k, &c.v}) {
            for (ggml_tensor * t : *list) ggml_set_output(t);
        }
        return build_ac_step_graph(gc, m, H - 1, HW, b, flash, c).graph;
    };
    const int chunk = fit_chunk(build, std::min(in.B, params_.max_batch),
                                format("rollout of %lld frames with its key/value cache", (long long) H));
    KvBuffer kv(m, backend_, cap, HW, chunk);
    std::vector<float> lat(size_t(chunk * frame)), pred(lat.size()), act(size_t(chunk * A)), st(size_t(chunk * S));
    for (int b0 = 0; b0 < in.B; b0 += chunk) {
        const int b = std::min(chunk, in.B - b0);
        for (int64_t t = 0; t < H; ++t) {
            AcStepGraph g = build_ac_step_graph(graph_ctx(), m, t, HW, b, flash, kv.cache);
            allocate(g.graph);
            if (t == 0) {
                ggml_backend_tensor_set(g.shared_x, sx.data(), 0, ggml_nbytes(g.shared_x));
                ggml_backend_tensor_set(g.shared_q, sq.data(), 0, ggml_nbytes(g.shared_q));
                ggml_backend_tensor_set(g.shared_k, sk.data(), 0, ggml_nbytes(g.shared_k));
                ggml_backend_tensor_set(g.shared_v, sv.data(), 0, ggml_nbytes(g.shared_v));
            } else {
                ggml_backend_tensor_set(g.latents, lat.data(), 0, ggml_nbytes(g.latents));
            }
            gather_steps(in.actions, H, A, b0, b, t, 1, act.data());
            gather_steps(in.states, H, S, b0, b, t, 1, st.data());
            ggml_backend_tensor_set(g.actions, act.data(), 0, ggml_nbytes(g.actions));
            ggml_backend_tensor_set(g.states, st.data(), 0, ggml_nbytes(g.states));
            ggml_backend_tensor_set(g.rope_cos, cos.data() + size_t(t) * tab, 0, ggml_nbytes(g.rope_cos));
            ggml_backend_tensor_set(g.rope_sin, sin.data() + size_t(t) * tab, 0, ggml_nbytes(g.rope_sin));
            compute(g.graph);
            ggml_backend_tensor_get(g.out, pred.data(), 0, ggml_nbytes(g.out));
            // Frame t + 1: the next step's latents, and the answer.
            normalize_rows(pred.data(), int64_t(b) * HW, int(D), eps, lat.data());
            for (int i = 0; i < b; ++i) {
                std::copy_n(lat.data() + size_t(i * frame), size_t(frame),
                            out + (size_t(b0 + i) * size_t(H) + size_t(t)) * size_t(frame));
            }
        }
    }
}

}  // namespace jepa
