// The loaded model: hyperparameters plus weights on one backend buffer. Immutable after load.
#pragma once

#include "hparams.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <memory>
#include <string>
#include <vector>

namespace jepa {

class FileMap;  // weights.h

struct LinearW {
    ggml_tensor * w = nullptr;
    ggml_tensor * b = nullptr;  // optional
    ggml_tensor * s = nullptr;  // i8c weights only: the scale of each output column, f32 [out]
    bool packed = false;        // w repacked for the engine's own CPU kernel (gemm.h)
};

struct NormW {
    ggml_tensor * w = nullptr;
    ggml_tensor * b = nullptr;
};

struct VitBlockW {
    NormW ln1, ln2;
    LinearW qkv;          // fused (rows q;k;v) when the file has attn_qkv
    LinearW q, k, v;      // otherwise split
    LinearW attn_out;
    LinearW ffn_up, ffn_down;
    ggml_tensor * ls1 = nullptr;  // layer scales (optional)
    ggml_tensor * ls2 = nullptr;
    LinearW adaln;        // LeWM: SiLU(c) -> shift/scale/gate x 2 ([D, 6 D])
};

struct EncoderW {
    LinearW patch_embed;           // w: [C*T*P*P, D] in ggml order
    ggml_tensor * pos = nullptr;   // [D, n_pos] stored table (learned or sincos)
    ggml_tensor * cls = nullptr;   // [D]
    ggml_tensor * reg = nullptr;   // [D, n_registers]
    std::vector<VitBlockW> blocks;
    NormW norm;
    LinearW proj0, proj2;          // LeWM's projector of the CLS (BatchNorm folded into proj0)
    // V-JEPA 2.1: the tubelet-1 image embedding, the modality vectors, the per-level norms.
    LinearW patch_embed_img;       // w: [C*P*P, D]
    ggml_tensor * mod_img = nullptr;    // [D]
    ggml_tensor * mod_video = nullptr;  // [D]
    std::vector<NormW> hier_norms;      // one per jepa.enc.hier_layers entry
};

// The attentive-pool head: self-attention blocks, then one cross-attention from learned queries
// (LayerNorm on keys/values only, no output projection), an MLP residual and the classifier.
struct HeadW {
    std::vector<VitBlockW> blocks;
    ggml_tensor * query = nullptr;  // [D, 1], used raw (not normalised)
    NormW ln_kv;
    LinearW q, k, v;
    NormW ln2;
    LinearW ffn_up, ffn_down;
    LinearW cls;                    // [D, n_classes]
};

// The predictors. masked: embed, mask tokens, blocks, norm, projection back to the encoder width.
// ac: embed, action / state embeds, blocks, norm, proj. lewm: pos_embed, action embedder, adaLN
// blocks, norm, proj0 -> act -> proj2.
struct PredW {
    LinearW embed;                       // [D_enc, D_pred] (masked, ac); pred.embed.0 [L*D_enc, D_enc] with levels
    LinearW embed2;                      // pred.embed.2 [D_enc, D_pred] (masked, in_levels > 1)
    ggml_tensor * mask_tokens = nullptr; // [D_pred, n_mask_tokens] (masked)
    ggml_tensor * mod_video = nullptr;   // [D_pred] (masked, modality_embed)
    ggml_tensor * mod_img = nullptr;
    LinearW proj_context;                // [D_pred, out_dim] (masked, proj_context)
    LinearW action_embed, state_embed;   // [7, D_pred] (ac)
    ggml_tensor * pos_embed = nullptr;   // [D, n_frames] (lewm)
    LinearW action_embed0, action_embed2;  // [A, M], [M, D] (lewm)
    std::vector<VitBlockW> blocks;
    NormW norm;
    LinearW proj;                        // [D_pred, out_dim] (masked, ac); pred.proj.0 for lewm
    LinearW proj2;                       // pred.proj.2 (lewm)
};

// A BERT-style text encoder: embedding tables, their LayerNorm, post-norm blocks (ln1 after the
// attention's residual, ln2 after the MLP's).
struct TextW {
    ggml_tensor * tok = nullptr;   // [D, vocab]
    ggml_tensor * pos = nullptr;   // [D, n_positions]
    ggml_tensor * type = nullptr;  // [D, n_token_types]
    NormW embed_norm;
    std::vector<VitBlockW> blocks;
};

struct Model {
    ModelHparams hp;
    EncoderW enc;
    TextW text;   // empty unless hp.is_text()
    HeadW head;   // empty unless hp.head.kind != JEPA_HEAD_NONE
    PredW pred;   // empty unless hp.pred.kind != JEPA_PRED_NONE

    jepa_device device = JEPA_DEVICE_CPU;
    int device_index = 0;
    std::string backend_name = "CPU";
    int64_t n_params = 0;
    int64_t n_bytes = 0;

    ggml_context * ctx_w = nullptr;            // tensor metadata (no data)
    ggml_backend_buffer_t buf_w = nullptr;     // the weights in memory of their own (all of them off the CPU)
    void * host_w = nullptr;                   // CPU: the memory under buf_w (64-byte aligned tensors)
    std::unique_ptr<FileMap> map;              // CPU with use_mmap: the file, mapped read-only
    ggml_backend_buffer_t buf_map = nullptr;   // the tensors used in place from `map`
    int64_t n_bytes_mapped = 0;                // of n_bytes: used in place from the mapping
    int n_packed = 0;                          // weight matrices the engine's own kernel runs
    bool half_attention = false;               // bf16 matrices on a bf16 kernel: attention in bf16 too
    std::string matmul_name;                   // "jepa: <paths>" (cpu::describe()) when n_packed > 0

    Model() = default;
    Model(const Model &) = delete;
    Model & operator=(const Model &) = delete;
    ~Model();

    ggml_backend_buffer_type_t buffer_type() const;
    // A new backend instance on the model's device (one per context).
    ggml_backend_t new_backend() const;
    // Every weight matrix with its bias, wherever it sits (encoder, head, predictor).
    template <typename F> void for_each_linear(F && f);
};

template <typename F> void Model::for_each_linear(F && f) {
    auto block = [&](VitBlockW & b) {
        for (LinearW * l : {&b.qkv, &b.q, &b.k, &b.v, &b.attn_out, &b.ffn_up, &b.ffn_down, &b.adaln}) f(*l);
    };
    for (LinearW * l : {&enc.patch_embed, &enc.proj0, &enc.proj2}) f(*l);
    for (VitBlockW & b : enc.blocks) block(b);
    for (VitBlockW & b : head.blocks) block(b);
    for (LinearW * l : {&head.q, &head.k, &head.v, &head.ffn_up, &head.ffn_down, &head.cls}) f(*l);
    for (LinearW * l : {&pred.embed, &pred.action_embed, &pred.state_embed, &pred.action_embed0, &pred.action_embed2,
                        &pred.proj, &pred.proj2}) {
        f(*l);
    }
    for (VitBlockW & b : pred.blocks) block(b);
    for (VitBlockW & b : text.blocks) block(b);
}

// Load and validate a GGUF file; throws jepa::Error naming what is wrong.
Model * load_model(const char * path, const jepa_model_params & params);

}  // namespace jepa

