// The C API: argument checks, then the engine, with every exception turned into a status.
#include "jepa.h"

#include "cpu/features.h"
#include "cpu/gemm.h"
#include "cpu/paths.h"

#include "context.h"
#include "error.h"
#include "host.h"
#include "input_checks.h"
#include "model.h"
#include "vit.h"
#include "weights.h"

#include "ggml.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

namespace {

jepa::Model * as_model(jepa_model * m) { return reinterpret_cast<jepa::Model *>(m); }
const jepa::Model * as_model(const jepa_model * m) { return reinterpret_cast<const jepa::Model *>(m); }
jepa::Context * as_ctx(jepa_context * c) { return reinterpret_cast<jepa::Context *>(c); }
const jepa::Context * as_ctx(const jepa_context * c) { return reinterpret_cast<const jepa::Context *>(c); }

jepa_status invalid(const char * what) {
    jepa::set_error(JEPA_ERR_INVALID_ARG, what);
    return JEPA_ERR_INVALID_ARG;
}

// JEPA_GUARD for the calls that return a value: `body()`, or `failed` with every exception turned into
// the thread's error (out of memory: JEPA_ERR_RESOURCE saying `oom`; anything else: `other`).
template <class T, class F>
T guarded(F && body, T failed, const char * oom, jepa_status other, const char * other_prefix) {
    jepa::clear_error();
    try {
        return body();
    } catch (const jepa::Error & e) {
        jepa::set_error(e.status(), e.what(), e.param());
    } catch (const std::bad_alloc &) {
        jepa::set_error(JEPA_ERR_RESOURCE, oom);
    } catch (const std::exception & e) {
        jepa::set_error(other, std::string(other_prefix) + e.what());
    }
    return failed;
}

// jepa_model_info from a loaded model. A field named as in the engine's struct it comes from is copied
// by JEPA_COPY (the name written once, so it cannot pair one field with another); the rest differ.
#define JEPA_COPY(src, f) i.f = src.f;
jepa_model_info describe(const jepa::Model & m) {
    const jepa::EncoderHparams & e = m.hp.enc;
    const jepa::PreprocessHparams & p = m.hp.pre;
    jepa_model_info i;
    std::memset(&i, 0, sizeof(i));
    i.name = m.hp.name.c_str();
    i.family = m.hp.family.c_str();
    i.modality = m.hp.modality.c_str();
    i.backend = m.backend_name.c_str();
    i.matmul = m.n_packed > 0 ? m.matmul_name.c_str() : "ggml";
    i.n_matmul_packed = m.n_packed;
    i.file_type = m.hp.file_type;
    JEPA_COPY(m, n_params) JEPA_COPY(m, n_bytes) JEPA_COPY(m, n_bytes_mapped)
    JEPA_COPY(e, embed_dim) JEPA_COPY(e, n_layer) JEPA_COPY(e, n_head) JEPA_COPY(e, ffn_dim) JEPA_COPY(e, patch_size)
    JEPA_COPY(e, tubelet_size) JEPA_COPY(e, img_size) JEPA_COPY(e, n_frames) JEPA_COPY(e, in_chans)
    i.has_cls = e.cls_token ? 1 : 0;
    i.block_causal = e.block_causal ? 1 : 0;
    i.n_levels = int(e.hier_layers.size());
    i.image_patch_embed = e.image_patch_embed ? 1 : 0;
    JEPA_COPY(e, n_registers) JEPA_COPY(e, pos_type) JEPA_COPY(e, ln_eps)
    i.head_kind = m.hp.head.kind;
    i.pred_kind = m.hp.pred.kind;
    i.n_labels = int(m.hp.labels.size());
    for (int c = 0; c < 3; ++c) {
        i.mean[c] = p.mean[c];
        i.std[c] = p.std[c];
    }
    JEPA_COPY(p, rescale) JEPA_COPY(p, resize_short) JEPA_COPY(p, crop) JEPA_COPY(p, resize_mode) JEPA_COPY(p, resample)
    i.n_classes = m.hp.head.n_classes;
    i.pred_embed_dim = m.hp.pred.embed_dim;
    i.pred_n_layer = m.hp.pred.n_layer;
    i.pred_n_head = m.hp.pred.kind == JEPA_PRED_NONE ? 0 : m.hp.pred.block.n_head;
    i.pred_n_mask_tokens = m.hp.pred.n_mask_tokens;
    i.pred_grid_size = m.hp.pred.grid_size;
    i.pred_out_dim = m.hp.pred.out_dim;
    i.pred_in_levels = m.hp.pred.kind == JEPA_PRED_NONE ? 0 : m.hp.pred.in_levels;
    i.pred_modality_embed = m.hp.pred.modality_embed ? 1 : 0;
    i.pred_proj_context = m.hp.pred.proj_context ? 1 : 0;
    i.pred_action_dim = m.hp.pred.action_dim;
    i.pred_state_dim = m.hp.pred.state_dim;
    i.pred_n_frames = m.hp.pred.n_frames;
    i.wm_embed_dim = m.hp.pred.kind == JEPA_PRED_LEWM ? int(m.enc.proj2.w->ne[1])
                     : m.hp.pred.kind == JEPA_PRED_AC ? e.embed_dim : 0;
    i.pred_norm_reps_eps = m.hp.pred.norm_reps_eps;
    if (m.hp.is_text()) {
        const jepa::TextHparams & t = m.hp.text;
        JEPA_COPY(t, vocab_size) JEPA_COPY(t, n_token_types) JEPA_COPY(t, n_positions) JEPA_COPY(t, pos_offset)
        JEPA_COPY(t, max_seq_len)
        i.max_tokens = t.max_tokens();
        i.pooling = t.pool;
        i.text_normalize = t.normalize ? 1 : 0;
    }
    return i;
}
#undef JEPA_COPY

}  // namespace

