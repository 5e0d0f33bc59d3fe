// Whole tiny models (tiny_models.h: the demo ViT in f32 and with f16 and q8_0 matrices, LeWM,
// V-JEPA 2-AC, a BERT text encoder) run through the C API, every output compared bit for bit with the
// one stored under tests/native/golden/, made on x86. The models and inputs come from LCGs, so they
// are the same files and arrays on every platform; the f32 kernel paths (AVX-512, AVX2, portable,
// NEON) are one design with one rounding sequence (gemm.h), so the exact class must give the stored
// bits on every one, x86 and ARM64 alike, and the q8_0 product (kernels_q8.inc: VNNI, AVX-VNNI, AVX2,
// SDOT, portable) is another such design (ctest runs this on each path: tests/native/CMakeLists.txt).
//
//     test_stored_outputs [DIR]           compare with DIR/<model>.txt (default: the source tree's
//                                         tests/native/golden, what ctest runs)
//     test_stored_outputs --write [DIR]   write them (x86 only: the stored bits are x86's; docs/arm64.md)
//
// JEPA_GEMM=ggml (ggml's own products, another rounding) is not the exact class's path: the suite
// says so and compares nothing.
#include "jepa.h"

#include "check.h"
#include "tiny_models.h"

#include <unistd.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace {

using Outputs = std::vector<std::pair<std::string, std::vector<float>>>;  // (name, values), in call order

std::string g_tmp;  // scratch directory for the model files

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// One model's outputs: the model written from (keys, tensors) and loaded, a context with 2 threads (the
// bits do not depend on it; the tests of rows and threads say so), calls(m, c, o) recording into o, both
// freed after. A model that does not load records nothing (and the check has failed).
using Calls = std::function<void(jepa_model *, jepa_context *, Outputs &)>;
Outputs run_model(const std::string & name, const tiny::Keys & keys, const std::vector<tiny::TensorDef> & tensors,
                  const Calls & calls) {
    Outputs o;
    const std::string path = g_tmp + "/" + name + ".gguf";
    if (!tiny::write_gguf(path, keys, tensors, {2024, 0.4f})) std::exit(2);
    jepa_model * m = jepa_model_load(path.c_str(), nullptr);
    std::remove(path.c_str());
    if (!m) std::fprintf(stderr, "%s: %s\n", name.c_str(), jepa_error_text());
    CHECK(m != nullptr);
    if (!m) return o;
    jepa_context_params p = jepa_context_default_params();
    p.n_threads = 2;
    jepa_context * c = jepa_context_new(m, &p);
    CHECK(c != nullptr);
    calls(m, c, o);
    jepa_context_free(c);
    jepa_model_free(m);
    return o;
}

// An output of n floats from call(out), recorded as name; NaN-filled first, so an unwritten value shows.
void record(Outputs & o, const std::string & name, size_t n, const std::function<jepa_status(float *)> & call) {
    std::vector<float> v(n, std::nanf(""));
    const jepa_status st = call(v.data());
    if (st != JEPA_OK) std::fprintf(stderr, "%s: %s\n", name.c_str(), jepa_error_text());
    CHECK(st == JEPA_OK);
    o.push_back({name, std::move(v)});
}

// ---- the models and their calls ------------------------------------------------------------------

Outputs run_hfvit(const char * name, ggml_type mt) {
    using namespace tiny::hfvit;
    const auto keys = [mt](gguf_context * g) { demo_keys(g, mt); };
    return run_model(name, keys, demo_tensors(mt), [](jepa_model * m, jepa_context * c, Outputs & o) {
        const int B = 2;
        const auto px = tiny::noise(size_t(B * kChans * kImg * kImg), 11);
        const int64_t n_tok = jepa_model_n_tokens(m, kChans, 1, kImg, kImg);
        const size_t n = size_t(B * n_tok * kDim);
        record(o, "tokens", n, [&](float * out) { return jepa_encode(c, px.data(), B, kChans, 1, kImg, kImg, out, n); });
    });
}

Outputs run_lewm() {
    using namespace tiny::lewm;
    return run_model("lewm", lewm_keys, lewm_tensors(), [](jepa_model * m, jepa_context * c, Outputs & o) {
        const int B = 2, T = 3;
        const auto px = tiny::noise(size_t(B * 3 * kImg * kImg), 21);
        const int64_t n_tok = jepa_model_n_tokens(m, 3, 1, kImg, kImg);
        const size_t n_enc = size_t(B * n_tok * kD);
        record(o, "tokens", n_enc, [&](float * out) { return jepa_encode(c, px.data(), B, 3, 1, kImg, kImg, out, n_enc); });
        const std::vector<float> tok = o.back().second;
        record(o, "latents", size_t(B * kD),
               [&](float * out) { return jepa_world_latents(c, tok.data(), B, int(n_tok), kD, out, size_t(B * kD)); });
        const auto emb = tiny::noise(size_t(B * T * kD), 22), act = tiny::noise(size_t(B * T * kA), 23);
        const size_t n = size_t(B * T * kD);
        std::vector<float> raw(n), act_emb(n);
        record(o, "pred", n, [&](float * out) {
            const jepa_world_input in{JEPA_PRED_LEWM, B, T, 1, kD, emb.data(), kA, 0, act.data(), nullptr};
            const jepa_world_output w{out, raw.data(), act_emb.data(), n};
            return jepa_world_predict(c, &in, &w);
        });
        o.push_back({"pred_raw", raw});
        o.push_back({"action_embed", act_emb});
    });
}

