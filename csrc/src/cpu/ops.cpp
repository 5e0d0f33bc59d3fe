// The engine's kernels as ggml graph ops (custom ops): each op's operands read off its tensors,
// its parameters carried in the op's userdata, and the kernel of this process's path called on
// the thread's share.
#include "dispatch.h"

#include <cstring>

namespace jepa::gemm {

using namespace detail;

namespace {


// The op's userdata: the epilogue in the low byte, then whether a weight scale, a bias, a gate and a
// residual follow x and w among the sources (src[0] = x, src[1] = packed w, then the i8c weight's
// scales, the bias, the gate, the residual).
constexpr uintptr_t kHasBias = 1u << 8, kHasResidual = 1u << 9, kHasGate = 1u << 10, kHasScale = 1u << 11;

void compute(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const uintptr_t flags = reinterpret_cast<uintptr_t>(userdata);
    const ggml_tensor * x = dst->src[0];
    const ggml_tensor * w = dst->src[1];
    int next = 2;
    const ggml_tensor * ws = (flags & kHasScale) ? dst->src[next++] : nullptr;
    const ggml_tensor * b = (flags & kHasBias) ? dst->src[next++] : nullptr;
    const ggml_tensor * g = (flags & kHasGate) ? dst->src[next++] : nullptr;
    const ggml_tensor * r = (flags & kHasResidual) ? dst->src[next] : nullptr;
    Problem p;
    // bf16 activations in or out: between the bf16 kernel and its neighbours only (see linear()).
    if (x->type == GGML_TYPE_BF16) {
        p.x16 = static_cast<const uint16_t *>(x->data);
    } else {
        p.x = static_cast<const float *>(x->data);
    }
    p.ldx = int64_t(x->nb[1] / ggml_element_size(x));
    if (dst->type == GGML_TYPE_BF16) {
        p.y16 = static_cast<uint16_t *>(dst->data);
    } else {
        p.y = static_cast<float *>(dst->data);
    }
    p.ldy = int64_t(dst->nb[1] / ggml_element_size(dst));
    p.w = w->data;
    p.layout = layout_of(w);
    p.wscale = ws ? static_cast<const float *>(ws->data) : nullptr;
    p.bias = b ? static_cast<const float *>(b->data) : nullptr;
    p.K = w->ne[0];
    p.N = w->ne[1];
    p.M = x->ne[1] * x->ne[2] * x->ne[3];
    p.epilogue = static_cast<Epilogue>(flags & 0xff);
    if (g) {
        p.gate = static_cast<const float *>(g->data);
        p.ldg = int64_t(g->nb[1] / sizeof(float));
    }
    if (r) {
        p.residual = static_cast<const float *>(r->data);
        p.ldr = int64_t(r->nb[1] / sizeof(float));
    }
    if (p.layout == Layout::Bf16Pairs) {
        run_bf16(p, ith, nth, amx_bf16());
    } else if (p.layout == Layout::Q8) {
        run_q8(p, ith, nth);
    } else if (p.layout == Layout::I8) {
        run_i8(p, ith, nth);
    } else {
        f32_kernels().gemm(p, ith, nth);
    }
}

// The kernel's view of an attention node: dst's sources q, k, v (src[0..2]) and dst itself, their
// pointers, strides and sizes (whole tensors; a caller narrows rows and keys).
Attention attention_of(const ggml_tensor * dst) {
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    auto f = [](const ggml_tensor * t, int i) { return int64_t(t->nb[i] / sizeof(float)); };
    Attention a;
    a.q = static_cast<const float *>(q->data);
    a.k = static_cast<const float *>(k->data);
    a.v = static_cast<const float *>(v->data);
    if (dst->type == GGML_TYPE_BF16) {
        a.out16 = static_cast<uint16_t *>(dst->data);
    } else {
        a.out = static_cast<float *>(dst->data);
    }
    a.q_head = f(q, 1), a.q_tok = f(q, 2), a.q_item = f(q, 3);
    a.k_head = f(k, 1), a.k_tok = f(k, 2), a.k_item = f(k, 3);
    a.v_head = f(v, 1), a.v_tok = f(v, 2), a.v_item = f(v, 3);
    const size_t oes = ggml_element_size(dst);
    a.o_tok = int64_t(dst->nb[1] / oes), a.o_item = int64_t(dst->nb[2] / oes);
    a.hd = q->ne[0], a.H = q->ne[1], a.Nq = q->ne[2], a.Nk = k->ne[2], a.B = q->ne[3];
    return a;
}

void compute_attention(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const ggml_tensor * mask = dst->src[3];
    Attention a = attention_of(dst);
    // userdata: the scale's bits, bit 32 for the half-precision kernel, bit 33 for one kernel.
    const uint64_t bits = reinterpret_cast<uintptr_t>(userdata);
    a.one_kernel = (bits >> 33) & 1;
    const uint32_t scale_bits = uint32_t(bits);
    std::memcpy(&a.scale, &scale_bits, sizeof(float));
    if (mask) {
        a.mask = mask->data;
        a.mask_f16 = mask->type == GGML_TYPE_F16;
        a.mask_ld = int64_t(mask->nb[1] / ggml_element_size(mask));
    }
    if ((bits >> 32) & 1) {
        run_attention_bf16(a, ith, nth, amx_bf16());
    } else {
        f32_kernels().attention(a, ith, nth);
    }
}

}  // namespace

namespace {
// A row-addressable f32 operand of the epilogue: rows of ne[0] floats at one stride (a view into a
// wider tensor, as the adaLN gates are, is read in place).
bool uniform_rows(const ggml_tensor * t) {
    return t->type == GGML_TYPE_F32 && t->nb[0] == sizeof(float) && t->nb[1] % sizeof(float) == 0 &&
           t->nb[2] == t->nb[1] * size_t(t->ne[1]) && t->nb[3] == t->nb[2] * size_t(t->ne[2]);
}
}  // namespace

ggml_tensor * linear(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b, Epilogue e,
                     ggml_tensor * residual, bool out_bf16, ggml_tensor * gate, ggml_tensor * wscale) {
    GGML_ASSERT((w->type == GGML_TYPE_I8) == (wscale != nullptr));  // an i8c weight comes with its scales
    const bool bf16 = takes_bf16(w);
    if (x->type != GGML_TYPE_F32 && !(x->type == GGML_TYPE_BF16 && bf16)) x = ggml_cast(ctx, x, GGML_TYPE_F32);
    // bf16 out: from the bf16 kernel only, in one k block (the stage holds no carry between blocks).
    out_bf16 = out_bf16 && bf16 && w->ne[0] <= KC_BF16;
    if (!ggml_is_contiguous(x)) x = ggml_cont(ctx, x);
    if (residual && (residual->type != GGML_TYPE_F32 || !ggml_is_contiguous(residual))) {
        residual = ggml_cont(ctx, ggml_cast(ctx, residual, GGML_TYPE_F32));
    }
    if (gate && !uniform_rows(gate)) gate = ggml_cont(ctx, ggml_cast(ctx, gate, GGML_TYPE_F32));
    ggml_tensor * args[6] = {x, w, nullptr, nullptr, nullptr, nullptr};
    int n = 2;
    uintptr_t flags = uintptr_t(e);
    if (wscale) {
        args[n++] = wscale;
        flags |= kHasScale;
    }
    if (b) {
        args[n++] = b;
        flags |= kHasBias;
    }
    if (gate) {
        args[n++] = gate;
        flags |= kHasGate;
    }
    if (residual) {
        args[n++] = residual;
        flags |= kHasResidual;
    }
    return ggml_custom_4d(ctx, out_bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, w->ne[1], x->ne[1], x->ne[2], x->ne[3], args,
                          n, compute, GGML_N_TASKS_MAX, reinterpret_cast<void *>(flags));
}

bool layer_norm_supported(const ggml_tensor * x, const ggml_tensor * w, const ggml_tensor * b) {
    if (!own_f32() || x->type != GGML_TYPE_F32) return false;
    for (const ggml_tensor * t : {w, b}) {
        if (t && (t->type != GGML_TYPE_F32 || ggml_nelements(t) != x->ne[0] || !ggml_is_contiguous(t))) return false;
    }
    return true;
}

ggml_tensor * layer_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * w, ggml_tensor * b, float eps,
                         bool out_bf16) {
    out_bf16 = out_bf16 && bf16_kernel();
    if (!ggml_is_contiguous(x)) x = ggml_cont(ctx, x);
    ggml_tensor * args[3] = {x, w, b};
    int n = 1;
    uintptr_t flags = 0;
    if (w) {
        args[n++] = w;
        flags |= 1;
    }
    if (b) {
        args[n++] = b;
        flags |= 2;
    }
    uint32_t eps_bits;
    std::memcpy(&eps_bits, &eps, sizeof(float));
    flags |= uintptr_t(eps_bits) << 32;
    auto run = [](ggml_tensor * dst, int ith, int nth, void * ud) {
        const uintptr_t f = reinterpret_cast<uintptr_t>(ud);
        const ggml_tensor * src = dst->src[0];
        const ggml_tensor * wt = (f & 1) ? dst->src[1] : nullptr;
        const ggml_tensor * bt = (f & 2) ? dst->src[(f & 1) ? 2 : 1] : nullptr;
        const uint32_t bits = uint32_t(f >> 32);
        float e;
        std::memcpy(&e, &bits, sizeof(float));
        const int64_t rows = ggml_nrows(src);
        const bool half = dst->type == GGML_TYPE_BF16;
        f32_kernels().layer_norm(static_cast<const float *>(src->data), int64_t(src->nb[1] / 4),
                        half ? nullptr : static_cast<float *>(dst->data), half ? static_cast<uint16_t *>(dst->data) : nullptr,
                        int64_t(dst->nb[1] / ggml_element_size(dst)), src->ne[0], rows * ith / nth, rows * (ith + 1) / nth,
                        wt ? static_cast<const float *>(wt->data) : nullptr,
                        bt ? static_cast<const float *>(bt->data) : nullptr, e);
    };
    return ggml_custom_4d(ctx, out_bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args,
                          n, run, GGML_N_TASKS_MAX, reinterpret_cast<void *>(flags));
}