extern "C" {

const char * jepa_version(void) { return JEPA_VERSION; }

// ggml_commit() reports the enclosing git tree (ours), so name the vendored upstream here
// (keep in step with csrc/third_party/ggml/VENDORED.md).
const char * jepa_ggml_version(void) {
    static const std::string v = std::string(ggml_version()) + " (llama.cpp 0c1e57098bba, llama-cpp-python 0.3.36)";
    return v.c_str();
}

const char * jepa_cpu_kernels(void) { return jepa::cpu::describe(); }

const char * jepa_cpu_features(void) {
    static const std::string s = jepa::cpu::names(jepa::cpu::features());
    return s.c_str();
}

const char * jepa_cpu_features_detected(void) {
    static const std::string s = jepa::cpu::names(jepa::cpu::detected());
    return s.c_str();
}

const char * jepa_cpu_feature_names(void) {
    static const std::string s = jepa::cpu::names(~0u);
    return s.c_str();
}

const char * jepa_cpu_features_mask(void) { return jepa::cpu::mask_text().c_str(); }
const char * jepa_cpu_features_mask_error(void) { return jepa::cpu::mask_error().c_str(); }

int jepa_cpu_class_count(void) { return jepa::cpu::class_count(); }

jepa_status jepa_cpu_class_get(int i, jepa_cpu_class * out) {
    if (!out || i < 0 || i >= jepa::cpu::class_count()) {
        jepa::set_error(JEPA_ERR_INVALID_ARG, "cpu class index out of range", "index");
        return JEPA_ERR_INVALID_ARG;
    }
    // The names live as long as the process: one string per class, made once.
    static const std::vector<std::string> features = [] {
        std::vector<std::string> v;
        for (int k = 0; k < jepa::cpu::class_count(); ++k) v.push_back(jepa::cpu::names(jepa::cpu::class_at(k).set));
        return v;
    }();
    const jepa::cpu::CpuClass & c = jepa::cpu::class_at(i);
    *out = {c.name, features[size_t(i)].c_str(), c.example};
    return JEPA_OK;
}

int jepa_kernel_path_count(void) { return jepa::cpu::row_count(); }

const char * jepa_kernel_paths_distinct(const char * kinds, int with_ggml) {
    jepa::cpu::Kinds k;
    const std::string spec = kinds ? kinds : "";
    if (!spec.empty()) {
        k = {false, false, false};
        size_t at = 0;
        while (at <= spec.size()) {
            const size_t end = std::min(spec.find(',', at), spec.size());
            const std::string t = spec.substr(at, end - at);
            at = end + 1;
            if (t == "f32") k.f32 = true;
            else if (t == "bf16") k.bf16 = true;
            else if (t == "q8") k.q8 = true;
            else {
                jepa::set_error(JEPA_ERR_INVALID_ARG, "unknown kernel kind '" + t + "' (f32, bf16, q8)", "kinds");
                return nullptr;
            }
        }
    }
    thread_local std::string out;
    out.clear();
    for (int i : jepa::cpu::distinct_rows(k, with_ggml != 0)) {
        if (!out.empty()) out += ' ';
        out += jepa::cpu::row_at(i).name;
    }
    return out.c_str();
}

jepa_status jepa_kernel_path_get(int i, jepa_kernel_path * out) {
    if (!out || i < 0 || i >= jepa::cpu::row_count()) {
        jepa::set_error(JEPA_ERR_INVALID_ARG, "kernel path index out of range", "index");
        return JEPA_ERR_INVALID_ARG;
    }
    // What each row runs on this CPU, made once: the line, then kind by kind.
    struct Runs {
        std::string line, f32, bf16, q8;
    };
    static const std::vector<Runs> runs = [] {
        std::vector<Runs> v;
        for (int k = 0; k < jepa::cpu::row_count(); ++k) {
            const jepa::cpu::Selection s = jepa::cpu::select(jepa::cpu::row_at(k), jepa::cpu::features());
            v.push_back({jepa::cpu::describe(s), jepa::cpu::f32_kernel(s), jepa::cpu::bf16_kernel(s), jepa::cpu::q8_kernel(s)});
        }
        return v;
    }();
    const jepa::cpu::PathRow & r = jepa::cpu::row_at(i);
    const Runs & run = runs[size_t(i)];
    *out = {r.name, jepa::cpu::cap_name(r.f32), jepa::cpu::cap_name(r.bf16), jepa::cpu::cap_name(r.q8), r.amx ? 1 : 0,
            r.stands_for, run.line.c_str(), run.f32.c_str(), run.bf16.c_str(), run.q8.c_str(),
            i == jepa::cpu::selected_row() ? 1 : 0};
    return JEPA_OK;
}

int jepa_has_cuda(void) {
#ifdef JEPA_USE_CUDA
    return 1;
#else
    return 0;
#endif
}

int jepa_default_threads(void) { return jepa::default_threads(); }

jepa_status jepa_device_memory(jepa_device device, int index, size_t * free_bytes, size_t * total_bytes) {
    if (!free_bytes || !total_bytes) return invalid("jepa_device_memory: free_bytes and total_bytes must not be NULL");
    // The enum's bits as an int: a value outside jepa_device is the caller's error to refuse, not a
    // load the sanitizer (and the standard) calls undefined.
    int raw = 0;
    std::memcpy(&raw, &device, sizeof raw);
    JEPA_GUARD({
        jepa::device_memory(raw, index, *free_bytes, *total_bytes);
        return JEPA_OK;
    })
}

jepa_model_params jepa_model_default_params(void) {
    jepa_model_params p;
    p.device = JEPA_DEVICE_CPU;
    p.device_index = 0;
    p.use_mmap = 1;
    return p;
}

jepa_model * jepa_model_load(const char * path, const jepa_model_params * params) {
    return guarded<jepa_model *>(
        [&] {
            const jepa_model_params p = params ? *params : jepa_model_default_params();
            return reinterpret_cast<jepa_model *>(jepa::load_model(path, p));
        },
        nullptr, "out of memory while loading the model", JEPA_ERR_BAD_FILE, "cannot load the model: ");
}

void jepa_model_free(jepa_model * model) { delete as_model(model); }

jepa_status jepa_model_get_info(const jepa_model * model, jepa_model_info * out) {
    if (!model || !out) return invalid("jepa_model_get_info: model and out must not be NULL");
    JEPA_GUARD({
        *out = describe(*as_model(model));
        return JEPA_OK;
    })
}

const char * jepa_model_label(const jepa_model * model, int i) {
    if (!model) {
        invalid("jepa_model_label: model must not be NULL");
        return nullptr;
    }
    const auto & labels = as_model(model)->hp.labels;
    if (i < 0 || size_t(i) >= labels.size()) {
        invalid("jepa_model_label: index out of range");
        return nullptr;
    }
    return labels[size_t(i)].c_str();
}

int jepa_model_file_changed(const jepa_model * model) {
    if (!model) {
        invalid("jepa_model_file_changed: model must not be NULL");
        return 0;
    }
    jepa::clear_error();
    const jepa::Model & m = *as_model(model);
    if (!m.map) return 0;
    const std::string why = m.map->changed();
    if (why.empty()) return 0;
    jepa::set_error(JEPA_ERR_BAD_FILE, "the model file changed under the running process: " + why);
    return 1;
}

const char * jepa_model_tokenizer(const jepa_model * model) {
    if (!model) {
        invalid("jepa_model_tokenizer: model must not be NULL");
        return nullptr;
    }
    jepa::clear_error();
    const jepa::Model & m = *as_model(model);
    if (!m.hp.is_text()) {
        jepa::set_error(JEPA_ERR_UNSUPPORTED, "jepa_model_tokenizer: this is not a text model (jepa.modality " + m.hp.modality + ")");
        return nullptr;
    }
    return m.hp.text.tokenizer.c_str();
}

int64_t jepa_model_n_tokens(const jepa_model * model, int C, int T, int H, int W) {
    if (!model) {
        invalid("jepa_model_n_tokens: model must not be NULL");
        return -1;
    }
    return guarded<int64_t>([&] { return jepa::encoder_n_tokens(*as_model(model), C, T, H, W); }, -1,
                            "out of memory", JEPA_ERR_BACKEND, "internal error: ");
}

jepa_context_params jepa_context_default_params(void) {
    jepa_context_params p;
    p.n_threads = 0;
    p.max_batch = 32;
    p.flash_attn = -1;
    p.max_graph_bytes = 0;
    p.max_output_bytes = jepa::default_max_output_bytes();
    return p;
}

jepa_context * jepa_context_new(const jepa_model * model, const jepa_context_params * params) {
    jepa::clear_error();
    if (!model) {
        invalid("jepa_context_new: model must not be NULL");
        return nullptr;
    }
    return guarded<jepa_context *>(
        [&] {
            const jepa_context_params p = params ? *params : jepa_context_default_params();
            return reinterpret_cast<jepa_context *>(new jepa::Context(*as_model(model), p));
        },
        nullptr, "out of memory while creating a context", JEPA_ERR_BACKEND, "internal error: ");
}

void jepa_context_free(jepa_context * ctx) { delete as_ctx(ctx); }

jepa_status jepa_context_get_params(const jepa_context * ctx, jepa_context_params * out) {
    if (!ctx || !out) return invalid("jepa_context_get_params: ctx and out must not be NULL");
    jepa::clear_error();
    *out = as_ctx(ctx)->params();
    return JEPA_OK;
}

jepa_status jepa_context_set_threads(jepa_context * ctx, int n_threads) {
    if (!ctx) return invalid("jepa_context_set_threads: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->set_threads(n_threads);
        return JEPA_OK;
    })
}