Outputs run_ac() {
    using namespace tiny::ac;
    return run_model("vjepa2_ac", ac_keys, ac_tensors(), [](jepa_model * m, jepa_context * c, Outputs & o) {
        // The encoder on a 4-frame clip (2 tubelets of the 2 x 2 grid; 3-D RoPE), 2 items.
        const int B = 2, F = 4, img = 4 * kGrid;
        const auto px = tiny::noise(size_t(B * 3 * F * img * img), 31);
        const int64_t n_tok = jepa_model_n_tokens(m, 3, F, img, img);
        const size_t n_enc = size_t(B * n_tok * kE);
        record(o, "tokens", n_enc, [&](float * out) { return jepa_encode(c, px.data(), B, 3, F, img, img, out, n_enc); });
        const std::vector<float> tok = o.back().second;
        const size_t n_lat = size_t(n_tok * kE);  // the first item's (the stored files stay small)
        record(o, "latents", n_lat,
               [&](float * out) { return jepa_world_latents(c, tok.data(), 1, int(n_tok), kE, out, n_lat); });
        // The predictor over 2 frames of latents (frame-causal), and a 3-step rollout from one frame.
        const int T = 2, H = 3;
        const auto z = tiny::noise(size_t(T * kHW * kE), 32), a = tiny::noise(size_t(H * 7), 33),
                   s = tiny::noise(size_t(H * 7), 34);
        const size_t n_pred = size_t(T * kHW * kE), n_roll = size_t(H * kHW * kE);
        record(o, "pred", n_pred, [&](float * out) {
            const jepa_world_input in{JEPA_PRED_AC, 1, T, kHW, kE, z.data(), 7, 7, a.data(), s.data()};
            const jepa_world_output w{out, nullptr, nullptr, n_pred};
            return jepa_world_predict(c, &in, &w);
        });
        record(o, "rollout", n_roll, [&](float * out) {
            const jepa_world_rollout_input in{JEPA_PRED_AC, 1, H, kHW, kE, z.data(), 7, 7, a.data(), s.data()};
            return jepa_world_rollout(c, &in, nullptr, out, n_roll);
        });
    });
}

Outputs run_bert() {
    using namespace tiny::bert;
    return run_model("bert", bert_keys, bert_tensors(), [](jepa_model *, jepa_context * c, Outputs & o) {
        // Three sequences end to end: one token, a short one (the few-keys attention), one past 16 keys.
        const std::vector<int32_t> lens = {1, 6, 18};
        std::vector<int32_t> ids, types;
        for (int32_t n : lens) {
            for (int32_t i = 0; i < n; ++i) {
                ids.push_back(int32_t((ids.size() * 17 + 3) % kVocab));
                types.push_back(i >= n / 2 ? 1 : 0);
            }
        }
        const int n_seq = int(lens.size());
        const size_t n_tok = ids.size();
        record(o, "tokens", n_tok * kDim, [&](float * out) {
            return jepa_encode_text(c, ids.data(), types.data(), lens.data(), n_seq, JEPA_POOLING_NONE, 0, out,
                                    n_tok * kDim);
        });
        record(o, "mean_normalized", size_t(n_seq * kDim), [&](float * out) {
            return jepa_encode_text(c, ids.data(), types.data(), lens.data(), n_seq, JEPA_POOLING_MEAN, 1, out,
                                    size_t(n_seq * kDim));
        });
    });
}

// ---- the stored files: "# comment" lines, then per output a line "name count" and its values'
// float32 bit patterns in hex, 8 per line -----------------------------------------------------------

bool write_golden(const std::string & path, const std::string & model, const Outputs & o) {
    std::ofstream f(path);
    f << "# " << model << ": float32 bit patterns from tests/native/test_stored_outputs.cpp on x86 (" << jepa_cpu_kernels()
      << ")\n# rewrite on x86: make golden-outputs (docs/arm64.md)\n";
    for (const auto & [name, v] : o) {
        f << name << " " << v.size() << "\n";
        for (size_t i = 0; i < v.size(); ++i) {
            char h[16];
            std::snprintf(h, sizeof h, "%08" PRIx32, bits(v[i]));
            f << h << ((i % 8 == 7 || i + 1 == v.size()) ? "\n" : " ");
        }
    }
    return bool(f);
}

