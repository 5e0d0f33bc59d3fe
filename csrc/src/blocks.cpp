#include "blocks.h"

#include "cpu/gemm.h"
#include "rope.h"

#include <cmath>

namespace jepa {

ggml_tensor * graph_output(ggml_cgraph * graph, ggml_tensor * t, const char * name) {
    ggml_set_name(t, name);
    ggml_set_output(t);
    ggml_build_forward_expand(graph, t);
    return t;
}

AttnOptions attn_options(const Model & m, int n_head, int head_dim, bool flash) {
    AttnOptions a;
    a.own_kernels = m.n_packed > 0 && flash;
    a.half = m.half_attention;
    a.n_head = n_head;
    a.scale = 1.0f / std::sqrt(float(head_dim));
    a.flash = flash;
    return a;
}

namespace {
// Weights in host memory mean the graph runs on the CPU backend.
bool on_cpu(const ggml_tensor * t) { return t && t->buffer && ggml_backend_buffer_is_host(t->buffer); }

// The product reads bf16 activations (the engine's bf16 kernel): its producer may write them so.
bool reads_bf16(const LinearW & l) { return l.packed && gemm::takes_bf16(l.w); }

// The norm before a block's attention feeds q, k and v (fused or split).
bool qkv_reads_bf16(const VitBlockW & b) {
    return b.qkv.w ? reads_bf16(b.qkv) : reads_bf16(b.q) && reads_bf16(b.k) && reads_bf16(b.v);
}
}  // namespace

ggml_tensor * build_norm(ggml_context * ctx, ggml_tensor * x, const NormW & n, float eps, bool bf16_out) {
    if (on_cpu(n.w) && gemm::layer_norm_supported(x, n.w, n.b)) return gemm::layer_norm(ctx, x, n.w, n.b, eps, bf16_out);
    x = ggml_norm(ctx, x, eps);
    if (n.w) x = ggml_mul(ctx, x, n.w);
    if (n.b) x = ggml_add(ctx, x, n.b);
    return x;
}

ggml_tensor * build_linear(ggml_context * ctx, ggml_tensor * x, const LinearW & l, ggml_tensor * residual,
                           ggml_tensor * gate) {
    if (l.packed) return gemm::linear(ctx, x, l.w, l.b, gemm::Epilogue::None, residual, false, gate, l.s);
    x = ggml_mul_mat(ctx, l.w, x);
    if (l.b) x = ggml_add(ctx, x, l.b);
    if (gate) x = ggml_mul(ctx, x, gate);
    return residual ? ggml_add(ctx, residual, x) : x;
}

ggml_tensor * build_plain_norm(ggml_context * ctx, ggml_tensor * x, float eps, bool own) {
    if (own && gemm::layer_norm_supported(x, nullptr, nullptr)) return gemm::layer_norm(ctx, x, nullptr, nullptr, eps);
    return ggml_norm(ctx, x, eps);
}

ggml_tensor * build_act(ggml_context * ctx, ggml_tensor * x, Act act, bool own) {
    if (own && act != Act::GeluTanh && gemm::unary_supported(x)) {
        return gemm::unary(ctx, x, act == Act::Silu ? gemm::Unary::Silu : gemm::Unary::GeluErf);
    }
    switch (act) {
        case Act::GeluErf:
            // Exact erf GELU: ggml_gelu is the tanh form through an f16 table (off by ~4e-3).
            return ggml_gelu_erf(ctx, x);
        case Act::GeluTanh: {
            // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in f32 with no table.
            const float c = std::sqrt(2.0f / float(M_PI));
            ggml_tensor * x3 = ggml_mul(ctx, ggml_sqr(ctx, x), x);
            ggml_tensor * inner = ggml_scale(ctx, ggml_add(ctx, x, ggml_scale(ctx, x3, 0.044715f)), c);
            ggml_tensor * t = ggml_scale_bias(ctx, ggml_tanh(ctx, inner), 0.5f, 0.5f);
            return ggml_mul(ctx, x, t);
        }
        case Act::Silu:
            return ggml_silu(ctx, x);
    }
    return x;
}

ggml_tensor * build_mlp(ggml_context * ctx, ggml_tensor * x, const LinearW & up, const LinearW & down, Act act,
                        ggml_tensor * residual, ggml_tensor * gate) {
    if (up.packed && act == Act::GeluErf) {
        // Bias and GELU in the product's own pass (its result in bf16 when down reads bf16).
        ggml_tensor * h = gemm::linear(ctx, x, up.w, up.b, gemm::Epilogue::GeluErf, nullptr, reads_bf16(down), nullptr,
                                       up.s);
        return build_linear(ctx, h, down, residual, gate);
    }
    return build_linear(ctx, build_act(ctx, build_linear(ctx, x, up), act, up.packed), down, residual, gate);
}

Qkv build_qkv(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, int n_head) {
    const int64_t N = x->ne[1], B = x->ne[2];
    // The attention's inner width: D for ViT blocks, n_head x head_dim for LeWM's.
    const int64_t D = b.qkv.w ? b.qkv.w->ne[1] / 3 : b.q.w->ne[1];
    const int64_t hd = D / n_head;
    if (b.qkv.w) {
        // One fused projection; q, k, v are strided views into its rows.
        ggml_tensor * qkv = build_linear(ctx, x, b.qkv);
        const size_t es = ggml_element_size(qkv);
        auto view = [&](int i) {
            return ggml_view_4d(ctx, qkv, hd, n_head, N, B, hd * es, qkv->nb[1], qkv->nb[2], size_t(i) * D * es);
        };
        return {view(0), view(1), view(2)};
    }
    auto split = [&](const LinearW & l) { return ggml_reshape_4d(ctx, build_linear(ctx, x, l), hd, n_head, N, B); };
    return {split(b.q), split(b.k), split(b.v)};
}

namespace {
// Key-ranged attention on ggml's ops (its CPU path and GPUs): each query group against its keys'
// rows as views, the groups' results concatenated along the tokens; no mask is built.
ggml_tensor * ranged_attn_ggml(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttnOptions & o) {
    const gemm::KeyRanges & r = *o.ranges;
    AttnOptions plain = o;
    plain.ranges = nullptr;
    plain.own_kernels = false;
    plain.mask = nullptr;
    auto rows = [&](ggml_tensor * t, int64_t t0, int64_t n) {
        return ggml_view_4d(ctx, t, t->ne[0], t->ne[1], n, t->ne[3], t->nb[1], t->nb[2], t->nb[3], size_t(t0) * t->nb[2]);
    };
    ggml_tensor * out = nullptr;
    for (size_t g = 0; g + 1 < r.q_start.size(); ++g) {
        const int64_t q0 = r.q_start[g], lo = r.k_lo[g], nk = r.k_hi[g] - lo;
        ggml_tensor * a = build_attn(ctx, rows(q, q0, r.q_start[g + 1] - q0), rows(k, lo, nk), rows(v, lo, nk), plain);
        out = out ? ggml_concat(ctx, out, a, 1) : a;  // [hd * H, rows, B]
    }
    return out;
}
}  // namespace

ggml_tensor * build_attn(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const AttnOptions & o) {
    const int64_t hd = q->ne[0], H = q->ne[1], Nq = q->ne[2], B = q->ne[3];
    if (o.ranges) {
        if (o.own_kernels && gemm::ranged_attention_supported(q, k, v, *o.ranges)) {
            return gemm::ranged_attention(ctx, q, k, v, o.ranges, o.bf16_out);
        }
        return ranged_attn_ggml(ctx, q, k, v, o);
    }
    if (o.own_kernels && gemm::attention_supported(q, k, v, o.mask)) {
        return gemm::attention(ctx, q, k, v, o.mask, o.scale, o.half, o.bf16_out, o.one_kernel);
    }
    // [hd, H, N, B] -> [hd, N, H, B]
    q = ggml_permute(ctx, q, 0, 2, 1, 3);
    k = ggml_permute(ctx, k, 0, 2, 1, 3);
    if (o.flash) {
        v = ggml_permute(ctx, v, 0, 2, 1, 3);
        ggml_tensor * out = ggml_flash_attn_ext(ctx, q, k, v, o.mask, o.scale, 0.0f, 0.0f);
        return ggml_reshape_3d(ctx, out, hd * H, Nq, B);  // result is [hd, H, Nq, B]
    }
    ggml_tensor * kq = ggml_mul_mat(ctx, k, q);                      // [Nk, Nq, H, B]
    kq = ggml_soft_max_ext(ctx, kq, o.mask, o.scale, 0.0f);
    ggml_tensor * vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 2, 0, 3));  // [Nk, hd, H, B]
    ggml_tensor * kqv = ggml_mul_mat(ctx, vt, kq);                   // [hd, Nq, H, B]
    kqv = ggml_cont(ctx, ggml_permute(ctx, kqv, 0, 2, 1, 3));        // [hd, H, Nq, B]
    return ggml_reshape_3d(ctx, kqv, hd * H, Nq, B);
}

