// The world-model C API on tiny random LeWM and V-JEPA 2-AC files (tiny_models.h):
// loading and the info fields, the loader's refusals of a broken tensor table, every argument
// refusal of jepa_world_latents / jepa_world_predict / jepa_world_rollout (a status, a message and the
// refused argument's name, never a crash), the wrong-kind refusals, batch invariance bit for bit, the
// causal masks (an early step does not see a later one), and AC rollouts cached = recomputed = upstream's
// loop over jepa_world_predict, bit for bit.
#include "jepa.h"

#include "check.h"
#include "tiny_models.h"

#include "ggml.h"
#include "gguf.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace {

using namespace tiny;
using namespace tiny::lewm;
using namespace tiny::ac;

std::string write_model(const std::string & path, const Keys & keys, const std::vector<TensorDef> & tensors) {
    if (!write_gguf(path, keys, tensors, {777, 0.4f})) std::exit(2);
    return path;
}

bool refused(jepa_status st, jepa_status want) {
    return st == want && std::strlen(jepa_error_text()) > 0;
}

// ... and the refused argument is named.
bool refused_arg(jepa_status st, jepa_status want, const char * param) {
    return refused(st, want) && std::strcmp(jepa_error_param(), param) == 0;
}

// One predictor pass through the kind-tagged entry, in the shapes of the tests below.
jepa_status world_predict(jepa_context * c, jepa_pred_kind kind, const float * z, const float * a, const float * s,
                          int B, int T, int P, int D, int A, int S, float * out, size_t len, float * raw = nullptr,
                          float * act_emb = nullptr) {
    // In jepa.h's field order: kind, B, T, P, D, latents, A, S, actions, states; pred, raw, act_emb, len.
    const jepa_world_input in{kind, B, T, P, D, z, A, S, a, s};
    const jepa_world_output o{out, raw, act_emb, len};
    return jepa_world_predict(c, &in, &o);
}

jepa_status lewm_predict(jepa_context * c, const float * e, const float * a, int B, int T, int D, int A, float * out,
                         size_t len, float * raw = nullptr, float * act_emb = nullptr) {
    return world_predict(c, JEPA_PRED_LEWM, e, a, nullptr, B, T, 1, D, A, 0, out, len, raw, act_emb);
}

jepa_status ac_predict(jepa_context * c, const float * z, const float * a, const float * s, int B, int T, int HW, int D,
                       float * out, size_t len) {
    return world_predict(c, JEPA_PRED_AC, z, a, s, B, T, HW, D, 7, 7, out, len);
}

// A model written here and loaded, with its info; NULL (a counted failure) when it does not load.
jepa_model * load(const std::string & path, void (*keys)(gguf_context *), const std::vector<TensorDef> & tensors,
                  jepa_model_info * info) {
    jepa_model * m = jepa_model_load(write_model(path, keys, tensors).c_str(), nullptr);
    CHECK(m != nullptr);
    if (!m) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), jepa_error_text());
        return nullptr;
    }
    CHECK(jepa_model_get_info(m, info) == JEPA_OK);
    return m;
}

