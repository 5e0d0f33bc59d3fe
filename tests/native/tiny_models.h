// Tiny random-weight models for the native suites, written as GGUF files with ggml's own gguf API:
// the demo ViT (hfvit: python/jepa/demo.py's keys and tensor names), LeWM, V-JEPA 2-AC and a BERT
// text encoder. Every value comes from a small LCG, so a model is the same file on every platform
// (test_stored_outputs compares outputs made on x86 with ARM64's bit for bit).
#pragma once

#include "ggml.h"
#include "gguf.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace tiny {

struct TensorDef {
    std::string name;
    std::vector<int64_t> ne;  // ggml order
    ggml_type type = GGML_TYPE_F32;
};

using Keys = std::function<void(gguf_context *)>;

// What the tensors hold: from an LCG seeded with `seed`, (u - 0.5) spread for u in [0, 1) (one plus
// that for a norm's gain: names with "ln" or "norm.weight"), in table order; f16 tensors hold those
// values rounded, q8_0 ones those values through ggml's reference quantizer (plain C: the same bytes
// on every platform), i32 ones their element index, any other type zeros (a value is drawn for every
// element all the same, so a tensor's type does not change the values of the ones after it).
struct Fill {
    uint32_t seed;
    float spread;
};

// The model as a GGUF file at path: `keys` sets the metadata, then the tensors in table order.
// False (and a line on stderr) when it cannot be written.
inline bool write_gguf(const std::string & path, const Keys & keys, const std::vector<TensorDef> & tensors, Fill fill) {
    size_t mem = ggml_tensor_overhead() * (tensors.size() + 1);
    for (const auto & t : tensors) {
        int64_t n = 1;
        for (int64_t d : t.ne) n *= d;
        mem += size_t(n) * ggml_type_size(t.type) / size_t(ggml_blck_size(t.type)) + 64;
    }
    ggml_init_params ip{mem, nullptr, /*no_alloc =*/ false};
    ggml_context * ctx = ggml_init(ip);
    gguf_context * g = gguf_init_empty();
    if (keys) keys(g);
    uint32_t state = fill.seed;
    auto next = [&state, &fill] {
        state = state * 1664525u + 1013904223u;
        return (float(state >> 8) / float(1u << 24) - 0.5f) * fill.spread;
    };
    for (const auto & d : tensors) {
        ggml_tensor * t = ggml_new_tensor(ctx, d.type, int(d.ne.size()), d.ne.data());
        ggml_set_name(t, d.name.c_str());
        const int64_t n = ggml_nelements(t);
        const bool gain = d.name.find("ln") != std::string::npos || d.name.find("norm.weight") != std::string::npos;
        if (d.type != GGML_TYPE_F32 && d.type != GGML_TYPE_F16 && d.type != GGML_TYPE_I32) std::memset(t->data, 0, ggml_nbytes(t));
        std::vector<float> q8(d.type == GGML_TYPE_Q8_0 ? size_t(n) : 0);
        for (int64_t i = 0; i < n; ++i) {
            const float v = gain ? 1.0f + next() : next();  // (drawn for every element, whatever its type)
            if (d.type == GGML_TYPE_F32) static_cast<float *>(t->data)[i] = v;
            else if (d.type == GGML_TYPE_F16) static_cast<ggml_fp16_t *>(t->data)[i] = ggml_fp32_to_fp16(v);
            else if (d.type == GGML_TYPE_I32) static_cast<int32_t *>(t->data)[i] = int32_t(i);
            else if (d.type == GGML_TYPE_Q8_0) q8[size_t(i)] = v;
        }
        if (d.type == GGML_TYPE_Q8_0) ggml_quantize_chunk(GGML_TYPE_Q8_0, q8.data(), t->data, 0, n / t->ne[0], t->ne[0], nullptr);
        gguf_add_tensor(g, t);
    }
    const bool ok = gguf_write_to_file(g, path.c_str(), /*only_meta =*/ false);
    gguf_free(g);
    ggml_free(ctx);
    if (!ok) std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return ok;
}

