#include "context.h"

#include "error.h"

#include "ggml-cpu.h"

#include <algorithm>
#include <thread>

namespace jepa {

namespace {
constexpr size_t kGraphNodes = 16384;

int default_threads() {
    const unsigned n = std::thread::hardware_concurrency();
    return n == 0 ? 1 : int(n);
}
}  // namespace

Context::Context(const Model & model, const jepa_context_params & params) : model_(model), params_(params) {
    if (params_.max_batch < 1 || params_.max_batch > 4096) {
        fail(JEPA_ERR_INVALID_ARG, "max_batch must be in [1, 4096], got %d", params_.max_batch);
    }
    if (params_.max_graph_bytes < 0) fail(JEPA_ERR_INVALID_ARG, "max_graph_bytes must be >= 0");
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
    if (n < 1 || n > 4096) fail(JEPA_ERR_INVALID_ARG, "max_batch must be in [1, 4096], got %d", n);
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
    // Auto: the plain path on the CPU (exact f32 softmax, measured as fast at ViT sizes); flash elsewhere.
    if (params_.flash_attn >= 0) return params_.flash_attn == 1;
    return !ggml_backend_is_cpu(backend_);
}

void Context::allocate(ggml_cgraph * graph) {
    if (!ggml_gallocr_alloc_graph(galloc_, graph)) {
        fail(JEPA_ERR_RESOURCE, "cannot allocate the compute buffer for this graph");
    }
}

int Context::fit_chunk(const InputShape & s, int want) {
    if (params_.max_graph_bytes <= 0) return want;
    for (int b = want;; b = (b + 1) / 2) {
        InputShape c = s;
        c.B = b;
        EncoderGraph eg = build_encoder_graph(graph_ctx(), model_, c, use_flash());
        size_t size = 0;
        ggml_gallocr_reserve_n_size(galloc_, eg.graph, nullptr, nullptr, &size);
        if (int64_t(size) <= params_.max_graph_bytes) return b;
        if (b == 1) {
            fail(JEPA_ERR_RESOURCE, "one item of %dx%dx%d needs a %lld-byte compute buffer, over the context's limit "
                 "of %lld bytes", s.T, s.H, s.W, (long long) size, (long long) params_.max_graph_bytes);
        }
    }
}

void Context::encode_chunk(const float * pixels, const InputShape & s, float * out) {
    const EncoderHparams & e = model_.hp.enc;
    EncoderGraph eg = build_encoder_graph(graph_ctx(), model_, s, use_flash());
    allocate(eg.graph);

    patches_.resize(size_t(ggml_nelements(eg.patches)));
    patchify(pixels, s, e.tubelet_size, e.patch_size, patches_.data());
    ggml_backend_tensor_set(eg.patches, patches_.data(), 0, ggml_nbytes(eg.patches));

    const ggml_status st = ggml_backend_graph_compute(backend_, eg.graph);
    if (st != GGML_STATUS_SUCCESS) fail(JEPA_ERR_BACKEND, "graph compute failed (ggml status %d)", int(st));
    ggml_backend_tensor_get(eg.out, out, 0, ggml_nbytes(eg.out));
}

void Context::encode(const float * pixels, const InputShape & s, float * out, size_t out_len) {
    if (!pixels || !out) fail(JEPA_ERR_INVALID_ARG, "encode: pixels and out must not be NULL");
    if (s.B < 1) fail(JEPA_ERR_INVALID_ARG, "encode: batch size must be >= 1, got %d", s.B);
    const int64_t n_tok = encoder_n_tokens(model_, s.C, s.T, s.H, s.W);
    const int64_t per_item = n_tok * model_.hp.enc.embed_dim;
    if (out_len / size_t(s.B) < size_t(per_item)) {
        fail(JEPA_ERR_INVALID_ARG, "encode: out holds %zu floats, needs %lld", out_len, (long long) (per_item * s.B));
    }
    const size_t in_item = size_t(s.C) * s.T * s.H * s.W;
    const int chunk = fit_chunk(s, std::min(s.B, params_.max_batch));
    for (int b0 = 0; b0 < s.B; b0 += chunk) {
        InputShape c = s;
        c.B = std::min(chunk, s.B - b0);
        encode_chunk(pixels + size_t(b0) * in_item, c, out + size_t(b0) * size_t(per_item));
    }
}

}  // namespace jepa
