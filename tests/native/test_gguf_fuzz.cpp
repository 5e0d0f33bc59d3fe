// The loader against truncated, forged and hostile GGUF files.
//
// A valid tiny hfvit model (the keys and tensor names python/jepa/demo.py writes) is built with
// ggml's own gguf API (tiny_models.h); every case derives one hostile variant from it (through the gguf API for
// metadata and tensor-table changes, by patching bytes for what that API refuses to write) and
// expects jepa_model_load to answer NULL, a non-OK status and a message naming the problem. A
// seeded mutation loop then asserts only "no crash, and either a model or NULL + a message".
//
// The process runs under an address-space limit, so an allocation sized by a lying header fails
// loudly (JEPA_ERR_RESOURCE instead of BAD_FILE) rather than quietly succeeding on overcommit.
#include "jepa.h"

#include "error.h"  // jepa::utf8_valid_prefix (held to a table in test_input_checks)
#include "tiny_models.h"

#include "ggml.h"
#include "gguf.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

using Bytes = std::vector<uint8_t>;

// ---- the valid model: the demo ViT of tiny_models.h ------------------------------------------

using tiny::TensorDef;
using namespace tiny::hfvit;

std::string g_dir;  // scratch directory for this run

Bytes read_file(const std::string & path) {
    Bytes b;
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) return b;
    uint8_t buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) b.insert(b.end(), buf, buf + n);
    std::fclose(f);
    return b;
}

bool write_file(const std::string & path, const Bytes & b) {
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) return false;
    const bool ok = b.empty() || std::fwrite(b.data(), 1, b.size(), f) == b.size();
    return std::fclose(f) == 0 && ok;
}

// Write a model through ggml's gguf API and return its bytes. `keys` edits the metadata after the
// demo keys are set; `tensors` is the tensor table (names, shapes, types), filled with small
// deterministic values.
Bytes build(const std::function<void(gguf_context *)> & keys = {}, std::vector<TensorDef> tensors = demo_tensors(),
            bool f16_keys = false) {
    const std::string path = g_dir + "/build.gguf";
    const auto all_keys = [&](gguf_context * g) {
        demo_keys(g, f16_keys ? GGML_TYPE_F16 : GGML_TYPE_F32);
        if (keys) keys(g);
    };
    // Small values in [-0.02, 0.02]: deterministic on every platform.
    if (!tiny::write_gguf(path, all_keys, tensors, {12345, 0.04f})) std::exit(2);
    return read_file(path);
}

// An edit forging one key, for the case tables: set<gguf_set_val_u32>("jepa.enc.n_head", 0) writes the
// setter, the key and the value once each.
template <auto Set, class T>
std::function<void(gguf_context *)> set(const char * key, T value) {
    return [key, value](gguf_context * g) { Set(g, key, value); };
}

// An edit that sets key to an array of the values, stored with the GGUF element type given.
template <class T>
std::function<void(gguf_context *)> set_arr(const char * key, gguf_type type, std::vector<T> values) {
    return [key, type, values](gguf_context * g) { gguf_set_arr_data(g, key, type, values.data(), values.size()); };
}

Bytes with_tensors(const std::function<void(std::vector<TensorDef> &)> & edit) {
    std::vector<TensorDef> t = demo_tensors();
    edit(t);
    return build({}, t);
}

TensorDef * find_tensor(std::vector<TensorDef> & t, const std::string & name) {
    for (auto & d : t) {
        if (d.name == name) return &d;
    }
    std::fprintf(stderr, "test bug: no tensor %s in the demo table\n", name.c_str());
    std::exit(2);
}

// ---- byte-level patching -------------------------------------------------------------------------
// GGUF v3: magic u32, version u32, n_tensors i64, n_kv i64; then each kv: key (u64 len + bytes),
// type i32, [array: elem type i32, n u64], value; then each tensor info: name, n_dims u32,
// ne i64 x n_dims, type i32, offset u64; padding to the alignment; the data.

constexpr size_t kOffVersion = 4, kOffNTensors = 8, kOffNKv = 16;

void put_u32(Bytes & b, size_t off, uint32_t v) { std::memcpy(b.data() + off, &v, 4); }
void put_u64(Bytes & b, size_t off, uint64_t v) { std::memcpy(b.data() + off, &v, 8); }
uint64_t get_u64(const Bytes & b, size_t off) {
    uint64_t v;
    std::memcpy(&v, b.data() + off, 8);
    return v;
}

// Offset of the length prefix of the GGUF string `s` (a key or a tensor name).
size_t find_str(const Bytes & b, const std::string & s) {
    Bytes pat(8 + s.size());
    const uint64_t n = s.size();
    std::memcpy(pat.data(), &n, 8);
    std::memcpy(pat.data() + 8, s.data(), s.size());
    for (size_t i = 0; i + pat.size() <= b.size(); ++i) {
        if (std::memcmp(b.data() + i, pat.data(), pat.size()) == 0) return i;
    }
    std::fprintf(stderr, "test bug: string %s not found in the file\n", s.c_str());
    std::exit(2);
}

// Offset of the type field that follows key `key`.
size_t kv_type_off(const Bytes & b, const std::string & key) { return find_str(b, key) + 8 + key.size(); }

// Offsets inside the tensor info of `name`.
struct TensorInfoOffs {
    size_t n_dims, ne, type, offset;
};
TensorInfoOffs tensor_info(const Bytes & b, const std::string & name) {
    TensorInfoOffs o;
    o.n_dims = find_str(b, name) + 8 + name.size();
    uint32_t nd;
    std::memcpy(&nd, b.data() + o.n_dims, 4);
    o.ne = o.n_dims + 4;
    o.type = o.ne + 8 * size_t(nd);
    o.offset = o.type + 4;
    return o;
}

Bytes patched(Bytes b, const std::function<void(Bytes &)> & f) {
    f(b);
    return b;
}

Bytes truncated(const Bytes & b, size_t n) { return Bytes(b.begin(), b.begin() + long(std::min(n, b.size()))); }

// Where the tensor data starts in a file written by build().
size_t data_offset(const Bytes & b) {
    const std::string path = g_dir + "/probe.gguf";
    write_file(path, b);
    gguf_init_params gp{/*no_alloc =*/ true, /*ctx =*/ nullptr};
    gguf_context * g = gguf_init_from_file(path.c_str(), gp);
    if (!g) {
        std::fprintf(stderr, "test bug: the valid file does not parse\n");
        std::exit(2);
    }
    const size_t off = gguf_get_data_offset(g);
    gguf_free(g);
    return off;
}

// ---- running cases -------------------------------------------------------------------------------

int g_failures = 0, g_cases = 0;