void test_lewm(const std::string & dir) {
    jepa_model_info i;
    jepa_model * m = load(dir + "/lewm.gguf", lewm_keys, lewm_tensors(), &i);
    if (!m) return;
    CHECK(i.pred_kind == JEPA_PRED_LEWM && i.pred_n_frames == 3 && i.pred_action_dim == kA);
    CHECK(i.wm_embed_dim == kD && i.head_kind == JEPA_HEAD_NONE);
    jepa_context * c = jepa_context_new(m, nullptr);
    CHECK(c);

    const int B = 3, T = 3;
    const auto embs = noise(size_t(B * T * kD), 1), acts = noise(size_t(B * T * kA), 2);
    std::vector<float> out(size_t(B * T * kD)), raw(out.size()), ae(out.size());
    CHECK(lewm_predict(c, embs.data(), acts.data(), B, T, kD, kA, out.data(), out.size(), raw.data(), ae.data()) ==
          JEPA_OK);
    // Batch invariance, bit for bit, and causality: step t does not depend on steps after it.
    for (int b = 0; b < B; ++b) {
        std::vector<float> one(size_t(T * kD));
        CHECK(lewm_predict(c, embs.data() + b * T * kD, acts.data() + b * T * kA, 1, T, kD, kA, one.data(),
                           one.size()) == JEPA_OK);
        CHECK(std::memcmp(one.data(), out.data() + b * T * kD, one.size() * sizeof(float)) == 0);
    }
    std::vector<float> e2 = embs, a2 = acts;
    for (int k = 0; k < kD; ++k) e2[size_t(2 * kD + k)] += 1.0f;  // item 0, step 2
    for (int k = 0; k < kA; ++k) a2[size_t(2 * kA + k)] -= 1.0f;
    std::vector<float> out2(out.size());
    CHECK(lewm_predict(c, e2.data(), a2.data(), B, T, kD, kA, out2.data(), out2.size()) == JEPA_OK);
    float early = 0.0f, late = 0.0f;
    for (int k = 0; k < 2 * kD; ++k) early = std::fmax(early, std::fabs(out2[size_t(k)] - out[size_t(k)]));
    for (int k = 2 * kD; k < 3 * kD; ++k) late = std::fmax(late, std::fabs(out2[size_t(k)] - out[size_t(k)]));
    CHECK(early < 1e-6f && late > 1e-3f);

    // Refusals: a status and a message, never a crash.
    CHECK(refused(lewm_predict(nullptr, embs.data(), acts.data(), 1, 1, kD, kA, out.data(), out.size()),
                  JEPA_ERR_INVALID_ARG));
    CHECK(refused(lewm_predict(c, nullptr, acts.data(), 1, 1, kD, kA, out.data(), out.size()),
                  JEPA_ERR_INVALID_ARG));
    std::vector<float> big(size_t(4 * kD * 4));
    CHECK(refused(lewm_predict(c, big.data(), big.data(), 1, 4, kD, kA, big.data(), big.size()),
                  JEPA_ERR_INVALID_ARG));  // past the window
    CHECK(refused_arg(lewm_predict(c, embs.data(), acts.data(), 1, 1, kD, kA + 1, out.data(), out.size()),
                      JEPA_ERR_INVALID_ARG, "actions"));
    CHECK(refused_arg(lewm_predict(c, embs.data(), acts.data(), 1, 1, kD - 1, kA, out.data(), out.size()),
                      JEPA_ERR_INVALID_ARG, "latents"));
    CHECK(refused_arg(world_predict(c, JEPA_PRED_LEWM, embs.data(), acts.data(), acts.data(), 1, 1, 1, kD, kA, 0,
                                    out.data(), out.size()),
                      JEPA_ERR_INVALID_ARG, "states"));  // lewm takes no states
    CHECK(refused_arg(world_predict(c, JEPA_PRED_LEWM, embs.data(), acts.data(), nullptr, 1, 1, 2, kD, kA, 0,
                                    out.data(), out.size()),
                      JEPA_ERR_INVALID_ARG, "latents"));  // one latent row per step
    CHECK(refused(jepa_world_predict(c, nullptr, nullptr), JEPA_ERR_INVALID_ARG));
    CHECK(refused(lewm_predict(c, embs.data(), acts.data(), B, T, kD, kA, out.data(), out.size() - 1, nullptr, nullptr),
                  JEPA_ERR_INVALID_ARG));
    CHECK(refused(lewm_predict(c, embs.data(), acts.data(), 0, T, kD, kA, out.data(), out.size()),
                  JEPA_ERR_INVALID_ARG));

    // The latents: pixels -> encoder -> CLS -> projector, batched = single.
    const auto px = noise(size_t(2 * 3 * kImg * kImg), 3);
    const int64_t n_tok = jepa_model_n_tokens(m, 3, 1, kImg, kImg);
    CHECK(n_tok > 1);
    std::vector<float> tok(size_t(2 * n_tok * kD));
    CHECK(jepa_encode(c, px.data(), 2, 3, 1, kImg, kImg, tok.data(), tok.size()) == JEPA_OK);
    std::vector<float> emb(size_t(2) * kD), emb1(size_t{kD});
    CHECK(jepa_world_latents(c, tok.data(), 2, int(n_tok), kD, emb.data(), emb.size()) == JEPA_OK);
    CHECK(jepa_world_latents(c, tok.data() + n_tok * kD, 1, int(n_tok), kD, emb1.data(), emb1.size()) == JEPA_OK);
    CHECK(std::memcmp(emb1.data(), emb.data() + kD, sizeof(float) * kD) == 0);
    CHECK(refused_arg(jepa_world_latents(c, tok.data(), 2, int(n_tok), kD, emb.data(), emb.size() - 1),
                      JEPA_ERR_INVALID_ARG, "out"));
    CHECK(refused_arg(jepa_world_latents(c, tok.data(), 1, int(n_tok), kD + 1, emb1.data(), emb1.size()),
                      JEPA_ERR_INVALID_ARG, "tokens"));
    CHECK(refused_arg(jepa_encode(c, px.data(), 1, 4, 1, kImg, kImg, tok.data(), tok.size()), JEPA_ERR_INVALID_ARG,
                      "pixels"));

    // Not an AC model, not a masked predictor; a lewm rollout runs over world_predict.
    CHECK(refused_arg(ac_predict(c, embs.data(), acts.data(), acts.data(), 1, 1, 4, kD, out.data(), out.size()),
                      JEPA_ERR_UNSUPPORTED, "kind"));
    const jepa_world_rollout_input lr{JEPA_PRED_LEWM, 1, 1, 1, kD, embs.data(), kA, 0, acts.data(), acts.data()};
    CHECK(refused_arg(jepa_world_rollout(c, &lr, nullptr, out.data(), out.size()), JEPA_ERR_UNSUPPORTED, "kind"));
    const int32_t ids[1] = {0};
    CHECK(refused(jepa_predict(c, embs.data(), 1, 1, kD, ids, ids, 1, nullptr, out.data(), out.size()),
                  JEPA_ERR_UNSUPPORTED));
    jepa_context_free(c);
    jepa_model_free(m);

    // A broken tensor table is refused by name.
    auto without = [&](const std::string & name) {
        auto t = lewm_tensors();
        for (auto it = t.begin(); it != t.end(); ++it) {
            if (it->name == name) {
                t.erase(it);
                break;
            }
        }
        return t;
    };
    auto expect_bad = [&](const std::vector<TensorDef> & t, const char * needle) {
        jepa_model * bad = jepa_model_load(write_model(dir + "/bad.gguf", lewm_keys, t).c_str(), nullptr);
        CHECK(!bad && jepa_error_status() == JEPA_ERR_BAD_FILE && std::strstr(jepa_error_text(), needle));
        if (bad) jepa_model_free(bad);
    };
    expect_bad(without("pred.blk.1.adaln.weight"), "pred.blk.1.adaln.weight");
    expect_bad(without("pred.action_embed.2.weight"), "pred.action_embed.2.weight");
    auto t = lewm_tensors();
    for (auto & d : t) {
        if (d.name == "pred.blk.0.attn_out.weight") d.ne = {kD, kD};  // inner width must be n_head x head_dim
    }
    expect_bad(t, "pred.blk.0.attn_out.weight");
}

