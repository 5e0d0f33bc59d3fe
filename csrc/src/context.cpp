#include "context.h"

#include "cpu/caches.h"
#include "cpu/gemm.h"

#include "error.h"
#include "head.h"
#include "host.h"
#include "input_checks.h"
#include "predictor.h"
#include "rope.h"
#include "weights.h"

#include "ggml-cpu.h"

#include <algorithm>

namespace jepa {

namespace {
constexpr size_t kGraphNodes = 16384;
}  // namespace

Context::Context(const Model & model, const jepa_context_params & params) : model_(model), params_(params) {
    if (params_.max_batch < 1 || params_.max_batch > JEPA_MAX_BATCH_LIMIT) {
        fail_arg(JEPA_ERR_INVALID_ARG, "max_batch", "max_batch must be in [1, %d], got %d", JEPA_MAX_BATCH_LIMIT,
                 params_.max_batch);
    }
    if (params_.max_graph_bytes < 0) fail(JEPA_ERR_INVALID_ARG, "max_graph_bytes must be >= 0");
    if (params_.max_output_bytes < 0) {
        fail_arg(JEPA_ERR_INVALID_ARG, "max_output_bytes", "max_output_bytes must be >= 0 (0: no cap), got %lld",
                 (long long) params_.max_output_bytes);
    }
    if (params_.flash_attn < -1 || params_.flash_attn > 1) fail(JEPA_ERR_INVALID_ARG, "flash_attn must be -1, 0 or 1");
    backend_ = model_.new_backend();
    set_threads(params_.n_threads);
    galloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
    if (!galloc_) {
        ggml_backend_free(backend_);
        fail(JEPA_ERR_RESOURCE, "cannot create the graph allocator");
    }
    gmeta_.resize(ggml_tensor_overhead() * kGraphNodes + ggml_graph_overhead_custom(kGraphNodes, false));
}

Context::~Context() {
    if (gctx_) ggml_free(gctx_);
    if (galloc_) ggml_gallocr_free(galloc_);
    if (backend_) ggml_backend_free(backend_);
}

void Context::set_threads(int n) {
    if (n > 1024) fail(JEPA_ERR_INVALID_ARG, "n_threads %d is too many (max 1024)", n);
    params_.n_threads = n <= 0 ? default_threads() : n;
    if (ggml_backend_is_cpu(backend_)) ggml_backend_cpu_set_n_threads(backend_, params_.n_threads);
}

void Context::set_max_batch(int n) {
    if (n < 1 || n > JEPA_MAX_BATCH_LIMIT) {
        fail_arg(JEPA_ERR_INVALID_ARG, "max_batch", "max_batch must be in [1, %d], got %d", JEPA_MAX_BATCH_LIMIT, n);
    }
    params_.max_batch = n;
}

ggml_context * Context::graph_ctx() {
    if (gctx_) ggml_free(gctx_);
    ggml_init_params ip{gmeta_.size(), gmeta_.data(), /*no_alloc =*/ true};
    gctx_ = ggml_init(ip);
    if (!gctx_) fail(JEPA_ERR_RESOURCE, "cannot create a graph context");
    return gctx_;
}

bool Context::use_flash() const {
    // Auto: flash everywhere. On the CPU it measured 1.10-1.26x faster than the plain path at ViT-S/L
    // sizes with the same parity and batch bit-identity (docs/performance.md), and it needs no
    // [N, N, heads] score matrix for long clips (8192 tokens: 4 GiB per layer for ViT-L).
    return params_.flash_attn != 0;
}

void Context::allocate(ggml_cgraph * graph) {
    if (!ggml_gallocr_alloc_graph(galloc_, graph)) {
        fail(JEPA_ERR_RESOURCE, "cannot allocate the compute buffer for this graph");
    }
}

void Context::check_file() const {
    if (!model_.map) return;
    const std::string why = model_.map->changed();
    if (!why.empty()) {
        // param "model_file": the server tells this from a request's fault by it (and reloads).
        fail_arg(JEPA_ERR_BAD_FILE, "model_file", "the model file changed under the running process: %s; load it "
                 "again (replace model files by rename, never in place)", why.c_str());
    }
}

void Context::compute(ggml_cgraph * graph) {
    // Before: a model whose file changed computes nothing. After: what a graph computed while it
    // changed (a truncation the SIGBUS guard turned into zero pages, a rewrite) is not returned.
    check_file();
    const int64_t scratch_failed = gemm::scratch_failures();
    const ggml_status st = ggml_backend_graph_compute(backend_, graph);
    check_file();
    if (st != GGML_STATUS_SUCCESS) fail(JEPA_ERR_BACKEND, "graph compute failed (ggml status %d)", int(st));
    // A kernel that could not get its scratch memory computed nothing: the answer is not there.
    if (gemm::scratch_failures() != scratch_failed) {
        fail(JEPA_ERR_RESOURCE, "out of memory: the engine's CPU kernels could not allocate their scratch buffers");
    }
}

size_t Context::graph_bytes(ggml_cgraph * graph) {
    // Measure with an allocator of its own: a no-alloc reserve on galloc_ would leave it a plan
    // without buffers, which the next ggml_gallocr_alloc_graph of a same-shaped graph would trust.
    struct Measure {
        ggml_gallocr_t a;
        ~Measure() { ggml_gallocr_free(a); }
    } measure{ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_))};
    if (!measure.a) fail(JEPA_ERR_RESOURCE, "cannot create the graph allocator");
    size_t size = 0;
    ggml_gallocr_reserve_n_size(measure.a, graph, nullptr, nullptr, &size);
    return size;
}

