#include "hparams.h"

#include "error.h"
#include "gguf_meta.h"

namespace jepa {

namespace {

const std::vector<std::string> kFamilies = {"ijepa", "vjepa", "vjepa2", "vjepa2_1", "levjepa", "hfvit", "lewm", "bert"};
// Families whose graphs this build runs; the others are refused with a clear message.
const std::vector<std::string> kSupportedFamilies = {"ijepa", "levjepa", "hfvit", "vjepa2", "vjepa2_1", "lewm", "bert"};

// RoPE keys under `prefix` (jepa.enc. or jepa.pred.): the frequency layout (V-JEPA 2's tiled one, or
// 2.1's interleaved one) and, where `interpolate_ok`, 2.1's grid interpolation onto rope_ref_grid.
struct RopeKeys {
    float theta = 10000.0f;
    bool interleaved = false;
    int ref_grid = 0;
};

RopeKeys parse_rope(const GgufMeta & m, const std::string & prefix, int head_dim, bool interpolate_ok) {
    RopeKeys r;
    r.interleaved = m.get_enum((prefix + "rope_freq_layout").c_str(), {"tiled", "interleaved"}, 0) == 1;
    if (m.get_bool((prefix + "rope_interpolate").c_str(), false)) {
        if (!interpolate_ok) {
            fail(JEPA_ERR_UNSUPPORTED, "%srope_interpolate is not supported here (only a V-JEPA 2.1 encoder's)",
                 prefix.c_str());
        }
        r.ref_grid = int(m.get_int("jepa.enc.rope_ref_grid", 2, 1024));  // interpolate_ok: the encoder alone
    }
    r.theta = m.get_f32((prefix + "rope_theta").c_str(), 10000.0f);
    if (!(r.theta > 1.0f)) fail(JEPA_ERR_BAD_FILE, "%srope_theta %g must be > 1", prefix.c_str(), r.theta);
    if (head_dim < 6 || head_dim % 2 != 0) {
        fail(JEPA_ERR_BAD_FILE, "%s: 3-D RoPE needs an even head_dim >= 6, got %d", prefix.c_str(), head_dim);
    }
    return r;
}

EncoderHparams parse_encoder(const GgufMeta & m) {
    EncoderHparams e;
    e.embed_dim = int(m.get_int("jepa.enc.embed_dim", 1, 16384));
    e.n_layer = int(m.get_int("jepa.enc.n_layer", 1, 256));
    e.n_head = int(m.get_int("jepa.enc.n_head", 1, 256));
    e.ffn_dim = int(m.get_int("jepa.enc.ffn_dim", 1, 65536));
    e.patch_size = int(m.get_int("jepa.enc.patch_size", 1, 64));
    e.tubelet_size = int(m.get_int("jepa.enc.tubelet_size", 1, 8, 1));
    e.img_size = int(m.get_int("jepa.enc.img_size", 1, 8192));
    e.n_frames = int(m.get_int("jepa.enc.n_frames", 1, 1024, 1));
    e.in_chans = int(m.get_int("jepa.enc.in_chans", 1, 16, 3));
    e.n_registers = int(m.get_int("jepa.enc.n_registers", 0, 64, 0));
    e.cls_token = m.get_bool("jepa.enc.cls_token", false);
    e.qkv_fused = m.get_bool("jepa.enc.qkv_fused", false);
    e.layer_scale = m.get_bool("jepa.enc.layer_scale", false);
    e.ln_eps = m.get_f32("jepa.enc.ln_eps", 1e-6f);
    e.act = Act(m.get_enum("jepa.enc.act", {"gelu_erf", "gelu_tanh", "silu"}, 0));
    const int pos = m.get_enum("jepa.enc.pos_type", {"none", "learned", "sincos2d", "sincos3d", "rope3d"}, 1);
    e.pos_type = jepa_pos_type(pos);
    e.block_causal = m.get_enum("jepa.enc.attn_mode", {"full", "block_causal"}, 0) == 1;

    if (e.embed_dim % e.n_head != 0) {
        fail(JEPA_ERR_BAD_FILE, "jepa.enc.embed_dim %d is not a multiple of jepa.enc.n_head %d", e.embed_dim, e.n_head);
    }
    if (e.img_size % e.patch_size != 0) {
        fail(JEPA_ERR_BAD_FILE, "jepa.enc.img_size %d is not a multiple of jepa.enc.patch_size %d", e.img_size,
             e.patch_size);
    }
    if (!(e.ln_eps > 0.0f && e.ln_eps < 1.0f)) fail(JEPA_ERR_BAD_FILE, "jepa.enc.ln_eps %g out of range (0, 1)", e.ln_eps);
    if (e.pos_type == JEPA_POS_ROPE3D) {
        const RopeKeys r = parse_rope(m, "jepa.enc.", e.head_dim(), true);
        e.rope_theta = r.theta;
        e.rope_interleaved = r.interleaved;
        e.rope_ref_grid = r.ref_grid;
        // A CLS carries no rotation (its table rows are the identity: LeVJEPA); registers are not known
        // from any rope3d release.
        if (e.n_registers > 0) {
            fail(JEPA_ERR_UNSUPPORTED, "jepa.enc.pos_type rope3d with register tokens is not supported");
        }
    }
    if (e.pos_type == JEPA_POS_SINCOS3D) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.enc.pos_type sincos3d (V-JEPA 1) is not supported by this build yet");
    }
    if (e.act == Act::Silu) fail(JEPA_ERR_UNSUPPORTED, "jepa.enc.act silu is not supported for encoders");
    e.modality_embed = m.get_bool("jepa.enc.modality_embed", false);
    e.image_patch_embed = m.get_bool("jepa.enc.image_patch_embed", false);
    if (m.has("jepa.enc.hier_layers")) {
        for (const int64_t l : m.get_u32_array("jepa.enc.hier_layers", 1, 16)) {
            if (l < 0 || l >= e.n_layer || (!e.hier_layers.empty() && l <= e.hier_layers.back())) {
                fail(JEPA_ERR_BAD_FILE, "jepa.enc.hier_layers: block %lld out of order or past jepa.enc.n_layer %d",
                     (long long) l, e.n_layer);
            }
            e.hier_layers.push_back(int(l));
        }
        if (e.hier_layers.back() != e.n_layer - 1) {
            fail(JEPA_ERR_BAD_FILE, "jepa.enc.hier_layers: the last level must follow the last block (%d), got %d",
                 e.n_layer - 1, e.hier_layers.back());
        }
    }
    e.has_proj = m.has("jepa.enc.proj_act");
    if (e.has_proj) e.proj_act = Act(m.get_enum("jepa.enc.proj_act", {"gelu_erf", "gelu_tanh", "silu"}, 0));
    return e;
}

// A text encoder's widths (the jepa.enc.* keys it shares with the vision encoders) and jepa.text.*.
// The table sizes (vocabulary, positions, token types) are the tensors' and are set by the loader.
void parse_text(const GgufMeta & m, EncoderHparams & e, TextHparams & t) {
    e.embed_dim = int(m.get_int("jepa.enc.embed_dim", 1, 16384));
    e.n_layer = int(m.get_int("jepa.enc.n_layer", 1, 256));
    e.n_head = int(m.get_int("jepa.enc.n_head", 1, 256));
    e.ffn_dim = int(m.get_int("jepa.enc.ffn_dim", 1, 65536));
    e.ln_eps = m.get_f32("jepa.enc.ln_eps", 1e-6f);  // converters always write the file's own
    e.act = Act(m.get_enum("jepa.enc.act", {"gelu_erf", "gelu_tanh", "silu"}, 0));
    e.pos_type = JEPA_POS_LEARNED;
    if (e.embed_dim % e.n_head != 0) {
        fail(JEPA_ERR_BAD_FILE, "jepa.enc.embed_dim %d is not a multiple of jepa.enc.n_head %d", e.embed_dim, e.n_head);
    }
    if (!(e.ln_eps > 0.0f && e.ln_eps < 1.0f)) fail(JEPA_ERR_BAD_FILE, "jepa.enc.ln_eps %g out of range (0, 1)", e.ln_eps);
    if (e.act == Act::Silu) fail(JEPA_ERR_UNSUPPORTED, "jepa.enc.act silu is not supported for encoders");
    t.pos_offset = int(m.get_int("jepa.text.pos_offset", 0, 65536, 0));
    t.max_seq_len = int(m.get_int("jepa.text.max_seq_len", 1, 1 << 20));
    // Required: the wrong pooling gives plausible, useless vectors, so it is never assumed.
    if (!m.has("jepa.text.pooling")) fail(JEPA_ERR_BAD_FILE, "missing metadata key jepa.text.pooling");
    // The key's names in the order of jepa_pooling_type from CLS on (the values the file is read into).
    t.pool = jepa_pooling_type(JEPA_POOLING_CLS + m.get_enum("jepa.text.pooling", {"cls", "mean", "last_token"}, 1));
    t.normalize = m.get_bool("jepa.text.normalize", false);
    t.tokenizer = m.get_str("jepa.text.tokenizer");
    if (t.tokenizer.empty() || t.tokenizer.front() != '{') {
        fail(JEPA_ERR_BAD_FILE, "metadata key jepa.text.tokenizer: expected a tokenizer.json object");
    }
}

PreprocessHparams parse_preprocess(const GgufMeta & m, const EncoderHparams & e) {
    PreprocessHparams p;
    if (m.has("jepa.pre.mean")) {
        const auto v = m.get_f32_array("jepa.pre.mean", 3);
        for (int i = 0; i < 3; ++i) p.mean[i] = v[i];
    }
    if (m.has("jepa.pre.std")) {
        const auto v = m.get_f32_array("jepa.pre.std", 3);
        for (int i = 0; i < 3; ++i) {
            if (!(v[i] > 0.0f)) fail(JEPA_ERR_BAD_FILE, "metadata key jepa.pre.std: values must be > 0");
            p.std[i] = v[i];
        }
    }
    p.rescale = m.get_f32("jepa.pre.rescale", 1.0f / 255.0f);
    // A scale of 0 makes every image the same vector, a negative one inverts them; V-JEPA 2.1's
    // preprocessing divides by it.
    if (!(p.rescale > 0.0f)) fail(JEPA_ERR_BAD_FILE, "metadata key jepa.pre.rescale: must be > 0 (got %g)", double(p.rescale));
    p.crop = int(m.get_int("jepa.pre.crop", 1, 8192, e.img_size));
    p.resize_short = int(m.get_int("jepa.pre.resize_short", 1, 16384, p.crop));
    p.resize_mode = jepa_resize_mode(m.get_enum("jepa.pre.resize_mode", {"shortest_edge", "squash"}, 0));
    p.resample = jepa_resample(m.get_enum("jepa.pre.resample", {"bilinear", "bicubic"}, 0));
    return p;
}

HeadHparams parse_head(const GgufMeta & m, const ModelHparams & h) {
    HeadHparams hd;
    const std::string kind = m.get_str("jepa.head.kind", "none");
    if (kind == "none") return hd;
    if (kind != "attentive_pool") {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.head.kind \"%s\" is not supported by this build yet", kind.c_str());
    }
    hd.kind = JEPA_HEAD_ATTENTIVE_POOL;
    hd.n_classes = int(m.get_int("jepa.head.n_classes", 1, 1 << 20));
    hd.n_pool_layers = int(m.get_int("jepa.head.n_pool_layers", 0, 64));
    hd.block = h.enc_block();
    return hd;
}