jepa_world_rollout_input rollout_input(const float * ctx_frame, const float * a, const float * s, int B, int H) {
    // In jepa.h's field order: kind, B, H, P, D, context, A, S, actions, states.
    return {JEPA_PRED_AC, B, H, kHW, kE, ctx_frame, 7, 7, a, s};
}

jepa_status rollout(jepa_context * c, const jepa_world_rollout_input & in, int cache, float * out, size_t len) {
    jepa_world_rollout_params p = jepa_world_rollout_default_params();
    p.cache = cache;
    return jepa_world_rollout(c, &in, &p, out, len);
}

// A whole rollout: cached (the default), recomputed, and upstream's loop over jepa_world_predict
// with jepa_world_latents' LayerNorm give the same bits (own kernels); refusals name the argument.
void test_ac_rollout(jepa_model * m, jepa_context * c, bool own) {
    CHECK(jepa_world_rollout_default_params().cache == 1);
    const int B = 3, H = 3, F = kHW * kE;
    const auto ctx_frame = noise(size_t(F), 7), a = noise(size_t(B * H * 7), 8), s = noise(size_t(B * H * 7), 9);
    const jepa_world_rollout_input in = rollout_input(ctx_frame.data(), a.data(), s.data(), B, H);
    std::vector<float> cached(size_t(B * H * F)), recomputed(cached.size()), loop(cached.size());
    CHECK(jepa_world_rollout(c, &in, nullptr, cached.data(), cached.size()) == JEPA_OK);
    CHECK(rollout(c, in, 0, recomputed.data(), recomputed.size()) == JEPA_OK);
    for (int b = 0; b < B; ++b) {
        std::vector<float> z(ctx_frame), pred;
        std::vector<float> ab, sb;
        for (int t = 0; t < H; ++t) {
            const int T = t + 1;
            ab.assign(a.begin() + b * H * 7, a.begin() + (b * H + T) * 7);
            sb.assign(s.begin() + b * H * 7, s.begin() + (b * H + T) * 7);
            pred.resize(size_t(T * F));
            CHECK(ac_predict(c, z.data(), ab.data(), sb.data(), 1, T, kHW, kE, pred.data(), pred.size()) == JEPA_OK);
            float * frame = loop.data() + size_t((b * H + t) * F);
            CHECK(jepa_world_latents(c, pred.data() + t * F, 1, kHW, kE, frame, size_t(F)) == JEPA_OK);
            z.insert(z.end(), frame, frame + F);
        }
    }
    auto max_diff = [](const std::vector<float> & x, const std::vector<float> & y) {
        float d = 0.0f;
        for (size_t k = 0; k < x.size(); ++k) d = std::fmax(d, std::fabs(x[k] - y[k]));
        return d;
    };
    CHECK(max_diff(cached, loop) < 1e-4f && max_diff(recomputed, loop) < 1e-4f);
    if (own) {
        CHECK(std::memcmp(cached.data(), loop.data(), cached.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(recomputed.data(), loop.data(), cached.size() * sizeof(float)) == 0);
    }
    // The cache counts in max_graph_bytes: 64 bytes is not enough for one candidate's.
    jepa_context_params cp = jepa_context_default_params();
    cp.max_graph_bytes = 64;
    jepa_context * tight = jepa_context_new(m, &cp);
    CHECK(tight && refused(jepa_world_rollout(tight, &in, nullptr, cached.data(), cached.size()), JEPA_ERR_RESOURCE));
    CHECK(std::strstr(jepa_error_text(), "key/value cache") != nullptr);
    jepa_context_free(tight);

    // A copy of `in` with one field forged is refused with its status, naming the argument.
    const size_t len = cached.size();
    auto refused_if = [&](auto forge, jepa_status want, const char * param) {
        jepa_world_rollout_input bad = in;
        forge(bad);
        return refused_arg(jepa_world_rollout(c, &bad, nullptr, cached.data(), len), want, param);
    };
    using R = jepa_world_rollout_input;
    std::vector<float> nan_frame(ctx_frame);
    nan_frame[5] = NAN;
    const float * nan_context = nan_frame.data();
    CHECK(refused_if([](R & r) { r.context = nullptr; }, JEPA_ERR_INVALID_ARG, "context"));
    CHECK(refused_if([](R & r) { r.D = kE + 1; }, JEPA_ERR_INVALID_ARG, "context"));
    CHECK(refused_if([](R & r) { r.P = kHW + 1; }, JEPA_ERR_UNSUPPORTED, "context"));
    CHECK(refused_if([](R & r) { r.A = 6; }, JEPA_ERR_INVALID_ARG, "actions"));
    CHECK(refused_if([](R & r) { r.S = 6; }, JEPA_ERR_INVALID_ARG, "states"));
    CHECK(refused_if([](R & r) { r.states = nullptr; }, JEPA_ERR_INVALID_ARG, "states"));
    CHECK(refused_if([](R & r) { r.H = 0; }, JEPA_ERR_INVALID_ARG, "actions"));
    CHECK(refused_if([](R & r) { r.kind = JEPA_PRED_LEWM; }, JEPA_ERR_UNSUPPORTED, "kind"));
    CHECK(refused_if([nan_context](R & r) { r.context = nan_context; }, JEPA_ERR_INVALID_ARG, "context"));
    CHECK(refused_arg(jepa_world_rollout(c, &in, nullptr, cached.data(), len - 1), JEPA_ERR_INVALID_ARG, "out"));
    CHECK(refused(jepa_world_rollout(c, nullptr, nullptr, cached.data(), len), JEPA_ERR_INVALID_ARG));
    CHECK(refused(jepa_world_rollout(nullptr, &in, nullptr, cached.data(), len), JEPA_ERR_INVALID_ARG));
}

void test_ac(const std::string & dir) {
    jepa_model_info i;
    jepa_model * m = load(dir + "/ac.gguf", ac_keys, ac_tensors(), &i);
    if (!m) return;
    CHECK(i.pred_kind == JEPA_PRED_AC && i.pred_action_dim == 7 && i.pred_state_dim == 7 && i.wm_embed_dim == kE);
    jepa_context * c = jepa_context_new(m, nullptr);

    const int B = 2, T = 3, N = T * kHW;
    const auto z = noise(size_t(B * N * kE), 4), a = noise(size_t(B * T * 7), 5), s = noise(size_t(B * T * 7), 6);
    std::vector<float> out(size_t(B * N * kE));
    CHECK(ac_predict(c, z.data(), a.data(), s.data(), B, T, kHW, kE, out.data(), out.size()) == JEPA_OK);
    std::vector<float> one(size_t(N * kE));
    CHECK(ac_predict(c, z.data() + N * kE, a.data() + T * 7, s.data() + T * 7, 1, T, kHW, kE, one.data(),
                          one.size()) == JEPA_OK);
    CHECK(std::memcmp(one.data(), out.data() + N * kE, one.size() * sizeof(float)) == 0);
    // Frame-causal: the first frame's rows from a 1-frame context (6 keys) equal those of the 3-frame
    // one (18, 12 of them masked), bit for bit on the engine's own kernels.
    std::vector<float> first(size_t(kHW * kE));
    CHECK(ac_predict(c, z.data(), a.data(), s.data(), 1, 1, kHW, kE, first.data(), first.size()) == JEPA_OK);
    float d = 0.0f;
    for (size_t k = 0; k < first.size(); ++k) d = std::fmax(d, std::fabs(first[k] - out[k]));
    CHECK(d < 1e-5f);
    const bool own = std::strcmp(jepa_cpu_kernels(), "ggml") != 0;
    CHECK(!own || std::memcmp(first.data(), out.data(), first.size() * sizeof(float)) == 0);

    CHECK(refused(ac_predict(c, z.data(), a.data(), s.data(), 1, 1, kHW + 1, kE, out.data(), out.size()),
                  JEPA_ERR_UNSUPPORTED));  // not the native grid
    CHECK(refused(ac_predict(c, z.data(), a.data(), s.data(), 1, 1, kHW, kE + 1, out.data(), out.size()),
                  JEPA_ERR_INVALID_ARG));
    CHECK(refused(ac_predict(c, z.data(), nullptr, s.data(), 1, 1, kHW, kE, out.data(), out.size()),
                  JEPA_ERR_INVALID_ARG));
    CHECK(refused(ac_predict(c, z.data(), a.data(), s.data(), B, T, kHW, kE, out.data(), out.size() - 1),
                  JEPA_ERR_INVALID_ARG));
    CHECK(refused_arg(lewm_predict(c, z.data(), a.data(), 1, 1, kE, 7, out.data(), out.size()), JEPA_ERR_UNSUPPORTED,
                      "kind"));
    CHECK(refused_arg(world_predict(c, JEPA_PRED_AC, z.data(), a.data(), s.data(), 1, 1, kHW, kE, 7, 6, out.data(),
                                    out.size()),
                      JEPA_ERR_INVALID_ARG, "states"));
    CHECK(refused_arg(world_predict(c, JEPA_PRED_AC, z.data(), a.data(), nullptr, 1, 1, kHW, kE, 7, 7, out.data(),
                                    out.size()),
                      JEPA_ERR_INVALID_ARG, "states"));
    // The latents: the non-affine LayerNorm of every token, rows independent.
    std::vector<float> lat(size_t(2 * kHW * kE)), lat1(size_t(kHW * kE));
    CHECK(jepa_world_latents(c, z.data(), 2, kHW, kE, lat.data(), lat.size()) == JEPA_OK);
    CHECK(jepa_world_latents(c, z.data() + kHW * kE, 1, kHW, kE, lat1.data(), lat1.size()) == JEPA_OK);
    CHECK(std::memcmp(lat1.data(), lat.data() + kHW * kE, lat1.size() * sizeof(float)) == 0);
    double mean = 0.0, sq = 0.0;
    for (int k = 0; k < kE; ++k) mean += lat[size_t(k)];
    for (int k = 0; k < kE; ++k) sq += double(lat[size_t(k)]) * lat[size_t(k)];
    CHECK(std::fabs(mean / kE) < 1e-5 && std::fabs(sq / kE - 1.0) < 1e-3);
    const int32_t ids[1] = {0};
    CHECK(refused(jepa_predict(c, z.data(), 1, 1, kE, ids, ids, 1, nullptr, out.data(), out.size()),
                  JEPA_ERR_UNSUPPORTED));
    test_ac_rollout(m, c, own);
    jepa_context_free(c);
    jepa_model_free(m);
}

}  // namespace

int main() {
    char tmpl[] = "/tmp/jepa_test_world_XXXXXX";
    const char * dir = mkdtemp(tmpl);
    if (!dir) return 2;
    test_lewm(dir);
    test_ac(dir);
    for (const char * f : {"lewm.gguf", "ac.gguf", "bad.gguf"}) std::remove((std::string(dir) + "/" + f).c_str());
    rmdir(dir);
    return check_result("test_world");
}
