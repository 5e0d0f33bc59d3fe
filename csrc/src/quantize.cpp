// jepa_quantize: ggml's own conversion of float32 weight rows to a storage type (jepa-quantize).
// No second implementation: every byte comes from ggml_quantize_chunk.
#include "jepa.h"

#include "error.h"

#include "ggml.h"

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
};

ggml_type type_of(const char * name) {
    if (name) {
        for (const TypeName & t : kTypes) {
            if (std::strcmp(t.name, name) == 0) return t.type;
        }
    }
    jepa::fail_arg(JEPA_ERR_INVALID_ARG, "type",
                   "unknown quantization type \"%s\" (f16, bf16, q8_0, q6_k, q5_k, q5_0, q4_k, q4_0)",
                   name ? name : "(null)");
}

// Bytes of one row, refusing a row length the type's blocks do not divide.
size_t row_bytes(ggml_type type, const char * name, int64_t n_per_row) {
    const int64_t blck = ggml_blck_size(type);
    if (n_per_row < 1 || n_per_row % blck != 0) {
        jepa::fail_arg(JEPA_ERR_UNSUPPORTED, "n_per_row", "%s packs rows in blocks of %lld values; a row of %lld does not fit",
                       name, (long long) blck, (long long) n_per_row);
    }
    return ggml_row_size(type, n_per_row);
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
        if (ggml_quantize_requires_imatrix(t)) {
            jepa::fail_arg(JEPA_ERR_UNSUPPORTED, "type", "%s needs an importance matrix", type);
        }
        ggml_quantize_chunk(t, src, dst, 0, n_rows, n_per_row, nullptr);
        return JEPA_OK;
    })
}

}  // extern "C"
