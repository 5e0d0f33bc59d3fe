// Context: the world-model entry points (LeWM and V-JEPA 2-AC). Each call chunks the batch by
// max_batch (and max_graph_bytes); an item's rows never depend on the other items of its batch.
#include "context.h"

#include "ac.h"
#include "error.h"
#include "lewm.h"

#include <algorithm>
#include <cmath>

namespace jepa {

namespace {

void need_pred(const Model & m, const char * kind, const char * what) {
    if (m.hp.pred.kind != kind) {
        fail(JEPA_ERR_UNSUPPORTED, "%s: this model has no %s predictor (jepa.pred.kind \"%s\")", what, kind,
             m.hp.pred.kind.c_str());
    }
}

void need_len(size_t have, int64_t per_item, int B, const char * what, const char * name) {
    if (have / size_t(B) < size_t(per_item)) {
        fail(JEPA_ERR_INVALID_ARG, "%s: %s holds %zu floats, needs %lld", what, name, have,
             (long long) (per_item * B));
    }
}

}  // namespace

void Context::lewm_project(const float * cls, int B, int E, float * out, size_t out_len) {
    const Model & m = model_;
    need_pred(m, "lewm", "lewm_embed");
    if (!cls || !out) fail(JEPA_ERR_INVALID_ARG, "lewm_embed: inputs and out must not be NULL");
    if (B < 1) fail(JEPA_ERR_INVALID_ARG, "lewm_embed: batch size must be >= 1, got %d", B);
    if (E != m.hp.enc.embed_dim) {
        fail(JEPA_ERR_INVALID_ARG, "lewm_embed: CLS rows have width %d, the encoder gives %d", E, m.hp.enc.embed_dim);
    }
    const int64_t D = m.hp.pred.embed_dim;
    need_len(out_len, D, B, "lewm_embed", "out");
    for (int b0 = 0; b0 < B; b0 += params_.max_batch) {
        const int b = std::min(params_.max_batch, B - b0);
        LewmProjectGraph g = build_lewm_project_graph(graph_ctx(), m, b);
        allocate(g.graph);
        ggml_backend_tensor_set(g.cls, cls + size_t(b0) * size_t(E), 0, ggml_nbytes(g.cls));
        compute(g.graph);
        ggml_backend_tensor_get(g.out, out + size_t(b0) * size_t(D), 0, ggml_nbytes(g.out));
    }
}

void Context::lewm_embed(const float * pixels, const InputShape & s, float * out, size_t out_len) {
    need_pred(model_, "lewm", "lewm_embed");
    if (s.B < 1) fail(JEPA_ERR_INVALID_ARG, "lewm_embed: batch size must be >= 1, got %d", s.B);
    const int64_t n_tok = encoder_n_tokens(model_, s.C, s.T, s.H, s.W);
    const int E = model_.hp.enc.embed_dim;
    std::vector<float> tokens(size_t(s.B) * size_t(n_tok) * size_t(E));
    encode(pixels, s, tokens.data(), tokens.size());
    std::vector<float> cls(size_t(s.B) * size_t(E));
    for (int b = 0; b < s.B; ++b) {
        std::copy_n(tokens.data() + size_t(b) * size_t(n_tok) * size_t(E), size_t(E), cls.data() + size_t(b) * size_t(E));
    }
    lewm_project(cls.data(), s.B, E, out, out_len);
}

void Context::lewm_predict(const float * embs, const float * actions, int B, int64_t T, int D, int A, float * out,
                           size_t out_len, float * raw, float * act_emb) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    need_pred(m, "lewm", "lewm_predict");
    if (!embs || !actions || !out) fail(JEPA_ERR_INVALID_ARG, "lewm_predict: embs, actions and out must not be NULL");
    if (B < 1 || T < 1) fail(JEPA_ERR_INVALID_ARG, "lewm_predict: bad shape (B %d, T %lld)", B, (long long) T);
    if (T > p.n_frames) {
        fail(JEPA_ERR_INVALID_ARG, "lewm_predict: %lld time steps, but the predictor's window is %d", (long long) T,
             p.n_frames);
    }
    if (D != p.embed_dim) fail(JEPA_ERR_INVALID_ARG, "lewm_predict: embeddings have width %d, expected %d", D, p.embed_dim);
    if (A != p.action_dim) fail(JEPA_ERR_INVALID_ARG, "lewm_predict: actions have width %d, expected %d", A, p.action_dim);
    const int64_t per_item = T * D;
    need_len(out_len, per_item, B, "lewm_predict", "out");

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
        ggml_backend_tensor_set(g.embs, embs + size_t(b0) * size_t(per_item), 0, ggml_nbytes(g.embs));
        ggml_backend_tensor_set(g.actions, actions + size_t(b0) * size_t(T * A), 0, ggml_nbytes(g.actions));
        ggml_backend_tensor_set(g.mask, mask.data(), 0, ggml_nbytes(g.mask));
        compute(g.graph);
        const size_t off = size_t(b0) * size_t(per_item);
        ggml_backend_tensor_get(g.out, out + off, 0, ggml_nbytes(g.out));
        if (raw) ggml_backend_tensor_get(g.raw, raw + off, 0, ggml_nbytes(g.raw));
        if (act_emb) ggml_backend_tensor_get(g.act_emb, act_emb + off, 0, ggml_nbytes(g.act_emb));
    }
}