int Context::cache_items(int want, size_t size) const {
    // On the CPU, the items of one graph keep its compute buffer within a quarter of the L3: each
    // op's output is then still in cache for the next op (ViT-S/16 f32 at batch 32, 2 threads, a
    // 32 MB L3, one process: 24.2 ms per image in one graph, 23.6 in graphs of 8 items, 23.3 of 6,
    // 21.6 of 4 (8 MB), 22.3 of 3, 23.5 one by one; the AVX2 kernels 44.0, 43.4, 41.7 of 4). An item
    // batched is the item alone, so this changes no bit.
    const double target = double(cpu::caches().l3) / 4;
    if (double(size) <= target) return want;
    // Rounded, not floored: the 4 items of 8.08 MB above ran faster than 3.
    const int fit = std::max(1, int(double(want) * target / double(size) + 0.5));
    const int n_graphs = (want + fit - 1) / fit;
    return (want + n_graphs - 1) / n_graphs;  // the same number of graphs, as even as they go
}

int Context::fit_chunk(const std::function<ggml_cgraph *(int)> & build, int want, const std::string & what,
                       bool cache_fit) {
    cache_fit = cache_fit && want > 1 && ggml_backend_is_cpu(backend_);
    if (params_.max_graph_bytes <= 0 && !cache_fit) return want;
    // One measured build serves both: the cache's choice and the first step of the limit's halving.
    int b = want;
    size_t size = graph_bytes(build(b));
    if (cache_fit) {
        b = cache_items(want, size);
        if (params_.max_graph_bytes <= 0) return b;
        if (b != want) size = graph_bytes(build(b));
    }
    for (;; b = (b + 1) / 2, size = graph_bytes(build(b))) {
        if (int64_t(size) <= params_.max_graph_bytes) return b;
        if (b == 1) {
            fail(JEPA_ERR_RESOURCE, "one %s needs a %lld-byte compute buffer, over the context's limit of %lld bytes",
                 what.c_str(), (long long) size, (long long) params_.max_graph_bytes);
        }
    }
}