// n values in [-1, 1) from an LCG: inputs (pixels, latents, actions) the same on every platform.
inline std::vector<float> noise(size_t n, uint32_t seed) {
    std::vector<float> v(n);
    for (auto & x : v) {
        seed = seed * 1664525u + 1013904223u;
        x = float(seed >> 8) / float(1u << 24) * 2.0f - 1.0f;
    }
    return v;
}

inline void common_keys(gguf_context * g, const char * family) {
    gguf_set_val_str(g, "general.architecture", "jepa");
    gguf_set_val_u32(g, "jepa.schema_version", 1);
    gguf_set_val_str(g, "jepa.family", family);
    gguf_set_val_str(g, "jepa.head.kind", "none");
}

// ---- the demo ViT (hfvit): 32 wide, 2 layers of 2 heads, 16 x 16 images in 8 x 8 patches, CLS ----
namespace hfvit {

constexpr int kDim = 32, kLayers = 2, kHeads = 2, kFfn = 64, kPatch = 8, kImg = 16, kChans = 3;
constexpr int kPatchDim = kChans * kPatch * kPatch;
constexpr int kPos = (kImg / kPatch) * (kImg / kPatch) + 1;  // patches + the CLS slot

// The tensor table of python/jepa/demo.py, in its order, with the 2-D block matrices as mt (f32,
// f16 or q8_0).
inline std::vector<TensorDef> demo_tensors(ggml_type mt = GGML_TYPE_F32) {
    std::vector<TensorDef> t = {
        {"enc.patch_embed.weight", {kPatchDim, kDim}},
        {"enc.patch_embed.bias", {kDim}},
        {"enc.cls_token", {kDim}},
        {"enc.pos_embed", {kDim, kPos}},
    };
    for (int i = 0; i < kLayers; ++i) {
        const std::string b = "enc.blk." + std::to_string(i) + ".";
        t.push_back({b + "ln1.weight", {kDim}});
        t.push_back({b + "ln1.bias", {kDim}});
        for (const char * m : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
            t.push_back({b + m + ".weight", {kDim, kDim}, mt});
            t.push_back({b + m + ".bias", {kDim}});
        }
        t.push_back({b + "ln2.weight", {kDim}});
        t.push_back({b + "ln2.bias", {kDim}});
        t.push_back({b + "ffn_up.weight", {kDim, kFfn}, mt});
        t.push_back({b + "ffn_up.bias", {kFfn}});
        t.push_back({b + "ffn_down.weight", {kFfn, kDim}, mt});
        t.push_back({b + "ffn_down.bias", {kDim}});
    }
    t.push_back({"enc.norm.weight", {kDim}});
    t.push_back({"enc.norm.bias", {kDim}});
    return t;
}

// The metadata python/jepa/gguf/writer.py writes for the demo model.
inline void demo_keys(gguf_context * g, ggml_type mt = GGML_TYPE_F32) {
    gguf_set_val_str(g, "general.architecture", "jepa");
    gguf_set_val_str(g, "general.name", "jepa-demo (random weights, not a trained model)");
    gguf_set_val_str(g, "general.license", "MIT");
    gguf_set_val_str(g, "general.description", "Tiny ViT with random weights written by test_gguf_fuzz");
    // (llama.cpp's LLAMA_FTYPE numbers: python/jepa/gguf/keys.py's FILE_TYPES)
    gguf_set_val_u32(g, "general.file_type", mt == GGML_TYPE_F16 ? 1 : mt == GGML_TYPE_Q8_0 ? 7 : 0);
    gguf_set_val_u32(g, "jepa.schema_version", 1);
    gguf_set_val_str(g, "jepa.family", "hfvit");
    gguf_set_val_str(g, "jepa.modality", "image");
    const std::pair<const char *, uint32_t> ints[] = {
        {"jepa.enc.embed_dim", kDim}, {"jepa.enc.n_layer", kLayers}, {"jepa.enc.n_head", kHeads},
        {"jepa.enc.ffn_dim", kFfn},   {"jepa.enc.patch_size", kPatch}, {"jepa.enc.tubelet_size", 1},
        {"jepa.enc.img_size", kImg},  {"jepa.enc.n_frames", 1},       {"jepa.enc.in_chans", kChans},
        {"jepa.enc.n_registers", 0},
    };
    for (const auto & kv : ints) gguf_set_val_u32(g, kv.first, kv.second);
    gguf_set_val_f32(g, "jepa.enc.ln_eps", 1e-12f);
    gguf_set_val_str(g, "jepa.enc.act", "gelu_erf");
    gguf_set_val_str(g, "jepa.enc.pos_type", "learned");
    gguf_set_val_bool(g, "jepa.enc.cls_token", true);
    gguf_set_val_bool(g, "jepa.enc.qkv_fused", false);
    gguf_set_val_bool(g, "jepa.enc.layer_scale", false);
    const float half[3] = {0.5f, 0.5f, 0.5f};
    gguf_set_arr_data(g, "jepa.pre.mean", GGUF_TYPE_FLOAT32, half, 3);
    gguf_set_arr_data(g, "jepa.pre.std", GGUF_TYPE_FLOAT32, half, 3);
    gguf_set_val_f32(g, "jepa.pre.rescale", 1.0f / 255.0f);
    gguf_set_val_u32(g, "jepa.pre.resize_short", kImg);
    gguf_set_val_u32(g, "jepa.pre.crop", kImg);
    gguf_set_val_str(g, "jepa.pre.resample", "bilinear");
    gguf_set_val_str(g, "jepa.pre.resize_mode", "squash");
    gguf_set_val_str(g, "jepa.head.kind", "none");
}

}  // namespace hfvit