void Context::ac_predict(const float * latents, const float * actions, const float * states, int B, int64_t T,
                         int64_t HW, int D, float * out, size_t out_len) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    need_pred(m, "ac", "ac_predict");
    if (!latents || !actions || !states || !out) {
        fail(JEPA_ERR_INVALID_ARG, "ac_predict: latents, actions, states and out must not be NULL");
    }
    if (B < 1 || T < 1 || HW < 1) {
        fail(JEPA_ERR_INVALID_ARG, "ac_predict: bad shape (B %d, T %lld, HW %lld)", B, (long long) T, (long long) HW);
    }
    if (D != m.hp.enc.embed_dim) {
        fail(JEPA_ERR_INVALID_ARG, "ac_predict: latents have width %d, the encoder gives %d", D, m.hp.enc.embed_dim);
    }
    const int g = p.grid_size;
    if (HW != int64_t(g) * g) {
        fail(JEPA_ERR_UNSUPPORTED, "ac_predict: %lld tokens per frame; this predictor runs the native %dx%d grid (%d)",
             (long long) HW, g, g, g * g);
    }
    if (T * (2 + HW) > (1 << 16)) fail(JEPA_ERR_INVALID_ARG, "ac_predict: %lld frames is too many", (long long) T);
    const int64_t per_item = T * HW * D;
    need_len(out_len, per_item, B, "ac_predict", "out");

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
        ggml_backend_tensor_set(pg.latents, latents + size_t(b0) * size_t(per_item), 0, ggml_nbytes(pg.latents));
        ggml_backend_tensor_set(pg.actions, actions + size_t(b0) * size_t(T * p.action_dim), 0, ggml_nbytes(pg.actions));
        ggml_backend_tensor_set(pg.states, states + size_t(b0) * size_t(T * p.state_dim), 0, ggml_nbytes(pg.states));
        ggml_backend_tensor_set(pg.rope_cos, cos.data(), 0, ggml_nbytes(pg.rope_cos));
        ggml_backend_tensor_set(pg.rope_sin, sin.data(), 0, ggml_nbytes(pg.rope_sin));
        ggml_backend_tensor_set(pg.mask, flash ? static_cast<const void *>(mask16.data()) : mask.data(), 0,
                                ggml_nbytes(pg.mask));
        compute(pg.graph);
        ggml_backend_tensor_get(pg.out, out + size_t(b0) * size_t(per_item), 0, ggml_nbytes(pg.out));
    }
}

}  // namespace jepa