ggml_tensor * build_varlen_attn(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v,
                                const gemm::Varlen & varlen, bool own) {
    if (own && gemm::varlen_attention_supported(q, k, v)) return gemm::varlen_attention(ctx, q, k, v, &varlen);
    AttnOptions o;
    o.n_head = int(q->ne[1]);
    o.scale = varlen.scale;
    ggml_tensor * out = nullptr;
    for (size_t s = 0; s + 1 < varlen.offsets.size(); ++s) {
        const int64_t t0 = varlen.offsets[s], n = varlen.offsets[s + 1] - t0;
        auto rows = [&](ggml_tensor * t) {
            return ggml_view_4d(ctx, t, t->ne[0], t->ne[1], n, 1, t->nb[1], t->nb[2], t->nb[3], size_t(t0) * t->nb[2]);
        };
        ggml_tensor * a = build_attn(ctx, rows(q), rows(k), rows(v), o);  // [D, n, 1]
        out = out ? ggml_concat(ctx, out, a, 1) : a;
    }
    return out;
}

AdalnNorms adaln_norms(const ggml_tensor * x, const ggml_tensor * shift1, const ggml_tensor * scale1, const NormW & ln1,
                       const ggml_tensor * shift2, const ggml_tensor * scale2, const NormW & ln2, bool own) {
    AdalnNorms a;
    a.own = own;
    a.fused = own && gemm::adaln_norm_supported(x, shift1, scale1, ln1.w, ln1.b) &&
              gemm::adaln_norm_supported(x, shift2, scale2, ln2.w, ln2.b);
    return a;
}