void Context::set_encoder_rope(const EncoderGraph & eg, const PatchGrid & g, const int32_t * keep_ids, int64_t n_keep,
                               int B) {
    const EncoderHparams & e = model_.hp.enc;
    if (g.t != rope_grid_.t || g.h != rope_grid_.h || g.w != rope_grid_.w) {
        rope3d_grid_tables(e.head_dim(), {e.rope_theta, e.rope_interleaved}, e.n_prefix(), g.t, g.h, g.w, e.rope_ref_grid,
                           rope_cos_, rope_sin_);
        rope_grid_ = g;
    }
    if (n_keep == 0) {
        ggml_backend_tensor_set(eg.rope_cos, rope_cos_.data(), 0, ggml_nbytes(eg.rope_cos));
        ggml_backend_tensor_set(eg.rope_sin, rope_sin_.data(), 0, ggml_nbytes(eg.rope_sin));
        return;
    }
    // The masked encoder: each kept token's row of the grid's tables (the same numbers as unmasked).
    const size_t hd = size_t(e.head_dim());
    std::vector<float> cos(size_t(B) * size_t(n_keep) * hd), sin(cos.size());
    for (size_t r = 0; r < size_t(B) * size_t(n_keep); ++r) {
        const size_t src = size_t(keep_ids[r]) * hd;
        std::copy_n(rope_cos_.data() + src, hd, cos.data() + r * hd);
        std::copy_n(rope_sin_.data() + src, hd, sin.data() + r * hd);
    }
    ggml_backend_tensor_set(eg.rope_cos, cos.data(), 0, ggml_nbytes(eg.rope_cos));
    ggml_backend_tensor_set(eg.rope_sin, sin.data(), 0, ggml_nbytes(eg.rope_sin));
}

void Context::encode_chunk(const float * pixels, const InputShape & s, float * out, const int32_t * keep_ids) {
    const EncoderHparams & e = model_.hp.enc;
    const PatchGrid g = encoder_grid(model_, s.C, s.T, s.H, s.W);
    EncoderGraph eg = build_encoder_graph(graph_ctx(), model_, s, use_flash());
    allocate(eg.graph);

    patches_.resize(size_t(ggml_nelements(eg.patches)));
    patchify(pixels, s, e.tubelet_for(s.T), e.patch_size, patches_.data());
    ggml_backend_tensor_set(eg.patches, patches_.data(), 0, ggml_nbytes(eg.patches));
    if (eg.keep) ggml_backend_tensor_set(eg.keep, keep_ids, 0, ggml_nbytes(eg.keep));
    if (eg.rope_cos) set_encoder_rope(eg, g, keep_ids, s.n_keep, s.B);

    compute(eg.graph);
    ggml_backend_tensor_get(eg.out, out, 0, ggml_nbytes(eg.out));
}

int64_t Context::encoder_width(const InputShape & s) const {
    const EncoderHparams & e = model_.hp.enc;
    if (!s.levels) return e.embed_dim;
    if (e.hier_layers.empty()) {
        fail(JEPA_ERR_UNSUPPORTED, "encode levels: this model has one output level (no jepa.enc.hier_layers)");
    }
    return int64_t(e.embed_dim) * int64_t(e.hier_layers.size());
}

void Context::check_keep(const InputShape & s, const int32_t * keep_ids) const {
    const EncoderHparams & e = model_.hp.enc;
    if (e.pos_type != JEPA_POS_ROPE3D || e.n_prefix() > 0 || e.block_causal) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "ids", "encode: a masked call needs a RoPE encoder without prefix tokens or "
                 "block-causal attention (V-JEPA 2, 2.1)");
    }
    if (!keep_ids) fail(JEPA_ERR_INVALID_ARG, "encode: the token ids must not be NULL");
    const int64_t Np = encoder_grid(model_, s.C, s.T, s.H, s.W).n();
    if (s.n_keep > Np) {
        fail_arg(JEPA_ERR_INVALID_ARG, "ids", "encode: %lld token ids for an input of %lld tokens", (long long) s.n_keep,
                 (long long) Np);
    }
    for (int64_t i = 0; i < int64_t(s.B) * s.n_keep; ++i) {
        if (keep_ids[i] < 0 || keep_ids[i] >= Np) {
            fail_arg(JEPA_ERR_INVALID_ARG, "ids", "encode: token id %d at %lld is out of range [0, %lld)", keep_ids[i],
                     (long long) i, (long long) Np);
        }
    }
}