const char * status_name(jepa_status s) {
    switch (s) {
        case JEPA_OK: return "OK";
        case JEPA_ERR_INVALID_ARG: return "INVALID_ARG";
        case JEPA_ERR_BAD_FILE: return "BAD_FILE";
        case JEPA_ERR_UNSUPPORTED: return "UNSUPPORTED";
        case JEPA_ERR_RESOURCE: return "RESOURCE";
        case JEPA_ERR_BACKEND: return "BACKEND";
    }
    return "?";
}

// A loaded model must also run: info, token count and one encode of the native size.
bool exercise(jepa_model * m, std::string & why) {
    jepa_model_info info;
    if (jepa_model_get_info(m, &info) != JEPA_OK) {
        why = std::string("get_info failed: ") + jepa_error_text();
        return false;
    }
    const int64_t n_tok = jepa_model_n_tokens(m, info.in_chans, 1, info.img_size, info.img_size);
    if (n_tok <= 0) {
        why = std::string("n_tokens failed: ") + jepa_error_text();
        return false;
    }
    const size_t n_in = size_t(info.in_chans) * size_t(info.img_size) * size_t(info.img_size);
    const size_t n_out = size_t(n_tok) * size_t(info.embed_dim);
    if (n_in > (size_t(1) << 22) || n_out > (size_t(1) << 22)) return true;  // not a tiny model: skip the run
    jepa_context_params cp = jepa_context_default_params();
    cp.n_threads = 1;
    jepa_context * ctx = jepa_context_new(m, &cp);
    if (!ctx) {
        why = std::string("context_new failed: ") + jepa_error_text();
        return false;
    }
    std::vector<float> in(n_in), out(n_out);
    for (size_t i = 0; i < n_in; ++i) in[i] = float(i % 17) / 17.0f - 0.5f;
    const jepa_status st = jepa_encode(ctx, in.data(), 1, info.in_chans, 1, info.img_size, info.img_size, out.data(),
                                       out.size());
    if (st != JEPA_OK) why = std::string("encode failed: ") + jepa_error_text();
    jepa_context_free(ctx);
    return st == JEPA_OK;
}

struct Expect {
    std::vector<jepa_status> status;   // any of these; empty: any non-OK status
    std::vector<std::string> needles;  // each must appear in the message
};

Expect bad(std::vector<std::string> needles = {}) { return {{JEPA_ERR_BAD_FILE}, std::move(needles)}; }
Expect unsupported(std::vector<std::string> needles = {}) { return {{JEPA_ERR_UNSUPPORTED}, std::move(needles)}; }

void report(const std::string & name, const std::string & problem) {
    ++g_failures;
    std::printf("FAIL   %-46s %s\n", name.c_str(), problem.c_str());
}

// Load `path` and check the refusal.
void expect_refused_path(const std::string & name, const std::string & path, const Expect & e) {
    ++g_cases;
    jepa_model_params mp = jepa_model_default_params();
    jepa_model * m = jepa_model_load(path.c_str(), &mp);
    if (m) {
        jepa_model_free(m);
        report(name, "loaded, expected a refusal");
        return;
    }
    const jepa_status st = jepa_error_status();
    const std::string msg = jepa_error_text();
    std::string problem;
    if (st == JEPA_OK) problem = "NULL with status OK";
    else if (msg.empty()) problem = "NULL with an empty message";
    if (problem.empty() && !e.status.empty()) {
        bool hit = false;
        for (jepa_status s : e.status) hit = hit || s == st;
        if (!hit) problem = std::string("status ") + status_name(st);
    }
    for (const auto & n : e.needles) {
        if (problem.empty() && msg.find(n) == std::string::npos) problem = "message lacks \"" + n + "\"";
    }
    if (problem.empty() && jepa::utf8_valid_prefix(msg.data(), msg.size()) != msg.size()) {
        problem = "the message is not valid UTF-8";
    }
    if (!problem.empty()) {
        report(name, problem + " — " + status_name(st) + ": " + msg);
    } else if (std::getenv("JEPA_FUZZ_VERBOSE")) {
        std::printf("ok     %-46s %s: %s\n", name.c_str(), status_name(st), msg.c_str());
    }
}

void expect_refused(const std::string & name, const Bytes & b, const Expect & e) {
    const std::string path = g_dir + "/case.gguf";
    if (!write_file(path, b)) {
        std::fprintf(stderr, "cannot write %s\n", path.c_str());
        std::exit(2);
    }
    expect_refused_path(name, path, e);
}

void expect_loads(const std::string & name, const Bytes & b) {
    ++g_cases;
    const std::string path = g_dir + "/case.gguf";
    write_file(path, b);
    jepa_model_params mp = jepa_model_default_params();
    jepa_model * m = jepa_model_load(path.c_str(), &mp);
    if (!m) {
        ++g_failures;
        std::printf("FAIL   %-46s refused: %s: %s\n", name.c_str(), status_name(jepa_error_status()), jepa_error_text());
        return;
    }
    std::string why;
    if (!exercise(m, why)) {
        ++g_failures;
        std::printf("FAIL   %-46s %s\n", name.c_str(), why.c_str());
    }
    jepa_model_free(m);
}

// ---- the cases -----------------------------------------------------------------------------------

void header_cases(const Bytes & v) {
    expect_refused("bad magic", patched(v, [](Bytes & b) { b[3] = 'X'; }), bad({"magic"}));
    expect_refused("magic of another format", patched(v, [](Bytes & b) { std::memcpy(b.data(), "\x7f" "ELF", 4); }),
                   bad({"magic"}));
    for (uint32_t ver : {0u, 1u, 4u, 0x03000000u, 0xffffffffu}) {
        expect_refused("version " + std::to_string(ver), patched(v, [ver](Bytes & b) { put_u32(b, kOffVersion, ver); }),
                       bad({"version"}));
    }
    const uint64_t n_t = get_u64(v, kOffNTensors), n_kv = get_u64(v, kOffNKv);
    const std::pair<const char *, uint64_t> counts[] = {
        {"huge", uint64_t(1) << 62}, {"negative", uint64_t(-1)}, {"1e9", 1000000000ull}, {"int64 max", uint64_t(INT64_MAX)},
    };
    for (const auto & c : counts) {
        const uint64_t val = c.second;
        expect_refused(std::string("n_tensors ") + c.first, patched(v, [val](Bytes & b) { put_u64(b, kOffNTensors, val); }),
                       bad());
        expect_refused(std::string("n_kv ") + c.first, patched(v, [val](Bytes & b) { put_u64(b, kOffNKv, val); }), bad());
    }
    expect_refused("n_tensors one more than written", patched(v, [n_t](Bytes & b) { put_u64(b, kOffNTensors, n_t + 1); }),
                   bad());
    expect_refused("n_tensors one fewer than written",
                   patched(v, [n_t](Bytes & b) { put_u64(b, kOffNTensors, n_t - 1); }), bad());
    expect_refused("n_tensors 0", patched(v, [](Bytes & b) { put_u64(b, kOffNTensors, 0); }), bad({"missing tensor"}));
    expect_refused("n_kv one more than written", patched(v, [n_kv](Bytes & b) { put_u64(b, kOffNKv, n_kv + 1); }), bad());
    expect_refused("n_kv one fewer than written", patched(v, [n_kv](Bytes & b) { put_u64(b, kOffNKv, n_kv - 1); }),
                   bad());
    expect_refused("n_kv 0", patched(v, [](Bytes & b) { put_u64(b, kOffNKv, 0); }), bad());
}