jepa_status jepa_context_set_max_batch(jepa_context * ctx, int max_batch) {
    if (!ctx) return invalid("jepa_context_set_max_batch: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->set_max_batch(max_batch);
        return JEPA_OK;
    })
}

jepa_status jepa_context_check_output(const jepa_context * ctx, const char * what, int64_t n_floats) {
    if (!ctx) return invalid("jepa_context_check_output: ctx must not be NULL");
    JEPA_GUARD({
        jepa::check_output(n_floats, as_ctx(ctx)->params().max_output_bytes, what ? what : "output");
        return JEPA_OK;
    })
}

namespace {
// An encode's pixel shape, checked as every entry that takes one checks it (`what` names the call).
jepa::InputShape pixel_shape(const char * what, int B, int C, int T, int H, int W) {
    if (B < 1 || C < 1 || T < 1 || H < 1 || W < 1) {
        jepa::fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "%s: bad shape [%d, %d, %d, %d, %d]", what, B, C, T, H, W);
    }
    if (H > 16384 || W > 16384 || T > 4096) {
        jepa::fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "%s: input [%d, %d, %d, %d, %d] is too large", what, B, C, T, H, W);
    }
    jepa::InputShape s;
    s.B = B;
    s.C = C;
    s.T = T;
    s.H = H;
    s.W = W;
    return s;
}
}  // namespace