const std::vector<std::string> kActs = {"gelu_erf", "gelu_tanh", "silu"};

void check_eps(float eps, const char * key) {
    if (!(eps > 0.0f && eps < 1.0f)) fail(JEPA_ERR_BAD_FILE, "%s %g out of range (0, 1)", key, eps);
}

// Widths, depth and block options every predictor kind has.
void parse_pred_common(const GgufMeta & m, const EncoderHparams & e, PredHparams & p) {
    p.embed_dim = int(m.get_int("jepa.pred.embed_dim", 1, 16384));
    p.n_layer = int(m.get_int("jepa.pred.n_layer", 1, 256));
    p.block.n_head = int(m.get_int("jepa.pred.n_head", 1, 256));
    p.ffn_dim = int(m.get_int("jepa.pred.ffn_dim", 1, 65536));
    p.out_dim = int(m.get_int("jepa.pred.out_dim", 1, 16384, e.embed_dim));
    p.block.ln_eps = m.get_f32("jepa.pred.ln_eps", e.ln_eps);
    p.block.act = Act(m.get_enum("jepa.pred.act", kActs, int(e.act)));
    check_eps(p.block.ln_eps, "jepa.pred.ln_eps");
    // A V-JEPA 2.1 predictor (an encoder with levels) predicts its own width: the teacher's, or levels x D.
    if (p.out_dim != e.embed_dim && e.hier_layers.empty()) {
        fail(JEPA_ERR_BAD_FILE, "jepa.pred.out_dim %d differs from the encoder width %d", p.out_dim, e.embed_dim);
    }
}