void kv_structure_cases(const Bytes & v) {
    // Lengths that lie: over ggml's 1 GiB cap, and under it but past the end of the file.
    const std::pair<const char *, uint64_t> lies[] = {{"2^40", uint64_t(1) << 40}, {"1e8", 100000000ull}};
    for (const auto & l : lies) {
        const uint64_t val = l.second;
        expect_refused(std::string("key length ") + l.first,
                       patched(v, [val](Bytes & b) { put_u64(b, find_str(b, "jepa.enc.n_head"), val); }), bad());
        expect_refused(std::string("string value length ") + l.first, patched(v, [val](Bytes & b) {
                           put_u64(b, kv_type_off(b, "jepa.family") + 4, val);
                       }),
                       bad());
        expect_refused(std::string("array length ") + l.first, patched(v, [val](Bytes & b) {
                           put_u64(b, kv_type_off(b, "jepa.pre.mean") + 8, val);
                       }),
                       bad());
    }
    expect_refused("array length 4 (reads into the next key)",
                   patched(v, [](Bytes & b) { put_u64(b, kv_type_off(b, "jepa.pre.mean") + 8, 4); }), bad());
    expect_refused("array length 2 (leaves a float behind)",
                   patched(v, [](Bytes & b) { put_u64(b, kv_type_off(b, "jepa.pre.mean") + 8, 2); }), bad());
    expect_refused("kv type 99", patched(v, [](Bytes & b) { put_u32(b, kv_type_off(b, "jepa.enc.n_head"), 99); }),
                   bad({"jepa.enc.n_head"}));
    expect_refused("kv type -1", patched(v, [](Bytes & b) { put_u32(b, kv_type_off(b, "jepa.enc.n_head"), 0xffffffffu); }),
                   bad({"jepa.enc.n_head"}));
    expect_refused("array element type 99",
                   patched(v, [](Bytes & b) { put_u32(b, kv_type_off(b, "jepa.pre.mean") + 4, 99); }),
                   bad({"jepa.pre.mean"}));
    expect_refused("array of arrays", patched(v, [](Bytes & b) {
                       put_u32(b, kv_type_off(b, "jepa.pre.mean") + 4, GGUF_TYPE_ARRAY);
                   }),
                   bad({"jepa.pre.mean"}));
    // jepa.enc.ffn_dim and jepa.enc.n_layer have the same length: rename one into the other.
    expect_refused("duplicate key", patched(v, [](Bytes & b) {
                       const size_t at = find_str(b, "jepa.enc.ffn_dim") + 8;
                       std::memcpy(b.data() + at, "jepa.enc.n_layer", 16);
                   }),
                   bad({"jepa.enc.n_layer"}));
    expect_refused("empty key", patched(v, [](Bytes & b) {
                       // "jepa.enc.act" becomes a zero-length key followed by 12 bytes read as its type etc.
                       put_u64(b, find_str(b, "jepa.enc.act"), 0);
                   }),
                   bad());
    // gguf's writer refuses a bad alignment, so write 64 and patch the value.
    const Bytes a64 = build(set<gguf_set_val_u32>("general.alignment", 64));
    for (uint32_t al : {0u, 3u, 48u}) {
        expect_refused("alignment " + std::to_string(al), patched(a64, [al](Bytes & b) {
                           put_u32(b, kv_type_off(b, "general.alignment") + 4, al);
                       }),
                       bad({"alignment"}));
    }
    expect_refused("alignment 2^31 (data offset past the end)", patched(a64, [](Bytes & b) {
                       put_u32(b, kv_type_off(b, "general.alignment") + 4, 0x80000000u);
                   }),
                   bad());
    expect_refused("alignment as i32", patched(a64, [](Bytes & b) {
                       put_u32(b, kv_type_off(b, "general.alignment"), GGUF_TYPE_INT32);
                   }),
                   bad({"general.alignment"}));
    expect_loads("alignment 64 (valid)", a64);
}

void tensor_info_cases(const Bytes & v) {
    const std::string t = "enc.blk.1.ffn_up.weight";
    expect_refused("tensor name length 2^40",
                   patched(v, [&](Bytes & b) { put_u64(b, find_str(b, t), uint64_t(1) << 40); }), bad());
    expect_refused("tensor name length 300 (> GGML_MAX_NAME)",
                   patched(v, [&](Bytes & b) { put_u64(b, find_str(b, t), 300); }), bad());
    expect_refused("tensor n_dims 5", patched(v, [&](Bytes & b) { put_u32(b, tensor_info(b, t).n_dims, 5); }),
                   bad({t}));
    expect_refused("tensor n_dims 2^31",
                   patched(v, [&](Bytes & b) { put_u32(b, tensor_info(b, t).n_dims, 0x80000000u); }), bad({t}));
    expect_refused("tensor ne negative", patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).ne, uint64_t(-64)); }),
                   bad({t}));
    expect_refused("tensor ne 2^40 (shape lie)",
                   patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).ne + 8, uint64_t(1) << 40); }), bad({"enc.blk.1.ffn_up"}));
    expect_refused("tensor ne product overflows", patched(v, [&](Bytes & b) {
                       put_u64(b, tensor_info(b, t).ne, uint64_t(1) << 40);
                       put_u64(b, tensor_info(b, t).ne + 8, uint64_t(1) << 40);
                   }),
                   bad({t}));
    expect_refused("tensor ne 0", patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).ne + 8, 0); }), bad({"enc.blk.1.ffn_up"}));
    expect_refused("tensor type 999", patched(v, [&](Bytes & b) { put_u32(b, tensor_info(b, t).type, 999); }), bad({t}));
    expect_refused("tensor type q4_0 on a 32-wide row kept",
                   patched(v, [&](Bytes & b) { put_u32(b, tensor_info(b, "enc.norm.bias").type, GGML_TYPE_Q4_0); }),
                   bad({"enc.norm.bias"}));
    expect_refused("tensor type q4_K, row not a block multiple",
                   patched(v, [&](Bytes & b) { put_u32(b, tensor_info(b, t).type, GGML_TYPE_Q4_K); }), bad({t}));
    expect_refused("tensor offset past the end of the file",
                   patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).offset, uint64_t(1) << 40); }), bad({t}));
    expect_refused("tensor offset misaligned",
                   patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).offset, get_u64(b, tensor_info(b, t).offset) + 4); }),
                   bad({t}));
    expect_refused("tensor offset -1",
                   patched(v, [&](Bytes & b) { put_u64(b, tensor_info(b, t).offset, uint64_t(-1)); }), bad({t}));
    // Same-length names: the second ln1.bias becomes a copy of the first.
    expect_refused("duplicate tensor name", patched(v, [](Bytes & b) {
                       const size_t at = find_str(b, "enc.blk.1.ln1.bias") + 8;
                       std::memcpy(b.data() + at, "enc.blk.0.ln1.bias", 18);
                   }),
                   bad({"enc.blk.0.ln1.bias"}));
}

