#include "model.h"

#include "error.h"
#include "cpu/paths.h"
#include "cpu/gemm.h"
#include "gguf.h"
#include "gguf_meta.h"
#include "tensor_table.h"
#include "weights.h"

#include "ggml-alloc.h"
#include "ggml-cpu.h"
#ifdef JEPA_USE_CUDA
#include "ggml-cuda.h"
#endif

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <sys/stat.h>

namespace jepa {

Model::~Model() {
    if (buf_w) ggml_backend_buffer_free(buf_w);
    if (buf_map) ggml_backend_buffer_free(buf_map);  // before `map` unmaps what it wraps
    std::free(host_w);
    if (ctx_w) ggml_free(ctx_w);
}

ggml_backend_buffer_type_t Model::buffer_type() const {
#ifdef JEPA_USE_CUDA
    if (device == JEPA_DEVICE_CUDA) return ggml_backend_cuda_buffer_type(device_index);
#endif
    return ggml_backend_cpu_buffer_type();
}

ggml_backend_t Model::new_backend() const {
#ifdef JEPA_USE_CUDA
    if (device == JEPA_DEVICE_CUDA) {
        ggml_backend_t be = ggml_backend_cuda_init(device_index);
        if (!be) fail(JEPA_ERR_BACKEND, "cannot start CUDA device %d", device_index);
        return be;
    }
#endif
    ggml_backend_t be = ggml_backend_cpu_init();
    if (!be) fail(JEPA_ERR_BACKEND, "cannot start the CPU backend");
    return be;
}

namespace {

struct GgufDeleter {
    void operator()(gguf_context * g) const { gguf_free(g); }
};

// One pre-norm block `p` (e.g. "enc.blk.3."): fused qkv when the file has attn_qkv, else q / k / v.
VitBlockW declare_block(TensorTable & t, const std::string & p, int64_t D, int64_t F, bool fused, bool layer_scale,
                        int64_t inner = 0) {
    VitBlockW b;
    const int64_t I = inner > 0 ? inner : D;  // attention width (LeWM: n_head x head_dim != D)
    b.ln1 = {t.require(p + "ln1.weight", {D}), t.require(p + "ln1.bias", {D})};
    b.ln2 = {t.require(p + "ln2.weight", {D}), t.require(p + "ln2.bias", {D})};
    if (fused) {
        b.qkv = t.linear(p + "attn_qkv", D, 3 * I);
    } else {
        b.q = t.linear(p + "attn_q", D, I);
        b.k = t.linear(p + "attn_k", D, I);
        b.v = t.linear(p + "attn_v", D, I);
    }
    b.attn_out = t.linear(p + "attn_out", I, D);
    b.ffn_up = t.linear(p + "ffn_up", D, F);
    b.ffn_down = t.linear(p + "ffn_down", F, D);
    if (layer_scale) {
        b.ls1 = t.require(p + "ls1.weight", {D});
        b.ls2 = t.require(p + "ls2.weight", {D});
    }
    return b;
}

void declare_encoder(TensorTable & t, const EncoderHparams & e, EncoderW & w) {
    const int64_t D = e.embed_dim, K = e.patch_dim();
    w.patch_embed.w = t.require("enc.patch_embed.weight", {K, D}, TensorKind::Embedding);
    w.patch_embed.b = t.optional("enc.patch_embed.bias", {D});
    if (e.cls_token) w.cls = t.require("enc.cls_token", {D});
    if (e.n_registers > 0) w.reg = t.require("enc.reg_tokens", {D, e.n_registers});
    if (e.pos_type != JEPA_POS_NONE && e.pos_type != JEPA_POS_ROPE3D) {
        // Rows: the patches of the native grid, optionally preceded by the CLS slot or all prefix tokens.
        const int64_t n_patch = int64_t(e.n_frames / e.tubelet_size) * e.grid() * e.grid();
        std::vector<int64_t> allowed = {n_patch};
        if (e.cls_token) allowed.push_back(n_patch + 1);
        if (e.n_prefix() > 1) allowed.push_back(n_patch + e.n_prefix());
        w.pos = t.require_rows("enc.pos_embed", D, allowed);
    }
    w.blocks.resize(size_t(e.n_layer));
    for (int i = 0; i < e.n_layer; ++i) {
        w.blocks[size_t(i)] = declare_block(t, "enc.blk." + std::to_string(i) + ".", D, e.ffn_dim, e.qkv_fused,
                                            e.layer_scale);
    }
    if (e.hier_layers.empty()) {
        w.norm = {t.require("enc.norm.weight", {D}), t.require("enc.norm.bias", {D})};
    } else {
        // V-JEPA 2.1: one norm per level instead of a final one; the last level is the output.
        for (size_t k = 0; k < e.hier_layers.size(); ++k) {
            const std::string p = "enc.hier_norm." + std::to_string(k) + ".";
            w.hier_norms.push_back({t.require(p + "weight", {D}), t.require(p + "bias", {D})});
        }
    }
    if (e.image_patch_embed) {
        const int64_t K1 = int64_t(e.in_chans) * e.patch_size * e.patch_size;
        w.patch_embed_img.w = t.require("enc.patch_embed_img.weight", {K1, D}, TensorKind::Embedding);
        w.patch_embed_img.b = t.optional("enc.patch_embed_img.bias", {D});
    }
    if (e.modality_embed) {
        w.mod_video = t.require("enc.mod_embed_video", {D});
        if (e.image_patch_embed) w.mod_img = t.require("enc.mod_embed_img", {D});
    }
    if (e.has_proj) {
        const int64_t hidden = t.ne("enc.proj.0.weight", 1);
        const int64_t out = t.ne("enc.proj.2.weight", 1);
        if (hidden < 1 || out < 1) fail(JEPA_ERR_BAD_FILE, "missing tensor enc.proj.0.weight or enc.proj.2.weight");
        w.proj0 = t.linear("enc.proj.0", D, hidden);
        w.proj2 = t.linear("enc.proj.2", hidden, out);
    }
}

void declare_head(TensorTable & t, HeadHparams & h, int64_t D, HeadW & w) {
    // The MLP width is not in the metadata: HF's pooler uses 4 x D whatever the encoder's ratio.
    const int64_t F = t.ne("head.xattn.ffn_up.weight", 1);
    if (F < 1) fail(JEPA_ERR_BAD_FILE, "missing tensor head.xattn.ffn_up.weight");
    h.ffn_dim = int(F);
    w.query = t.require("head.query", {D, 1});  // one learned query (HF and Meta's probes)
    w.blocks.resize(size_t(h.n_pool_layers));
    for (int i = 0; i < h.n_pool_layers; ++i) {
        const std::string p = "head.blk." + std::to_string(i) + ".";
        w.blocks[size_t(i)] = declare_block(t, p, D, F, t.ne(p + "attn_qkv.weight", 0) > 0, false);
    }
    w.ln_kv = {t.require("head.xattn.ln_kv.weight", {D}), t.require("head.xattn.ln_kv.bias", {D})};
    w.q = t.linear("head.xattn.q", D, D);
    w.k = t.linear("head.xattn.k", D, D);
    w.v = t.linear("head.xattn.v", D, D);
    w.ln2 = {t.require("head.xattn.ln2.weight", {D}), t.require("head.xattn.ln2.bias", {D})};
    w.ffn_up = t.linear("head.xattn.ffn_up", D, F);
    w.ffn_down = t.linear("head.xattn.ffn_down", F, D);
    w.cls = t.linear("head.cls", D, h.n_classes);
}

// The ViT blocks, final norm and projection back to the encoder width that the masked and the AC
// predictor share.
void declare_pred_trunk(TensorTable & t, const PredHparams & h, PredW & w) {
    const int64_t D = h.embed_dim;
    w.blocks.resize(size_t(h.n_layer));
    for (int i = 0; i < h.n_layer; ++i) {
        const std::string p = "pred.blk." + std::to_string(i) + ".";
        w.blocks[size_t(i)] = declare_block(t, p, D, h.ffn_dim, t.ne(p + "attn_qkv.weight", 0) > 0, false);
    }
    w.norm = {t.require("pred.norm.weight", {D}), t.require("pred.norm.bias", {D})};
    w.proj = t.linear("pred.proj", D, h.out_dim);
}

void declare_pred_masked(TensorTable & t, const PredHparams & h, int64_t D_enc, PredW & w) {
    if (h.in_levels > 1) {  // V-JEPA 2.1 g/G: Linear(L*D, D) -> GELU -> Linear(D, Dp)
        w.embed = t.linear("pred.embed.0", D_enc * h.in_levels, D_enc);
        w.embed2 = t.linear("pred.embed.2", D_enc, h.embed_dim);
    } else {
        w.embed = t.linear("pred.embed", D_enc, h.embed_dim);
    }
    w.mask_tokens = t.require("pred.mask_tokens", {h.embed_dim, h.n_mask_tokens});
    if (h.modality_embed) {
        w.mod_video = t.require("pred.mod_embed_video", {h.embed_dim});
        w.mod_img = t.require("pred.mod_embed_img", {h.embed_dim});
    }
    declare_pred_trunk(t, h, w);
    if (h.proj_context) w.proj_context = t.linear("pred.proj_context", h.embed_dim, h.out_dim);
}

void declare_pred_ac(TensorTable & t, const PredHparams & h, int64_t D_enc, PredW & w) {
    w.embed = t.linear("pred.embed", D_enc, h.embed_dim);
    w.action_embed = t.linear("pred.action_embed", h.action_dim, h.embed_dim);
    w.state_embed = t.linear("pred.state_embed", h.state_dim, h.embed_dim);
    declare_pred_trunk(t, h, w);
}

void declare_pred_lewm(TensorTable & t, const PredHparams & h, PredW & w) {
    const int64_t D = h.embed_dim;
    w.pos_embed = t.require("pred.pos_embed", {D, h.n_frames});
    const int64_t M = t.ne("pred.action_embed.0.weight", 1);
    const int64_t Hq = t.ne("pred.proj.0.weight", 1);
    if (M < 1) fail(JEPA_ERR_BAD_FILE, "missing tensor pred.action_embed.0.weight");
    if (Hq < 1) fail(JEPA_ERR_BAD_FILE, "missing tensor pred.proj.0.weight");
    w.action_embed0 = t.linear("pred.action_embed.0", h.action_dim, M);
    w.action_embed2 = t.linear("pred.action_embed.2", M, D);
    w.blocks.resize(size_t(h.n_layer));
    for (int i = 0; i < h.n_layer; ++i) {
        const std::string p = "pred.blk." + std::to_string(i) + ".";
        VitBlockW b = declare_block(t, p, D, h.ffn_dim, true, false, h.inner_dim());
        b.adaln = t.linear(p + "adaln", D, 6 * D);
        w.blocks[size_t(i)] = b;
    }
    w.norm = {t.require("pred.norm.weight", {D}), t.require("pred.norm.bias", {D})};
    w.proj = t.linear("pred.proj.0", D, Hq);
    w.proj2 = t.linear("pred.proj.2", Hq, D);
}

void declare_pred(TensorTable & t, const PredHparams & h, int64_t D_enc, PredW & w) {
    if (h.kind == JEPA_PRED_MASKED) declare_pred_masked(t, h, D_enc, w);
    else if (h.kind == JEPA_PRED_AC) declare_pred_ac(t, h, D_enc, w);
    else declare_pred_lewm(t, h, w);
}

// A text encoder (family bert): the table sizes are the tensors', checked against the metadata's
// use of them (the position offset and the truncation length must fit the position table).
void declare_text(TensorTable & t, ModelHparams & h, TextW & w) {
    const int64_t D = h.enc.embed_dim;
    TextHparams & x = h.text;
    const int64_t V = t.ne("text.tok_embed", 1), P = t.ne("text.pos_embed", 1), T = t.ne("text.type_embed", 1);
    if (V < 1 || P < 1 || T < 1) fail(JEPA_ERR_BAD_FILE, "missing tensor text.tok_embed, text.pos_embed or text.type_embed");
    if (V > (int64_t(1) << 24) || P > (1 << 20) || T > 1024) {
        fail(JEPA_ERR_BAD_FILE, "text embedding tables too large (%lld tokens, %lld positions, %lld types)",
             (long long) V, (long long) P, (long long) T);
    }
    w.tok = t.require("text.tok_embed", {D, V});
    w.pos = t.require("text.pos_embed", {D, P});
    w.type = t.require("text.type_embed", {D, T});
    x.vocab_size = int(V);
    x.n_positions = int(P);
    x.n_token_types = int(T);
    if (x.max_tokens() < 1) {
        fail(JEPA_ERR_BAD_FILE, "jepa.text.pos_offset %d leaves no row of text.pos_embed (%lld rows)", x.pos_offset,
             (long long) P);
    }
    if (x.max_seq_len > x.max_tokens()) {
        fail(JEPA_ERR_BAD_FILE, "jepa.text.max_seq_len %d is longer than the position table takes (%d rows from offset %d)",
             x.max_seq_len, x.n_positions, x.pos_offset);
    }
    w.embed_norm = {t.require("text.embed_norm.weight", {D}), t.require("text.embed_norm.bias", {D})};
    w.blocks.resize(size_t(h.enc.n_layer));
    for (int i = 0; i < h.enc.n_layer; ++i) {
        w.blocks[size_t(i)] = declare_block(t, "text.blk." + std::to_string(i) + ".", D, h.enc.ffn_dim, false, false);
    }
}

// Every tensor's bytes lie inside the file: checked before anything is allocated, so a header
// that promises gigabytes the file does not hold costs nothing.
void check_data_extents(const gguf_context * g, ggml_context * ctx_w, uint64_t file_size) {
    const uint64_t data_offset = gguf_get_data_offset(g);
    for (ggml_tensor * t = ggml_get_first_tensor(ctx_w); t; t = ggml_get_next_tensor(ctx_w, t)) {
        const uint64_t off = data_offset + gguf_get_tensor_offset(g, gguf_find_tensor(g, ggml_get_name(t)));
        const uint64_t size = ggml_nbytes(t);
        if (off > file_size || size > file_size - off) {
            fail(JEPA_ERR_BAD_FILE, "%s: tensor data [%llu, +%llu) lies past the end of the file (%llu bytes): truncated?",
                 ggml_get_name(t), (unsigned long long) off, (unsigned long long) size, (unsigned long long) file_size);
        }
    }
}

// Repack the weight matrices the engine's own CPU kernel takes (gemm.h); the rest stay ggml's.
int pack_linears(Model & m) {
    int n = 0;
    m.for_each_linear([&](LinearW & l) {
        if (l.w && gemm::can_pack(l.w)) {
            if (l.w->type == GGML_TYPE_BF16 && cpu::selection().bf16 == cpu::Bf16::Avx512Bf16) m.half_attention = true;
            gemm::pack_in_place(l.w);
            l.packed = true;
            ++n;
        }
    });
    return n;
}

// i8c matrices run on the engine's own CPU product only (ggml has none for int8 rows with scales):
// anywhere else, the file is refused at load rather than a graph failing at the first request.
void refuse_unpacked_i8(Model & m) {
    m.for_each_linear([&](LinearW & l) {
        if (!l.w || l.w->type != GGML_TYPE_I8 || l.packed) return;
        if (m.device != JEPA_DEVICE_CPU) {
            fail(JEPA_ERR_UNSUPPORTED, "%s is i8c, which runs on the CPU only: load this model on the CPU, or "
                 "quantize it to q8_0 for this device", ggml_get_name(l.w));
        }
        fail(JEPA_ERR_UNSUPPORTED, "%s is i8c with rows of %lld: the i8c product takes rows of a multiple of %lld up to %lld",
             ggml_get_name(l.w), (long long) l.w->ne[0], (long long) gemm::I8_K_STEP,
             (long long) gemm::I8_K_MAX);
    });
}

}  // namespace

Model * load_model(const char * path, const jepa_model_params & params) {
    install_ggml_logger();
    if (!path) fail(JEPA_ERR_INVALID_ARG, "model path is NULL");
    struct stat st {};
    if (stat(path, &st) != 0) fail(JEPA_ERR_BAD_FILE, "cannot open %s: %s", path, std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(JEPA_ERR_BAD_FILE, "%s is not a regular file", path);
    if (params.device == JEPA_DEVICE_CUDA) {
#ifndef JEPA_USE_CUDA
        fail(JEPA_ERR_UNSUPPORTED, "this build has no CUDA backend (rebuild with -DJEPA_CUDA=ON)");
#else
        if (params.device_index < 0 || params.device_index >= ggml_backend_cuda_get_device_count()) {
            fail(JEPA_ERR_INVALID_ARG, "CUDA device %d does not exist (%d found)", params.device_index,
                 ggml_backend_cuda_get_device_count());
        }
#endif
    } else if (params.device != JEPA_DEVICE_CPU) {
        fail(JEPA_ERR_INVALID_ARG, "unknown device %d", int(params.device));
    }

    auto model = std::make_unique<Model>();
    model->device = params.device;
    model->device_index = params.device_index;

    ggml_context * meta = nullptr;
    gguf_init_params gp{/*no_alloc =*/ true, /*ctx =*/ &meta};
    std::unique_ptr<gguf_context, GgufDeleter> g(gguf_init_from_file(path, gp));
    if (!g) {
        const std::string why = take_ggml_log();
        fail(JEPA_ERR_BAD_FILE, "%s is not a valid GGUF file%s%s", path, why.empty() ? "" : ": ", why.c_str());
    }
    model->ctx_w = meta;  // owned by the model from here on
    check_strings(g.get());
    model->hp = parse_hparams(g.get());

    TensorTable table(g.get(), meta);
    if (model->hp.is_text()) declare_text(table, model->hp, model->text);
    else declare_encoder(table, model->hp.enc, model->enc);
    if (model->hp.head.kind != JEPA_HEAD_NONE) declare_head(table, model->hp.head, model->hp.enc.embed_dim, model->head);
    if (model->hp.pred.kind != JEPA_PRED_NONE) declare_pred(table, model->hp.pred, model->hp.enc.embed_dim, model->pred);
    if (model->hp.pred.kind == JEPA_PRED_LEWM && model->enc.proj2.w->ne[1] != model->hp.pred.embed_dim) {
        fail(JEPA_ERR_BAD_FILE, "enc.proj.2.weight gives %lld-wide embeddings, the lewm predictor reads %d",
             (long long) model->enc.proj2.w->ne[1], model->hp.pred.embed_dim);
    }
    table.check_all_used();
    model->n_params = table.n_elements();
    check_data_extents(g.get(), meta, uint64_t(st.st_size));

    const bool cpu = model->device == JEPA_DEVICE_CPU;
    std::set<const ggml_tensor *> own;  // what pack_linears will repack: memory of its own
    if (cpu) model->for_each_linear([&](LinearW & l) { if (l.w && gemm::packable(l.w)) own.insert(l.w); });
    place_weights(*model, path, g.get(), uint64_t(st.st_size), params.use_mmap != 0, own);
    if (cpu) model->n_packed = pack_linears(*model);
    refuse_unpacked_i8(*model);
    model->matmul_name = std::string("jepa: ") + cpu::describe();

    ggml_backend_t be = model->new_backend();
    model->backend_name = ggml_backend_name(be);
    ggml_backend_free(be);
    return model.release();
}

}  // namespace jepa