void Context::encode(const float * pixels, const InputShape & s, float * out, size_t out_len, const int32_t * keep_ids) {
    const int64_t width = encoder_width(s);  // first: what the model cannot give is said before anything else
    if (!pixels || !out) fail(JEPA_ERR_INVALID_ARG, "encode: pixels and out must not be NULL");
    if (s.B < 1) fail(JEPA_ERR_INVALID_ARG, "encode: batch size must be >= 1, got %d", s.B);
    if (s.n_keep < 0) fail_arg(JEPA_ERR_INVALID_ARG, "ids", "encode: %lld token ids", (long long) s.n_keep);
    if (s.n_keep > 0) check_keep(s, keep_ids);
    const int64_t n_tok = s.n_keep > 0 ? s.n_keep : encoder_n_tokens(model_, s.C, s.T, s.H, s.W);
    const int64_t per_item = n_tok * width;
    check_output(mul_sat({s.B, per_item}), params_.max_output_bytes, "encode");
    if (out_len / size_t(s.B) < size_t(per_item)) {
        fail(JEPA_ERR_INVALID_ARG, "encode: out holds %zu floats, needs %lld", out_len, (long long) (per_item * s.B));
    }
    const size_t in_item = size_t(s.C) * s.T * s.H * s.W;
    check_finite(pixels, size_t(s.B) * in_item, in_item, "pixels", "encode");
    const bool flash = use_flash();
    auto build = [&](int b) {
        InputShape c = s;
        c.B = b;
        return build_encoder_graph(graph_ctx(), model_, c, flash).graph;
    };
    const int chunk = fit_chunk(build, std::min(s.B, params_.max_batch), format("item of %dx%dx%d", s.T, s.H, s.W),
                                /*cache_fit=*/true);
    for (int b0 = 0; b0 < s.B; b0 += chunk) {
        InputShape c = s;
        c.B = std::min(chunk, s.B - b0);
        encode_chunk(pixels + size_t(b0) * in_item, c, out + size_t(b0) * size_t(per_item),
                     keep_ids ? keep_ids + size_t(b0) * size_t(s.n_keep) : nullptr);
    }
}

size_t Context::encode_memory(const InputShape & s) {
    if (s.B < 1) fail(JEPA_ERR_INVALID_ARG, "encode_memory: batch size must be >= 1, got %d", s.B);
    InputShape c = s;
    c.B = std::min(s.B, params_.max_batch);  // encode runs the batch in chunks of at most max_batch
    return graph_bytes(build_encoder_graph(graph_ctx(), model_, c, use_flash()).graph);
}

void Context::classify(const float * tokens, int B, int64_t N, int D, float * logits, size_t logits_len,
                       float * pooled, size_t pooled_len) {
    const Model & m = model_;
    if (m.hp.head.kind == JEPA_HEAD_NONE) fail(JEPA_ERR_UNSUPPORTED, "classify: this model has no classifier head");
    if (!tokens || !logits) fail(JEPA_ERR_INVALID_ARG, "classify: tokens and logits must not be NULL");
    if (B < 1 || N < 1) fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "classify: bad shape [%d, %lld, %d]", B, (long long) N, D);
    if (D != m.hp.enc.embed_dim) {
        fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "classify: tokens have width %d, the model's encoder gives %d", D, m.hp.enc.embed_dim);
    }
    const int64_t C = m.hp.head.n_classes;
    check_output(mul_sat({B, C + (pooled ? D : 0)}), params_.max_output_bytes, "classify");
    if (logits_len / size_t(B) < size_t(C)) {
        fail(JEPA_ERR_INVALID_ARG, "classify: logits holds %zu floats, needs %lld", logits_len, (long long) (C * B));
    }
    if (pooled && pooled_len / size_t(B) < size_t(D)) {
        fail(JEPA_ERR_INVALID_ARG, "classify: pooled holds %zu floats, needs %lld", pooled_len, (long long) D * B);
    }
    check_finite(tokens, size_t(B) * size_t(N) * size_t(D), size_t(N) * size_t(D), "tokens", "classify");
    const bool flash = use_flash();
    auto build = [&](int b) { return build_head_graph(graph_ctx(), m, N, b, flash).graph; };
    const int chunk = fit_chunk(build, std::min(B, params_.max_batch), format("item of %lld tokens", (long long) N));
    const size_t in_item = size_t(N) * size_t(D);
    for (int b0 = 0; b0 < B; b0 += chunk) {
        const int b = std::min(chunk, B - b0);
        HeadGraph hg = build_head_graph(graph_ctx(), m, N, b, flash);
        allocate(hg.graph);
        ggml_backend_tensor_set(hg.tokens, tokens + size_t(b0) * in_item, 0, ggml_nbytes(hg.tokens));
        compute(hg.graph);
        ggml_backend_tensor_get(hg.logits, logits + size_t(b0) * size_t(C), 0, ggml_nbytes(hg.logits));
        if (pooled) ggml_backend_tensor_get(hg.pooled, pooled + size_t(b0) * size_t(D), 0, ggml_nbytes(hg.pooled));
    }
}