ggml_tensor * build_adaln_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale,
                               const NormW & ln, float eps_mod, float eps, const AdalnNorms & how) {
    if (how.fused) return gemm::adaln_norm(ctx, x, shift, scale, ln.w, ln.b, eps_mod, eps);
    // LN(x) * (1 + scale) + shift, the LN on the engine's kernel where own (ggml_norm's variance sum
    // follows the SIMD width ggml was compiled for).
    ggml_tensor * n = build_plain_norm(ctx, x, eps_mod, how.own);
    ggml_tensor * m = ggml_add(ctx, ggml_mul(ctx, n, ggml_scale_bias(ctx, scale, 1.0f, 1.0f)), shift);
    return build_norm(ctx, m, ln, eps);
}

Qkv build_block_qkv(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, const BlockHparams & hp,
                    const AttnOptions & attn) {
    ggml_tensor * h = build_norm(ctx, x, b.ln1, hp.ln_eps, qkv_reads_bf16(b));
    Qkv qkv = build_qkv(ctx, h, b, hp.n_head);
    if (attn.rope_cos) {
        qkv.q = build_rope3d(ctx, qkv.q, attn.rope_cos, attn.rope_sin);
        qkv.k = build_rope3d(ctx, qkv.k, attn.rope_cos, attn.rope_sin);
    }
    return qkv;
}

ggml_tensor * build_vit_block_rest(ggml_context * ctx, ggml_tensor * x, const Qkv & qkv, const VitBlockW & b,
                                   const BlockHparams & hp, const AttnOptions & attn, int layer, const char * prefix) {
    AttnOptions ao = attn;
    ao.bf16_out = reads_bf16(b.attn_out);
    ggml_tensor * h = build_attn(ctx, qkv.q, qkv.k, qkv.v, ao);
    if (b.ls1) {
        x = ggml_add(ctx, x, ggml_mul(ctx, build_linear(ctx, h, b.attn_out), b.ls1));
    } else {
        x = build_linear(ctx, h, b.attn_out, x);  // the residual add in the product's pass
    }
    ggml_format_name(x, "%s.%d.attn_res", prefix, layer);

    h = build_norm(ctx, x, b.ln2, hp.ln_eps, reads_bf16(b.ffn_up));
    if (b.ls2) {
        x = ggml_add(ctx, x, ggml_mul(ctx, build_mlp(ctx, h, b.ffn_up, b.ffn_down, hp.act), b.ls2));
    } else {
        x = build_mlp(ctx, h, b.ffn_up, b.ffn_down, hp.act, x);
    }
    ggml_format_name(x, "%s.%d.out", prefix, layer);
    return x;
}

ggml_tensor * build_vit_block(ggml_context * ctx, ggml_tensor * x, const VitBlockW & b, const BlockHparams & hp,
                              const AttnOptions & attn, int layer, const char * prefix) {
    return build_vit_block_rest(ctx, x, build_block_qkv(ctx, x, b, hp, attn), b, hp, attn, layer, prefix);
}

}  // namespace jepa