// One forged file per row of the key tables: what is forged, the edit to the demo keys, the refusal.
struct KeyCase {
    const char * name;
    std::function<void(gguf_context *)> edit;
    Expect expect;
};

void key_type_cases() {
    const KeyCase cases[] = {
        {"n_head as a string", set<gguf_set_val_str>("jepa.enc.n_head", "2"), bad({"jepa.enc.n_head"})},
        {"embed_dim as f32", set<gguf_set_val_f32>("jepa.enc.embed_dim", 32.0f), bad({"jepa.enc.embed_dim"})},
        {"img_size as an array", set_arr<uint32_t>("jepa.enc.img_size", GGUF_TYPE_UINT32, {kImg}),
         bad({"jepa.enc.img_size"})},
        {"ln_eps as a string", set<gguf_set_val_str>("jepa.enc.ln_eps", "1e-12"), bad({"jepa.enc.ln_eps"})},
        {"ln_eps as u32", set<gguf_set_val_u32>("jepa.enc.ln_eps", 0), bad({"jepa.enc.ln_eps"})},
        {"family as u32", set<gguf_set_val_u32>("jepa.family", 5), bad({"jepa.family"})},
        {"architecture as u32", set<gguf_set_val_u32>("general.architecture", 0), bad({"general.architecture"})},
        {"schema_version as a string", set<gguf_set_val_str>("jepa.schema_version", "1"), bad({"jepa.schema_version"})},
        {"cls_token as a string", set<gguf_set_val_str>("jepa.enc.cls_token", "true"), bad({"jepa.enc.cls_token"})},
        {"act as u32", set<gguf_set_val_u32>("jepa.enc.act", 0), bad({"jepa.enc.act"})},
        {"pre.mean as i32 array", set_arr<int32_t>("jepa.pre.mean", GGUF_TYPE_INT32, {0, 0, 0}),
         bad({"jepa.pre.mean"})},
        {"pre.mean as a scalar", set<gguf_set_val_f32>("jepa.pre.mean", 0.5f), bad({"jepa.pre.mean"})},
        {"pre.std with 2 values", set_arr<float>("jepa.pre.std", GGUF_TYPE_FLOAT32, {0.5f, 0.5f}),
         bad({"jepa.pre.std"})},
        {"head.labels as a string", set<gguf_set_val_str>("jepa.head.labels", "cat"), bad({"jepa.head.labels"})},
        {"head.kind as bool", set<gguf_set_val_bool>("jepa.head.kind", false), bad({"jepa.head.kind"})},
        {"modality as u32", set<gguf_set_val_u32>("jepa.modality", 0), bad({"jepa.modality"})},
        {"name as u32", set<gguf_set_val_u32>("general.name", 0), bad({"general.name"})},
        {"file_type as a string", set<gguf_set_val_str>("general.file_type", "f32"), bad({"general.file_type"})},
    };
    for (const auto & c : cases) expect_refused(std::string("type: ") + c.name, build(c.edit), c.expect);
}

void missing_key_cases() {
    const char * required[] = {
        "general.architecture", "jepa.schema_version", "jepa.enc.embed_dim", "jepa.enc.n_layer",
        "jepa.enc.n_head",      "jepa.enc.ffn_dim",    "jepa.enc.patch_size", "jepa.enc.img_size",
    };
    for (const char * k : required) {
        expect_refused(std::string("missing ") + k, build([k](gguf_context * g) { gguf_remove_key(g, k); }), bad({k}));
    }
    // The schema lists jepa.family among the general keys; without it the graph options are a guess.
    expect_refused("missing jepa.family", build([](gguf_context * g) { gguf_remove_key(g, "jepa.family"); }),
                   bad({"jepa.family"}));
}