bool adaln_norm_supported(const ggml_tensor * x, const ggml_tensor * shift, const ggml_tensor * scale,
                          const ggml_tensor * w, const ggml_tensor * b) {
    if (!w || !b || !layer_norm_supported(x, w, b)) return false;
    for (const ggml_tensor * t : {shift, scale}) {
        if (!uniform_rows(t) || !ggml_are_same_shape(t, x) || t->nb[1] != shift->nb[1]) return false;
    }
    return true;
}

ggml_tensor * adaln_norm(ggml_context * ctx, ggml_tensor * x, ggml_tensor * shift, ggml_tensor * scale,
                         ggml_tensor * w, ggml_tensor * b, float eps_mod, float eps) {
    if (!ggml_is_contiguous(x)) x = ggml_cont(ctx, x);
    ggml_tensor * args[5] = {x, shift, scale, w, b};
    uint32_t bits[2];
    std::memcpy(&bits[0], &eps_mod, sizeof(float));
    std::memcpy(&bits[1], &eps, sizeof(float));
    auto run = [](ggml_tensor * dst, int ith, int nth, void * ud) {
        const uintptr_t u = reinterpret_cast<uintptr_t>(ud);
        const uint32_t lo = uint32_t(u), hi = uint32_t(u >> 32);
        float em, e;
        std::memcpy(&em, &lo, sizeof(float));
        std::memcpy(&e, &hi, sizeof(float));
        auto f = [&](int i) { return static_cast<const float *>(dst->src[i]->data); };
        const ggml_tensor * src = dst->src[0];
        const int64_t rows = ggml_nrows(src);
        f32_kernels().adaln(f(0), int64_t(src->nb[1] / 4), f(1), f(2), int64_t(dst->src[1]->nb[1] / 4),
                            static_cast<float *>(dst->data), int64_t(dst->nb[1] / 4), src->ne[0], rows * ith / nth,
                            rows * (ith + 1) / nth, f(3), f(4), em, e);
    };
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 5, run, GGML_N_TASKS_MAX,
                          reinterpret_cast<void *>(uintptr_t(bits[0]) | (uintptr_t(bits[1]) << 32)));
}