jepa_status jepa_encode(jepa_context * ctx, const float * pixels, int B, int C, int T, int H, int W, float * out,
                        size_t out_len) {
    if (!ctx) return invalid("jepa_encode: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->encode(pixels, pixel_shape("jepa_encode", B, C, T, H, W), out, out_len);
        return JEPA_OK;
    })
}

jepa_status jepa_encode_levels(jepa_context * ctx, const float * pixels, int B, int C, int T, int H, int W,
                               float * out, size_t out_len) {
    if (!ctx) return invalid("jepa_encode_levels: ctx must not be NULL");
    JEPA_GUARD({
        jepa::InputShape s = pixel_shape("jepa_encode_levels", B, C, T, H, W);
        s.levels = true;
        as_ctx(ctx)->encode(pixels, s, out, out_len);
        return JEPA_OK;
    })
}

jepa_status jepa_encode_masked(jepa_context * ctx, const float * pixels, int B, int C, int T, int H, int W,
                               const int32_t * ids, int n_ids, int levels, float * out, size_t out_len) {
    if (!ctx) return invalid("jepa_encode_masked: ctx must not be NULL");
    JEPA_GUARD({
        jepa::InputShape s = pixel_shape("jepa_encode_masked", B, C, T, H, W);
        if (n_ids < 1) jepa::fail_arg(JEPA_ERR_INVALID_ARG, "ids", "jepa_encode_masked: %d token ids", n_ids);
        s.levels = levels != 0;
        s.n_keep = n_ids;
        as_ctx(ctx)->encode(pixels, s, out, out_len, ids);
        return JEPA_OK;
    })
}

