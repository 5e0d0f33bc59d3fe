// Hyperparameters read from GGUF metadata (see GGUF-SCHEMA.md). Pure data, validated on parse.
#pragma once

#include "jepa.h"

#include <string>
#include <vector>

struct gguf_context;

namespace jepa {

enum class Act { GeluErf, GeluTanh, Silu };

struct EncoderHparams {
    int embed_dim = 0;
    int n_layer = 0;
    int n_head = 0;
    int ffn_dim = 0;
    int patch_size = 0;
    int tubelet_size = 1;
    int img_size = 0;
    int n_frames = 1;
    int in_chans = 3;
    int n_registers = 0;
    bool cls_token = false;
    bool qkv_fused = false;
    bool layer_scale = false;
    float ln_eps = 1e-6f;
    Act act = Act::GeluErf;
    jepa_pos_type pos_type = JEPA_POS_LEARNED;

    int head_dim() const { return embed_dim / n_head; }
    int n_prefix() const { return (cls_token ? 1 : 0) + n_registers; }
    int grid() const { return img_size / patch_size; }
    // Patch-embedding input width: C * tubelet * P * P.
    int patch_dim() const { return in_chans * tubelet_size * patch_size * patch_size; }
};

struct PreprocessHparams {
    float mean[3] = {0.5f, 0.5f, 0.5f};
    float std[3] = {0.5f, 0.5f, 0.5f};
    float rescale = 1.0f / 255.0f;
    int resize_short = 0;
    int crop = 0;
    jepa_resize_mode resize_mode = JEPA_RESIZE_SHORTEST_EDGE;
    jepa_resample resample = JEPA_RESAMPLE_BILINEAR;
};

struct ModelHparams {
    std::string name;
    std::string family;
    std::string modality;
    int file_type = 0;
    EncoderHparams enc;
    PreprocessHparams pre;
    std::string head_kind = "none";
    std::string pred_kind;  // empty: no predictor
    std::vector<std::string> labels;
};

// Read and validate every key; throws jepa::Error naming the key on any problem.
ModelHparams parse_hparams(const gguf_context * ctx);

}  // namespace jepa