void Context::predict(const float * tokens, int B, int64_t n_ctx, int D, const int32_t * ctx_ids,
                      const int32_t * tgt_ids, int64_t n_tgt, const PredictOptions & opt, float * out, size_t out_len) {
    const Model & m = model_;
    const PredHparams & p = m.hp.pred;
    if (p.kind != JEPA_PRED_MASKED) {
        fail(JEPA_ERR_UNSUPPORTED, "predict: this model has no masked predictor%s",
             p.kind == JEPA_PRED_NONE ? "" : " (its predictor is a world model's: see jepa_world_predict)");
    }
    if (!tokens || !ctx_ids || !tgt_ids || !out) {
        fail(JEPA_ERR_INVALID_ARG, "predict: tokens, context ids, target ids and out must not be NULL");
    }
    if (B < 1 || n_ctx < 1 || n_tgt < 1) {
        fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "predict: bad shape (B %d, %lld context, %lld target tokens)", B, (long long) n_ctx,
             (long long) n_tgt);
    }
    const int64_t D_in = int64_t(m.hp.enc.embed_dim) * p.in_levels;
    if (D != D_in) {
        if (p.in_levels > 1) {
            fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "predict: tokens have width %d; this predictor reads the encoder's %d levels "
                     "side by side, %lld wide (encode(levels=True))", D, p.in_levels, (long long) D_in);
        }
        fail_arg(JEPA_ERR_INVALID_ARG, "tokens", "predict: tokens have width %d, the model's encoder gives %d", D, m.hp.enc.embed_dim);
    }
    if (opt.context_out && !p.proj_context) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "context", "predict: this predictor has no context projection (pred.proj_context)");
    }
    if (opt.image && !p.modality_embed) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "modality", "predict: this predictor has no modality vectors: it takes no modality");
    }
    if (n_ctx + n_tgt > (1 << 20)) fail_arg(JEPA_ERR_INVALID_ARG, "target_ids", "predict: %lld tokens is too many", (long long) (n_ctx + n_tgt));
    const int gh = opt.grid_h > 0 ? opt.grid_h : p.grid_size;
    const int gw = opt.grid_w > 0 ? opt.grid_w : p.grid_size;
    if (opt.grid_h < 0 || opt.grid_w < 0 || gh > 8192 || gw > 8192) {
        fail_arg(JEPA_ERR_INVALID_ARG, "grid", "predict: bad grid %dx%d", opt.grid_h, opt.grid_w);
    }
    const int64_t max_id = int64_t(1) << 24;
    auto check_ids = [&](const int32_t * ids, int64_t n, const char * what, const char * param) {
        for (int64_t i = 0; i < n; ++i) {
            if (ids[i] < 0 || ids[i] >= max_id) {
                fail_arg(JEPA_ERR_INVALID_ARG, param, "predict: %s id %d at %lld is out of range [0, %lld)", what,
                         ids[i], (long long) i, (long long) max_id);
            }
        }
    };
    check_ids(ctx_ids, int64_t(B) * n_ctx, "context", "context_ids");
    check_ids(tgt_ids, int64_t(B) * n_tgt, "target", "target_ids");
    const int64_t out_item = n_tgt * p.out_dim;
    check_output(mul_sat({B, out_item}), params_.max_output_bytes, "predict");
    check_finite(tokens, size_t(B) * size_t(n_ctx) * size_t(D), size_t(n_ctx) * size_t(D), "tokens", "predict");
    if (out_len / size_t(B) < size_t(out_item)) {
        fail(JEPA_ERR_INVALID_ARG, "predict: out holds %zu floats, needs %lld", out_len, (long long) (out_item * B));
    }
    const int64_t ctx_item = n_ctx * p.out_dim;
    if (opt.context_out) {
        check_output(mul_sat({B, out_item + ctx_item}), params_.max_output_bytes, "predict");
        if (opt.context_out_len / size_t(B) < size_t(ctx_item)) {
            fail(JEPA_ERR_INVALID_ARG, "predict: context_out holds %zu floats, needs %lld", opt.context_out_len,
                 (long long) (ctx_item * B));
        }
    }
    PredRequest req;
    req.mask_index = ((opt.mask_index % p.n_mask_tokens) + p.n_mask_tokens) % p.n_mask_tokens;
    req.image = opt.image;
    req.context = opt.context_out != nullptr;
    const int64_t n_tok = n_ctx + n_tgt;
    const bool flash = use_flash();
    auto build = [&](int b) { return build_pred_graph(graph_ctx(), m, n_ctx, n_tgt, b, req, flash).graph; };
    const int chunk = fit_chunk(build, std::min(B, params_.max_batch),
                                format("prediction of %lld tokens", (long long) n_tok));

    const int hd = p.head_dim();
    std::vector<RopePos> pos(static_cast<size_t>(n_tok));
    std::vector<float> cos, sin;
    for (int b0 = 0; b0 < B; b0 += chunk) {
        const int b = std::min(chunk, B - b0);
        PredGraph pg = build_pred_graph(graph_ctx(), m, n_ctx, n_tgt, b, req, flash);
        allocate(pg.graph);
        cos.resize(size_t(b) * size_t(n_tok) * size_t(hd));
        sin.resize(cos.size());
        for (int i = 0; i < b; ++i) {
            const int32_t * ci = ctx_ids + size_t(b0 + i) * size_t(n_ctx);
            const int32_t * ti = tgt_ids + size_t(b0 + i) * size_t(n_tgt);
            for (int64_t k = 0; k < n_ctx; ++k) pos[size_t(k)] = rope_pos_of_id(ci[k], gh, gw);
            for (int64_t k = 0; k < n_tgt; ++k) pos[size_t(n_ctx + k)] = rope_pos_of_id(ti[k], gh, gw);
            const size_t off = size_t(i) * size_t(n_tok) * size_t(hd);
            rope3d_tables(hd, {p.rope_theta, p.rope_interleaved}, pos.data(), n_tok, cos.data() + off, sin.data() + off);
        }
        ggml_backend_tensor_set(pg.tokens, tokens + size_t(b0) * size_t(n_ctx) * size_t(D), 0, ggml_nbytes(pg.tokens));
        ggml_backend_tensor_set(pg.rope_cos, cos.data(), 0, ggml_nbytes(pg.rope_cos));
        ggml_backend_tensor_set(pg.rope_sin, sin.data(), 0, ggml_nbytes(pg.rope_sin));
        compute(pg.graph);
        ggml_backend_tensor_get(pg.out, out + size_t(b0) * size_t(out_item), 0, ggml_nbytes(pg.out));
        if (pg.ctx_out) {
            ggml_backend_tensor_get(pg.ctx_out, opt.context_out + size_t(b0) * size_t(ctx_item), 0, ggml_nbytes(pg.ctx_out));
        }
    }
}

}  // namespace jepa