// ---- LeWM: E = D = 16, 2 layers, predictor 2 heads x 12 (inner 24 != D), window 3, A = 5 ---------
namespace lewm {

constexpr int kD = 16, kImg = 8, kPatch = 4, kA = 5, kInner = 24, kM = 20, kHq = 12;

inline void lewm_keys(gguf_context * g) {
    common_keys(g, "lewm");
    for (auto kv : std::vector<std::pair<const char *, uint32_t>>{
             {"jepa.enc.embed_dim", kD}, {"jepa.enc.n_layer", 1}, {"jepa.enc.n_head", 2}, {"jepa.enc.ffn_dim", 32},
             {"jepa.enc.patch_size", kPatch}, {"jepa.enc.img_size", kImg}, {"jepa.pred.embed_dim", kD},
             {"jepa.pred.n_layer", 2}, {"jepa.pred.n_head", 2}, {"jepa.pred.head_dim", kInner / 2},
             {"jepa.pred.ffn_dim", 32}, {"jepa.pred.n_frames", 3}, {"jepa.pred.action_dim", kA}}) {
        gguf_set_val_u32(g, kv.first, kv.second);
    }
    gguf_set_val_bool(g, "jepa.enc.cls_token", true);
    gguf_set_val_str(g, "jepa.enc.pos_type", "learned");
    gguf_set_val_f32(g, "jepa.enc.ln_eps", 1e-12f);
    gguf_set_val_str(g, "jepa.enc.proj_act", "gelu_erf");
    gguf_set_val_str(g, "jepa.pred.kind", "lewm");
    gguf_set_val_f32(g, "jepa.pred.ln_eps", 1e-5f);
    gguf_set_val_f32(g, "jepa.pred.adaln_eps", 1e-6f);
}

inline std::vector<TensorDef> lewm_tensors() {
    const int64_t D = kD;
    std::vector<TensorDef> t = {{"enc.patch_embed.weight", {3 * kPatch * kPatch, D}}, {"enc.patch_embed.bias", {D}},
                                {"enc.cls_token", {D}}, {"enc.pos_embed", {D, 5}}};
    const std::string b = "enc.blk.0.";
    for (const char * n : {"ln1", "ln2"}) {
        t.push_back({b + n + ".weight", {D}});
        t.push_back({b + n + ".bias", {D}});
    }
    for (const char * n : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
        t.push_back({b + n + ".weight", {D, D}});
        t.push_back({b + n + ".bias", {D}});
    }
    t.insert(t.end(), {{b + "ffn_up.weight", {D, 32}}, {b + "ffn_up.bias", {32}}, {b + "ffn_down.weight", {32, D}},
                       {b + "ffn_down.bias", {D}}, {"enc.norm.weight", {D}}, {"enc.norm.bias", {D}},
                       {"enc.proj.0.weight", {D, 24}}, {"enc.proj.0.bias", {24}}, {"enc.proj.2.weight", {24, D}},
                       {"enc.proj.2.bias", {D}}, {"pred.pos_embed", {D, 3}}});
    for (int i = 0; i < 2; ++i) {
        const std::string p = "pred.blk." + std::to_string(i) + ".";
        t.insert(t.end(), {{p + "adaln.weight", {D, 6 * D}}, {p + "adaln.bias", {6 * D}}, {p + "ln1.weight", {D}},
                           {p + "ln1.bias", {D}}, {p + "attn_qkv.weight", {D, 3 * kInner}},
                           {p + "attn_out.weight", {kInner, D}}, {p + "attn_out.bias", {D}}, {p + "ln2.weight", {D}},
                           {p + "ln2.bias", {D}}, {p + "ffn_up.weight", {D, 32}}, {p + "ffn_up.bias", {32}},
                           {p + "ffn_down.weight", {32, D}}, {p + "ffn_down.bias", {D}}});
    }
    t.insert(t.end(), {{"pred.norm.weight", {D}}, {"pred.norm.bias", {D}}, {"pred.proj.0.weight", {D, kHq}},
                       {"pred.proj.0.bias", {kHq}}, {"pred.proj.2.weight", {kHq, D}}, {"pred.proj.2.bias", {D}},
                       {"pred.action_embed.0.weight", {kA, kM}}, {"pred.action_embed.0.bias", {kM}},
                       {"pred.action_embed.2.weight", {kM, D}}, {"pred.action_embed.2.bias", {D}}});
    return t;
}

}  // namespace lewm

