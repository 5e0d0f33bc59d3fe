// The loaded model: hyperparameters plus weights on one backend buffer. Immutable after load.
#pragma once

#include "hparams.h"

#include "ggml-backend.h"
#include "ggml.h"

#include <string>
#include <vector>

namespace jepa {

struct LinearW {
    ggml_tensor * w = nullptr;
    ggml_tensor * b = nullptr;  // optional
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
};

struct EncoderW {
    LinearW patch_embed;           // w: [C*T*P*P, D] in ggml order
    ggml_tensor * pos = nullptr;   // [D, n_pos] stored table (learned or sincos)
    ggml_tensor * cls = nullptr;   // [D]
    ggml_tensor * reg = nullptr;   // [D, n_registers]
    std::vector<VitBlockW> blocks;
    NormW norm;
};

struct Model {
    ModelHparams hp;
    EncoderW enc;

    jepa_device device = JEPA_DEVICE_CPU;
    int device_index = 0;
    std::string backend_name = "CPU";
    int64_t n_params = 0;
    int64_t n_bytes = 0;

    ggml_context * ctx_w = nullptr;            // tensor metadata (no data)
    ggml_backend_buffer_t buf_w = nullptr;     // the weights

    Model() = default;
    Model(const Model &) = delete;
    Model & operator=(const Model &) = delete;
    ~Model();

    ggml_backend_buffer_type_t buffer_type() const;
    // A new backend instance on the model's device (one per context).
    ggml_backend_t new_backend() const;
};

// Load and validate a GGUF file; throws jepa::Error naming what is wrong.
Model * load_model(const char * path, const jepa_model_params & params);

}  // namespace jepa

