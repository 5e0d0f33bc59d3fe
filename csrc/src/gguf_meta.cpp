#include "gguf_meta.h"

#include "error.h"

#include <cmath>
#include <cstring>

namespace jepa {

int64_t GgufMeta::find(const char * key) const {
    const int64_t id = gguf_find_key(ctx_, key);
    if (id < 0) fail(JEPA_ERR_BAD_FILE, "missing metadata key %s", key);
    return id;
}

bool GgufMeta::has(const char * key) const { return gguf_find_key(ctx_, key) >= 0; }

int64_t GgufMeta::get_int(const char * key, int64_t lo, int64_t hi) const {
    const int64_t id = find(key);
    int64_t v = 0;
    switch (gguf_get_kv_type(ctx_, id)) {
        case GGUF_TYPE_UINT8:  v = gguf_get_val_u8(ctx_, id); break;
        case GGUF_TYPE_INT8:   v = gguf_get_val_i8(ctx_, id); break;
        case GGUF_TYPE_UINT16: v = gguf_get_val_u16(ctx_, id); break;
        case GGUF_TYPE_INT16:  v = gguf_get_val_i16(ctx_, id); break;
        case GGUF_TYPE_UINT32: v = gguf_get_val_u32(ctx_, id); break;
        case GGUF_TYPE_INT32:  v = gguf_get_val_i32(ctx_, id); break;
        case GGUF_TYPE_INT64:  v = gguf_get_val_i64(ctx_, id); break;
        case GGUF_TYPE_UINT64: {
            const uint64_t u = gguf_get_val_u64(ctx_, id);
            if (u > uint64_t(INT64_MAX)) fail(JEPA_ERR_BAD_FILE, "metadata key %s: value %llu out of range", key, (unsigned long long) u);
            v = int64_t(u);
            break;
        }
        default:
            fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected an integer, got %s", key,
                 gguf_type_name(gguf_get_kv_type(ctx_, id)));
    }
    if (v < lo || v > hi) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: value %lld out of range [%lld, %lld]", key, (long long) v,
             (long long) lo, (long long) hi);
    }
    return v;
}

int64_t GgufMeta::get_int(const char * key, int64_t lo, int64_t hi, int64_t fallback) const {
    return has(key) ? get_int(key, lo, hi) : fallback;
}

float GgufMeta::get_f32(const char * key) const {
    const int64_t id = find(key);
    double v = 0;
    switch (gguf_get_kv_type(ctx_, id)) {
        case GGUF_TYPE_FLOAT32: v = gguf_get_val_f32(ctx_, id); break;
        case GGUF_TYPE_FLOAT64: v = gguf_get_val_f64(ctx_, id); break;
        default:
            fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected a float, got %s", key,
                 gguf_type_name(gguf_get_kv_type(ctx_, id)));
    }
    if (!std::isfinite(v)) fail(JEPA_ERR_BAD_FILE, "metadata key %s: value is not finite", key);
    return float(v);
}

float GgufMeta::get_f32(const char * key, float fallback) const { return has(key) ? get_f32(key) : fallback; }

bool GgufMeta::get_bool(const char * key, bool fallback) const {
    if (!has(key)) return fallback;
    const int64_t id = find(key);
    if (gguf_get_kv_type(ctx_, id) == GGUF_TYPE_BOOL) return gguf_get_val_bool(ctx_, id);
    return get_int(key, 0, 1) != 0;
}

std::string GgufMeta::get_str(const char * key) const {
    const int64_t id = find(key);
    if (gguf_get_kv_type(ctx_, id) != GGUF_TYPE_STRING) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected a string, got %s", key,
             gguf_type_name(gguf_get_kv_type(ctx_, id)));
    }
    return gguf_get_val_str(ctx_, id);
}

std::string GgufMeta::get_str(const char * key, const std::string & fallback) const {
    return has(key) ? get_str(key) : fallback;
}

int GgufMeta::get_enum(const char * key, const std::vector<std::string> & choices, int fallback) const {
    if (!has(key)) return fallback;
    const std::string v = get_str(key);
    for (size_t i = 0; i < choices.size(); ++i) {
        if (choices[i] == v) return int(i);
    }
    std::string all;
    for (const auto & c : choices) all += (all.empty() ? "" : ", ") + c;
    fail(JEPA_ERR_BAD_FILE, "metadata key %s: unsupported value \"%s\" (expected one of: %s)", key, v.c_str(),
         all.c_str());
}