void value_cases() {
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    // One row per forged value, spelled out: the table is the test's list of what must be refused
    // (a generator would hide which values are covered).
    const KeyCase cases[] = {
        {"n_head 0", set<gguf_set_val_u32>("jepa.enc.n_head", 0), bad({"jepa.enc.n_head"})},
        {"n_head 5 (32 % 5 != 0)", set<gguf_set_val_u32>("jepa.enc.n_head", 5),
         bad({"jepa.enc.n_head", "jepa.enc.embed_dim"})},
        {"n_head 2^32-1", set<gguf_set_val_u32>("jepa.enc.n_head", 0xffffffffu), bad({"jepa.enc.n_head"})},
        {"embed_dim 0", set<gguf_set_val_u32>("jepa.enc.embed_dim", 0), bad({"jepa.enc.embed_dim"})},
        {"embed_dim 2^30", set<gguf_set_val_u32>("jepa.enc.embed_dim", 1u << 30), bad({"jepa.enc.embed_dim"})},
        {"embed_dim -1 as i32", set<gguf_set_val_i32>("jepa.enc.embed_dim", -1), bad({"jepa.enc.embed_dim"})},
        {"embed_dim 2^63 as u64", set<gguf_set_val_u64>("jepa.enc.embed_dim", uint64_t(1) << 63),
         bad({"jepa.enc.embed_dim"})},
        {"n_layer 0", set<gguf_set_val_u32>("jepa.enc.n_layer", 0), bad({"jepa.enc.n_layer"})},
        {"n_layer 1e6", set<gguf_set_val_u32>("jepa.enc.n_layer", 1000000), bad({"jepa.enc.n_layer"})},
        {"n_layer 3 (one block missing)", set<gguf_set_val_u32>("jepa.enc.n_layer", 3), bad({"enc.blk.2."})},
        {"n_layer 1 (one block extra)", set<gguf_set_val_u32>("jepa.enc.n_layer", 1), bad({"enc.blk.1."})},
        {"ffn_dim 0", set<gguf_set_val_u32>("jepa.enc.ffn_dim", 0), bad({"jepa.enc.ffn_dim"})},
        {"ffn_dim disagrees with the tensors", set<gguf_set_val_u32>("jepa.enc.ffn_dim", 48),
         bad({"enc.blk.0.ffn_up.weight", "[32, 48]"})},
        {"patch_size 0", set<gguf_set_val_u32>("jepa.enc.patch_size", 0), bad({"jepa.enc.patch_size"})},
        {"img_size 20 (not a multiple of the patch)", set<gguf_set_val_u32>("jepa.enc.img_size", 20),
         bad({"jepa.enc.img_size", "jepa.enc.patch_size"})},
        {"img_size 0", set<gguf_set_val_u32>("jepa.enc.img_size", 0), bad({"jepa.enc.img_size"})},
        {"img_size 32 (position table too short)", set<gguf_set_val_u32>("jepa.enc.img_size", 32),
         bad({"enc.pos_embed"})},
        {"in_chans 0", set<gguf_set_val_u32>("jepa.enc.in_chans", 0), bad({"jepa.enc.in_chans"})},
        {"in_chans 1 (patch embedding too wide)", set<gguf_set_val_u32>("jepa.enc.in_chans", 1),
         bad({"enc.patch_embed.weight"})},
        {"tubelet_size 0", set<gguf_set_val_u32>("jepa.enc.tubelet_size", 0), bad({"jepa.enc.tubelet_size"})},
        {"n_frames 0", set<gguf_set_val_u32>("jepa.enc.n_frames", 0), bad({"jepa.enc.n_frames"})},
        {"n_registers 1 without reg_tokens", set<gguf_set_val_u32>("jepa.enc.n_registers", 1), bad({"enc.reg_tokens"})},
        {"n_registers 1e6", set<gguf_set_val_u32>("jepa.enc.n_registers", 1000000), bad({"jepa.enc.n_registers"})},
        {"qkv_fused without attn_qkv", set<gguf_set_val_bool>("jepa.enc.qkv_fused", true), bad({"attn_qkv"})},
        {"layer_scale without ls1", set<gguf_set_val_bool>("jepa.enc.layer_scale", true), bad({"ls1"})},
        {"ln_eps NaN", set<gguf_set_val_f32>("jepa.enc.ln_eps", nan), bad({"jepa.enc.ln_eps"})},
        {"ln_eps inf", set<gguf_set_val_f32>("jepa.enc.ln_eps", inf), bad({"jepa.enc.ln_eps"})},
        {"ln_eps 0", set<gguf_set_val_f32>("jepa.enc.ln_eps", 0.0f), bad({"jepa.enc.ln_eps"})},
        {"ln_eps -1e-6", set<gguf_set_val_f32>("jepa.enc.ln_eps", -1e-6f), bad({"jepa.enc.ln_eps"})},
        {"ln_eps 2", set<gguf_set_val_f32>("jepa.enc.ln_eps", 2.0f), bad({"jepa.enc.ln_eps"})},
        {"ln_eps NaN as f64", [](gguf_context * g) {
             gguf_set_val_f64(g, "jepa.enc.ln_eps", std::numeric_limits<double>::quiet_NaN());
         },
         bad({"jepa.enc.ln_eps"})},
        {"ln_eps 1e300 as f64", set<gguf_set_val_f64>("jepa.enc.ln_eps", 1e300), bad({"jepa.enc.ln_eps"})},
        {"pre.std 0", set_arr<float>("jepa.pre.std", GGUF_TYPE_FLOAT32, {0.5f, 0.0f, 0.5f}), bad({"jepa.pre.std"})},
        {"pre.mean NaN", set_arr<float>("jepa.pre.mean", GGUF_TYPE_FLOAT32, {0.5f, nan, 0.5f}), bad({"jepa.pre.mean"})},
        {"pre.rescale inf", set<gguf_set_val_f32>("jepa.pre.rescale", inf), bad({"jepa.pre.rescale"})},
        {"pre.crop 0", set<gguf_set_val_u32>("jepa.pre.crop", 0), bad({"jepa.pre.crop"})},
        {"pre.resample nearest", set<gguf_set_val_str>("jepa.pre.resample", "nearest"),
         bad({"jepa.pre.resample", "nearest"})},
        {"pre.resize_mode fit", set<gguf_set_val_str>("jepa.pre.resize_mode", "fit"), bad({"jepa.pre.resize_mode"})},
        {"act relu", set<gguf_set_val_str>("jepa.enc.act", "relu"), bad({"jepa.enc.act", "relu"})},
        {"pos_type spiral", set<gguf_set_val_str>("jepa.enc.pos_type", "spiral"), bad({"jepa.enc.pos_type"})},
        {"unknown family", set<gguf_set_val_str>("jepa.family", "resnet"), bad({"jepa.family", "resnet"})},
        {"empty family", set<gguf_set_val_str>("jepa.family", ""), bad({"jepa.family"})},
        {"wrong architecture", set<gguf_set_val_str>("general.architecture", "llama"),
         bad({"general.architecture", "llama"})},
        {"schema_version 2", set<gguf_set_val_u32>("jepa.schema_version", 2), unsupported({"jepa.schema_version"})},
        {"schema_version 0", set<gguf_set_val_u32>("jepa.schema_version", 0),
         {{JEPA_ERR_BAD_FILE, JEPA_ERR_UNSUPPORTED}, {"jepa.schema_version"}}},
        {"schema_version 2^64-1 as u64", set<gguf_set_val_u64>("jepa.schema_version", ~uint64_t(0)),
         bad({"jepa.schema_version"})},
        // Known to the schema, not runnable by this build: UNSUPPORTED, naming what.
        {"family vjepa", set<gguf_set_val_str>("jepa.family", "vjepa"), unsupported({"vjepa"})},
        // V-JEPA 2.1 runs, but only as a rope3d encoder with its levels: a plain ViT under that name is a bad file.
        {"family vjepa2_1 on a plain ViT", set<gguf_set_val_str>("jepa.family", "vjepa2_1"),
         bad({"vjepa2_1", "jepa.enc.hier_layers"})},
        {"hier_layers out of order", set_arr<uint32_t>("jepa.enc.hier_layers", GGUF_TYPE_UINT32, {1, 0}),
         bad({"jepa.enc.hier_layers"})},
        {"hier_layers before the last block", set_arr<uint32_t>("jepa.enc.hier_layers", GGUF_TYPE_UINT32, {0}),
         bad({"jepa.enc.hier_layers", "last block"})},
        {"hier_layers past n_layer", set_arr<uint32_t>("jepa.enc.hier_layers", GGUF_TYPE_UINT32, {kLayers}),
         bad({"jepa.enc.hier_layers"})},
        {"hier_layers as floats", set_arr<float>("jepa.enc.hier_layers", GGUF_TYPE_FLOAT32, {1.0f}),
         bad({"jepa.enc.hier_layers", "u32"})},
        {"hier_layers empty", set_arr<uint32_t>("jepa.enc.hier_layers", GGUF_TYPE_UINT32, {}),
         bad({"jepa.enc.hier_layers"})},
        {"hier_layers without their norms", set_arr<uint32_t>("jepa.enc.hier_layers", GGUF_TYPE_UINT32, {kLayers - 1}),
         bad({"enc.hier_norm.0.weight"})},
        {"image_patch_embed without its tensor", set<gguf_set_val_bool>("jepa.enc.image_patch_embed", true),
         bad({"enc.patch_embed_img.weight"})},
        {"modality_embed without its tensors", set<gguf_set_val_bool>("jepa.enc.modality_embed", true),
         bad({"enc.mod_embed_video"})},
        // lewm runs now, but only with its predictor and projector: a bare ViT under that name is a bad file.
        {"family lewm without its predictor", set<gguf_set_val_str>("jepa.family", "lewm"), bad({"lewm"})},
        // rope3d takes a CLS now (LeVJEPA), but never a position table beside it.
        {"pos_type rope3d beside a position table", set<gguf_set_val_str>("jepa.enc.pos_type", "rope3d"),
         bad({"enc.pos_embed"})},
        {"attn_mode unknown", set<gguf_set_val_str>("jepa.enc.attn_mode", "sliding"),
         {{JEPA_ERR_BAD_FILE, JEPA_ERR_UNSUPPORTED}, {"jepa.enc.attn_mode", "sliding"}}},
        {"attn_mode not a string", set<gguf_set_val_u32>("jepa.enc.attn_mode", 1), bad({"jepa.enc.attn_mode"})},
        {"act silu", set<gguf_set_val_str>("jepa.enc.act", "silu"), unsupported({"silu"})},
        {"head linear_cls", set<gguf_set_val_str>("jepa.head.kind", "linear_cls"), unsupported({"linear_cls"})},
        {"head kind unknown", set<gguf_set_val_str>("jepa.head.kind", "mlp9"),
         {{JEPA_ERR_BAD_FILE, JEPA_ERR_UNSUPPORTED}, {"jepa.head.kind", "mlp9"}}},
        {"head attentive_pool without its keys",
         set<gguf_set_val_str>("jepa.head.kind", "attentive_pool"), bad({"jepa.head.n_classes"})},
        {"head attentive_pool without its tensors", [](gguf_context * g) {
             gguf_set_val_str(g, "jepa.head.kind", "attentive_pool");
             gguf_set_val_u32(g, "jepa.head.n_classes", 3);
             gguf_set_val_u32(g, "jepa.head.n_pool_layers", 0);
         },
         bad({"head."})},
        {"head n_classes 0", [](gguf_context * g) {
             gguf_set_val_str(g, "jepa.head.kind", "attentive_pool");
             gguf_set_val_u32(g, "jepa.head.n_classes", 0);
             gguf_set_val_u32(g, "jepa.head.n_pool_layers", 0);
         },
         bad({"jepa.head.n_classes"})},
        {"masked predictor on a learned-position encoder",
         set<gguf_set_val_str>("jepa.pred.kind", "masked"), unsupported({"rope3d"})},
        {"ac predictor on a learned-position encoder",
         set<gguf_set_val_str>("jepa.pred.kind", "ac"), unsupported({"rope3d"})},
        {"lewm predictor without its keys", set<gguf_set_val_str>("jepa.pred.kind", "lewm"),
         {{JEPA_ERR_BAD_FILE}, {"jepa.pred."}}},
        {"predictor kind unknown", set<gguf_set_val_str>("jepa.pred.kind", "diffusion"),
         unsupported({"jepa.pred.kind", "diffusion"})},
    };
    for (const auto & c : cases) expect_refused(std::string("value: ") + c.name, build(c.edit), c.expect);
}