bool attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const ggml_tensor * mask) {
    if (!own_f32()) return false;
    for (const ggml_tensor * t : {q, k, v}) {
        if (t->type != GGML_TYPE_F32 || t->nb[0] != sizeof(float)) return false;
        for (int i = 1; i < 4; ++i) {
            if (t->nb[i] % sizeof(float) != 0) return false;
        }
    }
    if (k->ne[0] != q->ne[0] || v->ne[0] != q->ne[0] || k->ne[1] != q->ne[1] || v->ne[1] != q->ne[1]) return false;
    if (v->ne[2] != k->ne[2] || k->ne[3] != q->ne[3] || v->ne[3] != q->ne[3]) return false;
    if (mask) {
        if (mask->type != GGML_TYPE_F32 && mask->type != GGML_TYPE_F16) return false;
        if (mask->ne[0] != k->ne[2] || mask->ne[1] < q->ne[2] || mask->ne[2] != 1 || mask->ne[3] != 1) return false;
        if (mask->nb[0] != ggml_element_size(mask)) return false;
    }
    return true;
}

ggml_tensor * attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, ggml_tensor * mask,
                        float scale, bool half, bool out_bf16, bool one_kernel) {
    ggml_tensor * args[4] = {q, k, v, mask};
    uint32_t scale_bits;
    std::memcpy(&scale_bits, &scale, sizeof(float));
    const bool bf16 = half && bf16_kernel();
    void * userdata = reinterpret_cast<void *>(uintptr_t(scale_bits) | (uintptr_t(bf16) << 32) |
                                               (uintptr_t(one_kernel) << 33));
    // bf16 out only from the bf16 kernel (for a bf16 product that reads it).
    return ggml_custom_4d(ctx, out_bf16 && bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, q->ne[0] * q->ne[1], q->ne[2], q->ne[3],
                          1, args, mask ? 4 : 3, compute_attention, GGML_N_TASKS_MAX, userdata);
}

