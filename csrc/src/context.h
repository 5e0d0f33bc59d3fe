// A context: per-thread working state over a shared model — a backend instance, the graph
// allocator and the scratch buffers. Build, allocate, set inputs, run, read.
#pragma once

#include "model.h"
#include "vit.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <vector>

namespace jepa {

class Context {
public:
    Context(const Model & model, const jepa_context_params & params);
    ~Context();
    Context(const Context &) = delete;
    Context & operator=(const Context &) = delete;

    const Model & model() const { return model_; }
    const jepa_context_params & params() const { return params_; }
    void set_threads(int n);
    void set_max_batch(int n);

    // pixels [B, C, T, H, W] -> out [B, n_tok, D]
    void encode(const float * pixels, const InputShape & s, float * out, size_t out_len);

private:
    // A ggml context for graph metadata, reset before each build.
    ggml_context * graph_ctx();
    // Run one chunk of at most max_batch items.
    void encode_chunk(const float * pixels, const InputShape & s, float * out);
    // Largest chunk (<= want) whose compute buffer fits max_graph_bytes.
    int fit_chunk(const InputShape & s, int want);
    bool use_flash() const;
    void allocate(ggml_cgraph * graph);

    const Model & model_;
    jepa_context_params params_;
    ggml_backend_t backend_ = nullptr;
    ggml_gallocr_t galloc_ = nullptr;
    ggml_context * gctx_ = nullptr;
    std::vector<uint8_t> gmeta_;
    std::vector<float> patches_;
};

}  // namespace jepa
