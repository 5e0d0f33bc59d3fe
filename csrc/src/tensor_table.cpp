#include "tensor_table.h"

#include "error.h"
#include "gguf.h"

namespace jepa {

std::string shape_str(const ggml_tensor * t) {
    std::string s = "[";
    const int n = ggml_n_dims(t);
    for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(t->ne[i]);
    return s + "]";
}

namespace {

std::string shape_str(const std::vector<int64_t> & ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

bool type_allowed(ggml_type type, TensorKind kind) {
    if (type == GGML_TYPE_F32) return true;
    if (kind != TensorKind::Matrix) return false;
    switch (type) {
        case GGML_TYPE_I8:  // i8c: with its .weight_scale (TensorTable::linear)
        case GGML_TYPE_F16: case GGML_TYPE_BF16: case GGML_TYPE_Q8_0: case GGML_TYPE_Q4_0: case GGML_TYPE_Q4_1:
        case GGML_TYPE_Q5_0: case GGML_TYPE_Q5_1: case GGML_TYPE_Q4_K: case GGML_TYPE_Q5_K: case GGML_TYPE_Q6_K:
            return true;
        default:
            return false;
    }
}

}  // namespace

ggml_tensor * TensorTable::lookup(const std::string & name, const std::vector<int64_t> & ne, TensorKind kind,
                                  bool required) {
    ggml_tensor * t = ggml_get_tensor(ctx_, name.c_str());
    if (!t) {
        if (required) fail(JEPA_ERR_BAD_FILE, "missing tensor %s (expected shape %s)", name.c_str(), shape_str(ne).c_str());
        return nullptr;
    }
    bool ok = true;
    for (int i = 0; i < GGML_MAX_DIMS && ok; ++i) {
        const int64_t want = i < int(ne.size()) ? ne[size_t(i)] : 1;
        ok = t->ne[i] == want;
    }
    if (!ok) {
        fail(JEPA_ERR_BAD_FILE, "%s: got %s, expected %s", name.c_str(), shape_str(t).c_str(), shape_str(ne).c_str());
    }
    if (!type_allowed(t->type, kind)) {
        fail(JEPA_ERR_BAD_FILE, "%s: dtype %s is not allowed here (%s)", name.c_str(), ggml_type_name(t->type),
             kind == TensorKind::Matrix ? "weight matrices may be f32, f16, bf16 or quantized"
                                        : "only 2-D weight matrices may be f16 or quantized; this must be f32");
    }
    used_.insert(name);
    return t;
}

ggml_tensor * TensorTable::require(const std::string & name, const std::vector<int64_t> & ne, TensorKind kind) {
    return lookup(name, ne, kind, true);
}

ggml_tensor * TensorTable::optional(const std::string & name, const std::vector<int64_t> & ne, TensorKind kind) {
    return lookup(name, ne, kind, false);
}

ggml_tensor * TensorTable::require_rows(const std::string & name, int64_t ne0, const std::vector<int64_t> & rows) {
    ggml_tensor * t = ggml_get_tensor(ctx_, name.c_str());
    if (!t) fail(JEPA_ERR_BAD_FILE, "missing tensor %s", name.c_str());
    for (int64_t r : rows) {
        if (t->ne[1] == r) return require(name, {ne0, r});
    }
    std::string want;
    for (int64_t r : rows) want += (want.empty() ? "" : " or ") + shape_str(std::vector<int64_t>{ne0, r});
    fail(JEPA_ERR_BAD_FILE, "%s: got %s, expected %s", name.c_str(), shape_str(t).c_str(), want.c_str());
}

LinearW TensorTable::linear(const std::string & prefix, int64_t in, int64_t out) {
    LinearW l;
    l.w = require(prefix + ".weight", {in, out}, TensorKind::Matrix);
    // An i8c matrix: int8 rows and the f32 scale of each (docs/gguf.md). A scale beside any other type
    // is an unexpected tensor (check_all_used).
    if (l.w->type == GGML_TYPE_I8) l.s = require(prefix + ".weight_scale", {out});
    l.b = optional(prefix + ".bias", {out});
    return l;
}

int64_t TensorTable::ne(const std::string & name, int i) const {
    const ggml_tensor * t = ggml_get_tensor(ctx_, name.c_str());
    return t && i >= 0 && i < GGML_MAX_DIMS ? t->ne[i] : -1;
}

void TensorTable::check_all_used() const {
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) {
        if (!used_.count(ggml_get_name(t))) {
            fail(JEPA_ERR_BAD_FILE, "unexpected tensor %s %s (not part of this model's layout)", ggml_get_name(t),
                 shape_str(t).c_str());
        }
    }
}

int64_t TensorTable::n_elements() const {
    int64_t n = 0;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) n += ggml_nelements(t);
    return n;
}

int64_t TensorTable::n_bytes() const {
    int64_t n = 0;
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_); t; t = ggml_get_next_tensor(ctx_, t)) n += int64_t(ggml_nbytes(t));
    return n;
}

}  // namespace jepa