bool read_golden(const std::string & path, std::map<std::string, std::vector<uint32_t>> & out) {
    std::ifstream f(path);
    if (!f) return false;
    std::string line;
    while (std::getline(f, line)) {
        if (line.empty() || line[0] == '#') continue;
        std::istringstream head(line);
        std::string name;
        size_t n = 0;
        if (!(head >> name >> n)) return false;
        std::vector<uint32_t> & v = out[name];
        while (v.size() < n && f >> std::hex >> line) v.push_back(uint32_t(std::stoul(line, nullptr, 16)));
        std::getline(f, line);  // the rest of the last line of values
        if (v.size() != n) return false;
    }
    return true;
}

// Every value of every output against the stored bits: a mismatch names the output, how many
// values differ, the first one (both values and bits) and the largest difference.
void compare(const std::string & model, const Outputs & o, const std::map<std::string, std::vector<uint32_t>> & want) {
    CHECK(o.size() == want.size());
    for (const auto & [name, v] : o) {
        const auto it = want.find(name);
        if (it == want.end()) {
            std::fprintf(stderr, "%s/%s: no stored output\n", model.c_str(), name.c_str());
            CHECK(false);
            continue;
        }
        const std::vector<uint32_t> & w = it->second;
        if (w.size() != v.size()) {
            std::fprintf(stderr, "%s/%s: %zu values, %zu stored\n", model.c_str(), name.c_str(), v.size(), w.size());
            CHECK(false);
            continue;
        }
        size_t n_diff = 0, first = 0;
        double max_d = 0.0, max_ref = 0.0;
        for (size_t i = 0; i < v.size(); ++i) {
            float wf;
            std::memcpy(&wf, &w[i], 4);
            max_ref = std::fmax(max_ref, std::fabs(double(wf)));
            if (bits(v[i]) == w[i]) continue;
            if (n_diff++ == 0) first = i;
            max_d = std::fmax(max_d, std::fabs(double(v[i]) - double(wf)));
        }
        if (n_diff) {
            float wf;
            std::memcpy(&wf, &w[first], 4);
            std::fprintf(stderr,
                         "%s/%s: %zu of %zu values differ from the stored bits; first [%zu] %.9g (%08" PRIx32
                         ") stored %.9g (%08" PRIx32 "); max |diff| %.3g (max |stored| %.3g)\n",
                         model.c_str(), name.c_str(), n_diff, v.size(), first, double(v[first]), bits(v[first]),
                         double(wf), w[first], max_d, max_ref);
        } else {
            std::printf("%-10s %-16s %5zu values: the stored bits\n", model.c_str(), name.c_str(), v.size());
        }
        CHECK(n_diff == 0);
    }
}

bool on_x86() {
#if defined(__x86_64__) || defined(_M_X64)
    return true;
#else
    return false;
#endif
}

}  // namespace

int main(int argc, char ** argv) {
    const bool write = argc >= 2 && std::strcmp(argv[1], "--write") == 0;
    if (argc > (write ? 3 : 2)) {
        std::fprintf(stderr, "usage: %s [--write] [GOLDEN_DIR]\n", argv[0]);
        return 2;
    }
    const std::string dir = argc > (write ? 2 : 1) ? argv[argc - 1] : JEPA_GOLDEN_DIR;
    const std::string kernels = jepa_cpu_kernels();
    std::printf("kernels: %s\n", kernels.c_str());
    if (kernels == "ggml") {
        std::printf("test_stored_outputs: JEPA_GEMM=ggml runs ggml's products, not the exact class's kernels: "
                    "NOTHING compared\n");
        return 0;
    }
    if (write && !on_x86()) {
        std::fprintf(stderr, "--write: the stored outputs are x86's; write them on an x86 machine\n");
        return 2;
    }
    char tmpl[] = "/tmp/jepa_test_stored_XXXXXX";
    const char * tmp = mkdtemp(tmpl);
    if (!tmp) return 2;
    g_tmp = tmp;
    const std::vector<std::pair<std::string, std::function<Outputs()>>> models = {
        {"hfvit", [] { return run_hfvit("hfvit", GGML_TYPE_F32); }},
        {"hfvit_f16", [] { return run_hfvit("hfvit_f16", GGML_TYPE_F16); }},
        {"hfvit_q8_0", [] { return run_hfvit("hfvit_q8_0", GGML_TYPE_Q8_0); }},
        {"lewm", run_lewm},
        {"vjepa2_ac", run_ac},
        {"bert", run_bert},
    };
    for (const auto & [model, run] : models) {
        const Outputs o = run();
        const std::string path = dir + "/" + model + ".txt";
        if (write) {
            CHECK(write_golden(path, model, o));
            std::printf("wrote %s\n", path.c_str());
            continue;
        }
        std::map<std::string, std::vector<uint32_t>> want;
        if (!read_golden(path, want)) {
            std::fprintf(stderr, "%s: missing or unreadable (write it on x86: --write)\n", path.c_str());
            CHECK(false);
            continue;
        }
        compare(model, o, want);
    }
    rmdir(tmp);
    return check_result("test_stored_outputs");
}