void tensor_table_cases() {
    expect_refused("wrong shape ffn_up", with_tensors([](auto & t) {
                       find_tensor(t, "enc.blk.1.ffn_up.weight")->ne = {kDim, kFfn + 1};
                   }),
                   bad({"enc.blk.1.ffn_up.weight", "[32, 65]", "[32, 64]"}));
    expect_refused("transposed ffn_down", with_tensors([](auto & t) {
                       find_tensor(t, "enc.blk.0.ffn_down.weight")->ne = {kDim, kFfn};
                   }),
                   bad({"enc.blk.0.ffn_down.weight"}));
    expect_refused("norm weight 2-D", with_tensors([](auto & t) { find_tensor(t, "enc.norm.weight")->ne = {kDim, 1, 1, 2}; }),
                   bad({"enc.norm.weight"}));
    expect_refused("pos_embed one row short", with_tensors([](auto & t) {
                       find_tensor(t, "enc.pos_embed")->ne = {kDim, kPos - 2};
                   }),
                   bad({"enc.pos_embed"}));
    expect_refused("patch_embed for 1 channel", with_tensors([](auto & t) {
                       find_tensor(t, "enc.patch_embed.weight")->ne = {kPatch * kPatch, kDim};
                   }),
                   bad({"enc.patch_embed.weight"}));
    expect_refused("bias with the wrong length", with_tensors([](auto & t) {
                       find_tensor(t, "enc.blk.0.attn_k.bias")->ne = {kDim + 1};
                   }),
                   bad({"enc.blk.0.attn_k.bias"}));
    for (const char * name : {"enc.blk.1.attn_v.weight", "enc.norm.weight", "enc.cls_token", "enc.pos_embed",
                              "enc.patch_embed.weight", "enc.blk.0.ln2.bias"}) {
        const std::string n = name;
        expect_refused(std::string("missing ") + name, with_tensors([n](auto & t) {
                           for (auto it = t.begin(); it != t.end(); ++it) {
                               if (it->name == n) {
                                   t.erase(it);
                                   break;
                               }
                           }
                       }),
                       bad({name}));
    }
    expect_refused("extra tensor", with_tensors([](auto & t) { t.push_back({"enc.blk.0.attn_gate.weight", {kDim}}); }),
                   bad({"enc.blk.0.attn_gate.weight"}));
    expect_refused("extra block", with_tensors([](auto & t) { t.push_back({"enc.blk.2.ln1.weight", {kDim}}); }),
                   bad({"enc.blk.2.ln1.weight"}));
    expect_refused("extra tensor with an empty name", with_tensors([](auto & t) { t.push_back({"", {4}}); }), bad());
    // The dtype rule: only the 2-D block matrices may be f16 or quantized.
    const std::pair<const char *, ggml_type> dtype_cases[] = {
        {"enc.norm.weight", GGML_TYPE_F16},         {"enc.blk.0.ln1.bias", GGML_TYPE_F16},
        {"enc.blk.0.attn_q.bias", GGML_TYPE_F16},   {"enc.patch_embed.weight", GGML_TYPE_F16},
        {"enc.pos_embed", GGML_TYPE_Q8_0},          {"enc.cls_token", GGML_TYPE_BF16},
        {"enc.blk.1.ffn_up.weight", GGML_TYPE_I32}, {"enc.blk.1.attn_out.weight", GGML_TYPE_F64},
    };
    for (const auto & dc : dtype_cases) {
        const std::string n = dc.first;
        const ggml_type ty = dc.second;
        expect_refused(std::string(ggml_type_name(ty)) + " " + n,
                       with_tensors([n, ty](auto & t) { find_tensor(t, n)->type = ty; }), bad({n, ggml_type_name(ty)}));
    }
}

