// Hyperparameters read from GGUF metadata (docs/gguf.md). Pure data, validated on parse.
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
    float rope_theta = 10000.0f;  // rope3d only
    bool rope_interleaved = false; // rope_freq_layout interleaved (V-JEPA 2.1; rope.h), else tiled
    int rope_ref_grid = 0;        // rope_interpolate: rows and columns scaled onto this grid (0: not)
    bool modality_embed = false;  // V-JEPA 2.1: enc.mod_embed_img / _video added to every patch token
    bool image_patch_embed = false;  // V-JEPA 2.1: enc.patch_embed_img, a tubelet-1 embedding for T == 1
    std::vector<int> hier_layers; // V-JEPA 2.1: enc.hier_norm.{k} after these blocks, the last one the
                                  // output (no enc.norm); ascending, the last the final block
    bool block_causal = false;    // jepa.enc.attn_mode block_causal: a patch sees the patches of its
                                  // frame and earlier ones, a prefix token every token (LeVJEPA)
    bool has_proj = false;        // LeWM: a projector enc.proj.0 -> proj_act -> enc.proj.2 after the CLS
    Act proj_act = Act::GeluErf;

    int head_dim() const { return embed_dim / n_head; }
    int n_prefix() const { return (cls_token ? 1 : 0) + n_registers; }
    int grid() const { return img_size / patch_size; }
    // Patch-embedding input width: C * tubelet * P * P.
    int patch_dim() const { return in_chans * tubelet_size * patch_size * patch_size; }
    // The image path (V-JEPA 2.1): a one-frame input goes through the tubelet-1 embedding.
    bool image_path(int T) const { return image_patch_embed && T == 1; }
    int tubelet_for(int T) const { return image_path(T) ? 1 : tubelet_size; }
    int patch_dim_for(int T) const { return in_chans * tubelet_for(T) * patch_size * patch_size; }
};

// What one pre-norm block needs besides its weights.
struct BlockHparams {
    int n_head = 1;
    float ln_eps = 1e-6f;
    Act act = Act::GeluErf;
};

// The attentive-pool classifier head (jepa.head.*, kind attentive_pool): n_pool_layers self-attention
// blocks, then one cross-attention from learned queries, then a linear classifier.
struct HeadHparams {
    jepa_head_kind kind = JEPA_HEAD_NONE;
    int n_classes = 0;
    int n_pool_layers = 0;
    int ffn_dim = 0;            // from the tensors (HF uses 4 x width whatever the encoder's ratio)
    BlockHparams block;         // heads, eps and activation: the encoder's
};

// The predictors (jepa.pred.*). kind masked: context tokens embedded, mask tokens at the target
// positions, RoPE from the token ids on the encoder grid, blocks, norm, projection back. kind ac
// (V-JEPA 2-AC) and lewm (LeWM): the world-model predictors of docs/world-models.md.
struct PredHparams {
    jepa_pred_kind kind = JEPA_PRED_NONE;
    int embed_dim = 0;
    int n_layer = 0;
    int ffn_dim = 0;
    int n_mask_tokens = 0;
    int out_dim = 0;
    int grid_size = 0;          // native patch grid (crop / patch); ids decompose on it by default
    float rope_theta = 10000.0f;
    bool rope_interleaved = false;  // rope_freq_layout interleaved (V-JEPA 2.1)
    // V-JEPA 2.1's masked predictor: the encoder levels its context tokens carry (1: pred.embed; more:
    // pred.embed.0 -> GELU -> pred.embed.2), modality vectors on every token, a context projection.
    int in_levels = 1;
    bool modality_embed = false;
    bool proj_context = false;
    BlockHparams block;
    int hd = 0;                 // jepa.pred.head_dim (0: embed_dim / n_head); LeWM's inner width differs
    // World models.
    int n_frames = 0;           // lewm: the window (position rows); ac: frames upstream's mask covers
    int action_dim = 0;
    int state_dim = 0;          // ac
    float adaln_eps = 1e-6f;    // lewm: the non-affine norms the adaLN modulates
    float norm_reps_eps = 1e-5f;  // ac: the non-affine LayerNorm of the latents
    Act action_act = Act::Silu;   // lewm: the action embedder's activation
    Act proj_act = Act::GeluErf;  // lewm: pred.proj.0 -> act -> pred.proj.2

    int head_dim() const { return hd > 0 ? hd : embed_dim / block.n_head; }
    int inner_dim() const { return head_dim() * block.n_head; }
};

// jepa.pred.kind's string for a kind ("" for none): messages name kinds as files spell them.
const char * pred_kind_name(jepa_pred_kind kind);

struct PreprocessHparams {
    float mean[3] = {0.5f, 0.5f, 0.5f};
    float std[3] = {0.5f, 0.5f, 0.5f};
    float rescale = 1.0f / 255.0f;
    int resize_short = 0;
    int crop = 0;
    jepa_resize_mode resize_mode = JEPA_RESIZE_SHORTEST_EDGE;
    jepa_resample resample = JEPA_RESAMPLE_BILINEAR;
};

// A BERT-style text encoder (family bert: BertModel and XLMRobertaModel layouts): word + position +
// token-type embeddings, an embedding LayerNorm, post-LayerNorm blocks. Sizes of the tables come from
// the tensors; what the tokenizer and the pooling need travels in jepa.text.*.
struct TextHparams {
    int vocab_size = 0;       // rows of text.tok_embed
    int n_positions = 0;      // rows of text.pos_embed
    int n_token_types = 0;    // rows of text.type_embed
    int pos_offset = 0;       // position id of a sequence's first token (XLM-R: padding_idx + 1)
    int max_seq_len = 0;      // tokens per sequence after truncation (special tokens included)
    jepa_pooling_type pool = JEPA_POOLING_MEAN;
    bool normalize = false;
    std::string tokenizer;    // tokenizer.json, verbatim

    // The longest sequence the position table takes.
    int max_tokens() const { return n_positions - pos_offset; }
};

struct ModelHparams {
    std::string name;
    std::string family;
    std::string modality;
    int file_type = 0;
    EncoderHparams enc;
    PreprocessHparams pre;
    HeadHparams head;
    PredHparams pred;
    std::vector<std::string> labels;
    TextHparams text;         // family bert only

    bool is_text() const { return family == "bert"; }
    BlockHparams enc_block() const { return {enc.n_head, enc.ln_eps, enc.act}; }
};

// Read and validate every key; throws jepa::Error naming the key on any problem.
ModelHparams parse_hparams(const gguf_context * ctx);

}  // namespace jepa