std::vector<float> GgufMeta::get_f32_array(const char * key, size_t n) const {
    const int64_t id = find(key);
    if (gguf_get_kv_type(ctx_, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(ctx_, id) != GGUF_TYPE_FLOAT32) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected an array of f32", key);
    }
    if (gguf_get_arr_n(ctx_, id) != n) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected %zu values, got %zu", key, n, gguf_get_arr_n(ctx_, id));
    }
    const float * d = static_cast<const float *>(gguf_get_arr_data(ctx_, id));
    std::vector<float> out(d, d + n);
    for (float v : out) {
        if (!std::isfinite(v)) fail(JEPA_ERR_BAD_FILE, "metadata key %s: value is not finite", key);
    }
    return out;
}

std::vector<int64_t> GgufMeta::get_u32_array(const char * key, size_t min_n, size_t max_n) const {
    const int64_t id = find(key);
    const bool arr = gguf_get_kv_type(ctx_, id) == GGUF_TYPE_ARRAY;
    const gguf_type t = arr ? gguf_get_arr_type(ctx_, id) : GGUF_TYPE_COUNT;
    if (t != GGUF_TYPE_UINT32 && t != GGUF_TYPE_INT32) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected an array of u32", key);
    }
    const size_t n = gguf_get_arr_n(ctx_, id);
    if (n < min_n || n > max_n) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: %zu entries, expected %zu to %zu", key, n, min_n, max_n);
    }
    std::vector<int64_t> out(n);
    const void * d = gguf_get_arr_data(ctx_, id);
    for (size_t i = 0; i < n; ++i) {
        out[i] = t == GGUF_TYPE_UINT32 ? int64_t(static_cast<const uint32_t *>(d)[i]) : int64_t(static_cast<const int32_t *>(d)[i]);
        if (out[i] < 0) fail(JEPA_ERR_BAD_FILE, "metadata key %s: value %lld is negative", key, (long long) out[i]);
    }
    return out;
}

std::vector<std::string> GgufMeta::get_str_array(const char * key, size_t max_n) const {
    const int64_t id = find(key);
    if (gguf_get_kv_type(ctx_, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(ctx_, id) != GGUF_TYPE_STRING) {
        fail(JEPA_ERR_BAD_FILE, "metadata key %s: expected an array of strings", key);
    }
    const size_t n = gguf_get_arr_n(ctx_, id);
    if (n > max_n) fail(JEPA_ERR_BAD_FILE, "metadata key %s: %zu entries, more than the limit %zu", key, n, max_n);
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.emplace_back(gguf_get_arr_str(ctx_, id, i));
    return out;
}

}  // namespace jepa

namespace jepa {

namespace {

// `s` as printable ASCII (other bytes as \xNN), at most 64 bytes of it: a name that is not text
// can still be shown in a message.
std::string escaped(const char * s) {
    std::string out;
    for (size_t i = 0; s[i] && i < 64; ++i) {
        const unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F) out += char(c);
        else out += format("\\x%02x", c);
    }
    return out;
}

bool is_text(const char * s) {
    const size_t n = std::strlen(s);
    return utf8_valid_prefix(s, n) == n;
}

void check_text(const char * s, const char * what, const std::string & key) {
    const size_t n = std::strlen(s);
    const size_t ok = utf8_valid_prefix(s, n);
    if (ok != n) {
        fail(JEPA_ERR_BAD_FILE, "%s %s: not valid UTF-8 (byte 0x%02x at offset %zu)", what, key.c_str(),
             unsigned(static_cast<unsigned char>(s[ok])), ok);
    }
}

}  // namespace

void check_strings(const gguf_context * ctx) {
    // ggml hands strings out as C strings, so what any reader sees (and what is checked) ends at
    // the first NUL byte.
    // A key's or a tensor's own name: what the error would have to quote.
    auto check_name = [](const char * name, const char * what, int64_t id) {
        if (!is_text(name)) {
            fail(JEPA_ERR_BAD_FILE, "%s #%lld (\"%s\"): the %s's name is not valid UTF-8", what, (long long) id,
                 escaped(name).c_str(), what);
        }
    };
    const int64_t n_kv = gguf_get_n_kv(ctx);
    for (int64_t id = 0; id < n_kv; ++id) {
        const char * key = gguf_get_key(ctx, id);
        check_name(key, "metadata key", id);
        const gguf_type t = gguf_get_kv_type(ctx, id);
        if (t == GGUF_TYPE_STRING) {
            check_text(gguf_get_val_str(ctx, id), "metadata key", key);
        } else if (t == GGUF_TYPE_ARRAY && gguf_get_arr_type(ctx, id) == GGUF_TYPE_STRING) {
            const size_t n = gguf_get_arr_n(ctx, id);
            for (size_t i = 0; i < n; ++i) check_text(gguf_get_arr_str(ctx, id, i), "metadata key", format("%s[%zu]", key, i));
        }
    }
    const int64_t n_t = gguf_get_n_tensors(ctx);
    for (int64_t id = 0; id < n_t; ++id) check_name(gguf_get_tensor_name(ctx, id), "tensor", id);
}

}  // namespace jepa
