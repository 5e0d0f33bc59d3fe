// jepa_quantize: ggml's own conversion of float32 weight rows to a storage type (jepa-quantize).
// No second implementation: every byte of ggml's types comes from ggml_quantize_chunk. i8c, the
// project's own (int8 with one f32 scale per row, docs/gguf.md), is written here, its one writer.
#include "jepa.h"

#include "error.h"
#include "cpu/gemm.h"

#include "ggml.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace {

// The types jepa-quantize writes, by the names its --type takes.
struct TypeName {
    const char * name;
    ggml_type type;
};
constexpr TypeName kTypes[] = {
    {"f16", GGML_TYPE_F16},   {"bf16", GGML_TYPE_BF16}, {"q8_0", GGML_TYPE_Q8_0}, {"q6_k", GGML_TYPE_Q6_K},
    {"q5_k", GGML_TYPE_Q5_K}, {"q5_0", GGML_TYPE_Q5_0}, {"q4_k", GGML_TYPE_Q4_K}, {"q4_0", GGML_TYPE_Q4_0},
    {"i8c", GGML_TYPE_I8},
};
// i8c's rows: whole 16-value groups, at most 65536 values (the product's exact int32 sums, gemm.h).
constexpr int64_t kI8Step = jepa::gemm::I8_K_STEP, kI8Max = jepa::gemm::I8_K_MAX;

ggml_type type_of(const char * name) {
    if (name) {
        for (const TypeName & t : kTypes) {
            if (std::strcmp(t.name, name) == 0) return t.type;
        }
    }
    jepa::fail_arg(JEPA_ERR_INVALID_ARG, "type",
                   "unknown quantization type \"%s\" (f16, bf16, q8_0, q6_k, q5_k, q5_0, q4_k, q4_0, i8c)",
                   name ? name : "(null)");
}

// Bytes of one row, refusing a row length the type's blocks do not divide. An i8c row is its int8
// values, then its f32 scale.
size_t row_bytes(ggml_type type, const char * name, int64_t n_per_row) {
    if (type == GGML_TYPE_I8) {
        if (n_per_row < 1 || n_per_row % kI8Step != 0 || n_per_row > kI8Max) {
            jepa::fail_arg(JEPA_ERR_UNSUPPORTED, "n_per_row", "i8c takes rows of a multiple of %lld values up to %lld; "
                           "a row of %lld does not fit", (long long) kI8Step, (long long) kI8Max, (long long) n_per_row);
        }
        return size_t(n_per_row) + sizeof(float);
    }
    const int64_t blck = ggml_blck_size(type);
    if (n_per_row < 1 || n_per_row % blck != 0) {
        jepa::fail_arg(JEPA_ERR_UNSUPPORTED, "n_per_row", "%s packs rows in blocks of %lld values; a row of %lld does not fit",
                       name, (long long) blck, (long long) n_per_row);
    }
    return ggml_row_size(type, n_per_row);
}

// i8c: each row's scale d = amax / 127 and its values round(x / d) (x times 1 / d, to nearest even),
// in [-127, 127]; a row of zeros has scale 0. A row holding a NaN or an infinity is refused.
void quantize_i8c(const float * src, int64_t n_rows, int64_t n, uint8_t * dst) {
    const size_t row = size_t(n) + sizeof(float);
    for (int64_t r = 0; r < n_rows; ++r) {
        const float * x = src + r * n;
        float amax = 0.0f;
        for (int64_t k = 0; k < n; ++k) {
            if (!std::isfinite(x[k])) {
                jepa::fail_arg(JEPA_ERR_INVALID_ARG, "src", "jepa_quantize: row %lld holds %s at %lld", (long long) r,
                               std::isnan(x[k]) ? "a NaN" : "an infinity", (long long) k);
            }
            amax = std::max(amax, std::fabs(x[k]));
        }
        const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
        auto * q = reinterpret_cast<int8_t *>(dst + size_t(r) * row);
        for (int64_t k = 0; k < n; ++k) q[k] = int8_t(std::clamp(std::nearbyint(x[k] * id), -127.0f, 127.0f));
        std::memcpy(q + n, &d, sizeof d);
    }
}

}  // namespace

extern "C" {

int jepa_type_id(const char * type) {
    jepa::clear_error();
    try {
        return int(type_of(type));
    } catch (const jepa::Error & e) {
        jepa::set_error(e.status(), e.what(), e.param());
    }
    return -1;
}

int64_t jepa_type_row_bytes(const char * type, int64_t n_per_row) {
    jepa::clear_error();
    try {
        return int64_t(row_bytes(type_of(type), type, n_per_row));
    } catch (const jepa::Error & e) {
        jepa::set_error(e.status(), e.what(), e.param());
    }
    return -1;
}

jepa_status jepa_quantize(const char * type, const float * src, int64_t n_rows, int64_t n_per_row, void * dst,
                          size_t dst_len) {
    JEPA_GUARD({
        const ggml_type t = type_of(type);
        if (!src) jepa::fail_arg(JEPA_ERR_INVALID_ARG, "src", "jepa_quantize: src must not be NULL");
        if (!dst) jepa::fail_arg(JEPA_ERR_INVALID_ARG, "dst", "jepa_quantize: dst must not be NULL");
        if (n_rows < 1) jepa::fail_arg(JEPA_ERR_INVALID_ARG, "n_rows", "jepa_quantize: n_rows must be >= 1");
        const size_t row = row_bytes(t, type, n_per_row);
        if (dst_len / size_t(n_rows) < row) {
            jepa::fail_arg(JEPA_ERR_INVALID_ARG, "dst", "jepa_quantize: dst holds %zu bytes, needs %zu", dst_len,
                           row * size_t(n_rows));
        }
        if (t == GGML_TYPE_I8) {
            quantize_i8c(src, n_rows, n_per_row, static_cast<uint8_t *>(dst));
            return JEPA_OK;
        }
        if (ggml_quantize_requires_imatrix(t)) {
            jepa::fail_arg(JEPA_ERR_UNSUPPORTED, "type", "%s needs an importance matrix", type);
        }
        ggml_quantize_chunk(t, src, dst, 0, n_rows, n_per_row, nullptr);
        return JEPA_OK;
    })
}

}  // extern "C"
