#include "vit.h"

#include "blocks.h"
#include "error.h"
#include "rope.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace jepa {

PatchGrid encoder_grid(const Model & m, int C, int T, int H, int W) {
    const EncoderHparams & e = m.hp.enc;
    if (m.hp.is_text()) {
        fail_arg(JEPA_ERR_UNSUPPORTED, "pixels", "this is a text model (jepa.modality text): it encodes token ids, not pixels");
    }
    // The channel count first, so a channels-last array is named for what it is.
    if (C != e.in_chans) {
        fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "expected %d channels, got %d (pixels are [B, C, T, H, W], channels first)",
                 e.in_chans, C);
    }
    if (T < 1 || H < 1 || W < 1) fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "bad input size T=%d H=%d W=%d", T, H, W);
    if (e.tubelet_size == 1 && e.n_frames == 1 && T != 1) {
        fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "this is an image model: expected T = 1 frame, got %d", T);
    }
    if (H % e.patch_size != 0 || W % e.patch_size != 0) {
        fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "input %dx%d is not a multiple of the patch size %d", H, W,
                 e.patch_size);
    }
    const int tubelet = e.tubelet_for(T);
    PatchGrid g{(T + tubelet - 1) / tubelet, H / e.patch_size, W / e.patch_size};
    if (e.rope_ref_grid > 0 && (g.h < 2 || g.w < 2)) {
        // Upstream's interpolation divides by (side - 1): one patch row or column has no position.
        fail_arg(JEPA_ERR_INVALID_ARG, "pixels", "input %dx%d is one patch high or wide; this model needs at least 2x2 patches",
                 H, W);
    }
    if (m.enc.pos && ggml_nelements(m.enc.pos) > 0) {
        // A stored position table only covers the native grid.
        const int native = e.grid();
        const int native_t = e.n_frames / e.tubelet_size;
        if (g.h != native || g.w != native || g.t != native_t) {
            fail_arg(JEPA_ERR_UNSUPPORTED, "pixels",
                 "input %dx%dx%d (grid %dx%dx%d) differs from the model's position table (grid %dx%dx%d, %dx%d px); "
                 "resize the input to the model size",
                 T, H, W, g.t, g.h, g.w, native_t, native, native, e.img_size, e.img_size);
        }
    }
    return g;
}

int64_t encoder_n_tokens(const Model & m, int C, int T, int H, int W) {
    return encoder_grid(m, C, T, H, W).n() + m.hp.enc.n_prefix();
}

void patchify(const float * pixels, const InputShape & s, int tubelet, int patch, float * out) {
    const int gt = (s.T + tubelet - 1) / tubelet, gh = s.H / patch, gw = s.W / patch;
    const size_t plane = size_t(s.H) * s.W;
    float * dst = out;
    for (int b = 0; b < s.B; ++b) {
        const float * item = pixels + size_t(b) * s.C * s.T * plane;
        for (int it = 0; it < gt; ++it) {
            for (int iy = 0; iy < gh; ++iy) {
                for (int ix = 0; ix < gw; ++ix) {
                    for (int c = 0; c < s.C; ++c) {
                        for (int t = 0; t < tubelet; ++t) {
                            const int ft = std::min(it * tubelet + t, s.T - 1);
                            const float * frame = item + (size_t(c) * s.T + size_t(ft)) * plane;
                            for (int y = 0; y < patch; ++y) {
                                const float * row = frame + size_t(iy * patch + y) * s.W + size_t(ix) * patch;
                                std::memcpy(dst, row, sizeof(float) * size_t(patch));
                                dst += patch;
                            }
                        }
                    }
                }
            }
        }
    }
}