void parse_pred_rope(const GgufMeta & m, const EncoderHparams & e, PredHparams & p) {
    if (e.pos_type != JEPA_POS_ROPE3D) {
        fail(JEPA_ERR_UNSUPPORTED, "a %s predictor needs a rope3d encoder (jepa.enc.pos_type)", pred_kind_name(p.kind));
    }
    if (p.embed_dim % p.block.n_head != 0) {
        fail(JEPA_ERR_BAD_FILE, "jepa.pred.embed_dim %d is not a multiple of jepa.pred.n_head %d", p.embed_dim,
             p.block.n_head);
    }
    if (m.has("jepa.pred.head_dim") && m.get_int("jepa.pred.head_dim", 1, 4096) != p.head_dim()) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.pred.head_dim other than embed_dim / n_head is not supported");
    }
    p.grid_size = int(m.get_int("jepa.pred.grid_size", 1, 8192, e.grid()));
    if (p.block.act == Act::Silu) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.pred.act silu is not supported for %s predictors", pred_kind_name(p.kind));
    }
    const RopeKeys r = parse_rope(m, "jepa.pred.", p.head_dim(), false);
    p.rope_theta = r.theta;
    p.rope_interleaved = r.interleaved;
}

PredHparams parse_pred(const GgufMeta & m, const EncoderHparams & e) {
    PredHparams p;
    const std::string kind = m.get_str("jepa.pred.kind");
    for (jepa_pred_kind k : {JEPA_PRED_MASKED, JEPA_PRED_AC, JEPA_PRED_LEWM}) {
        if (kind == pred_kind_name(k)) p.kind = k;
    }
    if (p.kind == JEPA_PRED_NONE) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.pred.kind \"%s\" is not supported by this build yet", kind.c_str());
    }
    if (p.kind == JEPA_PRED_MASKED && e.pos_type != JEPA_POS_ROPE3D) {
        fail(JEPA_ERR_UNSUPPORTED, "a masked predictor needs a rope3d encoder (jepa.enc.pos_type)");
    }
    if (p.kind == JEPA_PRED_AC && e.pos_type != JEPA_POS_ROPE3D) {
        fail(JEPA_ERR_UNSUPPORTED, "an ac predictor needs a rope3d encoder (jepa.enc.pos_type)");
    }
    parse_pred_common(m, e, p);
    if (p.kind == JEPA_PRED_MASKED) {
        p.n_mask_tokens = int(m.get_int("jepa.pred.n_mask_tokens", 1, 1024));
        p.in_levels = int(m.get_int("jepa.pred.in_levels", 1, 64, 1));
        if (p.in_levels > 1 && size_t(p.in_levels) != e.hier_layers.size()) {
            fail(JEPA_ERR_BAD_FILE, "jepa.pred.in_levels %d: the encoder has %zu levels (jepa.enc.hier_layers)", p.in_levels,
                 e.hier_layers.size());
        }
        p.modality_embed = m.get_bool("jepa.pred.modality_embed", false);
        p.proj_context = m.get_bool("jepa.pred.proj_context", false);
        parse_pred_rope(m, e, p);
    } else if (p.kind == JEPA_PRED_AC) {
        p.action_dim = int(m.get_int("jepa.pred.action_dim", 1, 1024));
        p.state_dim = int(m.get_int("jepa.pred.state_dim", 1, 1024));
        p.n_frames = int(m.get_int("jepa.pred.n_frames", 1, 1 << 16, 0));
        if (m.get_int("jepa.pred.n_cond_tokens", 0, 16, 2) != 2 || m.get_str("jepa.pred.cond_order", "action,state") != "action,state") {
            fail(JEPA_ERR_UNSUPPORTED, "an ac predictor must have jepa.pred.n_cond_tokens 2 in cond_order \"action,state\"");
        }
        if (!m.get_bool("jepa.pred.frame_causal", true)) {
            fail(JEPA_ERR_UNSUPPORTED, "an ac predictor without jepa.pred.frame_causal is not supported");
        }
        p.norm_reps_eps = m.get_f32("jepa.pred.norm_reps_eps", 1e-5f);
        check_eps(p.norm_reps_eps, "jepa.pred.norm_reps_eps");
        parse_pred_rope(m, e, p);
    } else {  // lewm
        if (!e.cls_token || !e.has_proj) {
            fail(JEPA_ERR_BAD_FILE, "a lewm predictor needs an encoder with a CLS token and a projector (jepa.enc.proj_act)");
        }
        p.hd = int(m.get_int("jepa.pred.head_dim", 1, 4096, p.embed_dim / p.block.n_head));
        p.n_frames = int(m.get_int("jepa.pred.n_frames", 1, 1024));
        p.action_dim = int(m.get_int("jepa.pred.action_dim", 1, 65536));
        p.adaln_eps = m.get_f32("jepa.pred.adaln_eps", 1e-6f);
        check_eps(p.adaln_eps, "jepa.pred.adaln_eps");
        p.action_act = Act(m.get_enum("jepa.pred.action_act", kActs, int(Act::Silu)));
        p.proj_act = Act(m.get_enum("jepa.pred.proj_act", kActs, int(Act::GeluErf)));
        if (!m.get_bool("jepa.pred.frame_causal", true)) {
            fail(JEPA_ERR_UNSUPPORTED, "a lewm predictor without jepa.pred.frame_causal is not supported");
        }
        if (p.embed_dim != e.embed_dim) {
            fail(JEPA_ERR_UNSUPPORTED, "a lewm predictor wider than its encoder (%d vs %d) is not supported", p.embed_dim,
                 e.embed_dim);
        }
    }
    return p;
}

}  // namespace

