// libFuzzer target: bytes -> a GGUF file in memory (memfd) -> jepa_model_load; a model that loads is
// described, counted and, when tiny, run once: an encode, then its head, predictor or world model
// (a text model: its tokenizer string and a two-sequence encode_text through every pooling). Built by -DJEPA_FUZZ=ON with clang
// (-fsanitize=fuzzer,address,undefined over the engine and ggml): docs/fuzzing.md.
//
// Beyond "no sanitizer report": every refusal carries a status and a non-empty UTF-8 message, and a
// loaded model's strings are UTF-8 (what the loader promises Python). A broken promise traps.
#include "jepa.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

// The largest encode the target runs (floats in and out): bigger models are loaded and described only.
constexpr size_t kMaxRunFloats = size_t(1) << 16;

// Same rules as the engine's check (RFC 3629), written again so the target does not trust the code it tests.
bool utf8(const char * s) {
    const auto * u = reinterpret_cast<const unsigned char *>(s);
    for (size_t i = 0; u[i];) {
        const unsigned c = u[i];
        size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || (len == 2 && c < 0xC2) || (len == 4 && c > 0xF4)) return false;
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (size_t k = 1; k < len; ++k) {
            if ((u[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF)) {
            return false;
        }
        i += len;
    }
    return true;
}

[[noreturn]] void broken(const char * what, const char * detail) {
    std::fprintf(stderr, "fuzz_gguf: broken promise: %s: %s\n", what, detail);
    std::abort();
}

void refused(const char * call) {
    if (jepa_error_status() == JEPA_OK) broken(call, "failed with status OK");
    const char * msg = jepa_error_text();
    if (!*msg) broken(call, "failed with an empty message");
    if (!utf8(msg)) broken(call, "message is not UTF-8");
    if (!utf8(jepa_error_param())) broken(call, "param is not UTF-8");
}

// What else the file holds, on the tokens one encode gave: the classifier, the masked predictor
// (half the tokens as context, the rest as targets) or one world-model step on zero latents.
void heads(jepa_context * ctx, const jepa_model_info & info, std::vector<float> & tokens, int n_tok) {
    const int D = info.embed_dim;
    if (info.head_kind != JEPA_HEAD_NONE && size_t(info.n_classes) <= kMaxRunFloats) {
        std::vector<float> logits(static_cast<size_t>(info.n_classes)), pooled(static_cast<size_t>(D));
        if (jepa_classify(ctx, tokens.data(), 1, n_tok, D, logits.data(), logits.size(), pooled.data(), pooled.size()) !=
            JEPA_OK) {
            refused("jepa_classify");
        }
    }
    if (info.pred_kind == JEPA_PRED_MASKED && n_tok >= 2) {
        const int n_ctx = n_tok / 2, n_tgt = n_tok - n_ctx;
        std::vector<int32_t> ctx_ids(static_cast<size_t>(n_ctx)), tgt_ids(static_cast<size_t>(n_tgt));
        for (int i = 0; i < n_ctx; ++i) ctx_ids[size_t(i)] = i;
        for (int i = 0; i < n_tgt; ++i) tgt_ids[size_t(i)] = n_ctx + i;
        std::vector<float> pred(size_t(n_tgt) * size_t(D));
        if (jepa_predict(ctx, tokens.data(), 1, n_ctx, D, ctx_ids.data(), tgt_ids.data(), n_tgt, nullptr, pred.data(),
                         pred.size()) != JEPA_OK) {
            refused("jepa_predict");
        }
    }
    if (info.pred_kind == JEPA_PRED_AC || info.pred_kind == JEPA_PRED_LEWM) {
        const size_t lat = info.pred_kind == JEPA_PRED_AC ? size_t(n_tok) * size_t(D) : size_t(info.wm_embed_dim);
        std::vector<float> latents(lat);
        if (jepa_world_latents(ctx, tokens.data(), 1, n_tok, D, latents.data(), latents.size()) != JEPA_OK) {
            refused("jepa_world_latents");
        }
        jepa_world_input in{};
        in.kind = info.pred_kind;
        in.B = 1;
        in.T = 1;
        in.P = info.pred_kind == JEPA_PRED_AC ? info.pred_grid_size * info.pred_grid_size : 1;
        in.D = info.wm_embed_dim;
        in.A = info.pred_action_dim;
        in.S = info.pred_kind == JEPA_PRED_AC ? info.pred_state_dim : 0;
        const size_t n_z = size_t(in.P) * size_t(in.D);
        if (n_z == 0 || n_z > kMaxRunFloats || size_t(in.A) + size_t(in.S) > kMaxRunFloats) return;
        std::vector<float> z(n_z, 0.25f), a(size_t(in.A), 0.5f), st(size_t(in.S), -0.5f), pred(n_z);
        in.latents = z.data();
        in.actions = a.data();
        in.states = in.S ? st.data() : nullptr;
        jepa_world_output out{};
        out.pred = pred.data();
        out.len = pred.size();
        if (jepa_world_predict(ctx, &in, &out) != JEPA_OK) refused("jepa_world_predict");
    }
}

// A text model: its tokenizer string, then two short sequences laid end to end (ids and token types
// in range) through every pooling.
void exercise_text(jepa_model * m, const jepa_model_info & info) {
    const char * tok = jepa_model_tokenizer(m);
    if (!tok) return refused("jepa_model_tokenizer");
    if (!utf8(tok)) broken("jepa_model_tokenizer", "not UTF-8");
    const int n1 = info.max_tokens < 5 ? info.max_tokens : 5;
    const size_t n_tok = size_t(1 + n1);
    if (info.n_layer > 4 || n_tok * size_t(info.embed_dim) > kMaxRunFloats || info.vocab_size < 1) return;
    jepa_context_params cp = jepa_context_default_params();
    cp.n_threads = 1;
    jepa_context * ctx = jepa_context_new(m, &cp);
    if (!ctx) return refused("jepa_context_new");
    std::vector<int32_t> ids(n_tok), types(n_tok);
    for (size_t i = 0; i < n_tok; ++i) {
        ids[i] = int32_t(i * 7 % size_t(info.vocab_size));
        types[i] = int32_t(i % size_t(info.n_token_types > 0 ? info.n_token_types : 1));
    }
    const int32_t lens[2] = {1, n1};
    std::vector<float> out(n_tok * size_t(info.embed_dim));
    for (jepa_pooling_type pool : {JEPA_POOLING_NONE, JEPA_POOLING_CLS, JEPA_POOLING_MEAN, JEPA_POOLING_LAST}) {
        if (jepa_encode_text(ctx, ids.data(), types.data(), lens, 2, pool, 1, out.data(), out.size()) != JEPA_OK) {
            refused("jepa_encode_text");
        }
    }
    jepa_context_free(ctx);
}

void exercise(jepa_model * m) {
    jepa_model_info info;
    if (jepa_model_get_info(m, &info) != JEPA_OK) return refused("jepa_model_get_info");
    for (const char * s : {info.name, info.family, info.modality, info.backend, info.matmul}) {
        if (!s || !utf8(s)) broken("model info", "a string is NULL or not UTF-8");
    }
    for (int i = 0; i < info.n_labels; ++i) {
        const char * l = jepa_model_label(m, i);
        if (!l || !utf8(l)) broken("jepa_model_label", "NULL or not UTF-8");
    }
    if (std::strcmp(info.modality, "text") == 0) return exercise_text(m, info);
    const int T = info.n_frames;
    const int64_t n_tok = jepa_model_n_tokens(m, info.in_chans, T, info.img_size, info.img_size);
    if (n_tok < 0) return refused("jepa_model_n_tokens");
    const size_t n_in = size_t(info.in_chans) * size_t(T) * size_t(info.img_size) * size_t(info.img_size);
    const size_t n_out = size_t(n_tok) * size_t(info.embed_dim);
    if (n_in > kMaxRunFloats || n_out > kMaxRunFloats || info.n_layer > 4) return;
    jepa_context_params cp = jepa_context_default_params();
    cp.n_threads = 1;
    jepa_context * ctx = jepa_context_new(m, &cp);
    if (!ctx) return refused("jepa_context_new");
    std::vector<float> in(n_in), out(n_out);
    for (size_t i = 0; i < n_in; ++i) in[i] = float(i % 13) / 13.0f - 0.5f;
    if (jepa_encode(ctx, in.data(), 1, info.in_chans, T, info.img_size, info.img_size, out.data(), out.size()) != JEPA_OK) {
        refused("jepa_encode");
    } else {
        heads(ctx, info, out, int(n_tok));
    }
    jepa_context_free(ctx);
}

int g_fd = -1;
std::string g_path;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    // One in-memory file, rewritten for every input: no disk traffic, nothing left behind.
    g_fd = memfd_create("fuzz.gguf", MFD_CLOEXEC);
    if (g_fd < 0) {
        std::perror("memfd_create");
        std::exit(2);
    }
    g_path = "/proc/self/fd/" + std::to_string(g_fd);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t * data, size_t size) {
    if (ftruncate(g_fd, 0) != 0 || (size && pwrite(g_fd, data, size, 0) != ssize_t(size))) {
        std::perror("memfd write");
        std::exit(2);
    }
    jepa_model_params mp = jepa_model_default_params();
    jepa_model * m = jepa_model_load(g_path.c_str(), &mp);
    if (!m) {
        refused("jepa_model_load");
        return 0;
    }
    exercise(m);
    jepa_model_free(m);
    return 0;
}
