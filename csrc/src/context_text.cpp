// Context::encode_text: checks, chunking into graphs of at most max_batch sequences, pooling.
#include "context.h"

#include "error.h"
#include "input_checks.h"
#include "text.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace jepa {

namespace {

void check_ids(const int32_t * ids, int64_t n, int64_t limit, const char * param, const char * what) {
    for (int64_t i = 0; i < n; ++i) {
        if (ids[i] < 0 || ids[i] >= limit) {
            fail_arg(JEPA_ERR_INVALID_ARG, param, "encode_text: %s %d at token %lld is out of range [0, %lld)", what,
                     ids[i], (long long) i, (long long) limit);
        }
    }
}

// One sequence's rows [n, D] -> its vector, as sentence-transformers pools (sums in double, then
// rounded once: the result does not depend on anything but these rows).
void pool_rows(const float * rows, int64_t n, int64_t D, jepa_pooling_type pool, bool normalize, float * out) {
    if (pool == JEPA_POOLING_CLS) {
        std::memcpy(out, rows, sizeof(float) * size_t(D));
    } else if (pool == JEPA_POOLING_LAST) {
        std::memcpy(out, rows + (n - 1) * D, sizeof(float) * size_t(D));
    } else {
        for (int64_t d = 0; d < D; ++d) {
            double s = 0.0;
            for (int64_t i = 0; i < n; ++i) s += double(rows[i * D + d]);
            out[d] = float(s / double(n));
        }
    }
    if (!normalize) return;
    double ss = 0.0;
    for (int64_t d = 0; d < D; ++d) ss += double(out[d]) * double(out[d]);
    const double norm = std::max(std::sqrt(ss), 1e-12);  // torch.nn.functional.normalize's eps
    for (int64_t d = 0; d < D; ++d) out[d] = float(double(out[d]) / norm);
}

}  // namespace

void Context::encode_text_chunk(const int32_t * ids, const int32_t * type_ids, const int64_t * offsets, int s0, int s1,
                                float * tokens) {
    const Model & m = model_;
    const int64_t t0 = offsets[s0], n_tok = offsets[s1] - t0;
    varlen_.offsets.assign(offsets + s0, offsets + s1 + 1);
    for (int64_t & o : varlen_.offsets) o -= t0;
    varlen_.scale = 1.0f / std::sqrt(float(m.hp.enc.head_dim()));
    varlen_.half = m.half_attention;
    TextGraph tg = build_text_graph(graph_ctx(), m, varlen_, use_flash());
    allocate(tg.graph);
    text_pos_.resize(size_t(n_tok));
    text_types_.assign(size_t(n_tok), 0);
    for (int s = s0; s < s1; ++s) {
        for (int64_t i = offsets[s]; i < offsets[s + 1]; ++i) text_pos_[size_t(i - t0)] = int32_t(m.hp.text.pos_offset + i - offsets[s]);
    }
    if (type_ids) std::memcpy(text_types_.data(), type_ids + t0, sizeof(int32_t) * size_t(n_tok));
    ggml_backend_tensor_set(tg.ids, ids + t0, 0, ggml_nbytes(tg.ids));
    ggml_backend_tensor_set(tg.types, text_types_.data(), 0, ggml_nbytes(tg.types));
    ggml_backend_tensor_set(tg.pos, text_pos_.data(), 0, ggml_nbytes(tg.pos));
    compute(tg.graph);
    ggml_backend_tensor_get(tg.out, tokens, 0, ggml_nbytes(tg.out));
}

void Context::encode_text(const int32_t * ids, const int32_t * type_ids, const int32_t * seq_len, int n_seq,
                          jepa_pooling_type pool, bool normalize, float * out, size_t out_len) {
    const Model & m = model_;
    if (!m.hp.is_text()) {
        fail(JEPA_ERR_UNSUPPORTED, "encode_text: this is an %s model, not a text model (jepa.modality %s)",
             m.hp.modality.c_str(), m.hp.modality.c_str());
    }
    if (!ids || !seq_len || !out) fail(JEPA_ERR_INVALID_ARG, "encode_text: ids, seq_len and out must not be NULL");
    if (n_seq < 1) fail_arg(JEPA_ERR_INVALID_ARG, "seq_len", "encode_text: n_seq must be >= 1, got %d", n_seq);
    if (pool < JEPA_POOLING_NONE || pool > JEPA_POOLING_LAST) {  // LEWM is an image model's
        fail_arg(JEPA_ERR_INVALID_ARG, "pool", "encode_text: pooling %d is not a text pooling (NONE, CLS, MEAN, LAST)",
                 int(pool));
    }
    const TextHparams & t = m.hp.text;
    std::vector<int64_t> offsets(size_t(n_seq) + 1, 0);
    int max_len = 0;
    for (int s = 0; s < n_seq; ++s) {
        if (seq_len[s] < 1 || seq_len[s] > t.max_tokens()) {
            fail_arg(JEPA_ERR_INVALID_ARG, "seq_len",
                     "encode_text: sequence %d has %d tokens; a sequence takes 1 to %d (the position table)", s,
                     seq_len[s], t.max_tokens());
        }
        offsets[size_t(s) + 1] = offsets[size_t(s)] + seq_len[s];
        max_len = std::max(max_len, int(seq_len[s]));
    }
    const int64_t n_tok = offsets.back(), D = m.hp.enc.embed_dim;
    const int64_t rows = pool == JEPA_POOLING_NONE ? n_tok : n_seq;
    check_output(mul_sat({rows, D}), params_.max_output_bytes, "encode_text");
    if (out_len / size_t(D) < size_t(rows)) {
        fail(JEPA_ERR_INVALID_ARG, "encode_text: out holds %zu floats, needs %lld", out_len, (long long) (rows * D));
    }
    check_ids(ids, n_tok, t.vocab_size, "ids", "token id");
    if (type_ids) check_ids(type_ids, n_tok, t.n_token_types, "type_ids", "token type id");

    // Sequences per graph: max_batch, fewer where the compute buffer would pass max_graph_bytes
    // (measured on sequences of the call's longest length, so every chunk fits).
    auto build = [&](int b) {
        varlen_.offsets.resize(size_t(b) + 1);
        for (int i = 0; i <= b; ++i) varlen_.offsets[size_t(i)] = int64_t(i) * max_len;
        return build_text_graph(graph_ctx(), m, varlen_, use_flash()).graph;
    };
    const int chunk = fit_chunk(build, std::min(n_seq, params_.max_batch), format("sequence of %d tokens", max_len));
    for (int s0 = 0; s0 < n_seq; s0 += chunk) {
        const int s1 = std::min(n_seq, s0 + chunk);
        const int64_t t0 = offsets[size_t(s0)];
        float * tokens = out + size_t(t0 * D);
        if (pool != JEPA_POOLING_NONE) {
            text_tokens_.resize(size_t((offsets[size_t(s1)] - t0) * D));
            tokens = text_tokens_.data();
        }
        encode_text_chunk(ids, type_ids, offsets.data(), s0, s1, tokens);
        if (pool == JEPA_POOLING_NONE) continue;
        for (int s = s0; s < s1; ++s) {
            pool_rows(tokens + (offsets[size_t(s)] - t0) * D, seq_len[s], D, pool, normalize, out + size_t(s) * size_t(D));
        }
    }
}

}  // namespace jepa