// ---- V-JEPA 2-AC: encoder 24 wide (2 heads x 12), grid 2 x 2, predictor 24 wide -----------------
namespace ac {

constexpr int kE = 24, kGrid = 2, kHW = kGrid * kGrid;

inline void ac_keys(gguf_context * g) {
    common_keys(g, "vjepa2");
    for (auto kv : std::vector<std::pair<const char *, uint32_t>>{
             {"jepa.enc.embed_dim", kE}, {"jepa.enc.n_layer", 1}, {"jepa.enc.n_head", 2}, {"jepa.enc.ffn_dim", 32},
             {"jepa.enc.patch_size", 4}, {"jepa.enc.tubelet_size", 2}, {"jepa.enc.img_size", 4 * kGrid},
             {"jepa.enc.n_frames", 16}, {"jepa.pred.embed_dim", kE}, {"jepa.pred.n_layer", 2},
             {"jepa.pred.n_head", 2}, {"jepa.pred.ffn_dim", 48}, {"jepa.pred.action_dim", 7},
             {"jepa.pred.state_dim", 7}, {"jepa.pred.grid_size", kGrid}}) {
        gguf_set_val_u32(g, kv.first, kv.second);
    }
    gguf_set_val_str(g, "jepa.enc.pos_type", "rope3d");
    gguf_set_val_bool(g, "jepa.enc.qkv_fused", true);
    gguf_set_val_str(g, "jepa.pred.kind", "ac");
}

inline std::vector<TensorDef> ac_tensors() {
    const int64_t D = kE;
    std::vector<TensorDef> t = {{"enc.patch_embed.weight", {3 * 2 * 16, D}}, {"enc.patch_embed.bias", {D}}};
    auto block = [&](const std::string & p, int64_t F) {
        t.insert(t.end(), {{p + "ln1.weight", {D}}, {p + "ln1.bias", {D}}, {p + "attn_qkv.weight", {D, 3 * D}},
                           {p + "attn_qkv.bias", {3 * D}}, {p + "attn_out.weight", {D, D}}, {p + "attn_out.bias", {D}},
                           {p + "ln2.weight", {D}}, {p + "ln2.bias", {D}}, {p + "ffn_up.weight", {D, F}},
                           {p + "ffn_up.bias", {F}}, {p + "ffn_down.weight", {F, D}}, {p + "ffn_down.bias", {D}}});
    };
    block("enc.blk.0.", 32);
    t.insert(t.end(), {{"enc.norm.weight", {D}}, {"enc.norm.bias", {D}}, {"pred.embed.weight", {D, D}},
                       {"pred.embed.bias", {D}}, {"pred.action_embed.weight", {7, D}}, {"pred.action_embed.bias", {D}},
                       {"pred.state_embed.weight", {7, D}}, {"pred.state_embed.bias", {D}}});
    block("pred.blk.0.", 48);
    block("pred.blk.1.", 48);
    t.insert(t.end(), {{"pred.norm.weight", {D}}, {"pred.norm.bias", {D}}, {"pred.proj.weight", {D, D}},
                       {"pred.proj.bias", {D}}});
    return t;
}

}  // namespace ac

