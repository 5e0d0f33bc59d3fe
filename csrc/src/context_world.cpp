// Context: the world-model entries (docs/world-models.md), one pair for every predictor kind:
// world_latents (encoder tokens -> the predictor's latents) and world_predict (one predictor pass).
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
    if (in.A != p.action_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "actions", "%s: actions have width %d, this model's are %d wide", what, in.A,
                 p.action_dim);
    }
    if (in.S != p.state_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "states", "%s: states have width %d, this model's are %d wide", what, in.S,
                 p.state_dim);
    }
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

void Context::ac_predict(const jepa_world_input & in, const jepa_world_output & out) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    const int B = in.B, D = in.D;
    const int64_t T = in.T, HW = in.P;
    const int g = p.grid_size;
    if (HW != int64_t(g) * g) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "latents",
                 "world_predict: %lld tokens per frame; this ac predictor runs the native %dx%d grid (%d)",
                 (long long) HW, g, g, g * g);
    }
    if (T * (2 + HW) > (1 << 16)) {
        fail_arg(JEPA_ERR_INVALID_ARG, "latents", "world_predict: %lld frames is too many", (long long) T);
    }
    const int64_t per_item = T * HW * D;
    need_len(out.len, per_item, B, "world_predict", "out");

    std::vector<float> cos, sin, mask;
    ac_rope_tables(m, T, g, g, cos, sin);
    ac_frame_causal_mask(T, 2 + HW, mask);
    const bool flash = use_flash();
    std::vector<ggml_fp16_t> mask16;
    if (flash) {
        mask16.resize(mask.size());
        for (size_t i = 0; i < mask.size(); ++i) mask16[i] = ggml_fp32_to_fp16(mask[i]);
    }
    auto build = [&](int b) { return build_ac_pred_graph(graph_ctx(), m, T, HW, b, flash).graph; };
    const int chunk = fit_chunk(build, std::min(B, params_.max_batch),
                                format("prediction of %lld frames", (long long) T));
    for (int b0 = 0; b0 < B; b0 += chunk) {
        const int b = std::min(chunk, B - b0);
        AcPredGraph pg = build_ac_pred_graph(graph_ctx(), m, T, HW, b, flash);
        allocate(pg.graph);
        ggml_backend_tensor_set(pg.latents, in.latents + size_t(b0) * size_t(per_item), 0, ggml_nbytes(pg.latents));
        ggml_backend_tensor_set(pg.actions, in.actions + size_t(b0) * size_t(T * p.action_dim), 0,
                                ggml_nbytes(pg.actions));
        ggml_backend_tensor_set(pg.states, in.states + size_t(b0) * size_t(T * p.state_dim), 0, ggml_nbytes(pg.states));
        ggml_backend_tensor_set(pg.rope_cos, cos.data(), 0, ggml_nbytes(pg.rope_cos));
        ggml_backend_tensor_set(pg.rope_sin, sin.data(), 0, ggml_nbytes(pg.rope_sin));
        ggml_backend_tensor_set(pg.mask, flash ? static_cast<const void *>(mask16.data()) : mask.data(), 0,
                                ggml_nbytes(pg.mask));
        compute(pg.graph);
        ggml_backend_tensor_get(pg.out, out.pred + size_t(b0) * size_t(per_item), 0, ggml_nbytes(pg.out));
    }
}

}  // namespace jepa