void lie_cases() {
    // Hyperparameters and tensor shapes that agree on a big model, in a file that holds no data:
    // the loader must notice the file is too short before it allocates 3.2 GB for the weights.
    constexpr int D = 8192, F = 4 * D;
    std::vector<TensorDef> t = {
        {"enc.patch_embed.weight", {kPatchDim, D}}, {"enc.patch_embed.bias", {D}}, {"enc.cls_token", {D}},
        {"enc.pos_embed", {D, 2}},
        {"enc.blk.0.ln1.weight", {D}}, {"enc.blk.0.ln1.bias", {D}},
    };
    for (const char * m : {"attn_q", "attn_k", "attn_v", "attn_out"}) t.push_back({std::string("enc.blk.0.") + m + ".weight", {D, D}});
    t.push_back({"enc.blk.0.ln2.weight", {D}});
    t.push_back({"enc.blk.0.ln2.bias", {D}});
    t.push_back({"enc.blk.0.ffn_up.weight", {D, F}});
    t.push_back({"enc.blk.0.ffn_down.weight", {F, D}});
    t.push_back({"enc.norm.weight", {D}});
    t.push_back({"enc.norm.bias", {D}});
    // Build the tensor infos through the gguf API with only_meta, so no 3.2 GB buffer exists here either.
    ggml_init_params ip{ggml_tensor_overhead() * (t.size() + 1), nullptr, /*no_alloc =*/ true};
    ggml_context * ctx = ggml_init(ip);
    gguf_context * g = gguf_init_empty();
    demo_keys(g);
    gguf_set_val_u32(g, "jepa.enc.embed_dim", D);
    gguf_set_val_u32(g, "jepa.enc.n_layer", 1);
    gguf_set_val_u32(g, "jepa.enc.n_head", 64);
    gguf_set_val_u32(g, "jepa.enc.ffn_dim", F);
    gguf_set_val_u32(g, "jepa.enc.img_size", kPatch);
    for (const auto & d : t) {
        ggml_tensor * x = ggml_new_tensor(ctx, d.type, int(d.ne.size()), d.ne.data());
        ggml_set_name(x, d.name.c_str());
        gguf_add_tensor(g, x);
    }
    const std::string meta = g_dir + "/lie.gguf";
    gguf_write_to_file(g, meta.c_str(), /*only_meta =*/ true);
    gguf_free(g);
    ggml_free(ctx);
    expect_refused_path("3.2 GB of weights promised, none present", meta,
                        bad({"enc.patch_embed.weight", "past the end"}));
}

void truncation_cases(const Bytes & v) {
    const size_t data = data_offset(v);
    std::vector<size_t> cuts;
    for (size_t n = 0; n <= 40; ++n) cuts.push_back(n);                      // magic, version, counts, first key
    for (size_t n = 41; n < data; n += 37) cuts.push_back(n);               // kv section and tensor infos
    for (size_t n = data - 8; n <= data; ++n) cuts.push_back(n);            // the padding before the data
    for (size_t n = data + 1; n < v.size(); n += (v.size() - data) / 23) cuts.push_back(n);  // the data
    cuts.push_back(v.size() - 1);
    for (size_t n : cuts) {
        // Cutting the metadata is a parse error; cutting the data must name a tensor.
        Expect e = bad();
        if (n >= data) e.needles = {"past the end of the file"};
        expect_refused("truncated at " + std::to_string(n) + " of " + std::to_string(v.size()), truncated(v, n), e);
    }
}

void path_cases(const Bytes & v) {
    expect_refused_path("non-existent path", g_dir + "/no-such-model.gguf", bad({"no-such-model.gguf"}));
    expect_refused_path("a directory", g_dir, bad({g_dir}));
    expect_refused_path("/dev/null", "/dev/null", bad({"/dev/null"}));
    expect_refused_path("empty path", "", bad());
    const std::string empty = g_dir + "/empty.gguf";
    write_file(empty, {});
    expect_refused_path("empty file", empty, bad({"empty.gguf"}));
    const std::string fifo = g_dir + "/fifo.gguf";
    if (mkfifo(fifo.c_str(), 0600) == 0) expect_refused_path("a FIFO (must not block)", fifo, bad({"fifo.gguf"}));
    const std::string text = g_dir + "/model.json";
    const std::string body = "{\"model\": \"not a gguf\"}\n";
    write_file(text, Bytes(body.begin(), body.end()));
    expect_refused_path("a JSON file", text, bad({"model.json"}));
    const std::string link = g_dir + "/link.gguf";
    const std::string valid = g_dir + "/valid.gguf";
    write_file(valid, v);
    if (symlink(valid.c_str(), link.c_str()) == 0) {
        ++g_cases;
        jepa_model * m = jepa_model_load(link.c_str(), nullptr);
        if (!m) {
            ++g_failures;
            std::printf("FAIL   %-46s %s\n", "a symlink to a valid file", jepa_error_text());
        }
        jepa_model_free(m);
    }
}

// Strings the file holds reach Python and JSON as text: each one is checked as UTF-8 by the loader,
// read by it or not, and a bad one is named.
void string_cases() {
    const std::pair<const char *, const char *> bad_values[] = {
        {"latin-1 byte", "caf\xe9"},          {"lone continuation", "\x80" "abc"},
        {"overlong '/'", "\xc0\xaf"},         {"surrogate", "\xed\xa0\x80"},
        {"past U+10FFFF", "\xf4\x90\x80\x80"}, {"cut-off sequence", "abc\xe2\x82"},
    };
    for (const auto & bv : bad_values) {
        const std::string v = bv.second;
        for (const char * key : {"general.name", "jepa.family", "jepa.enc.act", "jepa.unread_key"}) {
            expect_refused(std::string("string ") + key + ": " + bv.first,
                           build([&](gguf_context * g) { gguf_set_val_str(g, key, v.c_str()); }),
                           bad({key, "not valid UTF-8"}));
        }
    }
    expect_refused("key name not UTF-8", build(set<gguf_set_val_u32>("jepa.x\xff", 1)),
                   bad({"jepa.x\\xff", "not valid UTF-8"}));
    expect_refused("string array entry not UTF-8", build([](gguf_context * g) {
                       const char * v[] = {"ok", "caf\xe9"};
                       gguf_set_arr_str(g, "jepa.extra_names", v, 2);
                   }),
                   bad({"jepa.extra_names[1]", "not valid UTF-8"}));
    expect_refused("tensor name not UTF-8", with_tensors([](auto & t) {
                       t.push_back({"enc.extra\xff", {4}});
                   }),
                   bad({"enc.extra\\xff", "not valid UTF-8"}));
    expect_refused_path("path not UTF-8 (the message stays text)", g_dir + "/caf\xe9.gguf", bad({"caf\\xe9.gguf"}));
    expect_loads("multi-byte UTF-8 name (control)", build([](gguf_context * g) {
                     gguf_set_val_str(g, "general.name", "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80");
                 }));
}