jepa_status jepa_encode_memory(jepa_context * ctx, int B, int C, int T, int H, int W, size_t * bytes) {
    if (!ctx || !bytes) return invalid("jepa_encode_memory: ctx and bytes must not be NULL");
    JEPA_GUARD({
        *bytes = as_ctx(ctx)->encode_memory(pixel_shape("jepa_encode_memory", B, C, T, H, W));
        return JEPA_OK;
    })
}

jepa_status jepa_classify(jepa_context * ctx, const float * tokens, int B, int N, int D, float * logits_out,
                          size_t logits_len, float * pooled_out, size_t pooled_len) {
    if (!ctx) return invalid("jepa_classify: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->classify(tokens, B, N, D, logits_out, logits_len, pooled_out, pooled_len);
        return JEPA_OK;
    })
}

jepa_predict_params jepa_predict_default_params(void) {
    jepa_predict_params p;
    p.mask_index = 1;
    p.grid_h = 0;
    p.grid_w = 0;
    p.image = 0;
    p.context_out = nullptr;
    p.context_out_len = 0;
    return p;
}

jepa_status jepa_predict(jepa_context * ctx, const float * tokens, int B, int n_ctx, int D, const int32_t * context_ids,
                         const int32_t * target_ids, int n_tgt, const jepa_predict_params * params, float * out,
                         size_t out_len) {
    if (!ctx) return invalid("jepa_predict: ctx must not be NULL");
    JEPA_GUARD({
        const jepa_predict_params p = params ? *params : jepa_predict_default_params();
        jepa::PredictOptions o;
        o.mask_index = p.mask_index;
        o.grid_h = p.grid_h;
        o.grid_w = p.grid_w;
        o.image = p.image != 0;
        o.context_out = p.context_out;
        o.context_out_len = p.context_out_len;
        as_ctx(ctx)->predict(tokens, B, n_ctx, D, context_ids, target_ids, n_tgt, o, out, out_len);
        return JEPA_OK;
    })
}

jepa_status jepa_world_latents(jepa_context * ctx, const float * tokens, int B, int N, int E, float * out,
                               size_t out_len) {
    if (!ctx) return invalid("jepa_world_latents: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->world_latents(tokens, B, N, E, out, out_len);
        return JEPA_OK;
    })
}

jepa_status jepa_world_predict(jepa_context * ctx, const jepa_world_input * in, const jepa_world_output * out) {
    if (!ctx || !in || !out) return invalid("jepa_world_predict: ctx, in and out must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->world_predict(*in, *out);
        return JEPA_OK;
    })
}

jepa_world_rollout_params jepa_world_rollout_default_params(void) {
    jepa_world_rollout_params p;
    p.cache = 1;
    return p;
}

jepa_status jepa_world_rollout(jepa_context * ctx, const jepa_world_rollout_input * in,
                               const jepa_world_rollout_params * params, float * out, size_t out_len) {
    if (!ctx || !in) return invalid("jepa_world_rollout: ctx and in must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->world_rollout(*in, params ? *params : jepa_world_rollout_default_params(), out, out_len);
        return JEPA_OK;
    })
}

jepa_status jepa_encode_text(jepa_context * ctx, const int32_t * ids, const int32_t * type_ids, const int32_t * seq_len,
                             int n_seq, jepa_pooling_type pool, int normalize, float * out, size_t out_len) {
    if (!ctx) return invalid("jepa_encode_text: ctx must not be NULL");
    JEPA_GUARD({
        as_ctx(ctx)->encode_text(ids, type_ids, seq_len, n_seq, pool, normalize != 0, out, out_len);
        return JEPA_OK;
    })
}

}  // extern "C"
