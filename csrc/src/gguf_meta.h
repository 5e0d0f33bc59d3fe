// Typed, validated reads of GGUF metadata keys. Every failure names the key.
#pragma once

#include "gguf.h"

#include <string>
#include <vector>

namespace jepa {

class GgufMeta {
public:
    explicit GgufMeta(const gguf_context * ctx) : ctx_(ctx) {}

    bool has(const char * key) const;
    // Integers accept any GGUF integer type whose value fits; out of [lo, hi] is an error.
    int64_t get_int(const char * key, int64_t lo, int64_t hi) const;
    int64_t get_int(const char * key, int64_t lo, int64_t hi, int64_t fallback) const;
    float get_f32(const char * key) const;
    float get_f32(const char * key, float fallback) const;
    bool get_bool(const char * key, bool fallback) const;
    std::string get_str(const char * key) const;
    std::string get_str(const char * key, const std::string & fallback) const;
    // A string that must be one of `choices`; returns its index.
    int get_enum(const char * key, const std::vector<std::string> & choices, int fallback) const;
    std::vector<float> get_f32_array(const char * key, size_t n) const;
    // An array of u32 (or i32 >= 0, as gguf-py writes a list of ints) of min_n..max_n entries.
    std::vector<int64_t> get_u32_array(const char * key, size_t min_n, size_t max_n) const;
    std::vector<std::string> get_str_array(const char * key, size_t max_n) const;

private:
    int64_t find(const char * key) const;
    const gguf_context * ctx_;
};

// Every string the file holds (key names, string values and array entries, tensor names) is valid
// UTF-8, or BAD_FILE naming the key: the strings travel into info, labels and
// messages, which Python and JSON read as text.
void check_strings(const gguf_context * ctx);

}  // namespace jepa