// ---- random mutations ----------------------------------------------------------------------------

void mutation_loop(const Bytes & v, int rounds, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const size_t meta = data_offset(v);
    auto pick = [&](size_t n) { return size_t(rng() % n); };
    int loaded = 0, refused = 0;
    for (int r = 0; r < rounds; ++r) {
        Bytes b = v;
        const int kind = int(rng() % 8);
        const size_t span = rng() % 8 < 7 ? meta : b.size();  // mostly the metadata: the data section rarely matters
        switch (kind) {
            case 0: case 1: case 2: {  // flip 1-4 random bits
                const int n = 1 + int(rng() % 4);
                for (int i = 0; i < n; ++i) b[pick(span)] ^= uint8_t(1u << (rng() % 8));
                break;
            }
            case 3: {  // overwrite a byte with 0x00 or 0xff
                b[pick(span)] = rng() % 2 ? 0xff : 0x00;
                break;
            }
            case 4: {  // overwrite 8 bytes with a big or a small value
                const size_t at = pick(span - 8);
                const uint64_t vals[] = {0, 1, uint64_t(-1), uint64_t(1) << 31, uint64_t(1) << 62, rng()};
                put_u64(b, at, vals[rng() % 6]);
                break;
            }
            case 5: {  // truncate anywhere
                b.resize(pick(b.size()));
                break;
            }
            case 6: {  // drop a block from the middle of the metadata
                const size_t at = pick(meta), n = 1 + pick(16);
                b.erase(b.begin() + long(at), b.begin() + long(std::min(at + n, b.size())));
                break;
            }
            default: {  // duplicate a block of the metadata in place
                const size_t at = pick(meta - 32), n = 1 + pick(16);
                Bytes chunk(b.begin() + long(at), b.begin() + long(at + n));
                b.insert(b.begin() + long(at), chunk.begin(), chunk.end());
                break;
            }
        }
        const std::string path = g_dir + "/mutant.gguf";
        write_file(path, b);
        jepa_model * m = jepa_model_load(path.c_str(), nullptr);
        if (m) {
            ++loaded;
            std::string why;
            if (!exercise(m, why)) {
                ++g_failures;
                std::printf("FAIL   mutation %d (kind %d) loaded but does not run: %s\n", r, kind, why.c_str());
            }
            jepa_model_free(m);
        } else {
            ++refused;
            const char * msg = jepa_error_text();
            if (jepa_error_status() == JEPA_OK || std::strlen(msg) == 0) {
                ++g_failures;
                std::printf("FAIL   mutation %d (kind %d): NULL without a status and a message\n", r, kind);
            } else if (jepa::utf8_valid_prefix(msg, std::strlen(msg)) != std::strlen(msg)) {
                ++g_failures;
                std::printf("FAIL   mutation %d (kind %d): the message is not valid UTF-8\n", r, kind);
            }
        }
    }
    std::printf("mutations: %d rounds, %d loaded and ran, %d refused\n", rounds, loaded, refused);
}

bool g_rlimited = false;

// Cap the address space so an allocation sized by a lie fails instead of quietly overcommitting.
void limit_memory() {
    const rlim_t cap = rlim_t(2) << 30;  // 2 GiB: the valid model needs a few MB
    rlimit rl{};
    if (getrlimit(RLIMIT_AS, &rl) == 0 && (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > cap)) {
        rl.rlim_cur = cap;
        g_rlimited = setrlimit(RLIMIT_AS, &rl) == 0;
    } else {
        g_rlimited = rl.rlim_cur != RLIM_INFINITY;
    }
}

}  // namespace

int main(int argc, char ** argv) {
    const auto t0 = std::chrono::steady_clock::now();
    // Sanitizers reserve terabytes of shadow address space; only cap plain builds.
    if (!std::getenv("JEPA_FUZZ_NO_RLIMIT")) limit_memory();
    char tmpl[] = "/tmp/jepa-gguf-fuzz-XXXXXX";
    const char * base = std::getenv("TMPDIR");
    std::string dir_tmpl = base && *base ? std::string(base) + "/jepa-gguf-fuzz-XXXXXX" : std::string(tmpl);
    std::vector<char> dt(dir_tmpl.begin(), dir_tmpl.end());
    dt.push_back('\0');
    if (!mkdtemp(dt.data())) {
        std::perror("mkdtemp");
        return 2;
    }
    g_dir = dt.data();
    // Arguments (for longer local runs): rounds of random mutation (300), seed (20240601).
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 300;
    const uint64_t seed = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 20240601ull;

    const Bytes valid = build();
    expect_loads("valid f32 model (control)", valid);
    expect_loads("valid f16 model (control)", build({}, demo_tensors(GGML_TYPE_F16), /*f16_keys =*/ true));
    expect_loads("unknown extra key (tolerated)", build([](gguf_context * g) {
                     gguf_set_val_str(g, "jepa.enc.future_option", "x");
                 }));
    expect_loads("no optional biases", with_tensors([](auto & t) {
                     for (auto it = t.begin(); it != t.end();) {
                         it = it->name == "enc.blk.0.attn_k.bias" ? t.erase(it) : it + 1;
                     }
                 }));

    header_cases(valid);
    kv_structure_cases(valid);
    tensor_info_cases(valid);
    key_type_cases();
    missing_key_cases();
    value_cases();
    tensor_table_cases();
    if (g_rlimited) lie_cases();  // without the cap the lie is only visible as a slow, quiet allocation
    truncation_cases(valid);
    path_cases(valid);
    string_cases();
    const int named = g_cases;
    mutation_loop(valid, rounds, seed);

    // Leave nothing behind.
    for (const char * f : {"build.gguf", "probe.gguf", "case.gguf", "lie.gguf", "empty.gguf", "fifo.gguf", "model.json",
                           "link.gguf", "valid.gguf", "mutant.gguf"}) {
        std::remove((g_dir + "/" + f).c_str());
    }
    rmdir(g_dir.c_str());

    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("test_gguf_fuzz: %d named cases, %d failed; %.1f s\n", named, g_failures, s);
    return g_failures == 0 ? 0 : 1;
}