namespace {

void compute_varlen(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const Varlen & spec = *static_cast<const Varlen *>(userdata);
    const ggml_tensor * q = dst->src[0];
    const ggml_tensor * k = dst->src[1];
    const ggml_tensor * v = dst->src[2];
    auto f = [](const ggml_tensor * t, int i) { return int64_t(t->nb[i] / sizeof(float)); };
    Attention a;
    a.q_head = f(q, 1), a.q_tok = f(q, 2);
    a.k_head = f(k, 1), a.k_tok = f(k, 2);
    a.v_head = f(v, 1), a.v_tok = f(v, 2);
    a.o_tok = int64_t(dst->nb[1] / sizeof(float));
    a.hd = q->ne[0], a.H = q->ne[1], a.B = 1;
    a.scale = spec.scale;
    const bool bf16 = spec.half && bf16_kernel();
    for (size_t s = 0; s + 1 < spec.offsets.size(); ++s) {
        const int64_t t0 = spec.offsets[s], n = spec.offsets[s + 1] - t0;
        a.q = static_cast<const float *>(q->data) + t0 * a.q_tok;
        a.k = static_cast<const float *>(k->data) + t0 * a.k_tok;
        a.v = static_cast<const float *>(v->data) + t0 * a.v_tok;
        a.out = static_cast<float *>(dst->data) + t0 * a.o_tok;
        a.Nq = a.Nk = n;
        a.q_item = a.k_item = a.v_item = a.o_item = 0;
        if (bf16) run_attention_bf16(a, ith, nth, amx_bf16());
        else f32_kernels().attention(a, ith, nth);
    }
}

}  // namespace

bool varlen_attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v) {
    for (const ggml_tensor * t : {q, k, v}) {
        if (t->type != GGML_TYPE_F32 || t->nb[0] != sizeof(float) || t->ne[3] != 1) return false;
        for (int i = 1; i < 4; ++i) {
            if (t->nb[i] % sizeof(float) != 0) return false;
        }
    }
    return k->ne[0] == q->ne[0] && v->ne[0] == q->ne[0] && k->ne[1] == q->ne[1] && v->ne[1] == q->ne[1] &&
           k->ne[2] == q->ne[2] && v->ne[2] == q->ne[2];
}

ggml_tensor * varlen_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const Varlen * spec) {
    ggml_tensor * args[3] = {q, k, v};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0] * q->ne[1], q->ne[2], 1, 1, args, 3, compute_varlen,
                          GGML_N_TASKS_MAX, const_cast<Varlen *>(spec));
}