// ---- a BERT text encoder: 16 wide, 2 post-norm layers of 2 heads, 50 tokens, 2 token types -------
namespace bert {

constexpr int kDim = 16, kLayers = 2, kHeads = 2, kFfn = 24, kVocab = 50, kPositions = 24, kTypes = 2;

inline void bert_keys(gguf_context * g) {
    common_keys(g, "bert");
    gguf_set_val_str(g, "jepa.modality", "text");
    for (auto kv : std::vector<std::pair<const char *, uint32_t>>{{"jepa.enc.embed_dim", kDim},
                                                                  {"jepa.enc.n_layer", kLayers},
                                                                  {"jepa.enc.n_head", kHeads},
                                                                  {"jepa.enc.ffn_dim", kFfn},
                                                                  {"jepa.text.max_seq_len", kPositions}}) {
        gguf_set_val_u32(g, kv.first, kv.second);
    }
    gguf_set_val_f32(g, "jepa.enc.ln_eps", 1e-12f);
    gguf_set_val_str(g, "jepa.enc.act", "gelu_erf");
    gguf_set_val_str(g, "jepa.text.pooling", "mean");
    gguf_set_val_str(g, "jepa.text.tokenizer", "{}");  // (the C API takes token ids; Python reads it)
}

inline std::vector<TensorDef> bert_tensors() {
    const int64_t D = kDim;
    std::vector<TensorDef> t = {{"text.tok_embed", {D, kVocab}}, {"text.pos_embed", {D, kPositions}},
                                {"text.type_embed", {D, kTypes}}, {"text.embed_norm.weight", {D}},
                                {"text.embed_norm.bias", {D}}};
    for (int i = 0; i < kLayers; ++i) {
        const std::string b = "text.blk." + std::to_string(i) + ".";
        for (const char * n : {"attn_q", "attn_k", "attn_v", "attn_out"}) {
            t.push_back({b + n + ".weight", {D, D}});
            t.push_back({b + n + ".bias", {D}});
        }
        t.insert(t.end(), {{b + "ln1.weight", {D}}, {b + "ln1.bias", {D}}, {b + "ln2.weight", {D}}, {b + "ln2.bias", {D}},
                           {b + "ffn_up.weight", {D, kFfn}}, {b + "ffn_up.bias", {kFfn}},
                           {b + "ffn_down.weight", {kFfn, D}}, {b + "ffn_down.bias", {D}}});
    }
    return t;
}

}  // namespace bert

}  // namespace tiny
