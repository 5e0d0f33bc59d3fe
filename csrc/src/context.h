// A context: per-thread working state over a shared model — a backend instance, the graph
// allocator and the scratch buffers. Build, allocate, set inputs, run, read.
#pragma once

#include "cpu/gemm.h"
#include "model.h"
#include "vit.h"

#include "ggml-alloc.h"
#include "ggml-backend.h"

#include <functional>
#include <string>
#include <vector>

namespace jepa {

struct PredictOptions {
    int mask_index = 1;  // the learned mask token for the targets (mod n_mask_tokens), upstream's default
    int grid_h = 0;      // the patch grid the ids index (0: the model's native grid)
    int grid_w = 0;
    bool image = false;  // V-JEPA 2.1: the image modality vector
    float * context_out = nullptr;  // V-JEPA 2.1: the context rows through pred.proj_context [B, n_ctx, out_dim]
    size_t context_out_len = 0;
};

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
    // keep_ids: int32 [B, s.n_keep] when s.n_keep > 0 (the masked encoder), else unused.
    void encode(const float * pixels, const InputShape & s, float * out, size_t out_len,
                const int32_t * keep_ids = nullptr);
    // The compute buffer one encode of shape s takes at this context's max_batch (what max_graph_bytes
    // bounds), measured without computing anything.
    size_t encode_memory(const InputShape & s);
    // Floats per token encode returns: D, or D x levels for a levels request (refused without levels).
    int64_t encoder_width(const InputShape & s) const;
    // A masked encode's ids (s.n_keep > 0): a model that takes them, each in the input's token range.
    void check_keep(const InputShape & s, const int32_t * keep_ids) const;
    // tokens [B, N, D] -> logits [B, n_classes], pooled [B, D] (pooled may be NULL)
    void classify(const float * tokens, int B, int64_t N, int D, float * logits, size_t logits_len, float * pooled,
                  size_t pooled_len);
    // context tokens [B, n_ctx, D] with ids [B, n_ctx], target ids [B, n_tgt] -> out [B, n_tgt, out_dim]
    void predict(const float * tokens, int B, int64_t n_ctx, int D, const int32_t * ctx_ids, const int32_t * tgt_ids,
                 int64_t n_tgt, const PredictOptions & opt, float * out, size_t out_len);

    // World models (context_world.cpp): encoder tokens [B, N, E] -> the predictor's latents, and one
    // predictor pass; both kind-tagged (jepa.h).
    void world_latents(const float * tokens, int B, int64_t N, int E, float * out, size_t out_len);
    void world_predict(const jepa_world_input & in, const jepa_world_output & out);
    // A whole rollout (ac): out [B, H, P, D], every step's normalised prediction (jepa.h).
    void world_rollout(const jepa_world_rollout_input & in, const jepa_world_rollout_params & params, float * out,
                       size_t out_len);

    // Text models (context_text.cpp): n_seq sequences laid end to end (ids, type_ids [n_tok], type_ids
    // may be NULL) -> out [n_tok, D] (pool NONE) or [n_seq, D], pooled and optionally normalised.
    void encode_text(const int32_t * ids, const int32_t * type_ids, const int32_t * seq_len, int n_seq,
                     jepa_pooling_type pool, bool normalize, float * out, size_t out_len);

private:
    // A ggml context for graph metadata, reset before each build.
    ggml_context * graph_ctx();
    void encode_chunk(const float * pixels, const InputShape & s, float * out, const int32_t * keep_ids);
    // The items (<= want) one graph of `size` compute-buffer bytes at want items should run on the
    // CPU for speed: as many as fit a quarter of the L3.
    int cache_items(int want, size_t size) const;
    // Largest chunk (<= want) whose compute buffer fits max_graph_bytes; build(b) builds the graph for
    // b items. cache_fit (the encoder; the world models' and text's graphs were not measured, so they
    // run whole): on the CPU, first no more than cache_items.
    int fit_chunk(const std::function<ggml_cgraph *(int)> & build, int want, const std::string & what,
                  bool cache_fit = false);
    size_t graph_bytes(ggml_cgraph * graph);  // the compute buffer graph needs (a measuring allocator)
    // Flash attention for a sequence of n_tok tokens (the same answer for every batch size).
    bool use_flash() const;
    void allocate(ggml_cgraph * graph);
    void compute(ggml_cgraph * graph);
    // Throws JEPA_ERR_BAD_FILE when the model's mapped file changed since it was loaded (weights.h).
    void check_file() const;
    // The encoder's RoPE tables for a grid, built once per grid and kept.
    void set_encoder_rope(const EncoderGraph & eg, const PatchGrid & g, const int32_t * keep_ids, int64_t n_keep, int B);
    // One graph's worth of sequences [s0, s1) of an encode_text call; hidden states to `tokens`.
    void encode_text_chunk(const int32_t * ids, const int32_t * type_ids, const int64_t * offsets, int s0, int s1,
                           float * tokens);
    // world_predict per kind, after its common checks.
    void lewm_predict(const jepa_world_input & in, const jepa_world_output & out);
    void ac_predict(const jepa_world_input & in, const jepa_world_output & out);
    // One AC predictor graph of b items over T frames: inputs [b, T*HW, D], [b, T, A], [b, T, S] -> out
    // [b, T*HW, D]; tables: ac_rope_tables and the frame-causal mask (f16 for flash) of T frames.
    struct AcTables;
    void ac_pred_graph(const AcTables & tab, int64_t T, int64_t HW, int b, const float * latents,
                       const float * actions, const float * states, float * out);
    // world_rollout per mode: keys and values kept per candidate, or every prefix recomputed.
    void ac_rollout_cached(const jepa_world_rollout_input & in, float * out);
    void ac_rollout_recompute(const jepa_world_rollout_input & in, float * out);

    const Model & model_;
    jepa_context_params params_;
    ggml_backend_t backend_ = nullptr;
    ggml_gallocr_t galloc_ = nullptr;
    ggml_context * gctx_ = nullptr;
    std::vector<uint8_t> gmeta_;
    std::vector<float> patches_;
    PatchGrid rope_grid_{0, 0, 0};
    std::vector<float> rope_cos_, rope_sin_;
    gemm::Varlen varlen_;                      // the text graph's sequences (read while it runs)
    std::vector<int32_t> text_pos_, text_types_;
    std::vector<float> text_tokens_;
};

}  // namespace jepa