EncoderGraph build_encoder_graph(ggml_context * ctx, const Model & m, const InputShape & s, bool flash) {
    const EncoderHparams & e = m.hp.enc;
    const EncoderW & w = m.enc;
    const PatchGrid g = encoder_grid(m, s.C, s.T, s.H, s.W);
    const int64_t D = e.embed_dim, Np = g.n(), B = s.B;
    const int64_t n_prefix = e.n_prefix();

    EncoderGraph eg;
    eg.graph = ggml_new_graph_custom(ctx, 16384, false);
    const bool image = e.image_path(s.T);
    eg.patches = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, e.patch_dim_for(s.T), Np, B);
    ggml_set_name(eg.patches, "patches");
    ggml_set_input(eg.patches);

    ggml_tensor * x = build_linear(ctx, eg.patches, image ? w.patch_embed_img : w.patch_embed);  // [D, Np, B]
    ggml_set_name(x, "patch_embed");
    if (e.modality_embed) x = ggml_add(ctx, x, image ? w.mod_img : w.mod_video);  // V-JEPA 2.1
    if (s.n_keep > 0) {
        // The masked encoder: only the kept tokens go on, their positions from their ids (a RoPE
        // encoder without prefix tokens: Context::encode checks).
        eg.keep = ggml_new_tensor_2d(ctx, GGML_TYPE_I32, s.n_keep, B);
        ggml_set_name(eg.keep, "keep_ids");
        ggml_set_input(eg.keep);
        x = ggml_get_rows(ctx, x, eg.keep);  // [D, n_keep, B]
    }

    const int64_t n_pos = w.pos ? w.pos->ne[1] : 0;
    const size_t row = w.pos ? w.pos->nb[1] : 0;
    ggml_tensor * cls = w.cls ? ggml_reshape_3d(ctx, w.cls, D, 1, 1) : nullptr;
    if (n_pos == Np) {
        x = ggml_add(ctx, x, w.pos);
    } else if (n_pos == Np + 1 && cls) {
        // The CLS slot has its own row; registers (if any) carry no position.
        x = ggml_add(ctx, x, ggml_view_2d(ctx, w.pos, D, Np, row, row));
        cls = ggml_add(ctx, cls, ggml_view_3d(ctx, w.pos, D, 1, 1, row, row, 0));
    }

    if (n_prefix > 0) {
        ggml_tensor * prefix = nullptr;
        if (cls) prefix = ggml_repeat_4d(ctx, cls, D, 1, B, 1);
        if (w.reg) {
            ggml_tensor * reg = ggml_repeat_4d(ctx, ggml_reshape_3d(ctx, w.reg, D, e.n_registers, 1), D, e.n_registers, B, 1);
            prefix = prefix ? ggml_concat(ctx, prefix, reg, 1) : reg;
        }
        x = ggml_concat(ctx, prefix, x, 1);  // [D, n_prefix + Np, B]
    }
    if (n_pos == Np + n_prefix && n_prefix > 1) {
        x = ggml_add(ctx, x, w.pos);
    }
    ggml_set_name(x, "embed");

    AttnOptions attn = attn_options(m, e.n_head, e.head_dim(), flash);
    if (e.pos_type == JEPA_POS_ROPE3D) {
        // Host-built tables (Context::set_rope_inputs), broadcast over heads and items.
        const int64_t n_tok = s.n_keep > 0 ? s.n_keep : Np + n_prefix;
        const int64_t per_item = s.n_keep > 0 ? B : 1;  // a masked call's positions differ per item
        eg.rope_cos = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, e.head_dim(), 1, n_tok, per_item);
        eg.rope_sin = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, e.head_dim(), 1, n_tok, per_item);
        ggml_set_name(eg.rope_cos, "rope_cos");
        ggml_set_name(eg.rope_sin, "rope_sin");
        ggml_set_input(eg.rope_cos);
        ggml_set_input(eg.rope_sin);
        attn.rope_cos = eg.rope_cos;
        attn.rope_sin = eg.rope_sin;
    }
    if (e.block_causal) {
        // Computed from the frame layout inside the attention (no N x N mask): prefix rows read every
        // token, a frame's patch rows the patches of frames up to their own.
        eg.ranges = std::make_shared<gemm::KeyRanges>(gemm::KeyRanges::block_causal(n_prefix, g.t, int64_t(g.h) * g.w));
        eg.ranges->scale = attn.scale;
        eg.ranges->half = attn.half;
        attn.ranges = eg.ranges.get();
    }
    const BlockHparams bh = m.hp.enc_block();
    size_t level = 0;  // V-JEPA 2.1: the next of hier_layers
    ggml_tensor * out = nullptr;
    for (int il = 0; il < e.n_layer; ++il) {
        x = build_vit_block(ctx, x, w.blocks[size_t(il)], bh, attn, il);
        if (level < e.hier_layers.size() && e.hier_layers[level] == il) {
            // The last level is the encoder's output (upstream's inference); the others are computed
            // only when asked for (return_hierarchical: the levels side by side, level 0 first).
            const bool last = level + 1 == e.hier_layers.size();
            if (last || s.levels) {
                ggml_tensor * y = build_norm(ctx, x, w.hier_norms[level], e.ln_eps);
                out = out ? ggml_concat(ctx, out, y, 0) : y;
            }
            ++level;
        }
    }
    x = out ? out : build_norm(ctx, x, w.norm, e.ln_eps);
    ggml_set_name(x, "enc.out");
    ggml_set_output(x);
    eg.out = x;
    ggml_build_forward_expand(eg.graph, x);
    return eg;
}

}  // namespace jepa