KeyRanges KeyRanges::block_causal(int64_t n_prefix, int64_t n_frames, int64_t per_frame) {
    KeyRanges r;
    const int64_t n = n_prefix + n_frames * per_frame;
    r.q_start.push_back(0);
    if (n_prefix > 0) {
        r.q_start.push_back(n_prefix);
        r.k_lo.push_back(0);
        r.k_hi.push_back(n);
    }
    for (int64_t f = 0; f < n_frames; ++f) {
        r.q_start.push_back(n_prefix + (f + 1) * per_frame);
        r.k_lo.push_back(n_prefix);
        r.k_hi.push_back(n_prefix + (f + 1) * per_frame);
    }
    return r;
}

namespace {

void compute_ranged(ggml_tensor * dst, int ith, int nth, void * userdata) {
    const KeyRanges & spec = *static_cast<const KeyRanges *>(userdata);
    const Attention whole = attention_of(dst);
    Attention a = whole;
    a.scale = spec.scale;
    const bool bf16 = spec.half && bf16_kernel();
    // Each group is one call of the kernel on its rows and keys; the groups write disjoint rows, so
    // every thread walks them in order with no barrier between.
    for (size_t g = 0; g + 1 < spec.q_start.size(); ++g) {
        const int64_t q0 = spec.q_start[g], lo = spec.k_lo[g];
        a.q = whole.q + q0 * a.q_tok;
        a.k = whole.k + lo * a.k_tok;
        a.v = whole.v + lo * a.v_tok;
        if (whole.out16) a.out16 = whole.out16 + q0 * a.o_tok;
        else a.out = whole.out + q0 * a.o_tok;
        a.Nq = spec.q_start[g + 1] - q0;
        a.Nk = spec.k_hi[g] - lo;
        if (bf16) run_attention_bf16(a, ith, nth, amx_bf16());
        else f32_kernels().attention(a, ith, nth);
    }
}

}  // namespace

bool ranged_attention_supported(const ggml_tensor * q, const ggml_tensor * k, const ggml_tensor * v, const KeyRanges & spec) {
    // attention_supported's operand rules without a mask, and the keys are the queries' tokens.
    return attention_supported(q, k, v, nullptr) && k->ne[2] == q->ne[2] && spec.n_tok() == q->ne[2];
}

ggml_tensor * ranged_attention(ggml_context * ctx, ggml_tensor * q, ggml_tensor * k, ggml_tensor * v, const KeyRanges * spec,
                               bool out_bf16) {
    ggml_tensor * args[3] = {q, k, v};
    const bool bf16 = spec->half && bf16_kernel();
    return ggml_custom_4d(ctx, out_bf16 && bf16 ? GGML_TYPE_BF16 : GGML_TYPE_F32, q->ne[0] * q->ne[1], q->ne[2], q->ne[3], 1,
                          args, 3, compute_ranged, GGML_N_TASKS_MAX, const_cast<KeyRanges *>(spec));
}

void gelu_erf(const float * x, float * y, int64_t n) { f32_kernels().gelu(x, y, n); }

bool unary_supported(const ggml_tensor * x) { return own_f32() && x->type == GGML_TYPE_F32; }

ggml_tensor * unary(ggml_context * ctx, ggml_tensor * x, Unary op) {
    if (!ggml_is_contiguous(x)) x = ggml_cont(ctx, x);
    ggml_tensor * args[1] = {x};
    auto run = [](ggml_tensor * dst, int ith, int nth, void * ud) {
        const int64_t n = ggml_nelements(dst), i0 = n * ith / nth / 16 * 16, i1 = ith + 1 == nth ? n : n * (ith + 1) / nth / 16 * 16;
        const float * src = static_cast<const float *>(dst->src[0]->data) + i0;
        float * out = static_cast<float *>(dst->data) + i0;
        if (static_cast<Unary>(reinterpret_cast<uintptr_t>(ud)) == Unary::Silu) f32_kernels().silu(src, out, i1 - i0);
        else f32_kernels().gelu(src, out, i1 - i0);
    };
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 1, run, GGML_N_TASKS_MAX,
                          reinterpret_cast<void *>(uintptr_t(op)));
}

}  // namespace jepa::gemm