const char * pred_kind_name(jepa_pred_kind kind) {
    switch (kind) {
        case JEPA_PRED_MASKED: return "masked";
        case JEPA_PRED_AC: return "ac";
        case JEPA_PRED_LEWM: return "lewm";
        case JEPA_PRED_NONE: break;
    }
    return "";
}

ModelHparams parse_hparams(const gguf_context * ctx) {
    const GgufMeta m(ctx);
    ModelHparams h;
    const std::string arch = m.get_str("general.architecture");
    if (arch != "jepa") fail(JEPA_ERR_BAD_FILE, "general.architecture is \"%s\", expected \"jepa\"", arch.c_str());
    const int64_t version = m.get_int("jepa.schema_version", 0, INT32_MAX);
    if (version != 1) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.schema_version %lld is not supported (this build reads version 1)",
             (long long) version);
    }
    h.name = m.get_str("general.name", "");
    // Required: a file that does not say what it is must not load as some default family.
    if (!m.has("jepa.family")) fail(JEPA_ERR_BAD_FILE, "missing metadata key jepa.family");
    h.family = kFamilies[size_t(m.get_enum("jepa.family", kFamilies, 0))];
    bool supported = false;
    for (const auto & f : kSupportedFamilies) supported = supported || f == h.family;
    if (!supported) {
        fail(JEPA_ERR_UNSUPPORTED, "jepa.family \"%s\" is not supported by this build yet", h.family.c_str());
    }
    h.modality = m.get_str("jepa.modality", "image");
    h.file_type = int(m.get_int("general.file_type", 0, 1024, 0));
    if (h.is_text()) {
        if (h.modality != "text") fail(JEPA_ERR_BAD_FILE, "jepa.family bert needs jepa.modality \"text\"");
        parse_text(m, h.enc, h.text);
        return h;
    }
    if (h.modality == "text") fail(JEPA_ERR_BAD_FILE, "jepa.modality text needs a text family (jepa.family bert)");
    h.enc = parse_encoder(m);
    if (h.family == "vjepa2_1" && (h.enc.pos_type != JEPA_POS_ROPE3D || h.enc.hier_layers.empty() || h.enc.rope_ref_grid == 0)) {
        fail(JEPA_ERR_BAD_FILE, "jepa.family vjepa2_1 needs jepa.enc.pos_type rope3d, jepa.enc.hier_layers and "
             "jepa.enc.rope_interpolate with jepa.enc.rope_ref_grid");
    }
    h.pre = parse_preprocess(m, h.enc);
    h.head = parse_head(m, h);
    if (m.has("jepa.pred.kind")) h.pred = parse_pred(m, h.enc);
    if (h.family == "vjepa2_1" && h.pred.kind != JEPA_PRED_NONE && h.pred.kind != JEPA_PRED_MASKED) {
        fail(JEPA_ERR_BAD_FILE, "jepa.family vjepa2_1 takes a masked predictor, not jepa.pred.kind \"%s\"",
             pred_kind_name(h.pred.kind));
    }
    if (h.family == "lewm" && h.pred.kind != JEPA_PRED_LEWM) {
        fail(JEPA_ERR_BAD_FILE, "jepa.family lewm needs jepa.pred.kind \"lewm\"");
    }
    if (m.has("jepa.head.labels")) h.labels = m.get_str_array("jepa.head.labels", 100000);
    if (!h.labels.empty() && int(h.labels.size()) != h.head.n_classes) {
        fail(JEPA_ERR_BAD_FILE, "jepa.head.labels has %zu entries but the head has %d classes", h.labels.size(),
             h.head.n_classes);
    }
    return h;
}

}  // namespace jepa
